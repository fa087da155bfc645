"""The real executor's driver: the step machine (``oppo_sim.core``) driven by real engines.

The driver decides nothing. Each step it asks the run's :class:`~oppo_sim.core.ledger.Ledger` for the
plan and its step machine, tells the role workers to do what the machine answers, and reports back
what the engines did:

    Launch  -> ``gen.add`` (prompt + tokens so far; the score worker opens a streamed sequence)
    Emit    -> ``score.feed`` of the chunk (and ``score.finish`` when final)
    Pause   -> ``gen.abort`` (the tokens are kept)
    EndGeneration -> ``gen.abort`` of whatever is unfinished, then ``machine.stopped``
    ScoreWhole reward/reference -> ``score.score_whole``; critic/logprob -> computed by the train
               worker as the first phase of its update; rule -> the task's verifier, here in the driver
               process on the CPU (timeline pool "cpu", role "rule")
    Train   -> ``train.train`` (asynchronous when the plan allows staleness), then the weight sync

Engine progress comes back from ``gen.generate``, which steps the engine up to the next mark the
machine set (a finish, a chunk boundary, a token budget). The result has the simulator's per-step,
timeline and decisions schema, measured from the wall clock, with the simulator's attribution of a step's
time: ``scoring_s`` runs from the end of generation until every scoring role (``SCORING_ROLES``: reward,
reference, critic, logprob) has scored the batch -- here the end of the train worker's critic and
log-prob passes --, ``training_s`` is the PPO update, ``sync_s`` the weight sync.

The run's algorithm (``cfg.algorithm``) decides the roles the ledger waits for (its
``scoring_roles()``, plus the pseudo-role ``"rule"`` under a rule reward) and the group size: the n
members of a group share one prompt (:class:`~oppo_real.executor.sample_store.SampleStore`) and train
together with their group ids (``sid // n``) for the group advantage.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from oppo_real.config import RealConfig
from oppo_real.executor.messages import TrainBatch
from oppo_real.executor.roles import RULE_POOL, RULE_ROLE, ledger_groups, ledger_roles
from oppo_real.executor.sample_store import SampleStore
from oppo_real.models.task import rule_reward
from oppo_real.workers.handles import Handle
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.ledger import Ledger
from oppo_sim.core.placement import streamed_roles
from oppo_sim.core.policies import Policy
from oppo_sim.core.protocol import Action, Emit, EndGeneration, FormBatch, Launch, Pause, Progress, ScoreWhole
from oppo_sim.core.stepplan import StepContext, StepPlan
from oppo_sim.core.stepmachine import StepMachine
from oppo_sim.traces.trace import Trace

SCORE_WORKER_ROLES = ("reward", "reference")  # the score worker; critic and logprob run in the train worker


@dataclass
class TrainingJob:
    """A PPO update submitted to the train worker and not yet synced into the generator."""

    step: int
    plan: StepPlan
    batch: tuple[int, ...]
    start: float
    gen_end: float
    score_end: float
    admitted: int
    deferred: int
    gen_calls: int
    ref: Any
    saved: str | None = None  # the trainer's state saved just before this training (a checkpoint's weights)


def refuse_overlap(policy: Policy, batch: int) -> None:
    """A step generates here once the one before it stopped: a plan that overlaps them is refused in one line."""
    if policy.plan(policy.initial_state(), StepContext(0, batch)).overlap:
        raise ConfigError(f"{policy.label()}: weights refit in flight are simulated only (oppo-sim)")


class Driver:
    """Runs ``policy`` for real on the workers in ``handles`` (``gen``, ``train``, ``score``)."""

    def __init__(self, cfg: RealConfig, policy: Policy, trace: Trace | None, handles: dict[str, Handle],
                 on_step: Callable[[dict], None] | None = None) -> None:
        self.cfg = cfg
        self.policy = policy
        self.trace = trace
        self.gen, self.train, self.score = handles["gen"], handles["train"], handles["score"]
        self.on_step = on_step
        self.store = SampleStore(cfg, trace)
        self.algorithm = cfg.algorithm
        self.ledger = Ledger(policy, cfg.batch, ledger_roles(cfg), streamed_roles(cfg.placement()), self.store.target_of,
                             **ledger_groups(cfg))
        refuse_overlap(policy, cfg.batch)
        # dapo: report each finished response's reward with its finish (the machine's dynamic sampling reads it)
        self.report_rewards = cfg.algorithm.name == "dapo"
        self.step = 0
        self.records: list[dict] = []
        self.rollouts: list[dict] = []
        self.timeline: list[list] = []
        self.training: list[TrainingJob] = []
        self.live: dict[str, int] = {}  # engine request id -> sample id, while it generates
        self.marks: dict[int, list[int | None]] = {}  # sample id -> [emit_at, pause_at]
        self.feeds: list[Any] = []  # outstanding streamed-chunk work on the score worker
        self.finals: dict[int, Any] = {}  # sample id -> outstanding final score of a streamed sample
        self.shift = 0.0  # seconds of outage (between a checkpoint and its resume) taken out of every time
        self.before_train: Callable[[int], str | None] | None = None  # called before a training that stays in flight
        self._good = cfg.task.good_mask()
        self.gen_calls = 0  # generation round trips (of the step being generated)

    def now(self) -> float:
        return time.time() - self.shift

    # -- one step --------------------------------------------------------------------------------------
    def run_step(self) -> None:
        t, ledger = self.step, self.ledger
        while not ledger.may_start(t):  # bounded staleness: wait for the weights
            self._finish_training()
        plan = ledger.plan(t)
        if self.cfg.static_engine:  # a static decoder generates in calls of the step's C (None: unchunked)
            self.gen.call("set_call_tokens", plan.chunk)
        start = self.now()
        self.gen_calls = 0
        m = ledger.begin(t, plan)
        self._apply(m, m.start())
        while not m.ended:
            self._generate(m)
        left = {sid: len(self.store[sid].tokens) for sid in m.active}
        self._abort(list(m.active))
        gen_end = self.now()
        self._apply(m, m.stopped(left))
        self._forget([*m.dropped, *m.trimmed])  # dynamic sampling's waste: never trained
        self.settle(m.batch or ())
        if not m.trained:
            raise RuntimeError(f"step {t}: the batch was not ready to train after scoring")
        if plan.max_staleness == 0 and self.cfg.colocate_mode == "sleep":  # the trainer takes the generator's GPU memory
            self.gen.call("sleep", t)
        self._submit_training(m, start, gen_end)
        self.step += 1
        while len(self.training) > plan.max_staleness:  # synchronous plans wait for this very step
            self._finish_training()

    def _generate(self, m: StepMachine) -> None:
        report = {}
        for sid in m.active:
            s, marks = self.store[sid], [x for x in self.marks[sid] if x is not None]
            if marks:
                report[s.req_id] = max(1, min(marks) - len(s.tokens))
        while self._finish_training(block=False):  # a training finished meanwhile: sync its weights now
            pass
        out = self.gen.call("generate", m.step, self.cfg.gen_iters_per_call, report)
        self.gen_calls += 1
        events = []
        for rid, toks in out.tokens.items():
            sid = self.live.get(rid)
            if sid is None:
                continue
            s = self.store[sid]
            s.tokens.extend(toks)
            s.logprobs.extend(out.logprobs[rid])
            done = rid in out.finished
            if done:
                s.finish_reason = out.finished[rid]
                del self.live[rid]
            if done and self.report_rewards:  # the reward dynamic sampling reads (None under a reward model: kept)
                events.append(Progress(sid, len(s.tokens), done, reward=self._finish_reward(m.step, sid)))
            else:
                events.append(Progress(sid, len(s.tokens), done))
        self._apply(m, m.report(events))
        if out.iterations == 0 and not m.ended:
            raise RuntimeError(f"step {m.step}: the generator has no unfinished requests but {len(m.active)} are active")

    # -- the machine's actions --------------------------------------------------------------------------
    def _apply(self, m: StepMachine, acts: list[Action]) -> list[Action]:
        """Carry out ``acts`` (engine calls batched per kind); returns the actions that follow from them."""
        queue, done = deque(acts), []
        launches, aborts, emits, whole = [], [], [], []
        while queue:
            a = queue.popleft()
            done.append(a)
            if isinstance(a, Launch):
                launches.append(a)
            elif isinstance(a, Pause):
                aborts.append(a.sid)
            elif isinstance(a, Emit):
                emits.append(a)
                if not a.final:
                    self.marks[a.sid][0] = a.next_emit_at
            elif isinstance(a, ScoreWhole):
                if a.role in SCORE_WORKER_ROLES:
                    whole.append(a)
                elif a.role == RULE_ROLE:
                    self._score_rule(m.step, a.sids)
                    queue.extend(self.ledger.scored(a.role, a.sids))
                else:
                    queue.extend(self.ledger.scored(a.role, a.sids))
            elif isinstance(a, (EndGeneration, FormBatch)):
                pass
        self._abort(aborts)
        self._launch(launches)
        self._stream(m.step, emits)
        return done + (self._score_whole(m.step, whole) if whole else [])

    def _launch(self, launches: list[Launch]) -> None:
        if not launches:
            return
        reqs = []
        for a in launches:
            s = self.store.create(a.sid) if a.fresh else self.store[a.sid]
            s.segment += 1
            self.live[s.req_id] = s.sid
            self.marks[s.sid] = [a.marks.emit_at, a.marks.pause_at]
            reqs.append(s.request())
        self.gen.call("add", reqs)

    def _abort(self, sids: list[int]) -> None:
        rids = []
        for sid in sids:
            s = self.store[sid]
            if self.live.pop(s.req_id, None) is not None:
                rids.append(s.req_id)
        if rids:
            self.gen.call("abort", rids)

    def _stream(self, step: int, emits: list[Emit]) -> None:
        if not emits:
            return
        feeds: dict[str, list[int]] = {}
        for a in emits:
            s = self.store[a.sid]
            if not s.opened:  # its first chunk: the score worker starts a sequence (KV kept per sequence)
                s.opened = True
                self.feeds.append(self.score.submit("open", [(str(s.sid), s.prompt)]))
            if a.upto > a.start:
                feeds[str(a.sid)] = s.tokens[a.start:a.upto]
        if feeds:
            self.feeds.append(self.score.submit("feed", step, feeds))
        finals = [a.sid for a in emits if a.final]
        if finals:
            ref = self.score.submit("finish", step, [str(sid) for sid in finals])
            for sid in finals:
                self.finals[sid] = ref

    def _finish_reward(self, step: int, sid: int) -> float | None:
        """A finished response's reward for dynamic sampling: the rule's, computed now (the "rule" role's
        timeline row); None under a reward model, whose score comes only after the batch is formed."""
        if self.algorithm.reward != "rule":
            return None
        self._score_rule(step, (sid,))
        return self.store[sid].score

    def _forget(self, sids) -> None:
        """Samples of groups dynamic sampling dropped or trimmed: never trained, so the store and the scorer let them go."""
        opened = []
        for sid in sids:
            self.finals.pop(sid, None)
            s = self.store.samples.get(sid)
            if s is not None:
                if s.opened:
                    opened.append(str(sid))
                self.store.pop(sid)
        if opened:
            self.feeds.append(self.score.submit("drop", opened))

    def _score_rule(self, step: int, sids) -> None:
        """The rule reward of ``sids``, computed here on the CPU; one timeline row (pool "cpu", role "rule")."""
        sids = [sid for sid in sids if self.store[sid].score is None]  # once (dapo computed it at the finish)
        if not sids:
            return
        t0 = time.time()
        for sid in sids:
            self.store[sid].score = self.store.rule_reward(sid)
        self.timeline.append([RULE_POOL, "driver", "score", RULE_ROLE, step, t0 - self.shift, time.time() - self.shift,
                              sum(len(self.store[sid].tokens) for sid in sids), 0.0, 0.0])

    def _keep_scores(self, s, sc) -> None:
        """The score worker's answer for sample ``s``: the reward model's score (not under a rule reward)
        and the reference log-probs (only with the KL term)."""
        if self.algorithm.reward == "model":
            s.score = sc.reward
        if self.algorithm.kl:
            s.ref_logprobs = sc.ref_logprobs

    def _score_whole(self, step: int, whole: list[ScoreWhole]) -> list[Action]:
        sids = sorted({sid for a in whole for sid in a.sids})
        items = [(str(sid), self.store[sid].prompt, tuple(self.store[sid].tokens)) for sid in sids]
        for key, sc in self.score.call("score_whole", step, items).items():
            self._keep_scores(self.store[int(key)], sc)
        acts: list[Action] = []
        for a in whole:
            acts += self.ledger.scored(a.role, a.sids)
        return acts

    def settle(self, sids) -> list[Action]:
        """Wait for outstanding streamed work; store the final scores of ``sids`` that streamed."""
        if self.feeds:
            self.score.wait(self.feeds)
            self.feeds = []
        acts: list[Action] = []
        for sid in sids:
            ref = self.finals.pop(sid, None)
            if ref is None:
                continue
            sc = self.score.wait([ref])[0][str(sid)]
            self._keep_scores(self.store[sid], sc)
            for role in self.ledger.streamed:
                acts += self.ledger.scored(role, [sid])
        return acts

    # -- training --------------------------------------------------------------------------------------
    def _train_message(self, step: int, sids: tuple[int, ...]) -> TrainBatch:
        batch = [self.store[sid] for sid in sids]
        n = self.algorithm.group_size
        return TrainBatch(
            step, tuple(s.prompt for s in batch), tuple(tuple(s.tokens) for s in batch),
            tuple(float(s.score) for s in batch),
            tuple(tuple(s.ref_logprobs) if s.ref_logprobs is not None else (0.0,) * len(s.tokens) for s in batch),
            tuple(tuple(s.logprobs) for s in batch),
            groups=tuple(sid // n for sid in sids) if self.algorithm.grouped else (),
        )

    def _submit_training(self, m: StepMachine, start: float, gen_end: float) -> None:
        # a training that will still be in flight after this step: the hook saves the trainer's state first
        # (the train worker runs its calls in order), so a checkpoint taken meanwhile has weights to name
        hook = self.before_train if m.plan.max_staleness > 0 else None
        handed = self.now()  # scoring ends here at the earliest (an inline worker trains within submit)
        saved = hook(m.step) if hook is not None else None
        ref = self.train.submit("train", self._train_message(m.step, m.batch))
        self.training.append(TrainingJob(m.step, m.plan, m.batch, start, gen_end, handed, len(m.admitted),
                                         len(m.deferred), self.gen_calls, ref, saved))

    def resubmit(self, job: TrainingJob) -> None:
        """Train again a step whose training was in flight at the checkpoint resumed from (``job.ref`` unset)."""
        job.ref = self.train.submit("train", self._train_message(job.step, job.batch))
        self.training.append(job)

    def _finish_training(self, block: bool = True) -> bool:
        """Complete the oldest training in flight: wait for it, sync its weights into the generator, record
        the step and let the ledger complete it. With ``block=False`` only if it is already done."""
        if not self.training or (not block and not self.train.ready(self.training[0].ref)):
            return False
        job = self.training.pop(0)
        stats = dict(self.train.wait([job.ref])[0])
        train_end = self.now()
        # scoring ends when every scoring role has scored the batch -- critic values and the actor's log-probs
        # included, which the train worker computes first (``scored_at``): the simulator's attribution
        scored_at = stats.pop("scored_at", None)
        score_end = job.score_end if scored_at is None else min(train_end, max(job.score_end, scored_at - self.shift))
        sync_s = self.gen.call("load_weights", job.step, job.step + 1, self.train.submit("weights", job.step))
        end = self.now()
        batch = [self.store.pop(sid) for sid in job.batch]
        rm = float(np.mean([s.score for s in batch]))
        outcome = self.ledger.complete(job.step, job.start, end, rm)
        self.records.append(self._record(job, batch, stats, score_end, train_end, end, outcome.step_time_s, rm, sync_s))
        if self.on_step is not None:
            self.on_step(self.records[-1])
        return True

    def _record(self, job: TrainingJob, batch, stats, score_end, train_end, end, step_time, rm, sync_s) -> dict:
        t, stale = job.step, self.ledger.decision(job.step).staleness
        rewards = [rule_reward(self.cfg.task, s.tokens, self._good) for s in batch]
        for s, rr, st in zip(batch, rewards, stale):
            self.rollouts.append({"step": t, "sid": s.sid, "prompt_tokens": len(s.prompt), "response_tokens": len(s.tokens),
                                  "reward": rr, "rm_score": s.score, "finish_reason": s.finish_reason,
                                  "staleness": st, "segments": s.segment})
        return {
            "step": t, "start": job.start, "end": end, "step_time_s": step_time,
            "generation_s": job.gen_end - job.start, "scoring_s": score_end - job.gen_end,
            "training_s": train_end - score_end, "sync_s": end - train_end, "samples": len(batch),
            "tokens": sum(len(s.tokens) for s in batch), "prompt_tokens": sum(len(s.prompt) for s in batch),
            "admitted": job.admitted, "deferred": job.deferred, "delta": job.plan.delta, "chunk": job.plan.chunk,
            "staleness_mean": float(np.mean(stale)), "staleness_max": int(max(stale)), "reward": float(np.mean(rewards)),
            "rm_score": rm, "policy_loss": stats.get("policy_loss", math.nan),
            "mean_kl": stats.get("mean_kl", math.nan), "weight_sync_s": sync_s, "gen_calls": job.gen_calls,
        }

    def drain(self) -> None:
        """Finish every training still in flight (end of run, before a checkpoint)."""
        while self.training:
            self._finish_training()

    # -- timeline ---------------------------------------------------------------------------------------
    def take_timeline(self, handles: tuple[Handle, ...] | None = None) -> None:
        """Collect the timeline rows the workers (``handles``: all three) recorded since the last call."""
        for h in handles or (self.gen, self.train, self.score):
            self.add_timeline(h.call("take_timeline"))

    def add_timeline(self, rows: list[list]) -> None:
        for row in rows:
            row[5] -= self.shift
            row[6] -= self.shift
            self.timeline.append(row)
