"""A scoring role on its device pool: batches the work that is ready (streamed chunks, or whole
sequences), keeps each streamed sequence's KV cache within an LRU budget (a sequence that lost it
re-prefills its whole context, counted as recompute), and reports each final score to the pipeline."""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING

import simpy

from oppo_sim.pipeline.devices import DevicePool

if TYPE_CHECKING:  # pragma: no cover
    from oppo_sim.pipeline.driver import Pipeline, SimSample


class Scorer:
    """One scoring role on its pool: batches ready work, keeps per-sequence KV for streamed chunks (LRU)."""

    def __init__(self, env: simpy.Environment, role: str, pipeline: "Pipeline", pool: DevicePool, kv_tokens: float):
        self.env = env
        self.role = role
        self.p = pipeline
        self.pool = pool
        self.model = pipeline.models[role]
        self.scalar = role in ("reward", "critic")
        self.kv_capacity = kv_tokens
        self.cache: OrderedDict[int, int] = OrderedDict()  # sid -> cached tokens
        self.cached = 0
        self.evictions = 0
        self.queue: deque[tuple[SimSample, int, bool, int, bool]] = deque()
        self._wake: simpy.Event | None = None
        env.process(self._run())

    def put(self, sample: SimSample, upto: int, final: bool, step: int, streamed: bool = False) -> None:
        self.queue.append((sample, upto, final, step, streamed))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _run(self):
        cost = self.p.cost_of[self.pool.name]
        per_token, per_pair = self.model.flop_coeffs(self.scalar)
        limit = self.p.cfg.scorer_max_tokens
        while True:
            if not self.queue:
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
                continue
            items = []
            new_tok, ctx_tok, redo = [], [], 0.0
            budget = limit
            unbatched = not self.p.cfg.stream_batching
            one_by_one = unbatched and self.queue[0][4]
            while self.queue and (not items or budget > 0):
                if items and unbatched and (one_by_one or self.queue[0][4]):
                    break  # streamed chunks are prefilled one sequence per forward
                s, upto, final, step, _streamed = self.queue.popleft()
                total = s.prompt + upto
                ctx = self.cache.get(s.sid, 0)
                n = total - ctx
                if n <= 0 and not final:
                    continue
                items.append((s, upto, final, step, total))
                new_tok.append(max(n, 0))
                ctx_tok.append(ctx)
                high = s.scored.get(self.role, 0)
                if high > ctx:  # this sequence's KV was evicted: re-prefilling what was computed before
                    k = min(n, high - ctx)
                    redo += per_token * k + per_pair * (k * ctx + k * (k + 1) / 2.0)
                budget -= max(n, 1)
            if not items:  # nothing left to compute (chunks already covered by the cached context)
                continue
            if self.p.cfg.padded_batches and not one_by_one and len(new_tok) > 1:
                width = max(n + c for n, c in zip(new_tok, ctx_tok))  # padded to the longest sequence
                new_tok, ctx_tok = [width - c for c in ctx_tok], ctx_tok
            secs, flops = cost.prefill_cost(self.model, self.pool.n, new_tok, ctx_tok, scalar_head=self.scalar)
            if one_by_one:  # each streamed chunk is its own remote call to the scorer process
                secs += self.p.cfg.dispatch_s
            job = self.pool.submit(
                self.pool.all, secs, activity="score", role=self.role, step=items[0][3],
                tokens=sum(new_tok), flops=flops, recompute_flops=redo,
            )
            yield job.done
            done = []
            for s, upto, final, _step, total in items:
                s.scored[self.role] = max(s.scored.get(self.role, 0), total)
                old = self.cache.pop(s.sid, 0)
                self.cached -= old
                if final:
                    done.append(s.sid)
                else:
                    self.cache[s.sid] = total
                    self.cached += total
            while self.cached > self.kv_capacity and self.cache:
                _sid, tok = self.cache.popitem(last=False)  # least recently used sequence loses its KV
                self.cached -= tok
                self.evictions += 1
            if done:
                self.p.on_scored(self.role, done)


