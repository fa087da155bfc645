"""Invariants of the simulated pipeline, over random traces and every policy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataclasses import replace

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.placement import Placement, Pool
from oppo_sim.core.policies import POLICY_NAMES, Inter, Intra, make_policy
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.pipeline.simulate import _result, simulate
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail, heavier_tail
from oppo_sim.traces.trace import Trace

SMALL = SimConfig(batch=8, steps=4, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu="h100-sxm", ppo_epochs=1)

traces = st.lists(
    st.tuples(st.integers(1, 400), st.integers(1, 900)), min_size=3, max_size=40
).map(lambda rows: Trace.from_arrays([r[0] for r in rows], [r[1] for r in rows], name="hyp"))

policies = st.sampled_from([
    make_policy("baseline"), make_policy("stream"), make_policy("intra", chunk=64), make_policy("inter", delta=3),
    make_policy("dynamic-delta", delta=2), make_policy("oppo", chunk=32, delta=4),
    make_policy("chunk-autotune", chunk=64, candidates=(16, 64), every=3), make_policy("partial-rollout", budget=128, delta=2),
    make_policy("async", staleness=1),
])


def run(trace, policy, cfg=SMALL):
    p = Pipeline(cfg, trace, policy)
    p.run()
    return p, _result(p)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces, policy=policies)
def test_conservation_batch_size_and_utilization(trace, policy):
    _, r = run(trace, policy)
    # every admitted prompt is trained exactly once or still in flight, as the result reports it
    s, d = r.summary, r.decisions
    assert s["admitted"] == s["samples_trained"] + s["in_flight_end"]
    trained = [sid for sids in d["trained"] for sid in sids]
    assert len(trained) == len(set(trained)) == s["samples_trained"]
    admitted = {sid for sids in d["admitted"] for sid in sids}
    assert set(trained) <= admitted and len(admitted) == s["admitted"]
    assert set(d["deferred"].iloc[-1]).isdisjoint(trained)
    # ... and as the conservation table counts it, step by step, from where each sample is held
    c = r.conservation
    assert list(c["step"]) == list(range(SMALL.steps)) and c["balanced"].all()
    assert c["admitted_total"].iloc[-1] == s["admitted"] and c["trained_total"].iloc[-1] == s["samples_trained"]
    held = c[["in_batch", "generating", "paused", "deferred", "ready"]].iloc[-1].sum()
    assert held == s["in_flight_end"] == len(admitted - set(trained))
    # every step trains exactly B samples
    assert len(r.steps) == SMALL.steps
    assert (r.steps["samples"] == SMALL.batch).all()
    assert r.summary["samples_trained"] == SMALL.batch * SMALL.steps
    for u in r.summary["utilization"].values():
        assert 0.0 <= u <= 1.0 + 1e-9
    assert 0.0 <= r.summary["flop_utilization"] <= 1.0
    # times are ordered within each step
    s = r.steps
    assert (s["end"] >= s["start"]).all() and (s["generation_s"] >= 0).all() and (s["step_time_s"] > 0).all()
    assert (r.timeline["end"] >= r.timeline["start"]).all()


def _overlaps(tl: pd.DataFrame) -> bool:
    tl = tl.sort_values("start")
    return bool((tl["start"].to_numpy()[1:] < tl["end"].to_numpy()[:-1] - 1e-9).any())


@settings(max_examples=25, deadline=None)
@given(trace=traces, policy=policies)
def test_unshared_devices_never_run_two_things(trace, policy):
    # reward alone on its pool: that pool must never overlap; each generation replica runs one thing at a time
    pl = Placement((Pool("main", 3), Pool("score", 1), Pool("ref", 1)), reward="score", reference="ref")
    cfg = SimConfig(**{**SMALL.__dict__, "placement": pl})
    _, r = run(trace, policy, cfg)
    tl = r.timeline
    for pool in ("score", "ref"):
        assert not _overlaps(tl[tl.pool == pool])
    gen = tl[tl.activity == "generate"]
    for dev, lane in gen.groupby("devices"):
        assert not _overlaps(lane), dev


def test_shared_pool_may_overlap_only_when_shared():
    pl = Placement((Pool("main", 2), Pool("score", 1)), reward="score", reference="score")
    assert pl.shared("main") and pl.shared("score")
    pl2 = Placement((Pool("main", 2), Pool("score", 1), Pool("ref", 1)), reference="ref")
    assert not pl2.shared("score") and not pl2.shared("ref")


@settings(max_examples=20, deadline=None)
@given(trace=traces, policy=policies, seed=st.integers(0, 3))
def test_deterministic(trace, policy, seed):
    cfg = SimConfig(**{**SMALL.__dict__, "seed": seed})
    _, a = run(trace, policy, cfg)
    _, b = run(trace, policy, cfg)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.timeline, b.timeline)
    assert a.summary == b.summary


@settings(max_examples=20, deadline=None)
@given(trace=traces)
def test_intra_with_huge_chunk_equals_stream(trace):
    big = int(trace.response_tokens.max()) + 1
    _, a = run(trace, Intra(chunk=big))
    _, b = run(trace, make_policy("stream"))
    cols = [c for c in a.steps.columns if c != "chunk"]
    pd.testing.assert_frame_equal(a.steps[cols], b.steps[cols])
    assert a.summary["step_time_s"] == b.summary["step_time_s"]
    assert a.summary["utilization"] == b.summary["utilization"]


@settings(max_examples=20, deadline=None)
@given(trace=traces)
def test_inter_with_zero_delta_equals_baseline(trace):
    _, a = run(trace, Inter(delta=0))
    _, b = run(trace, make_policy("baseline"))
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.timeline, b.timeline)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_heavier_tail_never_shrinks_oppo_advantage(seed):
    """Stretching the longest responses (same prompts, same everything else) must not shrink OPPO's
    speedup. No length cap here: once the baseline's stragglers sit at a cap, a heavier tail cannot slow
    the baseline any more but still adds work that every policy must eventually do (see the note in
    the README on capped traces)."""
    cfg = SimConfig(batch=32, steps=12, actor="qwen2.5-1.5b", reward="qwen2.5-1.5b", gpu="h100-sxm", max_response=None)
    base = generate_longtail(LongTailSpec(body_median=200, tail_fraction=0.05, tail_alpha=2.5, cap=100_000), 600, seed=seed)
    speedups = []
    for factor in (1.0, 2.0, 4.0):
        t = heavier_tail(base, factor, top_fraction=0.05) if factor > 1 else base
        b = simulate(t, "baseline", cfg).summary["samples_per_s"]
        o = simulate(t, "oppo", cfg).summary["samples_per_s"]
        speedups.append(o / b)
    assert speedups[0] <= speedups[1] <= speedups[2], speedups


def test_staleness_reported_for_deferred_and_async():
    t = generate_longtail(LongTailSpec(), 300, seed=1)
    r_inter = simulate(t, Inter(delta=6), SMALL)
    r_async = simulate(t, make_policy("async"), SMALL)
    r_base = simulate(t, "baseline", SMALL)
    assert r_base.steps["staleness_max"].max() == 0
    assert r_async.steps["staleness_max"].iloc[1:].min() >= 1
    assert r_async.summary["staleness_max"] <= 1
    assert r_inter.steps["staleness_max"].max() >= 1


def test_every_policy_name_runs():
    t = generate_longtail(LongTailSpec(), 200, seed=2)
    for name in POLICY_NAMES:
        r = simulate(t, name, SMALL)
        assert r.summary["samples_trained"] == SMALL.batch * SMALL.steps, name


def test_trace_shorter_than_run_is_replayed_cyclically():
    t = Trace.from_arrays([10, 20, 30], [5, 50, 500], name="tiny")
    _, r = run(t, make_policy("baseline"))
    assert r.summary["admitted"] == SMALL.batch * SMALL.steps
    # rows are taken in order, wrapping around
    assert int(r.steps["tokens"].iloc[0]) == sum([5, 50, 500][i % 3] for i in range(8))


def test_overlap_policies_beat_baseline_on_long_tail():
    t = generate_longtail(LongTailSpec(tail_fraction=0.1, cap=4096), 1000, seed=5)
    cfg = SimConfig(batch=32, steps=8, actor="qwen2.5-1.5b", reward="qwen2.5-1.5b")
    base = simulate(t, "baseline", cfg).summary
    for name in ("inter", "oppo"):
        s = simulate(t, name, cfg).summary
        assert s["samples_per_s"] > base["samples_per_s"], name
        assert s["utilization_overall"] > base["utilization_overall"], name
    assert np.isfinite(base["flop_utilization"])


algorithms = st.sampled_from([
    Algorithm("grpo", n=2), Algorithm("rloo", n=3, reward="rule"), Algorithm("reinforce++", n=2, kl=False),
    Algorithm("dapo", n=2, reward="rule", informative=0.6), Algorithm("grpo", n=4, reward="rule", kl=False),
    Algorithm("dapo", n=2, reward="rule", informative=0.6, gen_batch_size=5),
])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces, policy=policies, algorithm=algorithms, seed=st.integers(0, 3))
def test_grouped_runs_account_for_every_response_and_are_deterministic(trace, policy, algorithm, seed):
    """n responses per prompt: each step trains B*n, every admitted response is trained, in flight or in a
    dropped or trimmed group, the rule reward's CPU pool is in no utilization, and the same seed gives the same run."""
    cfg = replace(SMALL, batch=3, seed=seed, algorithm=algorithm)
    p, r = run(trace, policy, cfg)
    n, s = algorithm.n, r.summary
    assert (r.steps["samples"] == cfg.batch * n).all()
    assert s["admitted"] == s["samples_trained"] + s["in_flight_end"] + s["dropped"] + s["trimmed"]
    assert s["admitted"] % n == 0 and s["dropped"] % n == 0 and s["trimmed"] % n == 0
    assert set(s["utilization"]) == {pool.name for pool in cfg.placement.pools}
    assert ("critic" in set(r.timeline["role"])) == algorithm.critic
    _, again = run(trace, policy, cfg)
    pd.testing.assert_frame_equal(r.steps, again.steps)
    assert r.summary == again.summary
