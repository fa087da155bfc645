"""Shared helpers of the paper-figure scripts (``paper_figs/fig_*.py``).

Every script regenerates one figure from the simulator at the paper's setup (``SimConfig()`` defaults:
8xH200, 7 GPUs generate+train, 1 GPU scores, Qwen2.5-7B actor and reward, B=112) and writes
``<out>/<name>.png`` plus ``<out>/<name>.csv`` (the numbers behind the figure), printing the table.

    python paper_figs/fig_speedup.py            # full size, into paper_figs/out/
    python paper_figs/fig_speedup.py --quick    # small sizes (seconds), e.g. for tests
    python paper_figs/fig_speedup.py --out /tmp/figs --processes 2

Nothing happens on import: the output folder is created when a figure is saved.
"""

from __future__ import annotations

import argparse
import functools
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from matplotlib.figure import Figure

from oppo_sim.core.errors import TraceError
from oppo_sim.core.policies import Policy
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.catalog import find_trace, load_trace
from oppo_sim.traces.trace import Trace

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "out"
"""Default output folder (created by the scripts at run time, never on import)."""

REASONING_TRACE = "servegen_deepseek_r1_sampled"
"""The long-tail reasoning-length trace (DeepSeek-R1 response lengths from ServeGen): the closest public
stand-in for RL rollouts, used where a figure needs one trace."""

DEFAULT_TRACE = "oppo-longtail-default"
"""The trace the project ships (lognormal body + Pareto tail, drifting longer)."""

PUBLIC_TRACES: tuple[str, ...] = (
    REASONING_TRACE, "azure2023_conv", "azure2023_code", "mooncake_conversation",
)
"""The four public traces, used when found on the trace search path (see ``traces/README.md``)."""

TRACES: tuple[str, ...] = (*PUBLIC_TRACES, DEFAULT_TRACE)
"""Every trace the per-trace figures use, in plot order."""

SHORT_NAMES = {
    REASONING_TRACE: "servegen R1\n(reasoning)",
    "azure2023_conv": "azure conv",
    "azure2023_code": "azure code",
    "mooncake_conversation": "mooncake conv",
    DEFAULT_TRACE: "longtail-default\n(shipped)",
}

PAPER_SPEEDUP = (1.8, 2.8)
"""OPPO's reported end-to-end speedup (time to a target reward; reward curves unchanged)."""

PAPER_UTIL_GAIN = (1.4, 2.1)
"""OPPO's reported GPU-utilization gain."""

PAPER_UTIL_PAIRS: tuple[tuple[float, float], ...] = ((50.6, 71.0), (38.7, 73.6), (45.7, 67.3), (35.7, 74.1))
"""Utilization before -> after (%) the paper reports for its four settings."""

PNG_DPI = 130
MAX_PNG_BYTES = 300_000


def short(trace: str) -> str:
    return SHORT_NAMES.get(trace, trace)


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The common command line: ``--quick`` (small sizes), ``--out DIR``, ``--processes N``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help="small sizes (a few steps) for a fast check")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    ap.add_argument("--processes", type=int, default=1,
                    help="simulation worker processes for sweeps (default 1; the machine may be shared)")
    args = ap.parse_args(argv)
    if args.processes < 1:
        ap.error(f"--processes must be >= 1, got {args.processes}")
    return args


def available(traces: Sequence[str] = TRACES) -> list[str]:
    """The traces of ``traces`` found on the trace search path; prints a note for each missing one."""
    found = []
    for t in traces:
        try:
            find_trace(t)
        except TraceError:
            print(f"note: trace '{t}' is not on the trace search path; skipped (see traces/README.md)")
            continue
        found.append(t)
    return found


def require_trace(name: str) -> None:
    """Exit with a one-line message if the trace a figure is about is missing."""
    try:
        find_trace(name)
    except TraceError as e:
        raise SystemExit(f"error: this figure needs the trace '{name}': {e}") from None


def save(fig: Figure, table: pd.DataFrame, name: str, out: Path) -> tuple[Path, Path]:
    """Write ``out/<name>.png`` (lowering the resolution if it would exceed ``MAX_PNG_BYTES``) and
    ``out/<name>.csv``; returns both paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    png, csv = out / f"{name}.png", out / f"{name}.csv"
    dpi = PNG_DPI
    while True:
        fig.savefig(png, dpi=dpi, bbox_inches="tight")
        if png.stat().st_size <= MAX_PNG_BYTES or dpi <= 60:
            break
        dpi = int(dpi * 0.8)
    table.to_csv(csv, index=False, float_format="%.6g")
    print(f"wrote {png} ({png.stat().st_size // 1024} KB) and {csv}")
    return png, csv


def print_table(df: pd.DataFrame, title: str | None = None, floatfmt: str = "{:.3f}") -> None:
    if title:
        print(title)
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.max_rows", 500):
        print(df.to_string(index=False, float_format=lambda v: floatfmt.format(v)))
    print()


# --------------------------------------------------------------------------------------------------
# Running many simulations (figures whose points differ in more than the sweep grid's knobs)


@functools.lru_cache(maxsize=8)
def _trace(name: str, max_response: int | None) -> Trace:
    return load_trace(name, max_response=max_response)


def _run_one(job: tuple[str | Trace, Policy, SimConfig]) -> tuple[dict[str, Any], pd.DataFrame]:
    trace, policy, cfg = job
    res = simulate(trace if isinstance(trace, Trace) else _trace(trace, cfg.max_response), policy, cfg)
    return res.summary, res.steps


def simulate_many(jobs: Sequence[tuple[str | Trace, Policy, SimConfig]], processes: int = 1
                  ) -> list[tuple[dict[str, Any], pd.DataFrame]]:
    """``(summary, steps)`` of each ``(trace name or trace, policy, config)`` job, in order; ``processes > 1`` runs
    them in a process pool (each worker reads a trace once)."""
    if processes <= 1 or len(jobs) <= 1:
        return [_run_one(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=min(processes, len(jobs))) as ex:
        return list(ex.map(_run_one, jobs))
