"""Simulation results: per-step table, timeline table and summary, all pandas / plain dicts."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

STEP_COLUMNS = [
    "step", "start", "end", "step_time_s", "generation_s", "scoring_s", "training_s", "sync_s",
    "samples", "tokens", "prompt_tokens", "admitted", "deferred", "delta", "chunk",
    "staleness_mean", "staleness_max", "reward",
]
"""Columns of the per-step table, shared by the simulator and the real executor. Times in seconds;
``scoring_s`` is the scoring left *after* generation ended (the exposed part); ``step_time_s`` is the
time between consecutive step ends (the first step counts from its start). ``samples`` and ``admitted``
count responses: B x n with n responses per prompt (a grouped algorithm)."""

SIM_STEP_COLUMNS = [*STEP_COLUMNS, "sleep_wake_s"]
"""The simulator's per-step table: :data:`STEP_COLUMNS` and ``sleep_wake_s``, the seconds a generation
engine that takes turns with the roles sharing its GPUs spends going to sleep and waking up that step
(``oppo_sim.hw.costs.sleepwake``; 0 where it never sleeps). Of it, the sleep delays the scoring beside the
engine and the training (inside ``scoring_s``); the wake comes between ``training_s`` and ``sync_s``."""

TIMELINE_COLUMNS = ["pool", "devices", "activity", "role", "step", "start", "end", "tokens", "flops", "recompute_flops"]
"""Columns of the timeline table: one row per (merged) piece of work on a pool's devices."""

SUMMARY_KEYS = ("step_time_s", "samples_per_s", "utilization", "samples_trained", "steps")


@dataclass(frozen=True)
class SimResult:
    """What a run (simulated or measured) produced."""

    steps: pd.DataFrame
    timeline: pd.DataFrame
    summary: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    decisions: pd.DataFrame = field(default_factory=pd.DataFrame)  # per step: sample ids admitted/resumed/deferred/trained, Δ, C, staleness
    # per trained step: where every admitted sample is (oppo_sim.core.ledger.CONSERVATION_FIELDS); every row balanced
    conservation: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_json(self) -> dict[str, Any]:
        return {**_jsonable(self.summary), "meta": _jsonable(self.meta)}

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return None if math.isnan(v) else v
    return x


def summarize(steps: pd.DataFrame, timeline: pd.DataFrame, pool_devices: dict[str, int], pool_peak: dict[str, float],
              pool_busy: dict[str, float], batch: int) -> dict[str, Any]:
    """Headline numbers. ``pool_busy`` is each pool's busy fraction of the wall time (device-averaged)."""
    wall = float(steps["end"].max() - steps["start"].min()) if len(steps) else 0.0
    n = len(steps)
    samples = int(steps["samples"].sum())
    tokens = int(steps["tokens"].sum())
    useful = float((timeline["flops"] - timeline["recompute_flops"]).sum()) if len(timeline) else 0.0
    capacity = sum(pool_devices[p] * pool_peak[p] for p in pool_devices) * wall
    devices = sum(pool_devices.values())
    overall = sum(pool_busy[p] * pool_devices[p] for p in pool_devices) / devices if devices else 0.0
    return {
        "steps": n,
        "batch": batch,
        "samples_trained": samples,
        "wall_s": wall,
        "step_time_s": wall / n if n else float("nan"),
        "step_time_median_s": float(steps["step_time_s"].median()) if n else float("nan"),
        "samples_per_s": samples / wall if wall > 0 else 0.0,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "utilization": {p: float(v) for p, v in pool_busy.items()},
        "utilization_overall": float(overall),
        "flop_utilization": useful / capacity if capacity > 0 else 0.0,
        "staleness_mean": float(steps["staleness_mean"].mean()) if n else 0.0,
        "staleness_max": int(steps["staleness_max"].max()) if n else 0,
    }


def busy_fraction(timeline: pd.DataFrame, t0: float, t1: float) -> dict[str, float]:
    """Busy fraction of the window [t0, t1] per pool: the union of its activities' intervals (a measured
    timeline has one lane per worker; activities that overlap on a pool count once)."""
    out: dict[str, float] = {}
    span = t1 - t0
    for pool, g in timeline.groupby("pool"):
        iv = sorted((max(s, t0), min(e, t1)) for s, e in zip(g["start"], g["end"]) if e > t0 and s < t1)
        busy, cs, ce = 0.0, None, None
        for s, e in iv:
            if ce is None or s > ce:
                if ce is not None:
                    busy += ce - cs
                cs, ce = s, e
            else:
                ce = max(ce, e)
        if ce is not None:
            busy += ce - cs
        out[str(pool)] = min(1.0, busy / span) if span > 0 else 0.0
    return out
