"""One explicit iteration of the simulated engine, decided as vLLM v1's ``Scheduler.schedule()`` decides it
(rules 2-4 of :mod:`oppo_sim.engine.continuous`): the running phase with preemption of the last running
request, then strict FCFS admission with prefix-cache lookups, and the price of what was scheduled.

The running phase has a shortcut that decides the same: when every running request can get all its tokens
(their sum fits the token budget) and all the blocks they need fit the free blocks, nothing is preempted and
nobody is cut short, so the plainly decoding requests (:class:`~oppo_sim.engine.decoders.Decoders`) are taken
as one token each from their aggregates and only the others are looked at one by one. Otherwise the phase is
walked request by request as vLLM walks it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from oppo_sim.engine.kvpool import NO_HITS, Hits
from oppo_sim.engine.request import ADMIT, PREEMPT, RUN, Plan, Req, _cdiv

EngineCore = Any  # an oppo_sim.engine.continuous.EngineCore (its cfg, running, waiting, pool and cost are read)


class _Sched:
    """Scratch state of one explicit iteration being planned."""

    __slots__ = ("budget", "free", "pops", "ops", "sched", "admitted", "preempted", "touched", "pending", "unref")

    def __init__(self, budget: int, free: int, pops: int = 0):
        self.budget = budget
        self.free = free
        self.pops = pops  # blocks allocated from the free queue so far (they may evict cached blocks)
        self.ops: list[tuple[str, Req, int, int]] = []
        self.sched: list[tuple[Req, int, int]] = []  # (request, tokens, computed before)
        self.admitted: list[Req] = []
        self.preempted: list[Req] = []
        self.touched: list[Hits] = []  # prefix-cache hits of the admissions so far
        self.pending: dict = {}  # prefix -> mask of the shared prompt blocks admissions so far will register
        self.unref: dict = {}  # (run, block) -> holders that preemptions so far release


@dataclass
class InFull:
    """The running phase of an iteration that schedules every running request in full (no preemption): the
    lazily advanced decoders one token each, the ``others`` (request, tokens, computed before) in running
    order, and the blocks they all take."""

    running: Sequence[Req]
    others: list[tuple[Req, int, int]]
    skipped: list[Req]  # running requests with nothing to schedule
    need: int
    budget: int  # token budget left for the waiting phase


class Later(Sequence):
    """A list built on first use: an explicit plan's per-request view (``schedule``, ``ops``), which the engine
    itself does not need when the running phase was taken in full."""

    __slots__ = ("_build", "_items")

    def __init__(self, build: Callable[[], list]):
        self._build = build
        self._items: list | None = None

    def _get(self) -> list:
        if self._items is None:
            self._items, self._build = self._build(), None
        return self._items

    def __getitem__(self, i):
        return self._get()[i]

    def __len__(self) -> int:
        return len(self._get())

    def __iter__(self):
        return iter(self._get())

    def __eq__(self, other) -> bool:
        return list(self._get()) == list(other)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return repr(self._get())


def plan_iteration(core: "EngineCore") -> Plan:
    """One explicit iteration as vLLM's ``Scheduler.schedule()`` decides it: the running phase, then (only
    without preemptions) the waiting phase; priced with the core's decode cost."""
    thr = _threshold(core)
    full = _running_in_full(core, thr)
    if full is not None:
        full.running = tuple(full.running)  # as it is now: the plan's views are built later, if read
        st = _waiting_after(core, full, thr)
        secs, flops, recompute, tokens = _cost(core, st, full)
        sched, ops = _views(full, st)
        return Plan(1, secs, flops, recompute, tokens, False, schedule=sched, admitted=st.admitted, preempted=[],
                    ops=ops, free_after=st.free, fast=(full, st.ops, st.sched))
    core.sync_all()  # the exact walk below reads every running request's stored fields
    st = _Sched(budget=core.cfg.max_num_batched_tokens, free=core.pool.free)
    running = _schedule_running(core, st, thr)
    if not st.preempted:
        _schedule_waiting(core, st, thr, len(running))
    secs, flops, recompute, tokens = _cost(core, st, None)
    return Plan(1, secs, flops, recompute, tokens, False, schedule=[(r, n) for r, n, _ in st.sched],
                admitted=st.admitted, preempted=st.preempted, ops=st.ops, free_after=st.free)


def step_in_full(core: "EngineCore", start: float, events: list[tuple[str, Req]]):
    """Plan and apply the next explicit iteration at once, if its running phase schedules every running request
    in full (what :func:`plan_iteration` + ``commit`` would do, without building the plan): returns
    ``(seconds, flops, recompute_flops, tokens, requests to settle)``, or None (nothing applied)."""
    thr = _threshold(core)
    full = _running_in_full(core, thr)
    if full is None:
        return None
    st = _waiting_after(core, full, thr)
    secs, flops, recompute, tokens = _cost(core, st, full)
    touched = apply_in_full(core, full, st.ops, st.sched, start + secs, events)
    return secs, flops, recompute, tokens, touched


def _threshold(core: "EngineCore") -> int:
    return core.cfg.long_prefill_token_threshold if len(core.running) + len(core.waiting) > 1 else 0


def _waiting_after(core: "EngineCore", full: "InFull", thr: int) -> "_Sched":
    st = _Sched(budget=full.budget, free=core.pool.free - full.need, pops=full.need)
    _schedule_waiting(core, st, thr, len(full.running))
    return st


def _running_in_full(core: "EngineCore", thr: int) -> InFull | None:
    """The running phase if no lazily advanced decoder goes without its token and nothing is preempted (a
    request still prefilling may be cut by the budget if no decoder comes after it); else None."""
    bs = core.cfg.block_size
    running = core.running
    d = core.dec
    budget = core.cfg.max_num_batched_tokens
    need = d.need1()
    others, skipped = [], []
    for j, r in enumerate(core.others):  # running requests that are not lazily advanced (few: still prefilling)
        before = running.index(r) - j  # decoders ahead of it in the running list
        left = budget - before
        if left <= 0:  # the walk stops before it
            if d.n > before:
                return None
            skipped += core.others[j:]
            break
        c = r._computed
        n = r.prompt + r._generated - c
        if 0 < thr < n:
            n = thr
        if n <= 0:
            skipped.append(r)
            continue
        if n >= left:  # the budget runs out at it
            if d.n > before:
                return None
            n = left
        k = -(-(c + n) // bs) - r._blocks
        if k > 0:
            need += k
        budget -= n
        others.append((r, n, c))
    if budget < d.n or need > core.pool.free:
        return None
    return InFull(running, others, skipped, need, budget - d.n)


def _schedule_running(core: "EngineCore", st: _Sched, thr: int) -> list[Req]:
    """vLLM's running phase, request by request: returns the running list left after preemptions."""
    bs = core.cfg.block_size
    running = list(core.running)
    i = 0
    while i < len(running) and st.budget > 0:
        r = running[i]
        n = r.prompt + r._generated - r._computed
        if 0 < thr < n:
            n = thr
        n = min(n, st.budget)
        if n <= 0:
            i += 1
            continue
        need = max(_cdiv(r._computed + n, bs) - r._blocks, 0)
        self_preempted = False
        while need > st.free:
            victim = running.pop()  # the last running request (under FCFS never one scheduled already)
            st.preempted.append(victim)
            st.ops.append((PREEMPT, victim, 0, 0))
            st.free += victim._blocks - core.pool.held_in(victim.hits, st.unref)  # shared blocks others hold stay
            if victim is r:  # it preempted itself: the running phase stops
                self_preempted = True
                break
        if self_preempted:
            break
        st.free -= need
        st.pops += need
        st.ops.append((RUN, r, n, 0))
        st.sched.append((r, n, r._computed))
        st.budget -= n
        i += 1
    return running


def _schedule_waiting(core: "EngineCore", st: _Sched, thr: int, n_running: int) -> None:
    """vLLM's waiting phase (only in an iteration without preemptions): strict FCFS admission."""
    cfg = core.cfg
    bs = cfg.block_size
    chunked = cfg.enable_chunked_prefill
    slots = cfg.max_num_seqs - n_running
    for w in core.waiting:
        if st.budget <= 0 or slots <= 0:
            break
        total = w.prompt + w._generated
        hits, nh, held = _lookup(core, w, st)
        hit = nh * bs
        n = total - hit
        if 0 < thr < n:
            n = thr
        if n > st.budget:
            if not chunked:
                break
            n = st.budget
        if -(-total // bs) - held > st.free:  # the whole sequence must fit (free hits count: they leave the queue)
            break
        new = -(-(hit + n) // bs) - nh
        st.free -= nh - held + new
        st.pops += new
        st.touched.append(hits)
        st.ops.append((ADMIT, w, n, nh))
        if w.prefix is not None and core.pool.caching:  # its computed full prompt blocks: shared from now on
            kp = min(w.prompt // bs, (hit + n) // bs)
            if kp > nh:
                st.pending[w.prefix] = st.pending.get(w.prefix, 0) | (((1 << (kp - nh)) - 1) << nh)
        st.sched.append((w, n, hit))
        st.admitted.append(w)
        st.budget -= n
        slots -= 1


def _lookup(core: "EngineCore", w: Req, st: _Sched) -> tuple[Hits, int, int]:
    """(hits, blocks hit, of them held by other requests) of a waiting request."""
    if w.prefix is None and not core.pool.holds(w.lineage):  # nothing of its own cached (or no prefix caching)
        return NO_HITS, 0, 0
    doomed = core.pool.doomed(st.pops, st.touched) if st.pops else None
    return core.lookup(w, doomed, st.pending.get(w.prefix, 0))


def hits_of(core: "EngineCore", r: Req, doomed: dict | None = None, pending: int | None = None):
    """``r``'s prefix-cache hits (at most ``(num_tokens - 1) // block_size`` blocks): its prefix's shared
    prompt blocks first, then its own lineage's. ``pending``: a mask of the prefix blocks that admissions
    earlier in the iteration being planned will register (counted as held, no pieces yet; a cached copy is
    hit first, as the lookup at commit will). Returns the hits when ``pending`` is None, else
    ``(hits, blocks hit, of them held by other requests)``."""
    bs, pool = core.cfg.block_size, core.pool
    maxb = (r.prompt + r._generated - 1) // bs
    if r.prefix is None or not pool.caching:
        hits = pool.lookup(r.lineage, maxb, doomed)
        return hits if pending is None else (hits, len(hits), 0)
    key, cap = ("prefix", r.prefix), min(r.prompt // bs, maxb)
    hp = pool.lookup(key, cap, doomed)
    n = real = len(hp)
    while pending and n < cap and pending >> n & 1:  # pending blocks, then what is cached after them
        while n < cap and pending >> n & 1:
            n += 1
        more = pool.lookup(key, cap - n, doomed, start=n) if n < cap else NO_HITS
        if more:
            hp = Hits(hp.pieces + more.pieces, real + len(more))
            real, n = real + len(more), n + len(more)
    own = pool.lookup(r.lineage, maxb - n, doomed, start=n) if n < maxb else NO_HITS
    hits = Hits(hp.pieces + own.pieces, real + len(own)) if own else hp
    return hits if pending is None else (hits, n + len(own), pool.held_in(hp) + n - real)


def _cost(core: "EngineCore", st: _Sched, full: InFull | None) -> tuple[float, float, float, int]:
    """Cost of the iteration: decodes (one token over a request's whole context) and prefill chunks, and the
    FLOPs that recompute what a request had computed before (re-prefill after a preemption)."""
    b = core.dec.n if full is not None else 0
    kv_dec = float(core.dec.kv()) if full is not None else 0.0
    n_pre = 0
    pairs = 0.0
    kv_pre = 0.0
    recompute = 0.0
    for r, n, c in (full.others + st.sched if full is not None else st.sched):
        if n == 1 and r.prompt + r._generated - c == 1:
            b += 1
            kv_dec += c
        else:
            n_pre += n
            pairs += n * c + n * (n + 1) / 2.0
            kv_pre += c
            redo = min(n, r._max_computed - c)
            if redo > 0:
                recompute += core.cost.flops(0, 0.0, redo, redo * c + redo * (redo + 1) / 2.0)
    secs = core.cost.iteration(b, kv_dec, n_pre, pairs, kv_pre)
    flops = core.cost.flops(b, kv_dec, n_pre, pairs)
    return secs, flops, recompute, b + n_pre


def _views(full: InFull, st: _Sched) -> tuple[Later, Later]:
    """``schedule`` and ``ops`` of an iteration whose running phase was taken in full, built only if read."""
    def schedule() -> list[tuple[Req, int]]:
        tok = {id(r): n for r, n, _ in full.others}
        tok.update((id(r), 0) for r in full.skipped)
        run = [(r, tok.get(id(r), 1)) for r in full.running]
        return [(r, n) for r, n in run if n > 0] + [(r, n) for r, n, _ in st.sched]

    n_run = len(full.running) - len(full.skipped)
    sched = Later(schedule)
    ops = Later(lambda: [(RUN, r, n, 0) for r, n in sched[:n_run]] + st.ops)
    return sched, ops


def commit_in_full(core: "EngineCore", plan: Plan, now: float, events: list[tuple[str, Req]]) -> list[Req]:
    """An explicit iteration whose running phase scheduled every running request in full."""
    return apply_in_full(core, *plan.fast, now, events)


def apply_in_full(core: "EngineCore", full: InFull, admit_ops: list, admit_sched: list, now: float,
                  events: list[tuple[str, Req]]) -> list[Req]:
    """Apply an iteration whose running phase schedules every running request in full: the running phase's
    blocks in one go (nothing is freed in between), admissions in order, then one token for every decoder
    (their tick) and the others' tokens; returns the requests to settle."""
    bs = core.cfg.block_size
    core.pool.take(full.need)
    for r, n, c in full.others:
        nb = -(-(c + n) // bs)
        if nb > r._blocks:
            r._blocks = nb
    for _, r, n, h in admit_ops:
        core._admit(r, n, h)
    d = core.dec
    d.tick += 1
    if d.fresh:
        for r in d.fresh:
            r.first_token_t = now
        d.fresh.clear()
    touched = [r for r, _, _ in full.others] + [r for r, _, _ in admit_sched]
    for r, n, _ in full.others:
        _advance(core, r, n, now, events)
    for r, n, _ in admit_sched:
        _advance(core, r, n, now, events)
    due = d.due()
    if due:
        mixed = bool(events)
        for r in due:
            core._check_events(r, now, events)
            core._dirty.append(r)
        if mixed:
            events.sort(key=_running_order)
    return touched


def commit_walk(core: "EngineCore", plan: Plan, now: float, events: list[tuple[str, Req]]) -> list[Req]:
    """An explicit iteration walked request by request (a preemption, or a budget that ran short)."""
    core._dissolve()
    bs = core.cfg.block_size
    pool = core.pool
    for kind, r, n, h in plan.ops:  # block operations in vLLM's order
        if kind == PREEMPT:
            core._preempt(r)
        elif kind == RUN:
            nb = _cdiv(r._computed + n, bs)
            if nb > r._blocks:
                pool.take(nb - r._blocks)
                r._blocks = nb
        else:
            core._admit(r, n, h)
    core.dec.tick += 1
    for r, n in plan.schedule:
        _advance(core, r, n, now, events)
    return list(core.running)


def _advance(core: "EngineCore", r: Req, n: int, now: float, events: list[tuple[str, Req]]) -> None:
    """``r`` (not lazily advanced) was scheduled ``n`` tokens in an iteration that ended at ``now``."""
    c = r._computed + n
    r._computed = c
    if c > r._max_computed:
        r._max_computed = c
    if c == r.prompt + r._generated:  # caught up: a new token is sampled
        r._generated += 1
        if r.first_token_t is None:
            r.first_token_t = now
        core._check_events(r, now, events)


def _running_order(event: tuple[str, Req]) -> int:
    return event[1]._pos
