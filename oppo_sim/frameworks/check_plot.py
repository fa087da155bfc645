"""The figure of ``oppo-sim check --plot``: measured vs predicted seconds per stage (bars: the median over the
steps shown, error bars: their smallest to largest), and, with ``--policies``, each policy's predicted speedup
over baseline with its range (:mod:`oppo_sim.frameworks.check_policies`)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def _stage_panel(ax, table: pd.DataFrame, title: str) -> None:
    stages = list(dict.fromkeys(table["stage"]))
    x = np.arange(len(stages))
    for off, col, label, color in ((-0.2, "measured_s", "measured (log)", "#4c72b0"),
                                   (0.2, "predicted_s", "predicted", "#dd8452")):
        g = table.groupby("stage", sort=False)[col]
        med, lo, hi = (g.median().reindex(stages).to_numpy(), g.min().reindex(stages).to_numpy(),
                       g.max().reindex(stages).to_numpy())
        ax.bar(x + off, med, 0.4, label=label, color=color, yerr=np.vstack([med - lo, hi - med]), capsize=3)
    ax.set_xticks(x)
    ax.set_xticklabels([s.split("/")[-1] for s in stages], rotation=30, ha="right")
    ax.set_ylabel("seconds per step (median; bars: min-max)")
    ax.set_title(title)
    ax.legend()


def _policy_panel(ax, policies: pd.DataFrame) -> None:
    x = np.arange(len(policies))
    sp = policies["speedup"].to_numpy(float)
    err = np.vstack([sp - policies["speedup_lo"].to_numpy(float), policies["speedup_hi"].to_numpy(float) - sp])
    ax.bar(x, sp, 0.6, color="#55a868", yerr=err, capsize=4)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(x)
    ax.set_xticklabels(policies["policy"], rotation=30, ha="right")
    ax.set_ylabel("speedup over baseline (bars: range)")
    ax.set_title("what each policy would buy on this run")
    ax.set_ylim(0, 1.18 * float(policies["speedup_hi"].max()))
    for xi, s, lo, hi in zip(x, sp, policies["speedup_lo"], policies["speedup_hi"]):
        ax.annotate(f"{s:.2f}x\n({lo:.2f}-{hi:.2f})", (xi, hi), ha="center", va="bottom", fontsize=8)


def plot_check(table: pd.DataFrame, title: str, policies: pd.DataFrame | None = None):
    """The figure (a matplotlib ``Figure``): the stage panel, and the policy panel when ``policies`` is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if policies is not None and not policies.empty else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    _stage_panel(axes[0][0], table, title)
    if panels == 2:
        _policy_panel(axes[0][1], policies)
    fig.tight_layout()
    return fig


__all__ = ["plot_check"]
