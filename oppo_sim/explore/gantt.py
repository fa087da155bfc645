"""Drawing a run's timeline as a Gantt chart on an Axes: one lane per (pool, devices) group, overlapping
jobs of a shared pool on tracks within the lane, bars coloured by activity and role, step boundaries
marked. The public figures are in :mod:`oppo_sim.explore.plots`."""

from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.results import SimResult

ACTIVITY_COLORS: dict[str, str] = {
    "generate": "#4C78A8",
    "score:reward": "#F58518",
    "score:reference": "#EECA3B",
    "score:critic": "#B279A2",
    "score:logprob": "#72B7B2",
    "train:actor": "#54A24B",
    "train:critic": "#E45756",
    "sync": "#9D9D9D",
    "sleep": "#BCBDDC",
    "wake": "#756BB1",
}
"""Colour of each timeline activity key (``activity`` or ``activity:role``); unknown keys get a fallback."""

_FALLBACK = ["#FF9DA6", "#9D755D", "#BAB0AC", "#88D27A", "#D67195", "#439894", "#83BCB6", "#F2CF5B"]

_LANE_HEIGHT = 0.8


# --------------------------------------------------------------------------------------------------
# Timelines
# --------------------------------------------------------------------------------------------------


def activity_key(activity: str, role: str) -> str:
    """``generate``, ``sync``, or ``activity:role`` (``score:reward``, ``train:actor``, ...)."""
    role = "" if role is None or (isinstance(role, float) and np.isnan(role)) else str(role)
    return str(activity) if not role or role == activity else f"{activity}:{role}"


def _colors(keys: list[str]) -> dict[str, str]:
    out, extra = {}, 0
    for k in keys:
        if k in ACTIVITY_COLORS:
            out[k] = ACTIVITY_COLORS[k]
        else:
            out[k] = _FALLBACK[extra % len(_FALLBACK)]
            extra += 1
    return out


def _ordered_keys(keys) -> list[str]:
    known = [k for k in ACTIVITY_COLORS if k in keys]
    return known + sorted(k for k in keys if k not in ACTIVITY_COLORS)


def _device_sort_key(devices: str) -> tuple:
    text = str(devices)
    if text == "all":
        return (1, ())
    try:
        return (0, tuple(int(x) for x in text.split(",")))
    except ValueError:
        return (0, (float("inf"),), text)


def _lanes(tl: pd.DataFrame, meta: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """Lane order: pools as the placement lists them (else by first appearance), devices numerically, the
    whole pool last."""
    placed = re.findall(r"(\S+)\[\d+\]=", str((meta or {}).get("placement", "")))
    seen = list(dict.fromkeys(tl["pool"].astype(str)))
    pools = [q for q in placed if q in seen] + [q for q in seen if q not in placed]
    lanes = []
    for pool in pools:
        devs = {str(d) for d in tl.loc[tl["pool"].astype(str) == pool, "devices"]}
        lanes += [(pool, d) for d in sorted(devs, key=_device_sort_key)]
    return lanes


def _tracks(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, int]:
    """Greedy interval colouring: bars that overlap in time go to different tracks of the lane."""
    order = np.lexsort((ends, starts))
    track_end: list[float] = []
    track = np.zeros(len(starts), dtype=int)
    for i in order:
        s, e = starts[i], ends[i]
        for t, last in enumerate(track_end):
            if last <= s + 1e-9:
                track[i] = t
                track_end[t] = e
                break
        else:
            track[i] = len(track_end)
            track_end.append(e)
    return track, max(1, len(track_end))


def _select_steps(result: SimResult, steps: tuple[int, int] | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    tl, st = result.timeline, result.steps
    if steps is None:
        return tl, st
    try:
        a, b = (int(v) for v in steps)
    except (TypeError, ValueError):
        raise ConfigError(f"steps must be a pair (first, last), got {steps!r}") from None
    if a > b:
        raise ConfigError(f"steps=({a}, {b}): first step is after the last")
    tl = tl[(tl["step"] >= a) & (tl["step"] <= b)]
    st = st[(st["step"] >= a) & (st["step"] <= b)]
    if tl.empty and st.empty:
        known = f"{int(result.steps['step'].min())}..{int(result.steps['step'].max())}" if len(result.steps) else "none"
        raise ConfigError(f"no steps in {a}..{b}; the run has steps {known}")
    return tl, st


def _extent(tl: pd.DataFrame, st: pd.DataFrame) -> tuple[float, float]:
    lo = [float(st["start"].min())] if len(st) else []
    hi = [float(st["end"].max())] if len(st) else []
    if len(tl):
        lo.append(float(tl["start"].min()))
        hi.append(float(tl["end"].max()))
    return (min(lo), max(hi)) if lo else (0.0, 1.0)


def _draw_timeline(ax: Axes, result: SimResult, steps: tuple[int, int] | None, colors: dict[str, str] | None = None,
                   legend: bool = True, title: str | None = None, relative: bool = False) -> tuple[float, float]:
    """Draw one Gantt into ``ax``; returns the x range shown. ``relative``: time counts from the start of
    the selection."""
    tl, st = _select_steps(result, steps)
    x0, x1 = _extent(tl, st)
    t0 = x0 if relative else 0.0
    tl = tl.assign(start=tl["start"] - t0, end=tl["end"] - t0)
    st = st.assign(start=st["start"] - t0, end=st["end"] - t0)
    x0, x1 = x0 - t0, x1 - t0
    min_edge = 0.004 * (x1 - x0 or 1.0)  # bars narrower than this get no white outline (it would hide them)
    tl = tl.assign(key=[activity_key(a, r) for a, r in zip(tl["activity"], tl["role"])])
    keys = _ordered_keys(set(tl["key"]))
    colors = colors or _colors(keys)
    lanes = _lanes(tl, result.meta)
    for lane_i, (pool, devs) in enumerate(lanes):
        rows = tl[(tl["pool"].astype(str) == pool) & (tl["devices"].astype(str) == devs)]
        starts, ends = rows["start"].to_numpy(float), rows["end"].to_numpy(float)
        track, ntracks = _tracks(starts, ends)
        h = _LANE_HEIGHT / ntracks
        top = lane_i - _LANE_HEIGHT / 2
        for key in keys:
            for t in range(ntracks):
                m = (rows["key"].to_numpy() == key) & (track == t)
                if not m.any():
                    continue
                widths = ends[m] - starts[m]
                ax.broken_barh(list(zip(starts[m], widths)), (top + t * h, h), facecolors=colors[key], edgecolor="white",
                               linewidths=np.where(widths > min_edge, 0.5, 0.0))
    ax.set_yticks(range(len(lanes)), [f"{p}/{d}" for p, d in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)  # first lane on top
    ax.tick_params(axis="y", length=0)
    first = int(st["step"].min()) if len(st) else None
    ax.set_xlabel(f"time since the start of step {first} (s)" if relative and first is not None else "time (s)")
    pad = 0.01 * (x1 - x0 or 1.0)
    ax.set_xlim(x0 - pad, x1 + pad)
    # step boundaries: a faint line at each step's start, labelled with its number; and the last end
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    word = "step " if len(st) <= 12 else ""
    for step, start in zip(st["step"], st["start"]):
        ax.axvline(float(start), color="black", alpha=0.25, linewidth=0.8, linestyle="--", zorder=0)
        ax.text(float(start), 1.0, f" {word}{int(step)}", transform=trans, fontsize=7, color="0.35", ha="left",
                va="bottom")
    if len(st):
        ax.axvline(float(st["end"].max()), color="black", alpha=0.25, linewidth=0.8, linestyle="--", zorder=0)
    ax.grid(axis="x", alpha=0.15)
    ax.set_axisbelow(True)
    if title is not None:
        ax.set_title(title, loc="left", fontsize=10, pad=12)
    if legend:
        ax.legend(handles=[Patch(facecolor=colors[k], label=k) for k in keys], loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False, title="activity", title_fontsize=8)
    return x0, x1


def _default_title(result: SimResult) -> str:
    s = result.summary
    bits = [str(s.get("policy", ""))]
    if s.get("trace"):
        bits.append(str(s["trace"]))
    if "samples_per_s" in s:
        bits.append(f"{s['samples_per_s']:.2f} samples/s")
    if "utilization_overall" in s:
        bits.append(f"util {100 * s['utilization_overall']:.0f}%")
    return " · ".join(b for b in bits if b)


def _lane_count(result: SimResult, steps: tuple[int, int] | None) -> int:
    tl, _ = _select_steps(result, steps)
    return len(_lanes(tl, result.meta))
