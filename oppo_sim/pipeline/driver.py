"""The simulated RLHF pipeline: the simpy driver of the step machine.

Every decision — what to admit, when to stream, pause, end generation, defer, what forms the batch and
what is scored whole — is taken by :mod:`oppo_sim.core.stepmachine` (via the run's
:class:`~oppo_sim.core.ledger.Ledger`). This module only turns engine events into the machine's
inputs and its actions into simulated work:

- one :class:`~oppo_sim.pipeline.generation.GenReplica` per generation replica (data parallel); one
  :class:`~oppo_sim.pipeline.scoring.Scorer` per scoring role (``Algorithm.scoring_roles``) and, for a rule
  reward, the CPU :class:`~oppo_sim.pipeline.scoring.RuleScorer` (role ``rule``); a role of
  ``SimConfig.after_update`` gets a step's work once the previous step has ended (``Pipeline._put``);
- the trace row each admitted sample replays (:class:`~oppo_sim.traces.rowmap.TraceReplay`, at admission);
  groups share the prompt of their first sid's row, each its own response length; the rewards dynamic
  sampling reads come with each finish, from the trace's ``reward`` column, else drawn once per group
  (informative with probability ``Algorithm.informative``, seeded by the run's seed and the group id);
- the rollout loop (:meth:`Pipeline.rollout`): plan, staleness gate, start the machine, run its actions;
- the trainer loop (:meth:`Pipeline.trainer`): waits for the machine's ``Train``, runs the PPO epochs for the
  actor (and the critic), syncs the weights and completes the step;
- where the engine takes turns with the roles sharing its GPUs (``memory_plan.sleep_wake_of``), a ``sleep``
  job on its pool when generation ends and a ``wake`` job before the weight sync: the step's ``sleep_wake_s``.

Every timing comes from the cost model via the device pools.
"""

from __future__ import annotations

import gc
import math
from dataclasses import replace
from typing import Callable

import numpy as np
import simpy

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.ledger import Ledger
from oppo_sim.core.placement import ROLES, SCORING_ROLES, streamed_roles
from oppo_sim.core.policies import Policy
from oppo_sim.core.protocol import Action, Defer, Emit, EndGeneration, FormBatch, Launch, Pause, Progress, ScoreWhole, Train
from oppo_sim.core.stepmachine import StepMachine
from oppo_sim.engine.factory import EngineKind, make_engine
from oppo_sim.engine.request import EMIT, FINISH, PAUSE, Req
from oppo_sim.engine.static import StaticEngineCore
from oppo_sim.hw.costs.costmodel import CostModel, train_jobs
from oppo_sim.hw.memory.pool_memory import MemoryReport
from oppo_sim.hw.costs.sleepwake import swap_seconds
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.devices import DevicePool, Timeline
from oppo_sim.pipeline.generation import GenReplica
from oppo_sim.pipeline.fit_check import fit_for_policy, sleep_wake_of
from oppo_sim.pipeline.memory_plan import (frozen_gathers, frozen_shards, generation_kv_blocks, longest, reference_swapped,
                                           scorer_weights)
from oppo_sim.pipeline.padding import pass_tokens
from oppo_sim.pipeline.topology import cost_models, weight_sync_legs
from oppo_sim.pipeline.samples import SimSample
from oppo_sim.pipeline.step_record import StepRecord
from oppo_sim.pipeline.scoring import RULE_WORKERS, RuleScorer, Scorer
from oppo_sim.traces.rowmap import TraceReplay
from oppo_sim.traces.trace import Trace


class Pipeline:
    """Builds the pools, engines and scorers for ``cfg`` and runs ``policy`` over ``trace``."""

    def __init__(self, cfg: SimConfig, trace: Trace, policy: Policy, on_step: Callable[[StepRecord], None] | None = None,
                 memory: MemoryReport | None = None):
        if len(trace) == 0:
            raise ConfigError("the trace has no rows")
        self.trace = cfg.limit(trace)
        self.policy = policy
        # what fits decides the training setup (ZeRO stage, recompute) and the KV caches; refused if nothing fits.
        # A report given with the configuration is the one fit_for_policy made (the configuration it returned).
        if memory is None:
            cfg, memory = fit_for_policy(cfg, policy, *longest(self.trace, cfg.max_response))
        self.cfg = cfg
        self.memory = memory
        self.sleepwake = sleep_wake_of(cfg, memory)  # None where the engine never sleeps
        self.asleep: dict[int, simpy.Event] = {}  # step -> its sleep job's end
        self._beside_engine = frozenset(r for r in ROLES if cfg.placement.pool_of(r) == cfg.placement.generate)
        self.env = simpy.Environment()
        self.timeline = Timeline()
        self.models = cfg.models()
        self.pools: dict[str, DevicePool] = {}
        self.cost_of: dict[str, CostModel] = cost_models(cfg, self.memory)
        for p in cfg.placement.pools:
            hw = cfg.hardware_of(p.name)
            self.pools[p.name] = DevicePool(self.env, p.name, p.devices, hw.gpu.peak_flops, cfg.contention, self.timeline)
        self.algorithm = alg = cfg.algorithm
        self.roles = alg.scoring_roles() + (("rule",) if alg.reward == "rule" else ())
        self.n = alg.group_size
        self._build_generators()
        self._build_scorers()
        self.ledger = Ledger(policy, cfg.batch, self.roles, streamed_roles(cfg.placement), self._target_of,
                             **alg.ledger_groups())
        self.streamed_roles = self.ledger.streamed
        self.samples: dict[int, SimSample] = {}
        self._forgotten = [0, 0]  # dropped and trimmed samples forgotten so far
        self.replay = TraceReplay(self.trace, cfg.trace_offset)  # the row each admitted sample replays
        self._row_of: dict[int, int] = {}  # sid -> its row, from admission until it is trained or dropped
        # the trace's columns as Python lists: a sample is made per admission
        self._prompts = list(map(int, self.trace.prompt_tokens.tolist()))
        self._responses = list(map(int, self.trace.response_tokens.tolist()))
        self._rewards = list(map(float, self.trace.reward.tolist())) if self.trace.reward is not None else None
        self.records: list[StepRecord] = []
        self.version_ev = self.env.event()
        self.train_ev: dict[int, simpy.Event] = {}
        self._held: dict[int, list[tuple]] = {}  # step -> the next step's work for cfg.after_update roles, until it ends
        self.gen_done: dict[int, simpy.Event] = {}  # step -> its generation ended (EndGeneration)
        self.stopping: list[simpy.Event] = []
        self.machines: dict[int, StepMachine] = {}  # steps generating (two at once where weights refit in flight)
        self._step_of: dict[int, int] = {}  # sid -> the step generating it
        self.done = self.env.event()
        self.on_step = on_step  # optional callable(StepRecord), e.g. a progress bar

    # -- construction ---------------------------------------------------------------------------
    def _build_generators(self) -> None:
        cfg, name = self.cfg, self.cfg.placement.generate
        pool, cost, model, tp = self.pools[name], self.cost_of[name], self.models["generate"], self.cfg.engine.tp
        blocks = generation_kv_blocks(cfg, self.memory)  # the engine's share less its weights and profiled memory
        dc = cost.decode(model, tp, cfg.engine.enable_expert_parallel, cost.host_op_s if cfg.engine.enforce_eager else 0.0,
                         cfg.engine.vllm_version)
        zero3 = cfg.engine_kind == EngineKind.STATIC and name == cfg.placement.train and self.memory.train.zero_stage == 3
        static_cost = cfg.static_cost.on_host(cost.hw.host_scale)  # x86-measured host terms on this GPU's host
        if zero3:  # the trainer's ZeRO-3 shards, gathered for generate (inside a shard group under hybrid sharding)
            static_cost = replace(static_cost, gather_s=cost.param_gather(model.weight_bytes(), cfg.trainer.shard_ranks(pool.n), pool.n))
        self.replicas = [
            GenReplica(self.env, i, make_engine(cfg.engine_kind, dc, cfg.engine, blocks, cfg.static, static_cost), pool,
                       tuple(range(i * tp, (i + 1) * tp)), self._on_gen)
            for i in range(pool.n // tp)
        ]
        for r in self.replicas:
            r.dispatch_s = cfg.overheads.call_s

    def _build_scorers(self) -> None:
        """One scorer per scoring role; the scorers of a pool share the KV memory its roles leave free."""
        pl = self.cfg.placement
        self.scorers: dict[str, Scorer | RuleScorer] = {}
        gpu_roles = [r for r in SCORING_ROLES if r in self.roles]
        loops = {p.name: simpy.Resource(self.env, capacity=1) for p in pl.pools}  # the loop's passes, one at a time
        for role in gpu_roles:
            name = pl.pool_of(role)
            pool = self.pools[name]
            sharing = sum(1 for r in gpu_roles if pl.pool_of(r) == name)
            free = pool.n * max(0.0, self.memory.pool(name).headroom) / sharing
            model, cost = self.models[role], self.cost_of[name]
            shards = frozen_shards(self.cfg, role, self.memory.train.zero_stage)  # ZeRO-3 shards: gathered per forward
            w = model.weight_bytes(scalar_head=role in ("reward", "critic"))
            gather = cost.param_gather(w, shards, pool.n) if frozen_gathers(self.cfg) else 0.0  # Megatron: never
            swap = swap_seconds(scorer_weights(self.cfg, role, pool.n, self.memory.train.zero_stage)[0],
                                self.cfg.hardware_of(name).gpu.host_bw) if reference_swapped(self.cfg, role) else 0.0
            self.scorers[role] = Scorer(self.env, role, model, pool, cost, self.cfg, free / model.kv_bytes_per_token(),
                                        self.on_scored, gather, swap, loops[name] if role in self.cfg.after_update else None)
        if "rule" in self.roles:  # CPU workers, off the GPU pools (in the timeline, in no utilization)
            cpu = DevicePool(self.env, "cpu", RULE_WORKERS, 0.0, 0.0, self.timeline)
            self.scorers["rule"] = RuleScorer(self.env, cpu, self.algorithm.reward_cost_ms, self.on_scored)

    # -- samples ----------------------------------------------------------------------------------
    def _target_of(self, sid: int, step: int) -> int:
        row = self._row_of[sid] = self.replay.admit(sid, step)
        return self._responses[row]

    def _sample(self, sid: int) -> SimSample:
        s = self.samples.get(sid)
        if s is None:
            i = self._row_of[sid]
            reward = self._rewards[i] if self._rewards is not None else None
            if self.n == 1:
                s = self.samples[sid] = SimSample(sid, i, self._prompts[i], self._responses[i], reward)
            else:  # the group's prompt: the row of its first sid
                g = sid // self.n
                prompt = self._prompts[self._row_of[g * self.n]]
                s = self.samples[sid] = SimSample(sid, i, prompt, self._responses[i], reward, group=g)
        return s

    def _reward_of(self, sid: int) -> float:
        """The reward dynamic sampling reads: the trace's ``reward`` column, else a draw that makes the group
        informative with probability ``Algorithm.informative`` -- the same for every run with this seed. With
        neither (no column, no fraction stated) every group is informative: nothing is dropped."""
        if self._rewards is not None:
            return self._rewards[self._row_of[sid]]
        g, n = divmod(sid, self.n)
        p = self.algorithm.informative if self.algorithm.informative is not None else 1.0
        informative = np.random.default_rng((self.cfg.seed, g)).random() < p
        return float(n == 0) if informative else 0.0

    # -- the machine's actions --------------------------------------------------------------------------
    def _apply(self, acts: list[Action], step: int) -> None:
        loads = None  # replicas' loads, kept while only this call's launches change them
        for a in acts:
            kind = type(a)
            if kind is Emit:
                s = self._sample(a.sid)
                for role in a.roles:
                    self._put(role, s, a.upto, a.final, step, True)
                if not a.final:
                    s.req.emit_at = a.next_emit_at
            elif kind is Launch:  # (a fresh one may be another step's, started by a slot this step freed)
                self._step_of[a.sid] = self.ledger.tracks[a.sid].admit_step if a.fresh else step
                req = self._sample(a.sid).req
                req.emit_at, req.pause_at = a.marks.emit_at, a.marks.pause_at
                if loads is None:
                    loads = [r.load() for r in self.replicas]
                i = loads.index(min(loads))  # the least loaded replica, the first of equals
                self.replicas[i].add(req)
                loads[i] = self.replicas[i].load()
            elif kind is Pause:
                req = self._sample(a.sid).req  # the engine stopped it at its pause mark
                req.emit_at = req.pause_at = None
            elif kind is EndGeneration:  # stop now: no replica starts another iteration (unless the next step's run)
                self.stopping = [] if self.machines[step].plan.overlap else [r.stop() for r in self.replicas if r.busy()]
                self.gen_done[step].succeed()
                loads = None
            elif kind is ScoreWhole:
                for sid in a.sids:
                    s = self._sample(sid)
                    self._put(a.role, s, s.target, True, step)
            elif kind is Train:
                self._train_event(a.step).succeed()
            elif kind is not Defer and kind is not FormBatch:  # those the ledger holds; the engines gave the requests back
                raise TypeError(f"unknown action {a!r}")

    def _put(self, role: str, s: SimSample, upto: int, final: bool, step: int, streamed: bool = False) -> None:
        """``s`` up to ``upto`` to ``role``'s scorer; for a role of ``cfg.after_update``, once step ``step - 1`` ended."""
        if role in self.cfg.after_update and step > 0 and math.isnan(self.records[step - 1].end):
            return self._held.setdefault(step - 1, []).append((role, s, upto, final, step, streamed))
        self.scorers[role].put(s, upto, final, step, streamed)

    def _train_event(self, step: int) -> simpy.Event:
        ev = self.train_ev.get(step)
        if ev is None:
            ev = self.train_ev[step] = self.env.event()
        return ev

    def on_scored(self, role: str, sids: list[int]) -> None:
        self._apply(self.ledger.scored(role, sids), -1)

    def _on_gen(self, replica: GenReplica, events: list[tuple[str, Req]]) -> None:
        seen: dict[int, Progress] = {}
        for kind, req in events:
            if kind == FINISH or kind == EMIT or kind == PAUSE:
                rid = req.rid
                prev = seen.get(rid)
                seen[rid] = Progress(rid, req.generated, kind == FINISH or (prev is not None and prev.finished))
        if self.ledger.filter_groups:
            for ev in seen.values():
                if ev.finished:
                    ev.reward = self._reward_of(ev.sid)
        by_step: dict[int, list[Progress]] = {}
        for ev in seen.values():
            by_step.setdefault(self._step_of[ev.sid], []).append(ev)
        for step in sorted(by_step):
            dropped = len(self.ledger.dropped)
            self._apply(self.machines[step].report(by_step[step]), step)
            if len(self.ledger.dropped) > dropped:
                self._score_dropped(self.ledger.dropped[dropped:], step)

    def _score_dropped(self, sids: list[int], step: int) -> None:
        """A dropped group was scored by the reward (model or rule) to be found uniform, a trimmed one to be
        kept: that work is done too, though it trains nothing (where the reward role streamed, its final chunk
        did it already)."""
        for role in ("reward", "rule"):
            if role in self.scorers and role not in self.ledger.streamed:
                for sid in sids:
                    s = self._sample(sid)
                    self._put(role, s, s.target, True, step)

    # -- processes -----------------------------------------------------------------------------------
    def rollout(self):
        ledger = self.ledger
        for t in range(self.cfg.steps):
            while not ledger.may_start(t):
                yield self.version_ev
            ovh = self.cfg.overheads
            if ovh.step_s or ovh.sample_s:  # the driver plans, launches and keeps its books before generating
                yield self.env.timeout(ovh.step_s + ovh.sample_s * self.cfg.batch * self.n)
            plan = ledger.plan(t)
            rec = StepRecord(t, self.env.now, plan)
            self.records.append(rec)
            self.gen_done[t] = self.env.event()
            m = self.machines[t] = ledger.begin(t, plan)
            for r in self.replicas:
                r.step = min(self.machines)  # (the timeline books an iteration to the earliest step generating)
                if isinstance(r.core, StaticEngineCore):  # a chunked plan generates in calls of its C
                    r.core.set_call_tokens(plan.chunk)
            self._apply(m.start(), t)
            if plan.overlap:  # weights refit in flight: the next step may start generating beside this one
                self.env.process(self._end_generation(m, rec))
            else:
                yield from self._end_generation(m, rec)

    def _end_generation(self, m: StepMachine, rec: StepRecord):
        """Step ``m.step``'s generation to its end, then its batch to the scorers."""
        t, ovh = m.step, self.cfg.overheads
        yield self.gen_done[t]
        del self.gen_done[t]
        left: dict[int, int] = {}
        if self.stopping:  # what was still generating stops after its current iteration, keeping its tokens
            stopped = yield simpy.AllOf(self.env, self.stopping)
            for reqs in stopped.values():
                for req in reqs:
                    req.emit_at = req.pause_at = None
                    left[req.rid] = req.generated
        rec.gen_end = self.env.now
        acts = m.stopped(left)
        del self.machines[t]
        for r in self.replicas if self.machines else ():
            r.step = min(self.machines)
        self._score_dropped(m.trimmed, t)  # kept groups discarded beyond B: rewarded, as the dropped ones
        rec.admitted, rec.deferred, rec.batch = len(m.admitted), len(m.deferred), m.batch
        asleep = self.asleep[t] = self._switch("sleep", t) if self.sleepwake is not None else None
        if ovh.token_s:  # the batch's tokens are copied into the scoring and training messages
            yield self.env.timeout(ovh.token_s * sum(self._sample(s).target for s in m.batch))
        # the scorers beside a sleeping engine start once it sleeps and their weights are back; the others at once
        later = [a for a in acts if asleep is not None and type(a) is ScoreWhole and a.role in self._beside_engine]
        self._apply([a for a in acts if all(a is not b for b in later)], t)
        if later:
            yield asleep
            self._apply(later, t)

    def _switch(self, activity: str, step: int) -> simpy.Event:
        """The engine's ``sleep`` (when generation ends) or ``wake`` (before the sync): a job on its pool."""
        pool = self.pools[self.sleepwake.pool]
        return pool.submit(pool.all, self.sleepwake.switch_s, activity=activity, role=activity, step=step).done

    def trainer(self):
        cfg, pl = self.cfg, self.cfg.placement
        tpool, tcost = self.pools[pl.train], self.cost_of[pl.train]
        gpool = self.pools[pl.generate]
        sync_s = sum(weight_sync_legs(cfg, self.cost_of).values())  # the trainer's export, then the hand-off
        for t in range(cfg.steps):
            yield self._train_event(t)
            asleep = self.asleep.pop(t, None)
            if asleep is not None and not asleep.processed:  # training needs the memory the engine gives up
                yield asleep
            rec = self.records[t]
            rec.score_end = rec.train_start = self.env.now
            batch = [self.samples[sid] for sid in rec.batch]
            prompts, responses = np.array([s.prompt for s in batch]), np.array([s.target for s in batch])
            ids, micro = np.array([s.sid for s in batch]), tcost.micro_batch().sequences or 0
            for trained in cfg.trained():  # each model's update on its sequences as it pads them
                seqs = pass_tokens(cfg, trained[0], prompts, responses, ids, micro)
                for j in train_jobs(tcost, (trained,), tpool.n, seqs, cfg.ppo_epochs, cfg.minibatches):
                    job = tpool.submit(tpool.all, j.seconds, activity="train", role=j.role, step=t, tokens=j.tokens,
                                       flops=j.flops)
                    yield job.done
            rec.train_end = self.env.now
            if self.sleepwake is not None:  # the other roles' state back to the host, the engine awake, before the sync
                yield self._switch("wake", t)
                rec.sleep_wake_s = self.sleepwake.step_s
            rec.sync_start = self.env.now
            job = gpool.submit(gpool.all, sync_s, activity="sync", role="sync", step=t)
            yield job.done
            for r in (() if rec.plan.overlap else self.replicas):  # refit in flight: the running keep their KV
                r.reset()
            rec.end = self.env.now
            for role, s, upto, final, step, streamed in self._held.pop(t, ()):  # the next step's passes may start
                self.scorers[role].put(s, upto, final, step, streamed)
            self._finish_step(rec, batch)
            if self.on_step is not None:
                self.on_step(rec)
            ev, self.version_ev = self.version_ev, self.env.event()
            ev.succeed()
        self.done.succeed()

    def _finish_step(self, rec: StepRecord, batch: list[SimSample]) -> None:
        stale = self.ledger.decision(rec.step).staleness
        rec.staleness_mean = float(np.mean(stale))
        rec.staleness_max = int(max(stale))
        rec.tokens = sum(s.target for s in batch)
        rec.prompt_tokens = sum(s.prompt for s in batch)
        rewards = [s.reward for s in batch if s.reward is not None]
        rec.reward = float(np.mean(rewards)) if rewards else self.cfg.reward_curve.mean_reward(rec.step)
        rec.step_time_s = self.ledger.complete(rec.step, rec.start, rec.end, rec.reward).step_time_s
        for s in batch:
            del self.samples[s.sid]
            del self._row_of[s.sid]
            del self._step_of[s.sid]
        for k, gone in enumerate((self.ledger.dropped, self.ledger.trimmed)):  # groups dynamic sampling let go
            for sid in gone[self._forgotten[k]:]:
                self.samples.pop(sid, None)
                self._row_of.pop(sid, None)
                self._step_of.pop(sid, None)
            self._forgotten[k] = len(gone)

    def run(self) -> None:
        self.env.process(self.rollout())
        self.env.process(self.trainer())
        # What exists before the run (modules, the trace, the configuration) is not garbage: the collector need not
        # scan it again and again while the run allocates (unless the caller froze objects itself).
        freeze = gc.isenabled() and gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            self.env.run(until=self.done)
        finally:
            if freeze:
                gc.unfreeze()

    def in_flight(self) -> int:
        return self.ledger.in_flight()
