"""The planner's figure: predicted throughput against staleness for every configuration that fits, one
colour per policy, the Pareto front (most samples/s for a given staleness) joined and ringed, the
reference (synchronous baseline on the default placement) and the best configuration marked."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oppo_sim.explore.plan import OK, pareto_front


def plot_pareto(table: pd.DataFrame, title: str | None = None) -> Figure:
    """``table``: a planner table (``PlanResult.table``; rows with ``status == "ok"`` are drawn). The ends
    of the front are labelled: the fastest configuration and the freshest (least stale) one."""
    ok = table[table["status"] == OK] if "status" in table.columns else table
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    if ok.empty:
        ax.text(0.5, 0.5, "no configuration fits", ha="center", va="center", transform=ax.transAxes)
        return fig
    cmap = plt.get_cmap("tab10")
    for i, (policy, g) in enumerate(ok.groupby("policy", sort=True)):
        ax.scatter(g["staleness_mean"], g["samples_per_s"], s=18, alpha=0.6, color=cmap(i % 10), label=policy)
    front = ok[pareto_front(ok)].sort_values("staleness_mean")
    ax.step(front["staleness_mean"], front["samples_per_s"], where="post", color="black", lw=1.2, label="Pareto front")
    ax.scatter(front["staleness_mean"], front["samples_per_s"], s=70, facecolors="none", edgecolors="black", lw=1.2)
    ends = [front.iloc[-1]] + ([front.iloc[0]] if len(front) > 1 else [])
    for r, dy in zip(ends, (6, -12)):
        ax.annotate(r["config"], (r["staleness_mean"], r["samples_per_s"]), textcoords="offset points",
                    xytext=(8, dy), fontsize=7)
    ref = ok[ok["is_reference"]] if "is_reference" in ok.columns else ok.iloc[:0]
    if len(ref):
        ax.scatter(ref["staleness_mean"], ref["samples_per_s"], marker="*", s=220, color="gold", edgecolors="black",
                   zorder=5, label="reference: baseline, default placement")
    best = ok.loc[ok["samples_per_s"].idxmax()]
    if "speedup" in ok.columns and np.isfinite(best.get("speedup", np.nan)):
        ax.set_title(title or f"best {best['config']}: {best['speedup']:.2f}x the reference", fontsize=10)
    else:
        ax.set_title(title or f"best {best['config']}", fontsize=10)
    ax.set_xlabel("mean staleness of trained samples (policy versions behind)")
    ax.set_ylabel("predicted samples / s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


__all__ = ["plot_pareto"]
