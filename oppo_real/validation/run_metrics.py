"""Predicted against measured: what one run measures (median step time, throughput, utilization per
pool, time per step component) and whether two runs took the same decisions."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from oppo_sim.core.ledger import DECISION_FIELDS
from oppo_sim.core.results import SimResult, busy_fraction

COMPONENTS = ("generation_s", "scoring_s", "training_s", "sync_s", "driver_s")
"""Where a step's time goes: generation, scoring left after generation, training, weight sync, and the
driver's time between steps (the step time none of the others cover)."""


def measure(res: SimResult, warmup: int) -> dict[str, float]:
    """Median step time and components, samples/s and utilization per pool over the steps after ``warmup``."""
    st = res.steps[res.steps["step"] >= warmup]
    if st.empty:
        st = res.steps
    t0 = float(st["start"].min()) if warmup == 0 or st is res.steps else float(res.steps.loc[res.steps["step"] == warmup - 1, "end"].iloc[0])
    t1 = float(st["end"].max())
    busy = busy_fraction(res.timeline, t0, t1)
    parts = st[list(COMPONENTS[:-1])]
    out = {
        "step_s": float(st["step_time_s"].median()),
        "samples_per_s": float(st["samples"].sum() / (t1 - t0)) if t1 > t0 else float("nan"),
        "util_main": busy.get("main", 0.0),
        "util_score": busy.get("score", 0.0),
    }
    for c in COMPONENTS[:-1]:
        out[c] = float(parts[c].median())
    out["driver_s"] = float((st["step_time_s"] - parts.sum(axis=1)).clip(lower=0).median())
    return out


@dataclass(frozen=True)
class Agreement:
    """The fraction of steps whose decisions are identical, and which fields differ (if any)."""

    fraction: float
    fields: tuple[str, ...]


def decision_agreement(a: pd.DataFrame, b: pd.DataFrame) -> Agreement:
    """Compare two decisions tables step by step (admitted, resumed, deferred, trained ids; Δ; C; staleness)."""
    steps = sorted(set(a["step"]) & set(b["step"]))
    if not steps:
        return Agreement(float("nan"), ())
    ia, ib = a.set_index("step"), b.set_index("step")
    same, differ = 0, []
    for t in steps:
        bad = [f for f in DECISION_FIELDS[1:] if _norm(ia.at[t, f]) != _norm(ib.at[t, f])]
        same += not bad
        differ += [f for f in bad if f not in differ]
    return Agreement(same / len(steps), tuple(differ))


def _norm(v):
    if isinstance(v, (list, tuple)):
        return tuple(int(x) for x in v)
    return None if v is None or (isinstance(v, float) and v != v) or v is pd.NA else int(v)


INHERENT = {
    "chunk-autotune": ("chunk", "chunk-autotune keeps the C whose trial step was fastest, and the simulator's step "
                                "times are predictions of the measured ones"),
}


def explain(policy_name: str, agreement: Agreement) -> str:
    """One line saying which decision fields differed, and why where the difference is inherent."""
    if not agreement.fields:
        return ""
    field, why = INHERENT.get(policy_name, (None, None))
    if field is not None and field in agreement.fields:
        return f"{', '.join(agreement.fields)} differ: {why} (what follows from C differs with it)"
    return f"{', '.join(agreement.fields)} differ: not explained by the policy (a bug to report)"
