"""How many of a framework checkout's own RL launch scripts / recipes oppo-sim reads, and why the rest are refused.

    python scripts/count_framework_loads.py PATH [--framework verl|nemo-rl|openrlhf] [--verbose]

PATH is a checkout of verl, NeMo RL or OpenRLHF (the framework is told from its layout unless given). Each file
of the set below goes through ``oppo-sim run --from-<framework> FILE`` up to the configuration it would simulate
(nothing is simulated); a file loads when that configuration is built, and is refused otherwise, with its
one-line reason. The files are read where they are: nothing of them is copied or kept.

The sets — the RL jobs a user of each framework would pick up:

- verl: ``examples/**/*.sh`` but ``examples/sft/`` and ``examples/generation/`` (supervised fine-tuning and
  offline generation, not RL), ``verl/experimental/**/*.sh`` (one-step-off, fully-async, agent loops),
  ``recipe/**/*.sh`` where the checkout has it;
- NeMo RL: ``examples/configs/grpo*.yaml`` and ``examples/configs/recipes/llm/**/grpo*.yaml``;
- OpenRLHF: ``examples/scripts/train_*.sh`` but supervised, DPO, reward-model and non-RL ones.

Measured (the counts this prints, on public snapshots: verl at b178a3cd56f5, NeMo RL at 7ea279abfbeb; "configs
only" is a copy of NeMo RL's ``examples/configs`` alone, without the ``examples/nemo_gym`` and ``examples/modelopt``
files some recipes name as parents):

    framework               before the model families    after (oppo_sim/hw/models/model_table_families.py)
    verl                    109 / 154                    138 / 154 (89.6%)
    NeMo RL, configs only   114 / 176                    157 / 176
    NeMo RL, full checkout  (not measured)               166 / 176 (94.3%)
    OpenRLHF                  7 / 8                        7 / 8

What the rest are refused for is printed by reason; the jobs the framework itself cannot run as written (a
placeholder or an empty model path, a variable the script never sets, a division by a variable it never
sets) are among them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oppo_sim.cli import build_parser  # noqa: E402
from oppo_sim.cli_setup import sim_config  # noqa: E402
from oppo_sim.frameworks.framework_args import with_framework_args  # noqa: E402

_NOT_RL_ORL = re.compile(r"sft|dpo|_rm\b|_rm\.|nonrl|kto|kd|prm")
REASONS = (  # (label, pattern on the one-line refusal), first match wins
    ("model path is a placeholder", r"a placeholder for you to fill in"),
    ("model path is empty", r"is empty \(a variable"),
    ("model not in oppo-sim's table", r"no oppo-sim model matches"),
    ("a variable the script never sets", r"not set in the script"),
    ("shell arithmetic bash cannot do either", r"not integer arithmetic"),
    ("algorithm not simulated", r"oppo-sim simulates"),
    ("not a job of this framework", r"no verl key=value|no --options|is not an option"),
    ("a parent file missing", r"no such file"),
)


def files_of(root: Path, framework: str) -> list[Path]:
    """The file set of ``framework`` in the checkout ``root`` (module docstring)."""
    if framework == "verl":
        ex = [p for p in root.glob("examples/**/*.sh") if not {"sft", "generation"} & set(p.relative_to(root).parts)]
        return sorted(ex + list(root.glob("verl/experimental/**/*.sh")) + list(root.glob("recipe/**/*.sh")))
    if framework == "nemo-rl":
        return sorted(list(root.glob("examples/configs/grpo*.yaml")) + list(root.glob("examples/configs/recipes/llm/**/grpo*.yaml")))
    return sorted(p for p in root.glob("examples/scripts/train_*.sh") if not _NOT_RL_ORL.search(p.name))


def framework_of(root: Path) -> str:
    """verl, nemo-rl or openrlhf, from the checkout's layout."""
    if (root / "verl").is_dir() or (root / "examples" / "grpo_trainer").is_dir():
        return "verl"
    if (root / "examples" / "configs" / "recipes").is_dir() or (root / "nemo_rl").is_dir():
        return "nemo-rl"
    if (root / "openrlhf").is_dir() or (root / "examples" / "scripts").is_dir():
        return "openrlhf"
    raise SystemExit(f"{root}: not a checkout of verl, NeMo RL or OpenRLHF (give --framework)")


def load(framework: str, path: Path) -> str | None:
    """None when ``path`` loads; else its one-line refusal."""
    parser = build_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            sim_config(parser.parse_args(with_framework_args(parser, ["run", f"--from-{framework}", str(path)], echo=False)))
    except SystemExit as e:
        return f"exit {e.code}"
    except Exception as e:  # noqa: BLE001 - every refusal is counted, whatever it is
        return (str(e).splitlines() or [type(e).__name__])[0]
    return None


def reason_of(message: str) -> str:
    return next((label for label, pat in REASONS if re.search(pat, message)), "other: " + message[:100])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path, help="a checkout of verl, NeMo RL or OpenRLHF")
    ap.add_argument("--framework", choices=("verl", "nemo-rl", "openrlhf"), default=None,
                    help="which framework PATH is (default: told from its layout)")
    ap.add_argument("--verbose", action="store_true", help="list each refused file with its reason (default: off)")
    a = ap.parse_args(argv)
    framework = a.framework or framework_of(a.path)
    files = files_of(a.path, framework)
    refused = {f: m for f in files if (m := load(framework, f)) is not None}
    print(f"{framework}: {len(files) - len(refused)} / {len(files)} load "
          f"({(len(files) - len(refused)) / max(len(files), 1):.1%})")
    for label, n in Counter(reason_of(m) for m in refused.values()).most_common():
        print(f"  refused {n:3d}  {label}")
    if a.verbose:
        for f, m in refused.items():
            print(f"    {f.relative_to(a.path)}: {m[:200]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
