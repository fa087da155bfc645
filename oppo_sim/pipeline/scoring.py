"""A scoring role on its device pool: batches the work that is ready (streamed chunks, or whole
sequences), keeps each streamed sequence's KV cache within an LRU budget (a sequence that lost it
re-prefills its whole context, counted as recompute), and reports each final score to the pipeline. A
forward takes up to ``scorer_max_tokens`` tokens per data-parallel rank of its pool and is timed on the
slowest rank (``CostModel.prefill_cost``).

A frozen model sharded with a ZeRO-3 trainer (``memory_plan.frozen_shards``) gathers its weights for every
forward, as FSDP and DeepSpeed ZeRO-3 do: each rank runs its own micro-batch of up to
``scorer_max_tokens`` tokens (so a forward over the pool takes ``scorer_max_tokens`` x devices tokens, not
the pool-wide batch of an unsharded scorer), and the gather overlaps the forward's compute (FSDP and
ZeRO-3 prefetch the next layer's parameters while one computes): a forward costs the longer of the two.

A reference held on the host (``memory_plan.reference_swapped``) pays its swap with the policy's weights
(``swap_s``) once per step, with the first forward of that step's work.

A pass of the training loop (``SimConfig.after_update``) holds its pool's ``loop`` while it scores a step's whole
sequences: the loop's passes on one pool run one after the other, as a worker group runs one call at a time,
where other work shares the GPUs (processor sharing)."""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Callable

import numpy as np
import simpy

from oppo_sim.hw.costs.costmodel import CostModel, rule_reward_seconds
from oppo_sim.hw.models.lookup import ModelSpec
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.devices import DevicePool
from oppo_sim.pipeline.padding import micro_widths, padded_width, pads
from oppo_sim.pipeline.samples import SimSample


class Scorer:
    """One scoring role on its pool: batches ready work, keeps per-sequence KV for streamed chunks (LRU)."""

    def __init__(self, env: simpy.Environment, role: str, model: ModelSpec, pool: DevicePool, cost: CostModel,
                 cfg: SimConfig, kv_tokens: float, on_scored: Callable[[str, list[int]], None], gather_s: float = 0.0,
                 swap_s: float = 0.0, loop: simpy.Resource | None = None):
        self.env = env
        self.loop = loop  # the pool's training-loop lock, for a pass of cfg.after_update (None: shares freely)
        self.gather_s = gather_s  # each forward's all-gather of weights sharded with the trainer (0: a full copy)
        self.swap_s = swap_s  # once a step: a host-held reference swapped with the policy's weights (0: none)
        self._swapped_step = -1
        # tokens per forward over the pool: up to scorer_max_tokens on each data-parallel rank (and pipeline stage)
        self.budget = cfg.scorer_max_tokens * (pool.n if gather_s > 0 else cost.scorer_batch_scale(pool.n))
        self.role = role
        self.cfg = cfg
        self.cost = cost
        self.on_scored = on_scored
        self.pool = pool
        self.model = model
        self.scalar = role in ("reward", "critic")
        self.padded = pads(cfg, role)  # each sequence a row of the run's padded width (pipeline.padding)
        self._flop_coeffs = model.flop_coeffs(self.scalar)
        self.kv_capacity = kv_tokens
        self.cache: OrderedDict[int, int] = OrderedDict()  # sid -> cached tokens
        self.cached = 0
        self.evictions = 0
        self.queue: deque[tuple[SimSample, int, bool, int, bool]] = deque()
        self._wake: simpy.Event | None = None
        self.shared: set[int] = set()  # groups (n > 1) whose prompt this scorer has prefilled: its KV is reused
        env.process(self._run())

    def put(self, sample: SimSample, upto: int, final: bool, step: int, streamed: bool = False) -> None:
        self.queue.append((sample, upto, final, step, streamed))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _run(self):
        cost, queue = self.cost, self.queue
        held, held_step = None, -1
        while True:
            if held is not None and (not queue or queue[0][3] != held_step or queue[0][4]):
                self.loop.release(held)  # this step's pass is done: the loop's next pass on the pool may start
                held = None
            if not queue:
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
                continue
            if self.loop is not None and held is None and not queue[0][4]:
                held, held_step = self.loop.request(), queue[0][3]
                yield held
                continue
            one_by_one = not self.cfg.stream_batching and queue[0][4]
            items, new_tok, ctx_tok, redo = self._take_batch(one_by_one)
            if not items:  # nothing left to compute (chunks already covered by the cached context)
                continue
            new_tok = self._padded(items, new_tok, ctx_tok, one_by_one)
            secs, flops = cost.prefill_cost(self.model, self.pool.n, new_tok, ctx_tok, scalar_head=self.scalar)
            secs = max(secs, self.gather_s)  # prefetched layer by layer beside the compute (0 unsharded)
            if self.swap_s and items[0][3] != self._swapped_step:
                secs, self._swapped_step = secs + self.swap_s, items[0][3]
            if one_by_one:  # each streamed chunk is its own remote call to the scorer process
                secs += self.cfg.overheads.call_s
            job = self.pool.submit(
                self.pool.all, secs, activity="score", role=self.role, step=items[0][3],
                tokens=sum(new_tok), flops=flops, recompute_flops=redo,
            )
            yield job.done
            self._settle(items)

    def _padded(self, items, new_tok: list[int], ctx_tok: list[int], one_by_one: bool) -> list[int]:
        """New tokens of each sequence as the forward computes them (``pipeline.padding``): a padded role's final
        forward the rest of its row of the run's padded width, ``padded_batches`` a whole-sequence batch's
        longest, ``padded_micro_batches`` its micro-batch's longest prompt and response; streamed chunks as they are."""
        if self.padded:
            width = padded_width(self.cfg, max(it[0].prompt for it in items), max(it[4] - it[0].prompt for it in items))
            return [max(n, width - c) if it[2] else n for it, n, c in zip(items, new_tok, ctx_tok)]
        if self.cfg.padded_batches and not one_by_one and len(new_tok) > 1:
            width = max(n + c for n, c in zip(new_tok, ctx_tok))  # padded to the longest sequence
            return [width - c for c in ctx_tok]
        k = (self.cost.micro_batch(True).sequences or 0) if self.cfg.padded_micro_batches and not one_by_one else 0
        if k > 1 and len(new_tok) > 1:  # each micro-batch: prompts to their longest, responses to theirs
            ids = np.array([it[0].sid for it in items])
            prompts = micro_widths(np.array([it[0].prompt for it in items]), k, ids)
            responses = micro_widths(np.array([it[4] - it[0].prompt for it in items]), k, ids)
            return [max(n, int(p + r) - c) for n, c, p, r in zip(new_tok, ctx_tok, prompts, responses)]
        return new_tok

    def _take_batch(self, one_by_one: bool):
        """The ready work one forward takes (up to ``self.budget`` new tokens; one sequence when
        streamed chunks are not batched): items, new and cached tokens per sequence, recompute FLOPs."""
        per_token, per_pair = self._flop_coeffs
        unbatched = not self.cfg.stream_batching
        items, new_tok, ctx_tok, redo = [], [], [], 0.0
        budget = self.budget
        queue, cache, role = self.queue, self.cache, self.role
        while queue and (not items or budget > 0):
            if items and unbatched and (one_by_one or queue[0][4]):
                break  # streamed chunks are prefilled one sequence per forward
            s, upto, final, step, _streamed = queue.popleft()
            total = s.prompt + upto
            ctx = cache.get(s.sid, 0)
            if ctx == 0 and s.group is not None and not self.padded:  # the group's prompt: prefilled once, attended by all
                if s.group in self.shared:
                    ctx = s.prompt
                else:
                    self.shared.add(s.group)
            n = total - ctx
            if n <= 0 and not final:
                continue
            items.append((s, upto, final, step, total))
            new_tok.append(max(n, 0))
            ctx_tok.append(ctx)
            high = s.scored.get(role, 0)
            if high > ctx:  # this sequence's KV was evicted: re-prefilling what was computed before
                k = min(n, high - ctx)
                redo += per_token * k + per_pair * (k * ctx + k * (k + 1) / 2.0)
            budget -= max(n, padded_width(self.cfg, s.prompt, upto) - ctx if self.padded and final else n, 1)
        return items, new_tok, ctx_tok, redo

    def _settle(self, items) -> None:
        """The forward is done: caches updated (LRU eviction), final scores reported."""
        done = []
        cache, role = self.cache, self.role
        cached = self.cached
        for s, _upto, final, _step, total in items:
            s.scored[role] = max(s.scored.get(role, 0), total)
            sid = s.sid
            cached -= cache.pop(sid, 0)
            if final:
                done.append(sid)
            else:
                cache[sid] = total
                cached += total
        while cached > self.kv_capacity and cache:
            _sid, tok = cache.popitem(last=False)  # least recently used sequence loses its KV
            cached -= tok
            self.evictions += 1
        self.cached = cached
        if done:
            self.on_scored(self.role, done)


RULE_WORKERS = 16
"""CPU workers of the rule-reward pool (a verifier: parse, compare with the answer). A constant here, not
a configuration field: with ``reward_cost_ms`` of a few ms per response the pool is rarely the tail."""


class RuleScorer:
    """The rule reward (role ``rule``): a pool of :data:`RULE_WORKERS` CPU workers, each call costing
    ``Algorithm.reward_cost_ms`` per response. Its work shows in the timeline on pool ``cpu`` (activity
    ``score``, role ``rule``); the pool is not one of the run's GPU pools, so it counts in no utilization."""

    role = "rule"

    def __init__(self, env: simpy.Environment, pool: DevicePool, cost_ms: float, on_scored: Callable[[str, list[int]], None]):
        self.env = env
        self.pool = pool
        self.cost_ms = cost_ms  # per response (Algorithm.reward_cost_ms)
        self.on_scored = on_scored
        self.queue: deque[tuple[int, int]] = deque()  # (sid, step)
        self._wake: list[simpy.Event] = []
        for w in range(pool.n):
            env.process(self._worker(w))

    def put(self, sample: SimSample, upto: int, final: bool, step: int, streamed: bool = False) -> None:
        self.queue.append((sample.sid, step))
        while self._wake:
            ev = self._wake.pop()
            if not ev.triggered:
                ev.succeed()

    def _worker(self, w: int):
        n = self.pool.n
        while True:
            if not self.queue:
                ev = self.env.event()
                self._wake.append(ev)
                yield ev
                continue
            k = max(1, -(-len(self.queue) // n))  # an equal share of what waits (one call per response)
            items = [self.queue.popleft() for _ in range(min(k, len(self.queue)))]
            job = self.pool.submit((w,), rule_reward_seconds(len(items), self.cost_ms), activity="score", role=self.role,
                                   step=items[0][1])
            yield job.done
            self.on_scored(self.role, [sid for sid, _ in items])
