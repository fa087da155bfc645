"""The policies are pure: plans and state updates, no simpy."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import (
    POLICY_NAMES,
    Async,
    Baseline,
    ChunkAutotune,
    DeltaRule,
    DynamicDelta,
    Inter,
    Intra,
    Oppo,
    PartialRollout,
    make_policy,
    next_delta,
)
from oppo_sim.core.stepplan import PolicyState, StepContext, StepOutcome, Streaming


def outcome(step, reward, t=1.0):
    return StepOutcome(step=step, step_time_s=t, mean_reward=reward, trained=8, deferred=0)


def test_baseline_and_stream_plans():
    ctx = StepContext(step=0, batch=112)
    assert Baseline().plan(PolicyState(), ctx).admit == 112
    assert Baseline().plan(PolicyState(), ctx).end_after is None
    assert make_policy("stream").plan(PolicyState(), ctx).streaming is Streaming.FINISHED


def test_inter_keeps_b_plus_delta_in_flight():
    p = Inter(delta=8)
    s = p.initial_state()
    plan = p.plan(s, StepContext(step=3, batch=112, carried=5, carried_finished=2))
    assert plan.admit == 112 + 8 - 5 - 2
    assert plan.end_after == 110  # the 2 already finished count towards B
    assert Inter(delta=0).plan(Inter(delta=0).initial_state(), StepContext(0, 16)).admit == 16


def test_delta_rule_follows_reward_slope():
    rule = DeltaRule(delta0=4, delta_min=0, delta_max=6, window=2, inc=1, dec=2)
    assert next_delta(rule, 4, (0.1, 0.2)) == 4  # window not full yet
    assert next_delta(rule, 4, (0.1, 0.2, 0.3)) == 5
    assert next_delta(rule, 6, (0.1, 0.2, 0.3)) == 6  # capped at Δmax
    assert next_delta(rule, 4, (0.3, 0.3, 0.3)) == 2  # flat: decrease
    assert next_delta(rule, 1, (0.3, 0.2, 0.1)) == 0  # floored at Δmin
    prop = DeltaRule(delta0=16, delta_max=64, window=1, proportional=True)
    assert next_delta(prop, 16, (0.0, 1.0)) == 20
    assert next_delta(prop, 16, (1.0, 0.0)) == 12
    assert next_delta(prop, 2, (1.0, 0.0)) == 1


@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=0, max_size=60))
def test_dynamic_delta_stays_in_bounds(rewards):
    p = DynamicDelta(rule=DeltaRule(delta0=3, delta_min=1, delta_max=9, window=3))
    s = p.initial_state()
    for i, r in enumerate(rewards):
        s = p.update(s, outcome(i, r))
        assert 1 <= s.delta <= 9
        assert p.plan(s, StepContext(i, 32)).delta == s.delta


def test_delta_falls_to_min_at_convergence():
    p = Oppo(rule=DeltaRule(delta0=8, delta_min=0, delta_max=16, window=3))
    s = p.initial_state()
    for i in range(40):
        s = p.update(s, outcome(i, 1.0))  # flat reward: converged
    assert s.delta == 0


def test_chunk_autotune_tries_candidates_then_keeps_fastest():
    p = ChunkAutotune(inner=Oppo(chunk=500), candidates=(128, 256, 512), every=10)
    s = p.initial_state()
    times = {128: 3.0, 256: 2.0, 512: 2.5}
    used = []
    for step in range(12):
        plan = p.plan(s, StepContext(step, 32))
        used.append(plan.chunk)
        s = p.update(s, outcome(step, 0.0, t=times.get(plan.chunk, 9.0)))
    assert used[:3] == [128, 256, 512]
    assert used[3:10] == [256] * 7  # kept the fastest
    assert used[10:12] == [128, 256]  # next tuning round
    assert dict(s.tune_trials)[256] == 2.0


def test_partial_rollout_and_async_plans():
    pr = PartialRollout(budget=256, delta=4)
    plan = pr.plan(pr.initial_state(), StepContext(0, 16))
    assert plan.token_budget == 256 and plan.refill and plan.end_after == 16
    assert Async(staleness=2).plan(PolicyState(), StepContext(0, 16)).max_staleness == 2


def test_state_is_json_friendly():
    s = Oppo().initial_state()
    assert asdict(s) == {"delta": 8, "chunk": 500, "rewards": (), "tune_trials": ()}


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_make_policy_by_name(name):
    p = make_policy(name)
    assert p.name == name


@pytest.mark.parametrize("bad", [
    lambda: make_policy("nope"), lambda: Intra(chunk=0), lambda: Inter(delta=-1),
    lambda: DeltaRule(delta0=50, delta_max=32), lambda: ChunkAutotune(candidates=(128, 256), every=2),
    lambda: PartialRollout(budget=0), lambda: Async(staleness=0),
])
def test_bad_policy_config_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        bad()


@pytest.mark.parametrize("make", [
    lambda rule: DynamicDelta(rule=rule), lambda rule: Oppo(rule=rule), lambda rule: ChunkAutotune(inner=Oppo(rule=rule)),
], ids=["dynamic-delta", "oppo", "chunk-autotune"])
def test_a_delta_window_of_100_keeps_the_rewards_it_reads(make):
    """The Δ rule reads window + 1 mean rewards: with a window of 100 (more than any fixed history of 64), Δ
    must still move once 101 rewards are in, and keep following the trend."""
    p = make(DeltaRule(delta0=4, delta_min=0, delta_max=40, window=100))
    s, deltas, kept = p.initial_state(), [], []
    for i in range(130):
        s = p.update(s, outcome(i, i / 100.0))  # rising reward
        deltas.append(s.delta)
        kept.append(len(s.rewards))
    assert deltas[:100] == [4] * 100  # the window is not full yet
    assert deltas[100:] == list(range(5, 35))  # one up per step from the 101st reward on
    assert kept == [min(i + 1, 101) for i in range(130)] and p.rewards_kept() == 101


def test_policies_without_a_delta_rule_keep_no_rewards():
    for p in (Baseline(), Inter(delta=2), PartialRollout(), Async(), ChunkAutotune(inner=Intra())):
        s = p.update(p.initial_state(), outcome(0, 0.5))
        assert p.rewards_kept() == 0 and s.rewards == ()
    assert DynamicDelta(rule=DeltaRule(window=3)).update(PolicyState(), outcome(0, 0.5)).rewards == (0.5,)
