"""Figures of simulation (or measured) results. Every function returns a :class:`matplotlib.figure.Figure`
built with the object API: no pyplot state, no ``show()``, no files written, no backend chosen on import.
Save with ``fig.savefig(path)``; in Jupyter a returned figure displays itself.

* :func:`plot_timeline` / :func:`plot_timelines` -- Gantt chart(s) of a run's timeline, one lane per
  (pool, devices) group, bars coloured by activity and role.
* :func:`plot_utilization` -- per-pool busy fraction, overall and FLOP utilization, per policy.
* :func:`plot_speedup` -- samples/s over the baseline, from a sweep table.
* :func:`plot_sweep_heatmap` -- one metric over two sweep dimensions (e.g. chunk × delta).
* :func:`plot_step_times` -- step time per step, per policy.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.results import SimResult
from oppo_sim.explore.gantt import (  # noqa: F401  (activity_key and the colours are part of the plots API)
    ACTIVITY_COLORS,
    _colors,
    _default_title,
    _draw_timeline,
    _lane_count,
    _ordered_keys,
    _select_steps,
    activity_key,
)


def plot_timeline(result: SimResult, steps: tuple[int, int] | None = None, ax: Axes | None = None,
                  title: str | None = None) -> Figure:
    """Gantt chart of ``result.timeline``: one lane per (pool, devices) group, bars coloured by activity
    (bars that overlap in time within a lane are stacked in thinner tracks), dashed lines at step starts
    labelled with the step number. ``steps=(a, b)`` shows steps a..b inclusive. ``title`` defaults to the
    policy, trace and headline numbers."""
    if ax is None:
        n = _lane_count(result, steps)
        fig = Figure(figsize=(12, 1.2 + 0.32 * max(n, 2)), layout="constrained")
        ax = fig.add_subplot()
    _draw_timeline(ax, result, steps, title=title if title is not None else _default_title(result))
    return ax.figure


def plot_timelines(results: Mapping[str, SimResult], steps: tuple[int, int] | None = None) -> Figure:
    """Several Gantt charts stacked on a shared time axis (e.g. baseline vs overlapped); one legend. Each
    chart's time counts from the start of its first shown step, so equal widths mean equal durations."""
    if not results:
        raise ConfigError("plot_timelines needs at least one result")
    lanes = [_lane_count(r, steps) for r in results.values()]
    fig = Figure(figsize=(12, 0.9 + sum(0.9 + 0.32 * max(n, 2) for n in lanes)), layout="constrained")
    axes = fig.subplots(len(results), 1, sharex=True, squeeze=False, height_ratios=[max(n, 2) + 2 for n in lanes])[:, 0]
    keys: set[str] = set()
    for r in results.values():
        tl, _ = _select_steps(r, steps)
        keys |= {activity_key(a, ro) for a, ro in zip(tl["activity"], tl["role"])}
    ordered = _ordered_keys(keys)
    colors = _colors(ordered)
    spans = []
    for ax, (name, r) in zip(axes, results.items()):
        head = _default_title(r)
        label = head if head.split(" · ")[0] == name else f"{name} — {head}"
        spans.append(_draw_timeline(ax, r, steps, colors=colors, legend=False, title=label, relative=True))
    x0, x1 = min(a for a, _ in spans), max(b for _, b in spans)
    pad = 0.01 * (x1 - x0 or 1.0)
    axes[0].set_xlim(x0 - pad, x1 + pad)  # shared: the longest run sets the range
    for ax in axes[:-1]:
        ax.set_xlabel("")
    fig.legend(handles=[Patch(facecolor=colors[k], label=k) for k in ordered], loc="outside right upper",
               fontsize=8, frameon=False, title="activity", title_fontsize=8)
    return fig


# --------------------------------------------------------------------------------------------------
# Bars and lines
# --------------------------------------------------------------------------------------------------


def _annotate(ax: Axes, container, fmt: str) -> None:
    ax.bar_label(container, fmt=fmt, fontsize=7, padding=2)


def plot_utilization(results: Mapping[str, SimResult]) -> Figure:
    """Grouped bars: for each device pool, the whole cluster ("overall") and FLOP utilization, one bar per
    policy (busy fraction in %), values annotated."""
    if not results:
        raise ConfigError("plot_utilization needs at least one result")
    pools: list[str] = []
    for r in results.values():
        pools += [p for p in r.summary.get("utilization", {}) if p not in pools]
    cats = [f"{p} pool" for p in pools] + ["overall", "FLOP util."]
    n = len(results)
    width = 0.8 / n
    x = np.arange(len(cats))
    fig = Figure(figsize=(max(6.0, 1.1 * len(cats) * max(n, 2) * 0.6 + 2), 4.2), layout="constrained")
    ax = fig.add_subplot()
    top = 0.0
    for i, (name, r) in enumerate(results.items()):
        s = r.summary
        util = s.get("utilization", {})
        vals = [100 * util.get(p, np.nan) for p in pools]
        vals += [100 * s.get("utilization_overall", np.nan), 100 * s.get("flop_utilization", np.nan)]
        top = max([top, *[v for v in vals if v == v]])
        bars = ax.bar(x - 0.4 + width * (i + 0.5), vals, width, label=name)
        _annotate(ax, bars, "%.1f")
    ax.set_xticks(x, cats)
    ax.set_ylabel("utilization (%)")
    ax.set_ylim(0, max(100.0, top * 1.12))
    ax.set_title("Device utilization (busy fraction) and FLOP utilization", loc="left", fontsize=10)
    ax.legend(fontsize=8, frameon=False, loc="upper right")
    ax.grid(axis="y", alpha=0.2)
    ax.set_axisbelow(True)
    return fig


def _speedup_names(df: pd.DataFrame) -> pd.Series:
    names = df["label"].astype(str) if "label" in df.columns else df["policy"].astype(str)
    group = [c for c in ("trace", "gpu") if c in df.columns]
    dup = names.groupby([df[c] for c in group] + [names] if group else names).transform("size") > 1
    if dup.any():  # e.g. chunk-autotune rows differing only in Δ0: say what differs
        extra = []
        for _, row in df.iterrows():
            parts = [f"{k}={row[k]}" for k in ("chunk", "delta") if k in df.columns and pd.notna(row[k])]
            extra.append(f" [{', '.join(parts)}]" if parts else "")
        names = names.where(~dup, names + pd.Series(extra, index=df.index))
    return names


def plot_speedup(df: pd.DataFrame, baseline: str = "baseline") -> Figure:
    """Bars of samples/s over the baseline (a ``policy`` or ``label`` value) with the same trace and GPU,
    one bar per policy row; grouped by trace (and GPU) when the table has several."""
    missing = {"samples_per_s"} - set(df.columns)
    if missing or not ({"policy", "label"} & set(df.columns)):
        raise ConfigError("plot_speedup needs a sweep table with 'samples_per_s' and 'policy' or 'label' columns")
    df = df.reset_index(drop=True)
    is_base = pd.Series(False, index=df.index)
    for col in ("policy", "label"):
        if col in df.columns:
            is_base |= df[col].astype(str) == baseline
    if not is_base.any():
        raise ConfigError(f"baseline '{baseline}' is not in the table")
    keys = [c for c in ("trace", "gpu") if c in df.columns]
    if keys:
        ref = df[is_base].groupby(keys, sort=False)["samples_per_s"].first().rename("_ref").reset_index()
        ref_vals = df[keys].merge(ref, on=keys, how="left")["_ref"].to_numpy()
    else:
        ref_vals = np.full(len(df), float(df.loc[is_base, "samples_per_s"].iloc[0]))
    speed = df["samples_per_s"].to_numpy(float) / ref_vals
    names = _speedup_names(df)
    hue_cols = [c for c in keys if df[c].nunique() > 1]
    hues = (df[hue_cols].astype(str).agg(" / ".join, axis=1) if hue_cols else pd.Series("", index=df.index))
    cats = list(dict.fromkeys(names))
    groups = list(dict.fromkeys(hues))
    height = 0.8 / len(groups)
    pos = {n: i for i, n in enumerate(cats)}
    rows = len(cats) * max(1.0, 0.6 * len(groups))
    fig = Figure(figsize=(8.0, 1.3 + 0.32 * rows), layout="constrained")
    ax = fig.add_subplot()
    for gi, g in enumerate(groups):
        m = (hues == g).to_numpy()
        ys = np.array([pos[n] for n in names[m]], dtype=float) - 0.4 + height * (gi + 0.5)
        bars = ax.barh(ys, speed[m], height, label=g if g else None)
        _annotate(ax, bars, "%.2f×")
    ax.axvline(1.0, color="black", linewidth=0.8, alpha=0.6)
    ax.set_yticks(np.arange(len(cats)), cats)
    ax.set_ylim(len(cats) - 0.5, -0.5)  # first policy on top
    ax.set_xlabel(f"speedup over {baseline} (samples/s ratio)")
    finite = speed[np.isfinite(speed)]
    ax.set_xlim(0, (finite.max() if finite.size else 1.0) * 1.15)
    ax.set_title("Throughput speedup", loc="left", fontsize=10)
    if len(groups) > 1:
        ax.legend(fontsize=8, frameon=False, title=" / ".join(hue_cols), title_fontsize=8, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.2)
    ax.set_axisbelow(True)
    return fig


def plot_sweep_heatmap(df: pd.DataFrame, x: str, y: str, value: str = "samples_per_s", ax: Axes | None = None) -> Figure:
    """Heatmap of ``value`` over two sweep dimensions, each cell annotated. Rows with an empty ``x`` or
    ``y`` are left out (e.g. the baseline in a chunk × delta map); two rows for one cell is an error
    (filter the table first, e.g. ``df[df.policy == "oppo"]``)."""
    for col in (x, y, value):
        if col not in df.columns:
            raise ConfigError(f"column '{col}' is not in the table; columns: {', '.join(map(str, df.columns))}")
    d = df.dropna(subset=[x, y])
    if d.empty:
        raise ConfigError(f"no rows with both '{x}' and '{y}' set")
    counts = d.groupby([y, x]).size()
    if (counts > 1).any():
        cell = counts[counts > 1].index[0]
        raise ConfigError(f"several rows for {y}={cell[0]}, {x}={cell[1]}: filter the table to one row per cell")
    grid = d.pivot(index=y, columns=x, values=value).sort_index().sort_index(axis=1)
    if ax is None:
        fig = Figure(figsize=(1.2 + 1.1 * max(grid.shape[1], 3), 1.2 + 0.7 * max(grid.shape[0], 3)), layout="constrained")
        ax = fig.add_subplot()
    fig = ax.figure
    vals = grid.to_numpy(float)
    im = ax.imshow(vals, cmap="viridis", aspect="auto", origin="lower")
    finite = vals[np.isfinite(vals)]
    lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    for i in range(vals.shape[0]):
        for j in range(vals.shape[1]):
            v = vals[i, j]
            if not np.isfinite(v):
                continue
            light = (v - lo) / (hi - lo) > 0.6 if hi > lo else False
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=8, color="black" if light else "white")
    ax.set_xticks(range(grid.shape[1]), [_tick(v) for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [_tick(v) for v in grid.index])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    fig.colorbar(im, ax=ax, label=value)
    return fig


def _tick(v: Any) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def plot_step_times(results: Mapping[str, SimResult]) -> Figure:
    """Step time of every step, one line per policy (its mean as a dotted line, and in the legend)."""
    if not results:
        raise ConfigError("plot_step_times needs at least one result")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    for name, r in results.items():
        times = r.steps["step_time_s"].to_numpy(float)
        mean = float(np.mean(times)) if times.size else float("nan")
        (line,) = ax.plot(r.steps["step"].to_numpy(), times, marker="o", markersize=3, label=f"{name} (mean {mean:.3g} s)")
        if times.size:
            ax.axhline(mean, color=line.get_color(), linestyle=":", linewidth=1.0, alpha=0.7)  # unlabelled
    ax.set_xlabel("step")
    ax.set_ylabel("step time (s)")
    ax.set_ylim(bottom=0)
    ax.set_title("Step time per step", loc="left", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    ax.grid(alpha=0.2)
    return fig


__all__ = [
    "ACTIVITY_COLORS", "activity_key", "plot_timeline", "plot_timelines", "plot_utilization", "plot_speedup",
    "plot_sweep_heatmap", "plot_step_times",
]


def plot_compare(results: Mapping[str, SimResult], baseline: str = "baseline", steps: tuple[int, int] = (1, 3)) -> Figure:
    """One figure for ``oppo-sim compare``: speedup over the baseline and utilization per policy (top),
    and the timelines of the baseline and of the fastest policy over the same steps (bottom)."""
    if baseline not in results:
        raise ConfigError(f"plot_compare needs the '{baseline}' result")
    names = list(results)
    base = results[baseline].summary["samples_per_s"]
    speed = [results[n].summary["samples_per_s"] / base for n in names]
    labels = [results[n].summary.get("policy", n) for n in names]
    best = max(names, key=lambda n: results[n].summary["samples_per_s"])
    last = int(min(len(results[baseline].steps), len(results[best].steps))) - 1
    steps = (min(steps[0], last), min(steps[1], last))
    fig = Figure(figsize=(13, 10), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1, 1.6])
    ax_s, ax_u = top.subplots(1, 2)
    y = np.arange(len(names))
    bars = ax_s.barh(y, speed, color="#4C78A8")
    ax_s.axvline(1.0, color="k", lw=0.8, ls="--")
    ax_s.set_yticks(y, labels, fontsize=8)
    ax_s.invert_yaxis()
    ax_s.set_xlabel("speedup over baseline (samples/s)")
    ax_s.bar_label(bars, fmt="%.2fx", fontsize=8, padding=2)
    pools = list(results[baseline].summary["utilization"])
    width = 0.8 / (len(pools) + 1)
    for i, pool in enumerate([*pools, "overall"]):
        vals = [100 * (r.summary["utilization_overall"] if pool == "overall" else r.summary["utilization"].get(pool, 0.0))
                for r in results.values()]
        b = ax_u.barh(y + (i - len(pools) / 2) * width, vals, height=width, label=pool)
        ax_u.bar_label(b, fmt="%.0f", fontsize=7, padding=1)
    ax_u.set_yticks(y, labels, fontsize=8)
    ax_u.invert_yaxis()
    ax_u.set_xlabel("utilization: busy fraction of wall time (%)")
    ax_u.set_xlim(0, 110)
    ax_u.legend(fontsize=8, loc="lower right")
    shown = {baseline: results[baseline]} if best == baseline else {baseline: results[baseline], best: results[best]}
    axes = bottom.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    keys: set[str] = set()
    for r in shown.values():
        tl, _ = _select_steps(r, steps)
        keys |= {activity_key(a, ro) for a, ro in zip(tl["activity"], tl["role"])}
    ordered = _ordered_keys(keys)
    colors = _colors(ordered)
    for ax, (name, r) in zip(axes, shown.items()):
        _draw_timeline(ax, r, steps, colors=colors, legend=False, title=_default_title(r), relative=True)
    bottom.legend(handles=[Patch(facecolor=colors[k], label=k) for k in ordered], loc="outside right upper",
                  fontsize=8, frameon=False)
    return fig
