"""Regenerate every paper figure: runs each ``paper_figs/fig_*.py`` (then ``paper_vs_ours.py``,
``published_runs.py``, ``pretrain_check.py``, ``published_implied.py``, ``reward_curves.py`` and ``parity.py`` where present) as its own subprocess, one after the other,
forwarding ``--quick``.

    python paper_figs/make_all.py            # full size, into paper_figs/out/
    python paper_figs/make_all.py --quick    # small sizes
    python paper_figs/make_all.py --only fig_speedup,fig_timelines
    python paper_figs/make_all.py --sim-only # only the simulator figures (minutes, not hours)

A script that needs the real-engine stack (it imports ``oppo_real``, ``torch`` or ``vllm``) is skipped,
with a note, when torch is not importable here (``make setup-real`` installs it). Exits non-zero if any
script failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
EXTRA_SCRIPTS = ("paper_vs_ours.py", "published_runs.py", "pretrain_check.py", "published_implied.py", "reward_curves.py",
                 "parity.py")
REAL_STACK_SCRIPTS = frozenset({"reward_curves.py", "parity.py"})
"""Scripts known to run real PPO (vLLM + torch); any other script is checked for such imports."""
_REAL_STACK = re.compile(r"^\s*(?:from|import)\s+(?:oppo_real|torch|vllm)\b", re.MULTILINE)


def scripts(only: Sequence[str] = ()) -> list[Path]:
    """The figure scripts, in name order (then the extra ones that exist); ``only`` filters by stem."""
    found = sorted(HERE.glob("fig_*.py")) + [HERE / n for n in EXTRA_SCRIPTS if (HERE / n).is_file()]
    if only:
        unknown = set(only) - {p.stem for p in found}
        if unknown:
            raise SystemExit(f"error: no such figure script: {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(p.stem for p in found)}")
        found = [p for p in found if p.stem in only]
    return found


def needs_real_stack(script: Path) -> bool:
    return script.name in REAL_STACK_SCRIPTS or bool(_REAL_STACK.search(script.read_text(encoding="utf-8")))


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="forwarded to every script: small sizes")
    ap.add_argument("--only", default="", help="comma-separated script names (e.g. fig_speedup,fig_timelines)")
    ap.add_argument("--sim-only", action="store_true",
                    help="run only the simulator figures (skip scripts that need the real-engine stack)")
    args = ap.parse_args(argv)
    only = [s.strip().removesuffix(".py") for s in args.only.split(",") if s.strip()]
    have_torch = torch_available()
    failed, skipped, done = [], [], []
    for script in scripts(only):
        if needs_real_stack(script) and args.sim_only:
            print(f"== skipping {script.name}: real-engine figure (--sim-only)", flush=True)
            skipped.append(script.name)
            continue
        if needs_real_stack(script) and not have_torch:
            print(f"== skipping {script.name}: it needs the real-engine stack (torch), which is not importable "
                  f"here; install it with `make setup-real`", flush=True)
            skipped.append(script.name)
            continue
        cmd = [sys.executable, str(script)] + (["--quick"] if args.quick else [])
        print(f"== {' '.join([Path(cmd[0]).name, *cmd[1:]])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=HERE.parent).returncode
        dt = time.perf_counter() - t0
        if rc:
            print(f"== {script.name} FAILED (exit {rc}) after {dt:.0f} s", flush=True)
            failed.append(script.name)
        else:
            print(f"== {script.name} done in {dt:.0f} s", flush=True)
            done.append(script.name)
    print(f"\n{len(done)} done, {len(skipped)} skipped, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
