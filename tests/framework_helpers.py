"""What the framework-reader tests share: a translation's ``--opt value`` pairs and the SimConfig ``oppo-sim run``
builds from framework options (the readers' one path from options to a configuration)."""

from __future__ import annotations

from oppo_sim.cli import build_parser
from oppo_sim.cli_setup import sim_config
from oppo_sim.frameworks.framework_args import with_framework_args


def pairs(args) -> dict[str, str | None]:
    """``--opt value`` / ``--flag`` -> {opt: value or None}."""
    out: dict[str, str | None] = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[a] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def config_of(*argv: str):
    """The SimConfig oppo-sim builds from ``run`` arguments (framework options included), echo silenced."""
    parser = build_parser()
    return sim_config(parser.parse_args(with_framework_args(parser, ["run", *argv], echo=False)))
