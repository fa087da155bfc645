"""The TRL-style static generation engine: one call == unchunked, time == sum of per-call costs, one
request == the continuous engine, events at call ends, budgets, joining at call boundaries, nothing lost,
and the existing simpy driver runs it unchanged."""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.continuous import EngineCore
from oppo_sim.engine.factory import EngineKind, make_engine
from oppo_sim.engine.protocol import GenerationEngine
from oppo_sim.engine.request import EMIT, FINISH, PAUSE, EngineConfig, Req
from oppo_sim.engine.static import (
    CallPlan,
    StaticConfig,
    StaticCostParams,
    StaticEngineCore,
)
from oppo_sim.hw.costs.costmodel import DecodeCost
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.pipeline.devices import DevicePool, Timeline

try:  # the replica driver moved to its own module in the step-machine refactor
    from oppo_sim.pipeline.generation import GenReplica
except ImportError:  # pragma: no cover - before it
    from oppo_sim.pipeline.driver import GenReplica

DC = DecodeCost(get_model("qwen2.5-0.5b"), get_hardware("h100-sxm"))
DC7 = DecodeCost(get_model("qwen2.5-7b"), get_hardware("h200"))
BIG = 1_000_000  # KV blocks: no memory pressure
NO_OVH = StaticCostParams(call_overhead_s=0.0, host_op_s=0.0)  # the roofline alone


def static(call_tokens=None, gen_batch=None, ovh=0.0, blocks=BIG, carry_kv=True, cost=DC):
    return StaticEngineCore(cost, EngineConfig(), blocks, StaticConfig(call_tokens, gen_batch, carry_kv),
                            StaticCostParams(ovh, host_op_s=0.0))  # HF host time: test_hf_host_time_and_zero3_gather


def drain(core, now=0.0, on_event=None):
    """Plan/commit until idle; returns (end time, [(kind, rid, generated, time)], [call end times])."""
    events, ends = [], []
    while True:
        plan = core.plan()
        if plan is None:
            return now, events, ends
        now += plan.seconds
        ends.append(now)
        for kind, r in core.commit(plan, now):
            events.append((kind, r.rid, r.generated, now))
            if on_event is not None:
                on_event(kind, r)


def reqs_of(rows):
    return [Req(i, p, t) for i, (p, t) in enumerate(rows)]


rows_st = st.lists(st.tuples(st.integers(1, 300), st.integers(1, 400)), min_size=1, max_size=20)


# -- the three engine properties ---------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(rows=rows_st, extra=st.integers(0, 500), ovh=st.sampled_from([0.0, 0.03]))
def test_call_at_least_the_longest_response_is_one_unchunked_generation(rows, extra, ovh):
    longest = max(t for _, t in rows)
    a, b = static(None, ovh=ovh), static(longest + extra, ovh=ovh)
    ra, rb = reqs_of(rows), reqs_of(rows)
    for r in ra:
        a.add(r)
    for r in rb:
        b.add(r)
    ta, ea, ca = drain(a)
    tb, eb, cb = drain(b)
    assert len(ca) == len(cb) == 1  # one generate call holds the whole batch until its longest ends
    assert ta == tb
    assert ea == eb
    assert all(kind == FINISH and t == ta for kind, _, _, t in ea)  # everyone leaves when the call ends
    assert [r.generated for r in ra] == [t for _, t in rows]


def _independent_time(rows, C, ovh):
    """Per-iteration sum (no closed form) of one static batch in calls of C, KV carried, rows leaving at
    call ends, the padded KV trimmed to the widest remaining row: prefill of the batch padded to its
    longest prompt, then decode iterations of every remaining row over the padded KV."""
    n = len(rows)
    P = max(p for p, _ in rows)
    longest = max(t for _, t in rows)
    t = DC.iteration(0, 0.0, n * P, n * P * (P + 1) / 2.0, 0.0)
    calls = math.ceil(longest / C)
    j = 0  # decode iterations done (KV columns added after the prompt)
    for k in range(calls):
        alive = [(p, tt) for p, tt in rows if tt > k * C]  # not finished before this call
        width = max(p for p, _ in alive) + j  # every row's own tokens are right-aligned; pads trimmed
        b = len(alive)
        produce = min(C, max(tt for _, tt in alive) - k * C)
        iters = produce - (1 if k == 0 else 0)  # the first call's prefill samples its first token
        for i in range(iters):
            t += DC.iteration(b, b * (width + i))
        j += iters
        t += ovh
    return t, calls


@settings(max_examples=60, deadline=None)
@given(rows=rows_st, C=st.integers(1, 300), ovh=st.sampled_from([0.0, 0.011]))
def test_batch_time_is_the_sum_of_per_call_costs_up_to_its_longest_response(rows, C, ovh):
    core = static(C, ovh=ovh)
    rs = reqs_of(rows)
    for r in rs:
        core.add(r)
    t, _, ends = drain(core)
    want, calls = _independent_time(rows, C, ovh)
    assert len(ends) == calls == core.calls
    assert t == pytest.approx(want, rel=1e-9)
    assert core.iterations == 1 + max(tt for _, tt in rows) - 1  # one prefill + decodes up to the longest
    for r in rs:  # a response is seen when the call that produced its last token ends
        assert r.finish_t == ends[math.ceil(r.target / C) - 1]


@pytest.mark.parametrize("C", [None, 1, 7, 64, 10_000])
@pytest.mark.parametrize("prompt,target", [(1, 1), (37, 200), (900, 33)])
def test_one_request_agrees_with_the_continuous_engine(C, prompt, target):
    s, c = static(C), EngineCore(DC, EngineConfig(), BIG)
    rs, rc = Req(0, prompt, target), Req(0, prompt, target)
    s.add(rs)
    c.add(rc)
    ts, _, _ = drain(s)
    tc, _, _ = drain(c)
    assert ts == pytest.approx(tc, rel=1e-12)
    assert rs.generated == rc.generated == target
    assert rs.first_token_t == pytest.approx(rc.first_token_t, rel=1e-12)
    assert rs.finish_t == pytest.approx(rc.finish_t, rel=1e-12)
    # with a per-call overhead the only difference is one overhead per call
    o = static(C, ovh=0.25)
    o.add(Req(0, prompt, target))
    to, _, ends_o = drain(o)
    assert len(ends_o) == (1 if C is None else math.ceil(target / C))
    assert to == pytest.approx(tc + 0.25 * len(ends_o), rel=1e-12)


def test_one_request_streams_the_same_chunks_as_the_continuous_engine():
    def run(core, c=50):
        r = Req(0, 80, 230)
        r.emit_at = c
        core.add(r)

        def on(kind, req):
            if kind == EMIT:  # the driver moves the mark to the next boundary before the target
                nxt = (req.generated // c + 1) * c
                req.emit_at = nxt if nxt < req.target else None

        _, events, _ = drain(core, on_event=on)
        return events

    es, ec = run(static(None)), run(EngineCore(DC, EngineConfig(), BIG))
    assert [(k, g) for k, _, g, _ in es] == [(k, g) for k, _, g, _ in ec] == [
        (EMIT, 50), (EMIT, 100), (EMIT, 150), (EMIT, 200), (FINISH, 230)]
    assert [t for *_, t in es] == pytest.approx([t for *_, t in ec], rel=1e-12)


# -- call boundaries ----------------------------------------------------------------------------------


def test_chunk_boundaries_and_finishes_are_reported_at_call_ends():
    core = static(40, ovh=0.01)
    rs = reqs_of([(10, 15), (50, 40), (20, 100), (5, 95)])
    for r in rs:
        r.emit_at = 40
    for r in rs:
        core.add(r)
    out = []
    now = 0.0
    while (plan := core.plan()) is not None:
        assert isinstance(plan, CallPlan) and plan.steady and plan.b == 0
        now += plan.seconds
        evs = core.commit(plan, now)
        out.append([(k, r.rid, r.generated) for k, r in evs])
        for k, r in evs:
            if k == EMIT:
                r.emit_at = r.generated + 40
    assert out == [
        [(FINISH, 0, 15), (FINISH, 1, 40), (EMIT, 2, 40), (EMIT, 3, 40)],  # 0 finished at 15, held to 40
        [(EMIT, 2, 80), (EMIT, 3, 80)],
        [(FINISH, 2, 100), (FINISH, 3, 95)],
    ]
    assert rs[0].finish_t == rs[1].finish_t  # the short one is seen only when the call ends


def test_finished_rows_hold_their_slot_until_the_call_ends():
    rows = [(100, 10)] * 7 + [(100, 1000)]
    one_call, chunked = static(None), static(100)
    for core in (one_call, chunked):
        for r in reqs_of(rows):
            core.add(r)
    t1, _, _ = drain(one_call)
    t2, _, _ = drain(chunked)
    assert t2 < t1  # the 7 short rows leave after the first call instead of decoding padding to 1000
    cont = EngineCore(DC, EngineConfig(), BIG)
    for r in reqs_of(rows):
        cont.add(r)
    tc, _, _ = drain(cont)
    assert tc <= t2 < t1


def test_call_tokens_follow_the_drivers_chunk_marks_unless_set():
    core = static(None)
    r = Req(0, 10, 300)
    r.emit_at = 64
    core.add(r)
    assert core.plan().call_len == 64
    core.set_call_tokens(100)
    assert core.plan().call_len == 100
    core.set_call_tokens(None)
    assert core.plan().call_len == 64
    r.emit_at = None
    assert core.plan().call_len == 300  # no marks: one unchunked call
    with pytest.raises(ConfigError):
        core.set_call_tokens(0)


def test_pause_at_budget_at_call_boundaries():
    core = static(10)
    a, b = Req(0, 20, 100), Req(1, 20, 100)
    a.pause_at = 25  # a budget of 25 tokens: produced within the third call, reported when it ends
    core.add(a)
    core.add(b)
    _, events, ends = drain(core)
    assert (PAUSE, 0, 25, ends[2]) in events
    assert a.generated == 25 and a.finish_t is None
    assert b.generated == 100 and (FINISH, 1, 100, ends[-1]) in events
    assert len(ends) == 10


def test_requests_added_mid_call_join_the_next_call():
    core = static(20)
    a = Req(0, 30, 100)
    core.add(a)
    plan = core.plan()
    late = Req(1, 50, 30)
    core.add(late)  # arrives while the call runs
    core.commit(plan, plan.seconds)
    assert late.generated == 0 and list(core.waiting) == [late]
    nxt = core.plan()
    assert nxt.admitted == [late] and nxt.rows == 2 and nxt.prefill_width == 50
    t1 = plan.seconds + nxt.seconds
    core.commit(nxt, t1)
    assert late.generated == 20 and a.generated == 40  # both produce C tokens in the call they share
    assert late.first_token_t > plan.seconds
    drain(core, now=t1)
    assert a.generated == 100 and late.generated == 30


def test_mini_batches_run_one_after_another_and_new_requests_wait_for_the_round():
    rows = [(40, 50), (60, 120), (10, 80), (90, 30)]
    core = static(None, gen_batch=2)
    for r in reqs_of(rows):
        core.add(r)
    t, _, ends = drain(core)
    assert len(ends) == 2
    alone = []
    for part in (rows[:2], rows[2:]):
        c = static(None)
        for r in reqs_of(part):
            c.add(r)
        alone.append(drain(c)[0])
    assert t == pytest.approx(sum(alone), rel=1e-12)
    # chunked, round-robin: group 0, group 1, group 0, ...; a late request joins at the next round start
    core = static(25, gen_batch=2)
    rs = reqs_of(rows)
    for r in rs:
        core.add(r)
    p0 = core.plan()
    core.commit(p0, 1.0)
    assert p0.group == 0 and p0.rows == 2 and len(core.groups) == 2
    late = Req(9, 5, 5)
    core.add(late)
    p1 = core.plan()
    assert p1.group == 1 and p1.admitted == []  # mid-round: no admission
    core.commit(p1, 2.0)
    p2 = core.plan()
    assert p2.group == 0 and p2.admitted == [late]


def test_kv_capacity_limits_admission_and_everything_still_finishes():
    rows = [(100, 200)] * 6
    core = StaticEngineCore(DC, EngineConfig(block_size=16), kv_blocks=60, static=StaticConfig(50), params=NO_OVH)
    rs = reqs_of(rows)
    for r in rs:
        core.add(r)
    first = core.plan()
    assert first.rows == 3  # 960 tokens: three padded worst cases of 300
    _, events, _ = drain(core)
    assert sorted(rid for k, rid, _, _ in events if k == FINISH) == list(range(6))
    with pytest.raises(ConfigError):
        core.add(Req(7, 900, 200))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(1, 200), st.integers(1, 300), st.booleans()), min_size=1, max_size=16),
    C=st.one_of(st.none(), st.integers(1, 120)), gb=st.one_of(st.none(), st.integers(1, 5)),
    stop_after=st.integers(0, 30), carry=st.booleans(), budget=st.one_of(st.none(), st.integers(1, 150)),
)
def test_no_request_is_lost(rows, C, gb, stop_after, carry, budget):
    core = static(C, gb, ovh=0.001, carry_kv=carry)
    rs = [Req(i, p, t) for i, (p, t, _) in enumerate(rows)]
    late = [r for r, (_, _, lt) in zip(rs, rows) if lt]
    for r in rs:
        if r.pause_at is None and budget is not None:
            r.pause_at = budget
        if r not in late:
            core.add(r)
    finished, paused = [], []
    now, calls = 0.0, 0
    snap_checked = False
    while (plan := core.plan()) is not None and calls < stop_after:
        if not snap_checked:  # snapshot / run_chain / restore leave no trace
            snap = core.snapshot()
            core.run_chain(plan, now, 10)
            core.restore(snap)
            snap_checked = True
            plan = core.plan()
        if late and calls == 1:
            for r in late:  # added between plan and commit: must not be part of this call
                core.add(r)
        now += plan.seconds
        for kind, r in core.commit(plan, now):
            if kind == FINISH:
                finished.append(r)
            elif kind == PAUSE:
                paused.append(r)
        calls += 1
    left = core.remove_all()
    unseen = [r for r in late if calls <= 1]  # never added
    ids = [r.rid for r in finished + paused + left + unseen]
    assert sorted(ids) == list(range(len(rs)))  # each request exactly once
    assert not core.has_work() and core.kv_tokens() == 0
    for r in finished:
        assert r.generated == r.target
    for r in paused:
        assert r.generated == min(r.pause_at, r.target) and r.generated < r.target
    for r in left:
        assert r.generated < r.target and r.num_computed == 0


def test_remove_all_keeps_progress_and_resumed_requests_reprefill():
    core = static(30)
    r = Req(0, 40, 100)
    core.add(r)
    p = core.plan()
    core.commit(p, p.seconds)
    assert core.remove_all() == [r] and r.generated == 30
    core.add(r)  # next step: prompt + 30 generated tokens are prefilled again (recompute)
    p = core.plan()
    assert p.prefill_width == 70 and p.recompute_flops > 0
    drain(core)
    assert r.generated == 100


def test_without_carried_kv_every_call_reprefills():
    rows = [(50, 90), (20, 60)]
    times = {}
    for carry in (True, False):
        core = static(30, carry_kv=carry)
        for r in reqs_of(rows):
            core.add(r)
        times[carry] = drain(core)[0]
    assert times[False] > times[True]


def test_padding_is_counted_as_wasted_flops():
    core = static(None)
    core.add(Req(0, 10, 5))
    plan = core.plan()
    assert plan.recompute_flops == pytest.approx(0.0, abs=plan.flops * 1e-12)  # one row: no padding
    core = static(None)
    for r in reqs_of([(10, 5), (300, 400)]):
        core.add(r)
    plan = core.plan()
    assert 0 < plan.recompute_flops < plan.flops


def test_chunk_size_has_an_interior_optimum_with_a_call_overhead():
    """A long-tail batch: small calls pay the overhead, one call holds finished rows to the longest."""
    lengths = [60, 80, 100, 120, 150, 200, 250, 300, 400, 600, 900, 1400, 2200, 4000]
    rows = [(200, lengths[i % len(lengths)]) for i in range(112)]

    def gen_time(C):
        core = static(C, ovh=0.05, cost=DC7)
        for r in reqs_of(rows):
            core.add(r)
        return drain(core)[0]

    t = {C: gen_time(C) for C in (None, 3000, 500, 20)}
    assert t[500] < t[20] and t[500] < t[3000] < t[None]


# -- protocol, factory, simpy driver ------------------------------------------------------------------


def test_factory_and_protocol():
    s = make_engine("static", DC, EngineConfig(), 100, StaticConfig(call_tokens=8))
    c = make_engine(EngineKind.CONTINUOUS, DC, EngineConfig(), 100)
    assert isinstance(s, StaticEngineCore) and isinstance(c, EngineCore)
    assert isinstance(s, GenerationEngine) and isinstance(c, GenerationEngine)
    assert s.call_tokens == 8
    assert EngineKind.parse(" Static ") is EngineKind.STATIC
    with pytest.raises(ConfigError):
        EngineKind.parse("paged")
    with pytest.raises(ConfigError):
        StaticConfig(call_tokens=0)
    with pytest.raises(ConfigError):
        StaticCostParams(call_overhead_s=-1.0)
    assert StaticCostParams.from_meta({"static": {"call_overhead_s": 0.5}}).call_overhead_s == 0.5
    assert StaticCostParams.from_meta({}) == StaticCostParams(host_op_s=0.0)  # a profile: its decode holds the host
    with pytest.raises(ConfigError):
        StaticCostParams.from_meta({"static": {"overhead": 1}})


def _simpy_run(core, rows, stop_at=None, add_late_at=None):
    env = simpy.Environment()
    pool = DevicePool(env, "gen", 1, DC.hw.gpu.peak_flops, 0.0, Timeline())
    finished, box = [], {}

    def sink(_replica, events):
        finished.extend(r for k, r in events if k == FINISH)

    rep = GenReplica(env, 0, core, pool, (0,), sink)
    rs = reqs_of(rows)

    def feed():
        for r in rs[:-1] if add_late_at is not None else rs:
            rep.add(r)
        if add_late_at is not None:
            yield env.timeout(add_late_at)
            rep.add(rs[-1])
        if stop_at is not None:
            yield env.timeout(stop_at - env.now)
            box["left"] = yield rep.stop()
            box["t"] = env.now

    env.process(feed())
    env.run(until=1e6)
    return rs, finished, box, pool


def test_the_simpy_replica_drives_the_static_engine_unchanged():
    rows = [(30, 50), (60, 130), (10, 300)]
    direct = static(64, ovh=0.02)
    for r in reqs_of(rows):
        direct.add(r)
    t_direct, _, ends = drain(direct)
    rs, finished, _, pool = _simpy_run(static(64, ovh=0.02), rows)
    assert sorted(r.rid for r in finished) == [0, 1, 2]
    assert max(r.finish_t for r in rs) == pytest.approx(t_direct, rel=1e-12)
    assert pool.utilization(t_direct) == pytest.approx(1.0)
    # a stop during a call takes effect when the call ends: unfinished requests come back with progress
    rs, finished, box, _ = _simpy_run(static(64, ovh=0.02), rows, stop_at=ends[1] - 1e-6)
    assert box["t"] == pytest.approx(ends[1])
    assert sorted(r.rid for r in box["left"]) == [1, 2]
    assert {r.rid: r.generated for r in box["left"]} == {1: 128, 2: 128}
    # a request added during a call is admitted at the next call
    rs, finished, _, _ = _simpy_run(static(64, ovh=0.02), rows + [(5, 10)], add_late_at=ends[0] / 2)
    late = rs[-1]
    assert late.first_token_t > ends[0] and late.generated == 10


def test_the_pipeline_runs_on_the_static_engine(monkeypatch):
    """End to end with the existing pipeline (its replicas' cores swapped for static engines): the
    chunked policy streams at call boundaries and every step trains a full batch."""
    import oppo_sim.pipeline.simulate as sim
    from oppo_sim.core.policies import Intra, make_policy
    from oppo_sim.pipeline.config import SimConfig
    from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

    base = sim.Pipeline
    built = []

    class StaticPipeline(base):
        def _build_generators(self):
            super()._build_generators()
            for rep in self.replicas:
                old = rep.core
                # GPU-bound forwards (no HF host floor): a small batch's host-bound forwards would leave the
                # scoring tail intra overlaps shorter than its calls' overhead, and the ordering below to chance
                rep.core = make_engine("static", old.cost, self.cfg.engine, old.capacity, StaticConfig(),
                                       StaticCostParams(0.02, host_op_s=0.0))
                built.append(rep.core)

    monkeypatch.setattr(sim, "Pipeline", StaticPipeline)
    trace = generate_longtail(LongTailSpec(cap=2048), 400, seed=1)
    cfg = SimConfig(steps=3, batch=32)
    out = {}
    for name, pol in (("baseline", make_policy("baseline")), ("intra", Intra(chunk=256)), ("oppo", make_policy("oppo", chunk=256)),
                      ("partial", make_policy("partial-rollout"))):
        res = sim.simulate(trace, pol, cfg)
        assert len(res.steps) == 3 and (res.steps["samples"] == 32).all()
        out[name] = res.summary["step_time_s"]
        assert sum(c.calls for c in built) > 0
        built.clear()
    assert out["intra"] < out["baseline"]
