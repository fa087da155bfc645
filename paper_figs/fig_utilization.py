"""Figure: GPU utilization before (baseline) and after (oppo) overlap scheduling, per trace.

Utilization = busy fraction of wall time (what ``nvidia-smi``-style utilization reports), for the whole
cluster ("overall", device-weighted) and per device pool: ``main`` (7 GPUs: generation, critic, actor
log-probs, PPO training, weight sync) and ``score`` (1 GPU: reward and reference models). Paper setup
(8xH200, Qwen2.5-7B actor and reward, B=112), 60 steps (``--quick``: 8); ``oppo`` with C=500 and dynamic
Δ from Δ0=8. One panel per trace with the after/before ratio annotated, and a summary panel of the
overall ratio against the paper's reported 1.4-2.1x.

Writes ``out/fig_utilization.png`` and ``out/fig_utilization.csv``.
"""

from __future__ import annotations

import math
import sys
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oppo_sim.explore.sweep import SweepGrid, run_sweep
from oppo_sim.pipeline.config import SimConfig

try:
    from common import (
        PAPER_UTIL_GAIN,
        PAPER_UTIL_PAIRS,
        available,
        parse_args,
        print_table,
        save,
        short,
    )
except ImportError:  # imported as paper_figs.fig_utilization
    from paper_figs.common import (
        PAPER_UTIL_GAIN,
        PAPER_UTIL_PAIRS,
        available,
        parse_args,
        print_table,
        save,
        short,
    )

NAME = "fig_utilization"
POLICIES = ("baseline", "oppo")
CHUNK, DELTA = 500, 8
SCOPES = ("overall", "main", "score")
SCOPE_LABEL = {"overall": "overall\n(8 GPUs)", "main": "main pool\n(7: gen+train)", "score": "score pool\n(1: reward+ref)"}
COLUMNS = ("trace", "scope", "baseline_util", "oppo_util", "ratio", "baseline_flop_util", "oppo_flop_util",
           "speedup", "steps")
COLORS = {"baseline": "#8C8C8C", "oppo": "#C44E52"}


def compute(traces: Sequence[str], steps: int, processes: int = 1) -> pd.DataFrame:
    grid = SweepGrid(policies=POLICIES, chunks=(CHUNK,), deltas=(DELTA,), traces=tuple(traces),
                     base=SimConfig(steps=steps))
    sw = run_sweep(grid, processes=processes, progress=False)
    rows = []
    for trace in traces:
        b = sw[(sw["trace"] == trace) & (sw["policy"] == "baseline")].iloc[0]
        o = sw[(sw["trace"] == trace) & (sw["policy"] == "oppo")].iloc[0]
        for scope in SCOPES:
            col = f"utilization_{scope}"
            rows.append({
                "trace": trace, "scope": scope, "baseline_util": b[col], "oppo_util": o[col],
                "ratio": o[col] / b[col] if b[col] > 0 else math.nan,
                "baseline_flop_util": b["flop_utilization"], "oppo_flop_util": o["flop_utilization"],
                "speedup": o["speedup"], "steps": steps,
            })
    return pd.DataFrame(rows, columns=list(COLUMNS))


def figure(df: pd.DataFrame, steps: int) -> Figure:
    traces = list(dict.fromkeys(df["trace"]))
    n = len(traces) + 1
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.3 * nrows + 0.5), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    x = np.arange(len(SCOPES))
    w = 0.38
    for ax, trace in zip(axes, traces):
        sub = df[df["trace"] == trace].set_index("scope").reindex(SCOPES)
        before, after = 100 * sub["baseline_util"].to_numpy(float), 100 * sub["oppo_util"].to_numpy(float)
        bb = ax.bar(x - w / 2, before, w, color=COLORS["baseline"], label="baseline")
        ba = ax.bar(x + w / 2, after, w, color=COLORS["oppo"], label=f"oppo (C={CHUNK}, Δ0={DELTA})")
        ax.bar_label(bb, fmt="%.0f", fontsize=7, padding=1)
        ax.bar_label(ba, fmt="%.0f", fontsize=7, padding=1)
        for xi, r, top in zip(x, sub["ratio"].to_numpy(float), np.fmax(before, after)):
            ax.text(xi, top + 9, f"×{r:.2f}", ha="center", fontsize=8, fontweight="bold")
        ax.set_xticks(x, [SCOPE_LABEL[s] for s in SCOPES], fontsize=7)
        ax.set_ylim(0, 119)
        ax.set_yticks(range(0, 101, 20))
        ax.set_title(f"{short(trace).replace(chr(10), ' ')} — speedup {sub['speedup'].iloc[0]:.2f}×", fontsize=9,
                     loc="left")
        ax.grid(axis="y", alpha=0.2)
        ax.set_axisbelow(True)
    for ax in axes[::ncols]:
        ax.set_ylabel("busy fraction (%)")
    fig.legend(handles=[bb, ba], fontsize=8, frameon=False, loc="outside upper right", ncols=2)
    # summary: overall utilization ratio per trace against the paper's band
    ax = axes[len(traces)]
    ov = df[df["scope"] == "overall"].set_index("trace").reindex(traces)
    lo, hi = PAPER_UTIL_GAIN
    ax.axhspan(lo, hi, color="0.85", alpha=0.6, zorder=0, label=f"paper: {lo}–{hi}×")
    ax.axhline(1.0, color="black", linewidth=0.8)
    bars = ax.bar(np.arange(len(traces)), ov["ratio"].to_numpy(float), 0.6, color=COLORS["oppo"])
    ax.bar_label(bars, fmt="×%.2f", fontsize=7, padding=1)
    ax.set_xticks(np.arange(len(traces)), [short(t) for t in traces], fontsize=6.5, rotation=20)
    ax.set_ylim(0, max(hi, float(np.nanmax(ov["ratio"]))) * 1.15)
    ax.set_ylabel("overall utilization: oppo / baseline")
    pairs = ", ".join(f"{a:g}→{b:g}" for a, b in PAPER_UTIL_PAIRS)
    ax.set_title("overall gain vs the paper", fontsize=9, loc="left")
    ax.text(0.02, 0.97, f"paper (%): {pairs}", transform=ax.transAxes, fontsize=6.5, va="top")
    ax.legend(fontsize=7, frameon=False, loc="upper right", bbox_to_anchor=(1.0, 0.9))
    ax.grid(axis="y", alpha=0.2)
    ax.set_axisbelow(True)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(f"Simulated GPU utilization before/after OPPO — 8×H200 (7 main + 1 score), Qwen2.5-7B actor + "
                 f"7B reward, B=112, {steps} steps", fontsize=10, x=0.01, ha="left")
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    steps = 8 if args.quick else 60
    traces = available()
    if not traces:
        print("error: no trace found", file=sys.stderr)
        return 1
    df = compute(traces, steps, args.processes)
    print_table(df, f"utilization baseline -> oppo, {steps} steps (paper gain {PAPER_UTIL_GAIN[0]}–{PAPER_UTIL_GAIN[1]}×)")
    save(figure(df, steps), df, NAME, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
