"""Figure: throughput speedup of OPPO and its two halves over the synchronous baseline, per trace.

Simulates ``baseline``, ``intra`` (C=500), ``inter`` (Δ=8) and ``oppo`` (C=500, dynamic Δ from Δ0=8) at
the paper's setup (8xH200, 7 generate+train + 1 scoring GPU, Qwen2.5-7B actor and reward, B=112) on the
four public traces found on the trace search path and the shipped default trace; 60 steps (``--quick``:
8). Speedup = samples/s over the baseline's on the same trace. The paper's 1.8-2.8x (time to a target
reward with unchanged reward curves, i.e. the same ratio) is drawn as a band.

Writes ``out/fig_speedup.png`` and ``out/fig_speedup.csv``.
"""

from __future__ import annotations

import sys
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oppo_sim.explore.sweep import SweepGrid, run_sweep
from oppo_sim.pipeline.config import SimConfig

try:
    from common import PAPER_SPEEDUP, available, parse_args, print_table, save, short
except ImportError:  # imported as paper_figs.fig_speedup
    from paper_figs.common import (
        PAPER_SPEEDUP,
        available,
        parse_args,
        print_table,
        save,
        short,
    )

NAME = "fig_speedup"
POLICIES = ("baseline", "intra", "inter", "oppo")
CHUNK = 500  # the paper's best C for a 7B actor + 7B reward
DELTA = 8
COLUMNS = ("trace", "policy", "label", "chunk", "delta", "steps", "step_time_s", "samples_per_s", "speedup",
           "utilization_overall", "staleness_mean")
COLORS = {"intra": "#4C72B0", "inter": "#DD8452", "oppo": "#C44E52"}


def compute(traces: Sequence[str], steps: int, processes: int = 1) -> pd.DataFrame:
    grid = SweepGrid(policies=POLICIES, chunks=(CHUNK,), deltas=(DELTA,), traces=tuple(traces),
                     base=SimConfig(steps=steps))
    df = run_sweep(grid, processes=processes, progress=False)
    return df[list(COLUMNS)]


def figure(df: pd.DataFrame, steps: int) -> Figure:
    traces = list(dict.fromkeys(df["trace"]))
    pols = [p for p in POLICIES if p != "baseline"]
    fig = Figure(figsize=(1.9 * len(traces) + 2.5, 4.4), layout="constrained")
    ax = fig.add_subplot()
    lo, hi = PAPER_SPEEDUP
    ax.axhspan(lo, hi, color="0.85", alpha=0.6, zorder=0, label=f"paper: {lo}–{hi}× (OPPO)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    x = np.arange(len(traces))
    w = 0.8 / len(pols)
    for i, pol in enumerate(pols):
        sub = df[df["policy"] == pol].set_index("trace").reindex(traces)
        label = sub["label"].dropna().iloc[0] if sub["label"].notna().any() else pol
        bars = ax.bar(x - 0.4 + w * (i + 0.5), sub["speedup"].to_numpy(float), w, label=label, color=COLORS[pol])
        ax.bar_label(bars, fmt="%.2f×", fontsize=7, padding=2)
    ax.set_xticks(x, [short(t) for t in traces], fontsize=8)
    ax.set_ylabel("speedup over baseline (samples/s ratio)")
    top = float(np.nanmax(df["speedup"].to_numpy(float)))
    ax.set_ylim(0, max(top, hi) * 1.12)
    ax.set_title(f"Simulated speedup over the synchronous baseline — 8×H200, Qwen2.5-7B actor + 7B reward, "
                 f"B=112, {steps} steps", loc="left", fontsize=9)
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    ax.grid(axis="y", alpha=0.2)
    ax.set_axisbelow(True)
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    steps = 8 if args.quick else 60
    traces = available()
    if not traces:
        print("error: no trace found", file=sys.stderr)
        return 1
    df = compute(traces, steps, args.processes)
    print_table(df, f"speedup over baseline, {steps} steps (paper: {PAPER_SPEEDUP[0]}–{PAPER_SPEEDUP[1]}×)")
    save(figure(df, steps), df, NAME, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
