"""One explicit iteration of the simulated engine, decided as vLLM v1's ``Scheduler.schedule()`` decides it
(rules 2-4 of :mod:`oppo_sim.engine.continuous`): the running phase with preemption of the last running
request, then strict FCFS admission with prefix-cache lookups, and the price of what was scheduled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oppo_sim.engine.kvpool import NO_HITS, Hits
from oppo_sim.engine.request import ADMIT, PREEMPT, RUN, Plan, Req, _cdiv

EngineCore = Any  # an oppo_sim.engine.continuous.EngineCore (its cfg, running, waiting, pool and cost are read)


@dataclass
class _Sched:
    """Scratch state of one explicit iteration being planned."""

    budget: int
    free: int
    pops: int = 0  # blocks allocated from the free queue so far (they may evict cached blocks)
    ops: list[tuple[str, Req, int, int]] = field(default_factory=list)
    sched: list[tuple[Req, int, int]] = field(default_factory=list)  # (request, tokens, computed before)
    admitted: list[Req] = field(default_factory=list)
    preempted: list[Req] = field(default_factory=list)
    touched: list[Hits] = field(default_factory=list)  # prefix-cache hits of the admissions so far



def plan_iteration(core: "EngineCore") -> Plan:
    """One explicit iteration as vLLM's ``Scheduler.schedule()`` decides it: the running phase, then (only
    without preemptions) the waiting phase; priced with the core's decode cost."""
    cfg = core.cfg
    thr = cfg.long_prefill_token_threshold if len(core.running) + len(core.waiting) > 1 else 0
    st = _Sched(budget=cfg.max_num_batched_tokens, free=core.pool.free)
    running = _schedule_running(core, st, thr)
    if not st.preempted:
        _schedule_waiting(core, st, thr, len(running))
    return _price(core, st)


def _schedule_running(core: "EngineCore", st: _Sched, thr: int) -> list[Req]:
    """vLLM's running phase: returns the running list left after preemptions."""
    bs = core.cfg.block_size
    running = list(core.running)
    i = 0
    while i < len(running) and st.budget > 0:
        r = running[i]
        n = r.num_tokens - r.num_computed
        if 0 < thr < n:
            n = thr
        n = min(n, st.budget)
        if n <= 0:
            i += 1
            continue
        need = max(_cdiv(r.num_computed + n, bs) - r.blocks, 0)
        self_preempted = False
        while need > st.free:
            victim = running.pop()  # the last running request (under FCFS never one scheduled already)
            st.preempted.append(victim)
            st.ops.append((PREEMPT, victim, 0, 0))
            st.free += victim.blocks
            if victim is r:  # it preempted itself: the running phase stops
                self_preempted = True
                break
        if self_preempted:
            break
        st.free -= need
        st.pops += need
        st.ops.append((RUN, r, n, 0))
        st.sched.append((r, n, r.num_computed))
        st.budget -= n
        i += 1
    return running


def _schedule_waiting(core: "EngineCore", st: _Sched, thr: int, n_running: int) -> None:
    """vLLM's waiting phase (only in an iteration without preemptions): strict FCFS admission."""
    cfg = core.cfg
    bs = cfg.block_size
    slots = cfg.max_num_seqs - n_running
    for w in core.waiting:
        if st.budget <= 0 or slots <= 0:
            break
        total = w.num_tokens
        hits = _lookup(core, w, st)
        hit = len(hits) * bs
        n = total - hit
        if 0 < thr < n:
            n = thr
        if not cfg.enable_chunked_prefill and n > st.budget:
            break
        n = min(n, st.budget)
        if _cdiv(total, bs) > st.free:  # the whole sequence must fit (hits count: they leave the free queue)
            break
        new = _cdiv(hit + n, bs) - len(hits)
        st.free -= len(hits) + new
        st.pops += new
        st.touched.append(hits)
        st.ops.append((ADMIT, w, n, len(hits)))
        st.sched.append((w, n, hit))
        st.admitted.append(w)
        st.budget -= n
        slots -= 1


def _lookup(core: "EngineCore", w: Req, st: _Sched) -> Hits:
    if not core.cfg.enable_prefix_caching:
        return NO_HITS
    doomed = core.pool.doomed(st.pops, st.touched) if st.pops else None
    return core.pool.lookup(w.lineage, (w.num_tokens - 1) // core.cfg.block_size, doomed)


def _price(core: "EngineCore", st: _Sched) -> Plan:
    b = 0
    kv_dec = 0.0
    n_pre = 0
    pairs = 0.0
    kv_pre = 0.0
    recompute = 0.0
    for r, n, c in st.sched:
        if n == 1 and r.prompt + r.generated - c == 1:
            b += 1
            kv_dec += c
        else:
            n_pre += n
            pairs += n * c + n * (n + 1) / 2.0
            kv_pre += c
            redo = min(n, r.max_computed - c)
            if redo > 0:
                recompute += core.cost.flops(0, 0.0, redo, redo * c + redo * (redo + 1) / 2.0)
    secs = core.cost.iteration(b, kv_dec, n_pre, pairs, kv_pre)
    flops = core.cost.flops(b, kv_dec, n_pre, pairs)
    return Plan(1, secs, flops, recompute, b + n_pre, False, schedule=[(r, n) for r, n, _ in st.sched],
                admitted=st.admitted, preempted=st.preempted, ops=st.ops, free_after=st.free)

