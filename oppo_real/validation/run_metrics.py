"""Predicted against measured: what one run measures (median step time, throughput, utilization per
pool, time per step component) and whether two runs took the same decisions."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from oppo_sim.core.ledger import DECISION_FIELDS
from oppo_sim.core.results import SimResult, busy_fraction

COMPONENTS = ("generation_s", "scoring_s", "training_s", "sync_s", "driver_s")
"""Where a step's time goes: generation, scoring left after generation, training, weight sync, and the
driver's time between steps (the step time none of the others cover).

One attribution for both sides, the simulator's (``oppo_sim.pipeline``): generation runs from the step's
start to the end of generation; scoring from there until every scoring role
(``oppo_sim.core.placement.SCORING_ROLES``: reward, reference, critic values, the actor's log-probs)
has scored the batch; training is the PPO update of actor and critic; sync the weight sync. The real
executor computes critic values and log-probs in its train worker, before the update: they count as
scoring there too (``oppo_real.executor.real_driver``). :data:`COMPONENT_WORK` names the timeline work
each component holds; :func:`attribution` reads it off a run's tables."""

COMPONENT_WORK = {"generation_s": ("generate",), "scoring_s": ("score",), "training_s": ("train",), "sync_s": ("sync",)}
"""The timeline activities (``TIMELINE_COLUMNS``' ``activity``) whose work each priced component holds."""


def component_bounds(steps: pd.DataFrame) -> dict[tuple[int, str], tuple[float, float]]:
    """(step, component) -> (start, end) of the component's interval: the components follow one another
    from the step's start (generation, scoring, training, sync)."""
    out = {}
    for r in steps.itertuples(index=False):
        t = float(r.start)
        for c in COMPONENT_WORK:
            out[(int(r.step), c)] = (t, t + float(getattr(r, c)))
            t += float(getattr(r, c))
    return out


def attribution(res: SimResult, eps: float = 1e-6) -> dict[tuple[str, str], set[str]]:
    """(activity, role) of the timeline's rows -> the components their work ended in (the row's own step's
    intervals; work that ended in none of them, e.g. streamed scoring overlapping another step, is left out)."""
    bounds = component_bounds(res.steps)
    out: dict[tuple[str, str], set[str]] = {}
    for r in res.timeline.itertuples(index=False):
        for c in COMPONENT_WORK:
            lo, hi = bounds.get((int(r.step), c), (1.0, 0.0))
            if lo - eps <= float(r.end) <= hi + eps:
                out.setdefault((r.activity, r.role), set()).add(c)
                break
    return out


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
