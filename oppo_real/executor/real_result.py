"""The measured result of a real run, in the simulator's schema (steps, timeline, decisions, summary)
plus the real run's own outputs (one row per trained sample)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from oppo_sim.core.results import (
    STEP_COLUMNS,
    TIMELINE_COLUMNS,
    SimResult,
    busy_fraction,
    summarize,
)

if TYPE_CHECKING:  # pragma: no cover
    from oppo_real.executor.real_driver import Driver


@dataclass(frozen=True)
class RealResult(SimResult):
    """A :class:`SimResult` (same step/timeline/decisions/summary schema) plus the real run's rollouts."""

    rollouts: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per trained sample


def build_result(d: "Driver", paths) -> RealResult:
    """Steps and timeline relative to the first step's start; utilization as each pool's busy fraction."""
    t0 = d.records[0]["start"] if d.records else 0.0
    tl = pd.DataFrame(d.timeline, columns=TIMELINE_COLUMNS)
    tl["start"] -= t0
    tl["end"] -= t0
    tl = tl.sort_values(["start", "pool", "devices"], kind="stable").reset_index(drop=True)
    st = pd.DataFrame(d.records)
    for c in ("start", "end"):
        st[c] -= t0
    extra = [c for c in st.columns if c not in STEP_COLUMNS]
    st = st[STEP_COLUMNS + extra]
    st["chunk"] = st["chunk"].astype("Int64")
    wall = float(st["end"].max()) if len(st) else 0.0
    busy = busy_fraction(tl, 0.0, wall)
    pools = sorted(busy)
    cfg = d.cfg
    summary = summarize(st, tl, {p: 1 for p in pools}, {p: math.nan for p in pools}, busy, cfg.batch)
    summary.update({
        "policy": d.policy.label(), "backend": cfg.backend, "workers": cfg.workers, "devices": cfg.devices.describe(),
        "models": cfg.shape or cfg.model_dir or "tiny", "colocate": cfg.colocate_mode,
        "admitted": d.ledger.admitted_total, "in_flight_end": d.ledger.in_flight(),
        "reward_curve": [float(x) for x in st["reward"]], "rm_score_curve": [float(x) for x in st["rm_score"]],
        "final_reward": float(st["reward"].tail(min(10, len(st))).mean()) if len(st) else math.nan,
        "trace": d.trace.name if d.trace is not None else "natural-eos",
        "flop_utilization": None,
    })
    meta = {"config": cfg.to_json(), "models": {k: str(v) for k, v in asdict(paths).items()} if paths else {}}
    return RealResult(st, tl, summary, meta, decisions=d.ledger.decisions_frame(), rollouts=pd.DataFrame(d.rollouts),
                      conservation=d.ledger.conservation_frame())
