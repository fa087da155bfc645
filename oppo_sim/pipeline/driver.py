"""The simulated RLHF pipeline: simpy processes that carry out what a policy plans.

Processes:
- one :class:`GenReplica` per generation engine replica (data parallel over the generation pool);
- one :class:`Scorer` per scoring role (reward, reference, critic, actor log-probs);
- the rollout loop (:meth:`Pipeline.rollout`): admits prompts as the plan says, streams tokens to the
  scorers, ends the step's generation, defers what is unfinished, hands the batch to the trainer;
- the trainer loop (:meth:`Pipeline.trainer`): waits until the batch is scored, runs the PPO epochs for
  actor and critic, syncs weights into the generators, bumps the policy version and asks the policy to
  update its state.

The policy is only *consulted*; every timing comes from the cost model via the device pools.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np
import simpy

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import FROZEN_ROLES, SCORING_ROLES
from oppo_sim.core.policies import (
    Policy,
    PolicyState,
    StepContext,
    StepOutcome,
    StepPlan,
    Streaming,
)
from oppo_sim.engine.continuous import (
    EMIT,
    FINISH,
    PAUSE,
    Chain,
    EngineCore,
    Plan,
    Req,
    kv_blocks_for,
)
from oppo_sim.hw.costmodel import CostModel
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.devices import DevicePool, Job, Timeline
from oppo_sim.traces.trace import Trace

CHAIN_MAX_ITERS = 256
"""Most explicit (prefill / admission) iterations a replica commits as one device job."""


class Sample:
    """A prompt admitted into the pipeline, from admission until it is trained."""

    __slots__ = (
        "sid", "row", "prompt", "target", "req", "admit_step", "admit_version", "finish_t", "emitted",
        "pending", "queued", "batch", "scored", "reward",
    )

    def __init__(self, sid: int, row: int, prompt: int, target: int, admit_step: int, version: int, reward: float | None):
        self.sid = sid
        self.row = row
        self.prompt = prompt
        self.target = target
        self.req: Req | None = None
        self.admit_step = admit_step
        self.admit_version = version
        self.finish_t: float | None = None
        self.emitted = 0  # response tokens already sent to streamed scorers
        self.pending: set[str] = set(SCORING_ROLES)  # roles whose final score is not computed yet
        self.queued: set[str] = set()  # roles whose final (whole-sequence) work is queued
        self.batch: Batch | None = None
        self.scored: dict[str, int] = {}  # high-water mark of tokens prefilled per role (for recompute)
        self.reward = reward


class Batch:
    """The B samples one PPO update trains on."""

    def __init__(self, env: simpy.Environment, step: int, samples: list[Sample]):
        self.step = step
        self.samples = samples
        self.ready = env.event()
        self.pending = 0
        for s in samples:
            s.batch = self
            self.pending += len(s.pending)
        if self.pending == 0:
            self.ready.succeed()

    def role_done(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.ready.succeed()


class GenReplica:
    """simpy driver of one :class:`EngineCore`: plans, spends the plan's time on its devices, commits."""

    def __init__(self, env: simpy.Environment, idx: int, core: EngineCore, pool: DevicePool, devices: tuple[int, ...], sink):
        self.env = env
        self.idx = idx
        self.core = core
        self.pool = pool
        self.devices = devices
        self.sink = sink  # callable(replica, events)
        self.step = -1
        self._wake: simpy.Event | None = None
        self._plan: Plan | None = None
        self._job: Job | None = None
        self._stop: simpy.Event | None = None
        self._chain: Chain | None = None
        self._snap: tuple | None = None
        self._chain_start = 0.0
        self._pending: list[Req] = []
        self.dispatch_s = 0.0
        env.process(self._run())

    def add(self, req: Req) -> None:
        if self._chain is not None:
            self._pending.append(req)  # the committed chain must not see it; added when the chain ends
        else:
            self.core.add(req)
        self.poke()

    def load(self) -> int:
        return len(self.core.running) + len(self.core.waiting) + len(self._pending)

    def stop(self) -> simpy.Event:
        """Finish the current iteration, then take every request out; the event's value is the list."""
        ev = self.env.event()
        self._stop = ev
        self.poke()
        return ev

    def poke(self) -> None:
        """Something changed (a request arrived, a stop): cut the running work after its current iteration."""
        if self._job is None:
            if self._wake is not None and not self._wake.triggered:
                self._wake.succeed()
            return
        done = self._job.work_done(self.env.now)
        plan = self._plan
        if plan is not None:
            if plan.steady and plan.iters > 1:
                k = self.core.cost.iters_within(plan.b, plan.kv0, done, plan.iters)
                new = self.core.truncate(plan, min(plan.iters, k + 1))
                if new is not plan:
                    self._plan = new
                    self._job.meta.update(tokens=new.tokens, flops=new.flops)
                    self.pool.shorten(self._job, new.seconds)
            return
        chain = self._chain
        if chain is not None and len(chain.ends) > 1:
            keep = bisect.bisect_right(chain.ends, done) + 1  # iterations finished, plus the one in progress
            if keep < len(chain.ends):
                self.core.restore(self._snap)
                new = self.core.run_chain(self.core.plan(), self._chain_start, keep)
                self._chain = new
                self._job.meta.update(tokens=new.tokens, flops=new.flops, recompute_flops=new.recompute_flops)
                self.pool.shorten(self._job, new.seconds)

    def _run(self):
        while True:
            if self._stop is not None:
                ev, self._stop = self._stop, None
                ev.succeed(self.core.remove_all())
                continue
            plan = self.core.plan()
            if plan is None:
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
                continue
            if plan.steady:
                self._plan = plan
                self._job = self.pool.submit(
                    self.devices, plan.seconds, activity="generate", role="generate", step=self.step,
                    tokens=plan.tokens, flops=plan.flops, recompute_flops=plan.recompute_flops,
                )
                yield self._job.done
                plan, self._plan, self._job = self._plan, None, None
                events = self.core.commit(plan, self.env.now)
            else:
                self._snap = self.core.snapshot()
                self._chain_start = self.env.now
                chain = self._chain = self.core.run_chain(plan, self.env.now, CHAIN_MAX_ITERS)
                self._job = self.pool.submit(
                    self.devices, chain.seconds, activity="generate", role="generate", step=self.step,
                    tokens=chain.tokens, flops=chain.flops, recompute_flops=chain.recompute_flops,
                )
                yield self._job.done
                events = self._chain.events
                self._chain = self._snap = self._job = None
                for req in self._pending:  # arrived while the chain ran: queued only now, as vLLM would
                    self.core.add(req)
                self._pending.clear()
            if events:
                self.sink(self, events)
                if self.dispatch_s > 0:  # the driver handles the events before the engine runs again
                    yield self.env.timeout(self.dispatch_s)


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
        self.queue: deque[tuple[Sample, int, bool, int, bool]] = deque()
        self._wake: simpy.Event | None = None
        env.process(self._run())

    def put(self, sample: Sample, upto: int, final: bool, step: int, streamed: bool = False) -> None:
        self.queue.append((sample, upto, final, step, streamed))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _run(self):
        cost = self.p.cost_of[self.pool.name]
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
                    redo += 2.0 * self.model.matmul_params * k + 4.0 * self.model.layers * self.model.attn_width * (
                        k * ctx + k * (k + 1) / 2.0)
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
            for s, upto, final, _step, total in items:
                s.scored[self.role] = max(s.scored.get(self.role, 0), total)
                old = self.cache.pop(s.sid, 0)
                self.cached -= old
                if final:
                    s.pending.discard(self.role)
                    if s.batch is not None:
                        s.batch.role_done()
                else:
                    self.cache[s.sid] = total
                    self.cached += total
            while self.cached > self.kv_capacity and self.cache:
                _sid, tok = self.cache.popitem(last=False)  # least recently used sequence loses its KV
                self.cached -= tok
                self.evictions += 1


@dataclass
class StepRecord:
    step: int
    start: float
    plan: StepPlan
    admitted: int = 0
    gen_end: float = float("nan")
    score_end: float = float("nan")
    train_start: float = float("nan")
    train_end: float = float("nan")
    end: float = float("nan")
    deferred: int = 0
    carried_finished: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    staleness_mean: float = 0.0
    staleness_max: int = 0
    reward: float = float("nan")
    preemptions: int = 0


class Pipeline:
    """Builds the pools, engines and scorers for ``cfg`` and runs ``policy`` over ``trace``."""

    def __init__(self, cfg: SimConfig, trace: Trace, policy: Policy, on_step=None):
        if len(trace) == 0:
            raise ConfigError("the trace has no rows")
        self.cfg = cfg
        self.trace = trace.capped(cfg.max_response) if cfg.max_response is not None else trace
        self.policy = policy
        self.env = simpy.Environment()
        self.timeline = Timeline()
        self.models = cfg.models()
        pl = cfg.placement
        self.pools: dict[str, DevicePool] = {}
        self.cost_of: dict[str, CostModel] = {}
        for p in pl.pools:
            hw = cfg.hardware_of(p.name)
            self.pools[p.name] = DevicePool(self.env, p.name, p.devices, hw.gpu.peak_flops, cfg.contention, self.timeline)
            self.cost_of[p.name] = CostModel(hw)
        self._build_generators()
        self._build_scorers()
        self.state: PolicyState = policy.initial_state()
        self.version = 0
        self._version_ev = self.env.event()
        self.batches: simpy.Store = simpy.Store(self.env)
        self.deferred: list[Sample] = []
        self.ready: deque[Sample] = deque()  # finished, not yet trained, in finish order
        self.records: list[StepRecord] = []
        self.next_row = cfg.trace_offset
        self.next_sid = 0
        self.admitted_total = 0
        self.trained_total = 0
        self.trained_sids: set[int] = set()
        self._cur: _StepRun | None = None
        self.done = self.env.event()
        self.on_step = on_step  # optional callable(StepRecord), e.g. a progress bar

    # -- construction ---------------------------------------------------------------------------
    def _build_generators(self) -> None:
        cfg, pl = self.cfg, self.cfg.placement
        name = pl.generate
        pool, cost = self.pools[name], self.cost_of[name]
        model = self.models["generate"]
        tp = cfg.engine.tp
        hw = cfg.hardware_of(name)
        blocks = kv_blocks_for(model.weight_bytes(), model.kv_bytes_per_token(), hw.gpu.mem_bytes, cfg.engine,
                               f"{tp} x {hw.gpu.id} (generation, {model.id})")
        dc = cost.decode(model, tp)
        self.replicas = [
            GenReplica(self.env, i, EngineCore(dc, cfg.engine, blocks), pool, tuple(range(i * tp, (i + 1) * tp)), self._on_gen)
            for i in range(pool.n // tp)
        ]
        for r in self.replicas:
            r.dispatch_s = cfg.dispatch_s

    def _build_scorers(self) -> None:
        cfg, pl = self.cfg, self.cfg.placement
        self.scorers: dict[str, Scorer] = {}
        for role in SCORING_ROLES:
            name = pl.pool_of(role)
            hw = cfg.hardware_of(name)
            m = self.models[role]
            scalar = role in ("reward", "critic")
            pool = self.pools[name]
            free = pool.n * hw.gpu.mem_bytes * cfg.engine.gpu_memory_utilization - pool.n * m.weight_bytes(scalar_head=scalar)
            if free <= 0:
                raise ConfigError(
                    f"the {role} model {m.id} ({m.weight_bytes(scalar_head=scalar) / 1e9:.1f} GB) does not fit on "
                    f"pool '{name}' ({hw.gpu.id}, {hw.gpu.mem_bytes / 1e9:.0f} GB per device)"
                )
            self.scorers[role] = Scorer(self.env, role, self, pool, free / m.kv_bytes_per_token())
        gen_pool = pl.generate
        self.streamed_roles = tuple(r for r in SCORING_ROLES if r in FROZEN_ROLES and pl.pool_of(r) != gen_pool)

    # -- samples ----------------------------------------------------------------------------------
    def _new_sample(self, step: int) -> Sample:
        i = self.next_row % len(self.trace)
        self.next_row += 1
        prompt, target = self.trace.row(i)
        reward = float(self.trace.reward[i]) if self.trace.reward is not None else None
        s = Sample(self.next_sid, i, int(prompt), int(target), step, self.version, reward)
        self.next_sid += 1
        self.admitted_total += 1
        s.req = Req(s.sid, s.prompt, s.target, payload=s)
        return s

    # -- generation events --------------------------------------------------------------------------
    def _on_gen(self, replica: GenReplica, events: list[tuple[str, Req]]) -> None:
        run = self._cur
        for kind, req in events:
            s: Sample = req.payload
            if kind == EMIT:
                self._emit(s, req.generated, final=False)
                run.set_emit(req)
            elif kind == FINISH:
                s.finish_t = self.env.now
                run.active -= 1
                if run.plan.streaming is not Streaming.NONE:
                    self._emit(s, s.target, final=True)
                self.ready.append(s)
                run.finished += 1
            elif kind == PAUSE:
                run.active -= 1
                req.pause_at = None
                req.emit_at = None
                self.deferred.append(s)
                run.paused += 1
                if run.plan.refill and run.finished + run.active < (run.end_after or 0):
                    run.refill()
        run.check_end()

    def _emit(self, s: Sample, upto: int, final: bool) -> None:
        step = self._cur.step if self._cur else -1
        for role in self.streamed_roles:
            if final:
                s.queued.add(role)
            self.scorers[role].put(s, upto, final, step, streamed=True)
        s.emitted = upto

    # -- processes -----------------------------------------------------------------------------------
    def rollout(self):
        cfg = self.cfg
        B = cfg.batch
        for t in range(cfg.steps):
            ctx = StepContext(t, B, carried=len(self.deferred), carried_finished=len(self.ready))
            plan = self.policy.plan(self.state, ctx)
            while self.version < t - plan.max_staleness:
                yield self._version_ev
            rec = StepRecord(t, self.env.now, plan, carried_finished=len(self.ready))
            self.records.append(rec)
            run = _StepRun(self, t, plan, rec)
            self._cur = run
            for r in self.replicas:
                r.step = t
            carried, self.deferred = self.deferred, []
            for s in carried:
                run.start(s)
            run.admit_more(plan.admit)
            run.check_end()
            yield run.gen_done
            # stop what is still generating; unfinished requests keep their partial work
            busy = [r for r in self.replicas if r.load()]
            if busy:
                stopped = yield simpy.AllOf(self.env, [r.stop() for r in busy])
                for reqs in stopped.values():
                    for req in reqs:
                        req.emit_at = req.pause_at = None
                        self.deferred.append(req.payload)
            rec.gen_end = self.env.now
            rec.deferred = len(self.deferred)
            n = min(B, len(self.ready))
            if n < B:
                raise ConfigError(
                    f"step {t}: only {n} of {B} samples finished; the policy's plan cannot fill a batch"
                )
            batch = [self.ready.popleft() for _ in range(B)]
            for s in batch:  # whatever was not streamed is scored now, whole
                for role in SCORING_ROLES:
                    if role in s.pending and role not in s.queued:
                        s.queued.add(role)
                        self.scorers[role].put(s, s.target, True, t)
            self._cur = None
            yield self.batches.put(Batch(self.env, t, batch))

    def trainer(self):
        cfg = self.cfg
        pl = cfg.placement
        tpool = self.pools[pl.train]
        tcost = self.cost_of[pl.train]
        gpool = self.pools[pl.generate]
        gcost = self.cost_of[pl.generate]
        actor, critic = self.models["train"], self.models["critic"]
        for t in range(cfg.steps):
            batch: Batch = yield self.batches.get()
            rec = self.records[batch.step]
            yield batch.ready
            rec.score_end = self.env.now
            rec.train_start = self.env.now
            seqs = np.array([s.prompt + s.target for s in batch.samples], dtype=np.float64)
            if cfg.padded_batches:
                seqs = np.full_like(seqs, seqs.max())
            for role, model, scalar in (("actor", actor, False), ("critic", critic, True)):
                secs = cfg.ppo_epochs * tcost.train(model, tpool.n, seqs, cfg.minibatches, scalar_head=scalar)
                flops = cfg.ppo_epochs * tcost.train_flops(model, seqs, scalar)
                job = tpool.submit(tpool.all, secs, activity="train", role=role, step=batch.step,
                                   tokens=int(seqs.sum()) * cfg.ppo_epochs, flops=flops)
                yield job.done
            rec.train_end = self.env.now
            job = gpool.submit(gpool.all, gcost.weight_sync(actor), activity="sync", role="sync", step=batch.step)
            yield job.done
            rec.end = self.env.now
            self._finish_step(rec, batch)
            if self.on_step is not None:
                self.on_step(rec)
            self.version += 1
            ev, self._version_ev = self._version_ev, self.env.event()
            ev.succeed()
        self.done.succeed()

    def _finish_step(self, rec: StepRecord, batch: Batch) -> None:
        t = batch.step
        for s in batch.samples:
            if s.sid in self.trained_sids:
                raise AssertionError(f"sample {s.sid} trained twice")
            self.trained_sids.add(s.sid)
        self.trained_total += len(batch.samples)
        stale = [t - s.admit_version for s in batch.samples]
        rec.staleness_mean = float(np.mean(stale))
        rec.staleness_max = int(max(stale))
        rec.tokens = sum(s.target for s in batch.samples)
        rec.prompt_tokens = sum(s.prompt for s in batch.samples)
        rewards = [s.reward for s in batch.samples if s.reward is not None]
        rec.reward = float(np.mean(rewards)) if rewards else self.cfg.reward_curve.mean_reward(t)
        prev_end = self.records[t - 1].end if t > 0 else self.records[0].start
        outcome = StepOutcome(t, rec.end - prev_end, rec.reward, len(batch.samples), rec.deferred)
        self.state = self.policy.update(self.state, outcome)

    def run(self) -> None:
        self.env.process(self.rollout())
        self.env.process(self.trainer())
        self.env.run(until=self.done)

    def in_flight(self) -> int:
        return len(self.deferred) + len(self.ready)


class _StepRun:
    """Book-keeping of one step's generation: counts, end condition, admission and chunk boundaries."""

    def __init__(self, p: Pipeline, step: int, plan: StepPlan, rec: StepRecord):
        self.p = p
        self.step = step
        self.plan = plan
        self.rec = rec
        self.end_after = plan.end_after
        self.active = 0
        self.finished = 0
        self.paused = 0
        self.admitted = 0
        self.refilled = 0
        self.gen_done = p.env.event()

    def admit_more(self, n: int) -> None:
        for _ in range(n):
            self.admitted += 1
            self.rec.admitted += 1
            self.start(self.p._new_sample(self.step))

    def refill(self) -> None:
        """A response was paused at its token budget and B can no longer finish without help: admit a
        fresh prompt, or, once this step has refilled B prompts already, give the oldest paused response
        another budget (so a trace whose responses all exceed the budget still makes progress)."""
        if self.refilled < self.p.cfg.batch:
            self.refilled += 1
            self.admit_more(1)
        else:
            s = self.p.deferred.pop(0)  # paused in this step (carried ones were taken at the step start)
            self.paused -= 1
            self.start(s)

    def start(self, s: Sample) -> None:
        req = s.req
        plan = self.plan
        self.set_emit(req)
        req.pause_at = req.generated + plan.token_budget if plan.token_budget is not None else None
        replica = min(self.p.replicas, key=lambda r: (r.load(), r.idx))
        self.active += 1
        replica.add(req)

    def set_emit(self, req: Req) -> None:
        plan = self.plan
        if plan.streaming is Streaming.CHUNKED and self.p.streamed_roles:
            c = plan.chunk
            nxt = (req.generated // c + 1) * c
            req.emit_at = nxt if nxt < req.target else None
        else:
            req.emit_at = None

    def check_end(self) -> None:
        if self.gen_done.triggered:
            return
        if self.end_after is not None and self.finished >= self.end_after:
            self.gen_done.succeed()
        elif self.active == 0:
            self.gen_done.succeed()

