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
   identified by (request lineage, block index); requests declaring one ``prefix`` (a group's n responses)
   share their prompt's full blocks, reference-counted (see :mod:`oppo_sim.engine.kvpool`). :meth:`EngineCore.reset_cache` is vLLM's
   ``reset_prefix_cache(reset_running_requests=True)`` (weight sync): running requests are preempted and
   every hash is dropped.
6. A request whose scheduled tokens reach ``num_tokens`` samples a token; one that reaches its target (or
   its pause point) leaves at the end of that iteration and frees its blocks at once.

While every running request is plainly decoding and nothing can be admitted, consecutive iterations differ
only by their KV length, so :meth:`EngineCore.plan` returns one *span* that jumps straight to the next
interesting point (a request finishing, reaching a chunk boundary or its token budget, or a KV block
allocation failing) with the cost summed in closed form. Everything else is planned one iteration at a
time. Plainly decoding requests are advanced lazily (:mod:`oppo_sim.engine.decoders`): a span, or an explicit
iteration that schedules every running request in full, touches only the requests that reach a mark and those
still prefilling. The engine never sees simpy: a driver asks for a plan, spends its ``seconds`` on a device,
then commits it (possibly truncated to fewer iterations when the driver interrupts it).

Not modelled: ``max_model_len`` truncation (requests must fit; :meth:`EngineCore.add` refuses those that
cannot), the KV watermark (0 by default), priority scheduling, speculative decoding, async scheduling.
"""

from __future__ import annotations

from collections import deque

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.chains import ChainsMixin
from oppo_sim.engine.decoders import Decoders
from oppo_sim.engine.kvpool import NO_HITS, Hits, KVBlockPool
from oppo_sim.engine.request import EMIT, FINISH, PAUSE, EngineConfig, Plan, Req, _cdiv
from oppo_sim.engine.vllm_step import commit_in_full, commit_walk, hits_of, plan_iteration
from oppo_sim.hw.costs.costmodel import DecodeCost


class EngineCore(ChainsMixin):
    """State and scheduling of one generation engine replica; ``kv_blocks`` is vLLM's ``num_gpu_blocks``.

    ``running`` holds the running requests in admission order; each is either a lazily advanced decoder
    (``dec``) or one of ``others`` (still prefilling), so that a running request is a decoder exactly when its
    only uncomputed token is its last sampled one."""

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
        self.dec = Decoders(cfg.block_size)
        self.others: list[Req] = []  # running requests that are not lazily advanced, in running order
        self._dirty: list[Req] = []  # decoders that reported or reached a mark: re-keyed before the next plan
        self._admissions = 0
        self._resume: tuple | None = None  # the last chain's state after its first iteration (cut_chain)
        self.preemptions = 0
        self.prefix_hit_tokens = 0

    @property
    def iterations(self) -> int:
        return self.dec.tick

    @iterations.setter
    def iterations(self, v: int) -> None:
        self.dec.tick = v

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
        if req._dec is not None:
            raise AssertionError(f"request {req.rid} is still running in an engine")
        req._computed = 0
        req._blocks = 0
        req.hits = NO_HITS
        req.resumed = False
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def remove_all(self) -> list[Req]:
        """Take every request out (the step ended; vLLM: aborted): running first, then waiting; KV freed
        (their full blocks stay in the prefix cache)."""
        self._dissolve()
        for r in self.running:
            self._free(r, live=True)
        out = self.running + list(self.waiting)
        for r in out:
            r._computed = 0
            r.resumed = False
        self.running = []
        self.others = []
        self.waiting.clear()
        return out

    def reset_cache(self) -> None:
        """vLLM's ``reset_prefix_cache(reset_running_requests=True)`` (after a weight sync): every running
        request is preempted (to the front of the waiting queue, running order kept) and the cache forgotten."""
        self._dissolve()
        while self.running:
            self._preempt(self.running[-1])
        self.others = []
        self.pool.reset()

    # -- planning -----------------------------------------------------------------------------------
    def plan(self) -> Plan | None:
        if not self.running and not self.waiting:
            return None
        if self._dirty:
            self._rekey()
        if self._steady():
            return self._plan_span()
        return plan_iteration(self)

    def _rekey(self) -> None:
        d = self.dec
        for r in self._dirty:
            if r._dec is d:
                d.push(r)
        self._dirty.clear()

    def _steady(self) -> bool:
        n = len(self.running)
        if not n or n > self.cfg.max_num_batched_tokens or self.dec.n != n:
            return False  # (every running request plainly decoding <=> every one is a lazy decoder)
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
        total = head.prompt + head._generated
        hits = self.lookup(head)
        n = total - len(hits) * cfg.block_size
        if 0 < cfg.long_prefill_token_threshold < n:
            n = cfg.long_prefill_token_threshold
        if not cfg.enable_chunked_prefill and n > budget:
            return False
        return _cdiv(total, cfg.block_size) - self.pool.held_in(hits) <= self.pool.free - self.dec.need1()

    def lookup(self, r: Req, doomed: dict | None = None, pending: int | None = None):
        return hits_of(self, r, doomed, pending)

    def _plan_span(self) -> Plan:
        d = self.dec
        m = max(1, d.next_event() - d.tick)  # to the first request reaching its target or a mark
        m = d.fit(m, self.pool.free, len(self.running))
        if m == 0:  # the very next iteration needs a block we do not have: schedule it explicitly
            return plan_iteration(self)
        b, kv0 = d.n, d.kv()
        secs = self.cost.span(b, kv0, m)
        return Plan(m, secs, self.cost.span_flops(b, kv0, m), 0.0, b * m, True, b, float(kv0))

    def sync_all(self) -> None:
        """Make every running request's stored fields exact (an exact walk of the running phase reads them)."""
        d = self.dec
        for r in self.running:
            if r._dec is d:
                d.sync(r)

    def _dissolve(self) -> None:
        """No request is advanced lazily any more (before a walk that changes running requests one by one)."""
        d = self.dec
        for r in self.running:
            if r._dec is d:
                d.leave(r)
        d.heap.clear()
        self.others = list(self.running)

    def _settle(self, reqs) -> None:
        """Running requests among ``reqs`` that now plainly decode are advanced lazily from here on."""
        d = self.dec
        joined = False
        for r in reqs:
            if r._dec is None and r._pos and r.prompt + r._generated - r._computed == 1:
                d.join(r)
                joined = True
        if joined:
            self.others = [r for r in self.others if r._dec is None]

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
        """Apply a (possibly truncated) plan that ended at ``now``; return (event, request) pairs in running
        order. An explicit plan must be committed before the engine changes (it is planned against the current
        state). The caller may change the marks of the requests reported before the next plan."""
        events: list[tuple[str, Req]] = []
        if plan.steady:
            self._commit_span(plan, now, events)
            touched = None
        elif plan.fast is not None:
            touched = commit_in_full(self, plan, now, events)
        else:
            touched = commit_walk(self, plan, now, events)
        self._finish_commit(events, touched)
        return events

    def _finish_commit(self, events: list[tuple[str, Req]], touched: list[Req] | None) -> None:
        """Finished and paused requests leave (in scheduling order: vLLM frees them in update_from_output);
        reported decoders are re-keyed before the next plan; ``touched`` requests that now decode join."""
        gone = []
        for e, r in events:
            if e == FINISH or e == PAUSE:
                if r._dec is not None:
                    self.dec.leave(r)
                self._free(r, live=e == PAUSE)
                r._computed = 0
                r._pos = 0  # not running
                gone.append(r)
            elif r._dec is not None:
                self._dirty.append(r)
        if gone:
            if len(gone) == 1:
                self.running.remove(gone[0])
                if self.others and gone[0] in self.others:
                    self.others.remove(gone[0])
            else:
                self.running = [r for r in self.running if r._pos]
                if self.others:
                    self.others = [r for r in self.others if r._pos]
        if touched:
            self._settle(touched)

    def _commit_span(self, plan: Plan, now: float, events: list[tuple[str, Req]]) -> None:
        d = self.dec
        self.pool.take(d.need(plan.iters))  # every request's new blocks, in one go (nothing is freed in between)
        if d.fresh:  # their last prompt token was computed in the span's first iteration
            first_t = now - plan.seconds + self.cost.span(plan.b, plan.kv0, 1)
            for r in d.fresh:
                r.first_token_t = first_t
            d.fresh.clear()
        d.tick += plan.iters
        for r in d.due():
            self._check_events(r, now, events)
            self._dirty.append(r)

    def _admit(self, r: Req, n: int, h: int) -> None:
        bs = self.cfg.block_size
        pool = self.pool
        hits = self.lookup(r) if h else NO_HITS
        if len(hits) != h:
            raise AssertionError(f"request {r.rid}: planned {h} prefix-cache blocks, found {len(hits)}")
        pool.share(hits)
        new = _cdiv(h * bs + n, bs) - h
        pool.take(new)
        if r.prefix is not None and pool.caching:  # its newly computed full prompt blocks become shared content
            kp = min(r.prompt // bs, (h * bs + n) // bs)
            if kp > h:
                hits = Hits((*hits.pieces, pool.register(r.prefix, h, kp)), kp)
        if self.waiting.popleft() is not r:
            raise AssertionError("admission out of queue order")
        self.running.append(r)
        self.others.append(r)
        self._admissions += 1
        r._pos = self._admissions
        r.hits = hits
        r._blocks = h + new
        r._computed = h * bs
        r.resumed = False
        self.prefix_hit_tokens += h * bs

    def _preempt(self, v: Req) -> None:
        self.running.remove(v)
        if v in self.others:
            self.others.remove(v)
        self._free(v, live=True)
        v._computed = 0
        v.preemptions += 1
        v.resumed = True
        self.preemptions += 1
        self.waiting.appendleft(v)

    def _free(self, r: Req, live: bool) -> None:
        """Return ``r``'s blocks to the pool (``live``: its lineage may come back and hit them)."""
        self.pool.release(r.lineage, r._blocks, r.hits, r._computed // self.cfg.block_size, live)
        r._blocks = 0
        r.hits = NO_HITS

    @staticmethod
    def _check_events(r: Req, now: float, events: list[tuple[str, Req]]) -> None:
        g = r._generated
        if g >= r.target:
            r.finish_t = now
            events.append((FINISH, r))
            return
        if r.emit_at is not None and g >= r.emit_at:
            events.append((EMIT, r))
        if r.pause_at is not None and g >= r.pause_at:
            events.append((PAUSE, r))
