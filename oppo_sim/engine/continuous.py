"""Generation engine model: continuous batching decided as vLLM v1 (0.32) decides it, without an event per token.

One :class:`EngineCore` models one engine replica (``tp`` devices). Each iteration is one
``Scheduler.schedule()`` of vLLM v1 (``vllm/v1/core/sched/scheduler.py``) with FCFS, no speculative decoding
and no KV connector; block accounting follows its ``KVCacheManager`` / ``BlockPool`` (see
:mod:`oppo_sim.engine.kvpool`). The rules, in vLLM's order:

1. **KV blocks.** ``kv_blocks`` is vLLM's ``num_gpu_blocks``; one is its null block, so ``kv_blocks - 1`` are
   usable. A request holds ``cdiv(num_computed + n, block_size)`` blocks after ``n`` tokens are scheduled:
   nothing is reserved for the token that will be sampled (its KV is written when it is the next input).
2. **Running requests first**, in running-list (admission) order, while token budget remains: each gets
   ``num_tokens - num_computed`` tokens (1 for a decode), capped by ``long_prefill_token_threshold`` (when
   more than one request is running or waiting) and by the remaining budget.
3. **Preemption** (recompute): when a running request's blocks cannot be allocated, the *last* running
   request is preempted, repeatedly, until it fits; if the request itself is the last, it preempts itself and
   the running phase stops. A victim frees its blocks, forgets its computed tokens (keeps its sampled
   tokens, so it later recomputes prompt + generated) and goes to the **front** of the waiting queue; several
   victims end up there in their original running order.
4. **Waiting requests** are admitted only in an iteration without preemptions, strictly FCFS: the head is
   looked up in the prefix cache, given ``num_tokens - hit`` tokens (threshold-capped), and admitted if
   ``max_num_seqs`` allows, the whole current sequence fits in the free blocks (vLLM's
   ``scheduler_reserve_full_isl``) and, without chunked prefill, its tokens fit in the remaining budget
   (with chunked prefill it gets what the budget leaves). The first request that cannot be admitted **stops**
   admission (nothing behind it is considered).
5. **Prefix caching** (``enable_prefix_caching``): full blocks stay cached after their request frees them
   (evictable, counted as free, LRU); a new, resumed or preempted request hits the longest run of its own
   cached blocks, at most ``(num_tokens - 1) // block_size`` blocks, and computes only the rest. Content is
   identified by (request lineage, block index); sharing between different requests with identical prompts
   is not modelled (see :mod:`oppo_sim.engine.kvpool`). :meth:`EngineCore.reset_cache` is vLLM's
   ``reset_prefix_cache(reset_running_requests=True)`` (weight sync): running requests are preempted and
   every hash is dropped.
6. A request whose scheduled tokens reach ``num_tokens`` samples a token; one that reaches its target (or
   its pause point) leaves at the end of that iteration and frees its blocks at once.

While every running request is plainly decoding and nothing can be admitted, consecutive iterations differ
only by their KV length, so :meth:`EngineCore.plan` returns one *span* that jumps straight to the next
interesting point (a request finishing, reaching a chunk boundary or its token budget, or a KV block
allocation failing) with the cost summed in closed form. Everything else is planned one iteration at a
time. The engine never sees simpy: a driver asks for a plan, spends its ``seconds`` on a device, then
commits it (possibly truncated to fewer iterations when the driver interrupts it).

Not modelled: ``max_model_len`` truncation (requests must fit; :meth:`EngineCore.add` refuses those that
cannot), the KV watermark (0 by default), priority scheduling, speculative decoding, async scheduling.
"""

from __future__ import annotations

from collections import deque

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.kvpool import NO_HITS, KVBlockPool
from oppo_sim.engine.request import (
    EMIT,
    FINISH,
    PAUSE,
    PREEMPT,
    RUN,
    Chain,
    EngineConfig,
    Plan,
    Req,
    _cdiv,
)
from oppo_sim.engine.vllm_step import plan_iteration
from oppo_sim.hw.costmodel import DecodeCost


class EngineCore:
    """State and scheduling of one generation engine replica; ``kv_blocks`` is vLLM's ``num_gpu_blocks``."""

    def __init__(self, cost: DecodeCost, cfg: EngineConfig, kv_blocks: int):
        if kv_blocks < 2:
            raise ConfigError("no KV-cache blocks left for the generation engine (vLLM keeps one as its null block)")
        self.cost = cost
        self.cfg = cfg
        self.num_blocks = kv_blocks
        self.capacity = kv_blocks - 1  # usable blocks
        self.pool = KVBlockPool(self.capacity, cfg.block_size, cfg.enable_prefix_caching)
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.iterations = 0
        self.preemptions = 0
        self.prefix_hit_tokens = 0

    @property
    def used(self) -> int:
        """Blocks held by requests (free blocks include evictable cached ones)."""
        return self.capacity - self.pool.free

    # -- queue management -------------------------------------------------------------------------
    def add(self, req: Req) -> None:
        longest = req.prompt + req.target - 1  # the last sampled token's KV is never computed
        need = _cdiv(longest, self.cfg.block_size)
        if need > self.capacity:
            raise ConfigError(
                f"a request of {req.prompt + req.target} tokens needs {need} KV blocks but the engine has only "
                f"{self.capacity}; lower --max-response, raise tp or use a GPU with more memory"
            )
        if not self.cfg.enable_chunked_prefill and longest > self.cfg.max_num_batched_tokens:
            raise ConfigError(
                f"without chunked prefill max_num_batched_tokens ({self.cfg.max_num_batched_tokens}) must cover a "
                f"whole sequence ({longest} tokens to recompute after a preemption)"
            )
        req.num_computed = 0
        req.blocks = 0
        req.hits = NO_HITS
        req.resumed = False
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def remove_all(self) -> list[Req]:
        """Take every request out (the step ended; vLLM: aborted): running first, then waiting; KV freed
        (their full blocks stay in the prefix cache)."""
        for r in self.running:
            self._free(r, live=True)
        out = self.running + list(self.waiting)
        for r in out:
            r.num_computed = 0
            r.resumed = False
        self.running = []
        self.waiting.clear()
        return out

    def reset_cache(self) -> None:
        """vLLM's ``reset_prefix_cache(reset_running_requests=True)`` (after a weight sync): every running
        request is preempted (to the front of the waiting queue, running order kept) and the cache forgotten."""
        while self.running:
            self._preempt(self.running[-1])
        self.pool.reset()

    # -- planning -----------------------------------------------------------------------------------
    def plan(self) -> Plan | None:
        if not self.running and not self.waiting:
            return None
        if self._steady():
            return self._plan_span()
        return self._plan_iteration()

    def _steady(self) -> bool:
        run = self.running
        if not run or len(run) > self.cfg.max_num_batched_tokens:
            return False
        for r in run:
            if r.prompt + r.generated - r.num_computed != 1:
                return False
        return not self._head_admissible()

    def _head_admissible(self) -> bool:
        """Whether the next iteration (all running requests decoding) could admit the waiting head. Once not,
        it stays not while the decodes go on: free blocks only shrink, and evictions only shorten its hit."""
        cfg = self.cfg
        if not self.waiting or len(self.running) >= cfg.max_num_seqs:
            return False
        budget = cfg.max_num_batched_tokens - len(self.running)
        if budget <= 0:
            return False
        head = self.waiting[0]
        total = head.num_tokens
        n = total - len(self.pool.lookup(head.lineage, (total - 1) // cfg.block_size)) * cfg.block_size
        if 0 < cfg.long_prefill_token_threshold < n:
            n = cfg.long_prefill_token_threshold
        if not cfg.enable_chunked_prefill and n > budget:
            return False
        return _cdiv(total, cfg.block_size) <= self.pool.free - self._decode_need(1)

    def _decode_need(self, i: int) -> int:
        bs = self.cfg.block_size
        return sum(_cdiv(r.num_computed + i, bs) - r.blocks for r in self.running)

    def _plan_span(self) -> Plan:
        run = self.running
        m = 1 << 60
        kv0 = 0
        for r in run:
            g = r.generated
            left = r.target - g
            if r.emit_at is not None and r.emit_at - g < left:
                left = r.emit_at - g
            if r.pause_at is not None and r.pause_at - g < left:
                left = r.pause_at - g
            if left < m:
                m = left
            kv0 += r.num_computed
        m = max(1, m)
        m = self._kv_limit(m)
        b = len(run)
        if m == 0:  # the very next iteration needs a block we do not have: schedule it explicitly
            return self._plan_iteration()
        secs = self.cost.span(b, kv0, m)
        return Plan(m, secs, self.cost.span_flops(b, kv0, m), 0.0, b * m, True, b, float(kv0))

    def _kv_limit(self, m: int) -> int:
        """Largest i <= m such that i more decode iterations fit in the free blocks."""
        bs = self.cfg.block_size
        free = self.pool.free
        # cheap bound: each request needs at most ceil(m / bs) + 1 new blocks
        if len(self.running) * (_cdiv(m, bs) + 1) <= free:
            return m
        if self._decode_need(m) <= free:
            return m
        lo, hi = 0, m  # need(lo) <= free < need(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._decode_need(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def _plan_iteration(self) -> Plan:
        return plan_iteration(self)

    # -- chains of explicit iterations ---------------------------------------------------------------
    def snapshot(self) -> tuple:
        """Everything :meth:`run_chain` may change, to undo a chain that must be cut short."""
        reqs = [*self.running, *self.waiting]
        return (
            list(self.running), list(self.waiting), self.iterations, self.preemptions, self.prefix_hit_tokens,
            self.pool.snapshot(),
            [(r, r.num_computed, r.blocks, r.generated, r.max_computed, r.first_token_t, r.finish_t, r.preemptions,
              r.hits, r.resumed) for r in reqs],
        )

    def restore(self, snap: tuple) -> None:
        running, waiting, self.iterations, self.preemptions, self.prefix_hit_tokens, pool, states = snap
        self.running = list(running)
        self.waiting = deque(waiting)
        self.pool.restore(pool)
        for r, *vals in states:
            (r.num_computed, r.blocks, r.generated, r.max_computed, r.first_token_t, r.finish_t, r.preemptions,
             hits, r.resumed) = vals
            r.hits = hits

    def run_chain(self, first: Plan, start: float, max_iters: int) -> Chain:
        """Commit ``first`` (an explicit iteration) and the explicit iterations that follow it, stopping
        after one that produces events, before a steady span, or after ``max_iters``. Iterations are
        committed at once; their times are ``start`` plus the running sum (the driver spends the total on
        a device, and undoes the chain with :meth:`restore` + a shorter ``run_chain`` if interrupted)."""
        ends: list[float] = []
        flops = recompute = 0.0
        tokens = 0
        t = start
        plan: Plan | None = first
        events: list[tuple[str, Req]] = []
        while plan is not None and not plan.steady:
            t += plan.seconds
            ends.append(t - start)
            flops += plan.flops
            recompute += plan.recompute_flops
            tokens += plan.tokens
            events = self.commit(plan, t)
            if events or len(ends) >= max_iters:
                break
            plan = self.plan()
        return Chain(ends, events, flops, recompute, tokens)

    # -- committing ---------------------------------------------------------------------------------
    def truncate(self, plan: Plan, iters: int) -> Plan:
        """The same span cut to its first ``iters`` iterations (a driver interrupted it)."""
        if not plan.steady or iters >= plan.iters:
            return plan
        iters = max(1, iters)
        return Plan(
            iters, self.cost.span(plan.b, plan.kv0, iters), self.cost.span_flops(plan.b, plan.kv0, iters), 0.0,
            plan.b * iters, True, plan.b, plan.kv0,
        )

    def commit(self, plan: Plan, now: float) -> list[tuple[str, Req]]:
        """Apply a (possibly truncated) plan that ended at ``now``; return (event, request) pairs. An explicit
        plan must be committed before the engine changes (it is planned against the current state)."""
        self.iterations += plan.iters
        events: list[tuple[str, Req]] = []
        if plan.steady:
            self._commit_span(plan, now, events)
        else:
            self._commit_iteration(plan, now, events)
        done = [(e, r) for e, r in events if e in (FINISH, PAUSE)]
        if done:  # they leave in scheduling order (vLLM frees them in update_from_output)
            for e, r in done:
                self._free(r, live=e == PAUSE)
                r.num_computed = 0
            ids = {id(r) for _, r in done}
            self.running = [r for r in self.running if id(r) not in ids]
        return events

    def _commit_span(self, plan: Plan, now: float, events: list[tuple[str, Req]]) -> None:
        k = plan.iters
        bs = self.cfg.block_size
        first_t = now - plan.seconds + self.cost.span(plan.b, plan.kv0, 1)
        for r in self.running:
            if r.first_token_t is None:  # its last prompt token was computed in the span's first iteration
                r.first_token_t = first_t
            c = r.num_computed + k
            r.num_computed = c
            g = r.generated + k
            r.generated = g
            nb = -(-c // bs)
            self.pool.take(nb - r.blocks)
            r.blocks = nb
            if c > r.max_computed:
                r.max_computed = c
            if g >= r.target or (r.emit_at is not None and g >= r.emit_at) or (r.pause_at is not None and g >= r.pause_at):
                self._check_events(r, now, events)

    def _commit_iteration(self, plan: Plan, now: float, events: list[tuple[str, Req]]) -> None:
        bs = self.cfg.block_size
        pool = self.pool
        for kind, r, n, h in plan.ops:  # block operations in vLLM's order
            if kind == PREEMPT:
                self._preempt(r)
            elif kind == RUN:
                nb = _cdiv(r.num_computed + n, bs)
                if nb > r.blocks:
                    pool.take(nb - r.blocks)
                    r.blocks = nb
            else:
                hits = pool.lookup(r.lineage, h) if h else NO_HITS
                if len(hits) != h:
                    raise AssertionError(f"request {r.rid}: planned {h} prefix-cache blocks, found {len(hits)}")
                pool.touch(hits)
                new = _cdiv(h * bs + n, bs) - h
                pool.take(new)
                if self.waiting.popleft() is not r:
                    raise AssertionError("admission out of queue order")
                self.running.append(r)
                r.hits = hits
                r.blocks = h + new
                r.num_computed = h * bs
                r.resumed = False
                self.prefix_hit_tokens += h * bs
        for r, n in plan.schedule:
            c = r.num_computed + n
            r.num_computed = c
            if c > r.max_computed:
                r.max_computed = c
            if c == r.prompt + r.generated:  # caught up: a new token is sampled
                r.generated += 1
                if r.first_token_t is None:
                    r.first_token_t = now
                self._check_events(r, now, events)

    def _preempt(self, v: Req) -> None:
        self.running.remove(v)
        self._free(v, live=True)
        v.num_computed = 0
        v.preemptions += 1
        v.resumed = True
        self.preemptions += 1
        self.waiting.appendleft(v)

    def _free(self, r: Req, live: bool) -> None:
        """Return ``r``'s blocks to the pool (``live``: its lineage may come back and hit them)."""
        self.pool.release(r.lineage, r.blocks, r.hits, r.num_computed // self.cfg.block_size, live)
        r.blocks = 0
        r.hits = NO_HITS

    @staticmethod
    def _check_events(r: Req, now: float, events: list[tuple[str, Req]]) -> None:
        g = r.generated
        if g >= r.target:
            r.finish_t = now
            events.append((FINISH, r))
            return
        if r.emit_at is not None and g >= r.emit_at:
            events.append((EMIT, r))
        if r.pause_at is not None and g >= r.pause_at:
            events.append((PAUSE, r))
