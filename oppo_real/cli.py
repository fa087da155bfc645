"""``oppo-real``: run a policy for real (vLLM / torch engines, a real PPO update) and measure it.

    oppo-real run --policy oppo --steps 20 --out out/real/oppo

Writes into ``--out``: ``steps.csv`` and ``timeline.csv`` (the simulator's schema, measured),
``summary.json`` (the same keys as ``oppo-sim run`` plus ``reward_curve``), ``rollouts.csv`` (one row per
trained sample) and ``rollout_trace.csv.gz`` — the response lengths this run produced, as a trace the
simulator can replay. A checkpoint is kept in ``--out/checkpoint`` after every step; ``--resume``
continues from it. Bad input exits with status 2 and one line, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from oppo_sim.cliargs import Parser, run_command


def build_parser() -> argparse.ArgumentParser:
    from oppo_real.commands import (
        engine_check_cmd,
        profile_cmd,
        run_cmd,
        validate_cmd,
    )

    p = Parser(prog="oppo-real", description="Run OPPO and peer policies on real engines and measure them.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    for command in (run_cmd, profile_cmd, validate_cmd, engine_check_cmd):
        command.add_parser(sub)
    return p


def quiet_libraries() -> None:
    """Keep the per-step progress readable: no library progress bars or banners (see ``console.quiet_env``)."""
    from oppo_real.console import quiet_env

    quiet_env()


def main(argv: Sequence[str] | None = None) -> int:
    from oppo_real.console import quiet_env

    args = list(sys.argv[1:] if argv is None else argv)
    quiet_env(verbose="--verbose" in args)
    return run_command(build_parser(), args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
