"""The step machine: what one PPO step's plan *means*, decided once for the simulator and the real
executor alike.

A :class:`StepMachine` is made by :meth:`oppo_sim.core.ledger.Ledger.begin` from the policy's
:class:`~oppo_sim.core.policies.StepPlan` and the requests carried over from earlier steps. Its driver
feeds it what the engines report and carries out what it answers (``oppo_sim/core/protocol.py``)::

    start()                    -> Launch (resume the carried, admit the fresh), maybe EndGeneration
    report([Progress, ...])    -> Emit / Pause / Launch (refill, next round) / EndGeneration
    stopped({sid: generated})  -> Defer, FormBatch, ScoreWhole ..., maybe Train
    (Ledger.scored(role, sids) -> Train once every role has scored the batch)

The rules, each defined here once:

- **chunk boundary** (:meth:`StepMachine.next_emit`): a chunked plan stops a response every C generated
  tokens and hands the new chunk to the streamed scorers; a boundary at or past the response's target
  is no boundary (its finish hands over the rest). A chunk is emitted when a response *reaches its
  mark*, never because a report happened to show it past a boundary, so the decision does not depend on
  how often an engine reports;
- **streaming target**: only the roles the ledger was given as ``streamed`` (frozen scorers placed off
  the generation pool, :func:`oppo_sim.core.placement.streamed_roles`) ever receive chunks or finals;
- **token budget** (:meth:`StepMachine.marks`): a plan with a budget pauses a response once it has
  generated ``budget`` more tokens in this step; a paused response is deferred with its tokens;
- **refill** (:meth:`StepMachine._refill`): under a refill plan, a pause while fewer than ``end_after``
  responses can still finish admits a fresh prompt (at most B per step), after that it gives the
  oldest response paused in this step another budget;
- **end of generation** (:meth:`StepMachine._check_end`): once ``end_after`` responses finished, or
  nothing is generating (under dynamic sampling: with B groups kept, else another round);
- **deferral order**: responses paused in this step (in pause order), then the unfinished ones in the
  order they were launched; the next step resumes every one of them at its start, in that order (none
  is carried without being resumed; :meth:`oppo_sim.core.ledger.Ledger.check_conservation` checks it);
- **resumed** (the decisions' ``resumed``): the requests launched with the tokens they had, each once per
  step in the order first resumed — the deferred ones at the start, then those a refill resumes (a
  request paused and refilled again in the same step is not listed twice);
- **simultaneous finishes** (:meth:`StepMachine.report`): progress reported together is applied in
  sample-id order, so "the first B to finish" has one tie-break;
- **the batch** (:meth:`StepMachine.stopped`): the first B finished samples not yet trained, in finish
  order (under an ``overlap`` plan, of those this step admitted); every scoring role that streaming did not
  cover scores them whole;
- **the window** (an ``overlap`` plan: weights refit in flight, NeMo RL's ``in_flight_weight_updates``): the
  next step may generate beside this one, with at most B x k groups generating across them (NeMo RL's
  semaphore of ``num_prompts_per_step x max_trajectory_age_steps``); a step admits what the window has room
  for and one more group each time any group completes, the earliest step first (:meth:`Ledger.group_done`).

**Groups** (``Ledger.group_size`` = n > 1: n responses a prompt, :mod:`oppo_sim.core.algorithms`). The group,
the n responses of one prompt (sids g*n .. g*n+n-1), is the unit of admission, batching and deferral;
generation, chunk streaming, token budgets and pauses stay per response:

- a plan's ``admit`` (and a refill) counts prompts: each admits a whole group of n fresh responses;
- a group is **complete** when its last member finishes; the batch is the first B complete groups in the
  completion order of their last member (simultaneous completions in group-id order, as finishes are
  applied in sample-id order), each group's members in sample-id order; ``end_after`` counts complete
  groups; "can still finish" (refill) counts complete groups plus groups with a member generating and
  none paused; once B fresh groups were refilled, a refill gives every paused member of the oldest paused
  group another budget (with n = 1: the oldest paused response);
- **deferral defers whole groups**: every unfinished member with its partial work, *and* the finished
  members of those groups. The finished ones are not launched again: the next step takes them back at its
  start as finished members that wait (``waiting``) until their group completes. Their frozen scores stay
  valid and are kept; the actor's log-probs are computed when the group trains. The advantage is formed
  within the group (a baseline over its n rewards), so a member is only trainable with its group, and a
  group is never split between trained, deferred and ready;
- **dynamic sampling** (``Ledger.filter_groups``, dapo), in **rounds** as verl's DAPO recipe runs it
  (``recipe/dapo/dapo_ray_trainer.py``, ``RayDAPOTrainer.fit``, verl 0.4-0.6). A complete group whose n
  rewards (reported by the driver with each finish, :attr:`Progress.reward`) are all equal carries no
  gradient: it is **dropped** (:func:`informative`; verl keeps a group whose metric has std > 0), never
  trained, and nothing takes its place at once. The step's first round is what the plan launches (the
  carried, and the policy's fresh prompts, sized by ``gen_batch_size``: verl ``data.gen_batch_size``, the
  dataloader's batch, default B); a round ends when none of its requests is generating, and a round that
  ends with fewer than B groups kept (``ready``) is followed by another of ``gen_batch_size`` fresh prompts
  (:meth:`StepMachine._next_round`) -- past ``max_gen_batches`` rounds (0: no limit) a one-line error, as
  verl's "Generated too many". On top of the rounds, the policies act as without them: a plan that ends
  generation at B (``end_after``: inter, oppo, partial-rollout ...) ends it *mid-round* once B kept groups
  are complete and defers the round's unfinished groups with their partial work, its first round over-
  committed by Δ; a plan that waits for whole rounds (baseline, stream, intra, async: verl's synchronous
  step) keeps, like verl, the first B kept groups in the order they were sampled (sample ids: admission
  order) and **trims** the surplus (``trimmed``: discarded, never trained; verl's ``batch[:traj_bsz]``).
  Dropped and trimmed groups are the waste of dynamic sampling, both counted by the ledger's conservation.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Iterable, Mapping, Protocol, Sequence

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.protocol import (Action, Defer, Emit, EndGeneration, FormBatch, Launch, Marks, Pause, Progress,
                                   ScoreWhole, Train)
from oppo_sim.core.stepplan import StepPlan, Streaming
from oppo_sim.core.track import Track

MAX_DROPPED_GROUPS = 100
"""Dynamic sampling gives up (a one-line error) once one step has dropped this many groups per prompt of
its batch, even with no limit on its rounds (``max_gen_batches`` = 0): rewards that are (almost) never
informative would otherwise sample forever (verl, with no limit, samples on until its data run out)."""


def informative(rewards: Sequence[float | None]) -> bool:
    """Dynamic sampling's rule (DAPO ``filter_groups``): a group carries a gradient only when its rewards
    differ. A reward not reported (None) counts as informative: nothing is dropped on a guess."""
    return any(r is None for r in rewards) or len(set(rewards)) > 1


class RunState(Protocol):
    """What a step machine reads and changes of the run (:class:`oppo_sim.core.ledger.Ledger` is one)."""

    batch: int
    group_size: int
    filter_groups: bool
    gen_batch_size: int | None
    max_gen_batches: int
    roles: tuple[str, ...]
    streamed: tuple[str, ...]
    tracks: dict[int, Track]
    ready: list[int]

    def new_sample(self, step: int) -> int: ...
    def drop(self, sids: Sequence[int], trimmed: bool = False) -> None: ...
    def take_deferred(self) -> list[int]: ...
    def defer(self, sids: Iterable[int]) -> None: ...
    def take_ready(self, n: int, step: int | None = None) -> tuple[int, ...]: ...
    def window_free(self, plan: StepPlan) -> int: ...
    def group_done(self) -> list[Action]: ...
    def record(self, m: "StepMachine") -> None: ...
    def note(self, step: int, acts: list[Action]) -> list[Action]: ...


class StepMachine:
    """One step's generation, batch and scoring decisions (pure: no clock, no engine)."""

    def __init__(self, ledger: RunState, step: int, plan: StepPlan) -> None:
        self.ledger = ledger
        self.step = step
        self.plan = plan
        self.streamed: tuple[str, ...] = ledger.streamed if plan.streaming is not Streaming.NONE else ()
        self.chunk = plan.chunk if plan.streaming is Streaming.CHUNKED and self.streamed else None
        self.n = ledger.group_size
        self.active: dict[int, None] = {}  # generating now, in launch order
        self.finished = 0  # groups completed (and kept) in this step; with n = 1, responses finished
        self.waiting: dict[int, list[int]] = {}  # group -> its finished members, while the group is incomplete
        self.dropped: list[int] = []  # sids of the groups dynamic sampling dropped in this step
        self.trimmed: list[int] = []  # sids of the kept groups discarded beyond B (a plan waiting for whole rounds)
        self.rounds = 1  # generation rounds (dynamic sampling starts another while fewer than B groups are kept)
        self.paused: list[int] = []  # paused in this step and not resumed, oldest first
        self.refilled = 0
        self.to_admit = 0  # groups an overlapping plan admits as the window of groups in flight frees a slot
        self.handoff: list[Action] = []  # another step's launches, started by a slot this step freed
        self.ended = False
        self.admitted: list[int] = []
        self.resumed: dict[int, None] = {}  # an ordered set: a request refilled twice is resumed once
        self.deferred: tuple[int, ...] = ()
        self.batch: tuple[int, ...] | None = None
        self.pending: dict[int, set[str]] = {}
        self.unscored = 0  # (sample, role) pairs in pending
        self.trained = False

    # -- checkpoints ----------------------------------------------------------------------------
    def to_json(self) -> dict:
        """A step whose batch was handed to training and is not synced yet (``async``): the only open step a
        checkpoint holds. What it admitted, resumed and deferred is in the ledger's decisions already."""
        if not self.trained:
            raise RuntimeError(f"step {self.step} is still generating or scoring; a checkpoint holds an open step "
                               "only once its batch is training")
        plan = {**asdict(self.plan), "streaming": self.plan.streaming.value}
        return {"step": self.step, "plan": plan, "batch": list(self.batch or ()), "deferred": list(self.deferred)}

    @classmethod
    def from_json(cls, ledger: RunState, doc: Mapping) -> "StepMachine":
        """The step as :meth:`to_json` wrote it: its batch formed and training, to be completed again."""
        m = cls(ledger, doc["step"], StepPlan(**{**doc["plan"], "streaming": Streaming(doc["plan"]["streaming"])}))
        m.batch, m.deferred, m.ended, m.trained = tuple(doc["batch"]), tuple(doc["deferred"]), True, True
        return m

    # -- rules ----------------------------------------------------------------------------------
    def next_emit(self, tr: Track) -> int | None:
        """The next chunk boundary of a response, or None (no chunking, or the boundary is its end)."""
        if self.chunk is None:
            return None
        nxt = (tr.generated // self.chunk + 1) * self.chunk
        return nxt if nxt < tr.target else None

    def marks(self, tr: Track) -> Marks:
        """The engine marks of a response launched now: next chunk boundary, end of its token budget."""
        budget = self.plan.token_budget
        tr.pause_at = tr.generated + budget if budget is not None else None
        tr.emit_at = self.next_emit(tr)
        return Marks(tr.emit_at, tr.pause_at)

    # -- events ---------------------------------------------------------------------------------
    def start(self) -> list[Action]:
        """Resume what earlier steps deferred, admit the plan's fresh prompts."""
        acts: list[Action] = []
        tracks = self.ledger.tracks
        for sid in self.ledger.take_deferred():
            if tracks[sid].finished:  # a finished member of a deferred group: it waits for its group
                self.waiting.setdefault(sid // self.n, []).append(sid)
            else:
                acts.append(self._launch(sid, fresh=False))
        admit = self.plan.admit
        if self.plan.overlap:  # as many as the window has room for; the rest as slots free
            admit = min(admit, self.ledger.window_free(self.plan))
            self.to_admit = self.plan.admit - admit
        for _ in range(admit):
            acts += self._admit_group()
        return self.ledger.note(self.step, acts + self._check_end())

    def admit_waiting(self) -> list[Action]:  # one more group of an overlapping plan, into a freed slot
        self.to_admit -= 1
        return self._admit_group()

    def report(self, events: Iterable[Progress]) -> list[Action]:
        """Engine progress: tokens generated so far per request, and which finished."""
        acts: list[Action] = []
        for ev in sorted(events, key=lambda e: e.sid):
            acts += self._progress(ev)
        handoff, self.handoff = self.handoff, []  # (noted under their own step)
        return self.ledger.note(self.step, acts + self._check_end()) + handoff

    def stopped(self, progress: Mapping[int, int]) -> list[Action]:
        """Generation stopped (after :class:`EndGeneration`): ``progress`` holds every request the engines
        still had, with the tokens it generated. Defers them, forms the batch, asks for whole scoring."""
        if set(progress) != set(self.active):
            raise RuntimeError(f"step {self.step}: the engines stopped {sorted(progress)} but {sorted(self.active)} were generating")
        tracks = self.ledger.tracks
        for sid, g in progress.items():
            tracks[sid].generated = g
        unfinished = self.paused + list(self.active)
        if self.n == 1:
            self.deferred = tuple(unfinished)
        else:  # whole groups, in the order their first unfinished member is listed; members in sid order
            n, groups = self.n, dict.fromkeys(sid // self.n for sid in unfinished)
            self.deferred = tuple(sid for g in groups for sid in range(g * n, g * n + n))
        self.paused = []
        self.active.clear()
        self.waiting.clear()
        for sid in self.deferred:
            tracks[sid].pause_at = tracks[sid].emit_at = None
        self.ledger.defer(self.deferred)
        acts: list[Action] = [Defer(self.deferred)]
        B, ledger = self.ledger.batch * self.n, self.ledger
        own = self.plan.overlap  # a later step may be generating beside this one: the batch is what this one admitted
        have = sum(tracks[s].admit_step == self.step for s in ledger.ready) if own else len(ledger.ready)
        if have < B:
            what = "samples" if self.n == 1 else f"responses (groups of {self.n})"
            raise ConfigError(f"step {self.step}: only {have} of {B} {what} finished; the policy's plan cannot fill a batch")
        trim = ledger.filter_groups and self.plan.end_after is None  # verl's synchronous step: the first B sampled
        if trim:
            ledger.ready.sort()
        self.batch = ledger.take_ready(B, self.step if own else None)
        if trim and ledger.ready:
            self.trimmed = list(ledger.take_ready(len(ledger.ready)))
            ledger.drop(self.trimmed, trimmed=True)
        acts.append(FormBatch(self.step, self.batch))
        for role in self.ledger.roles:
            need = tuple(s for s in self.batch if role not in tracks[s].streamed)
            if need:
                acts.append(ScoreWhole(role, need))
        self.pending = {s: set(self.ledger.roles) - tracks[s].scored for s in self.batch}
        self.unscored = sum(len(v) for v in self.pending.values())
        self.ledger.record(self)
        return self.ledger.note(self.step, acts + self.maybe_train())

    def scored(self, role: str, sids: Iterable[int]) -> None:
        pending = self.pending
        for sid in sids:
            roles = pending.get(sid)
            if roles is not None and role in roles:
                roles.remove(role)
                self.unscored -= 1

    def maybe_train(self) -> list[Action]:
        if self.batch is None or self.trained or self.unscored:
            return []
        self.trained = True
        return [Train(self.step, self.batch)]

    # -- internals ------------------------------------------------------------------------------
    def _launch(self, sid: int, fresh: bool) -> Launch:
        tr = self.ledger.tracks[sid]
        self.active[sid] = None
        if fresh:
            self.admitted.append(sid)
        else:
            self.resumed[sid] = None
        return Launch(sid, fresh, tr.generated, self.marks(tr))

    def _admit_group(self) -> list[Action]:
        if self.plan.overlap:
            self.ledger.in_window += 1
        return [self._launch(self.ledger.new_sample(self.step), fresh=True) for _ in range(self.n)]

    def _progress(self, ev: Progress) -> list[Action]:
        tr = self.ledger.tracks[ev.sid]
        if tr.finished:
            return []
        tr.generated = ev.generated
        if ev.reward is not None:
            tr.reward = ev.reward
        if ev.finished or tr.generated >= tr.target:
            return self._finish(tr)
        acts: list[Action] = []
        if tr.emit_at is not None and tr.generated >= tr.emit_at:  # at its mark: everything up to the boundary
            acts.append(self._emit(tr, tr.generated // self.chunk * self.chunk, final=False))
        if tr.pause_at is not None and tr.generated >= tr.pause_at and tr.sid in self.active:
            acts += self._pause(tr)
        return acts

    def _finish(self, tr: Track) -> list[Action]:
        tr.finished = True
        tr.pause_at = tr.emit_at = None
        self.active.pop(tr.sid, None)
        acts: list[Action] = [self._emit(tr, tr.generated, final=True)] if self.streamed else []
        if self.n == 1:
            self._complete([tr.sid])
            return acts
        g = tr.sid // self.n
        members = self.waiting.setdefault(g, [])
        members.append(tr.sid)
        if len(members) < self.n:
            return acts
        del self.waiting[g]
        sids = list(range(g * self.n, g * self.n + self.n))
        tracks = self.ledger.tracks
        if self.ledger.filter_groups and not informative([tracks[s].reward for s in sids]):
            if len(self.dropped) >= MAX_DROPPED_GROUPS * self.ledger.batch * self.n:
                raise ConfigError(f"step {self.step}: dynamic sampling dropped {len(self.dropped) // self.n} groups "
                                  f"(all rewards equal) for a batch of {self.ledger.batch}; the rewards carry no signal")
            self.dropped.extend(sids)
            self.ledger.drop(sids)
            return acts
        self._complete(sids)
        return acts

    def _complete(self, sids: list[int]) -> None:  # a group kept; an overlapping plan frees its slot (handoff)
        self.finished += 1
        self.ledger.ready.extend(sids)
        if self.plan.overlap:
            self.handoff += self.ledger.group_done()

    def _emit(self, tr: Track, upto: int, final: bool) -> Emit:
        tr.emit_at = None if final else self.next_emit(tr)
        act = Emit(tr.sid, tr.emitted, upto, final, self.streamed, tr.emit_at)
        tr.emitted = upto
        if final:
            tr.streamed.update(self.streamed)
        return act

    def _pause(self, tr: Track) -> list[Action]:
        del self.active[tr.sid]
        tr.pause_at = tr.emit_at = None
        self.paused.append(tr.sid)
        return [Pause(tr.sid), *self._refill()]

    def _refill(self) -> list[Action]:
        plan = self.plan
        if self.ended or not plan.refill or plan.end_after is None:
            return []
        n = self.n
        if n == 1:
            running = len(self.active)
        else:  # groups that can still complete: a member generating, none paused
            held = {sid // n for sid in self.paused}
            running = len({sid // n for sid in self.active} - held)
        if self.finished + running >= plan.end_after:
            return []
        if self.refilled < self.ledger.batch:
            self.refilled += 1
            return self._admit_group()
        if n == 1:
            return [self._launch(self.paused.pop(0), fresh=False)]
        g = self.paused[0] // n  # the oldest paused group: every paused member of it gets another budget
        again = [sid for sid in self.paused if sid // n == g]
        self.paused = [sid for sid in self.paused if sid // n != g]
        return [self._launch(sid, fresh=False) for sid in again]

    def _check_end(self) -> list[Action]:
        if self.ended:
            return []
        end_after = self.plan.end_after
        if end_after is not None and self.finished >= end_after:
            self.ended = True
            return [EndGeneration()]
        if not self.active and not self.to_admit:
            led = self.ledger
            if led.filter_groups and len(led.ready) < led.batch * self.n:
                return self._next_round()
            self.ended = True
            return [EndGeneration()]
        return []

    def _next_round(self) -> list[Action]:
        """Dynamic sampling: the round ended with fewer than B groups kept: another round of ``gen_batch_size``
        fresh prompts, or -- past ``max_gen_batches`` rounds -- a one-line error (verl raises the same)."""
        led = self.ledger
        size = led.gen_batch_size or led.batch
        if led.max_gen_batches and self.rounds >= led.max_gen_batches:
            raise ConfigError(f"step {self.step}: dynamic sampling kept {len(led.ready) // self.n} of {led.batch} groups in "
                              f"{self.rounds} round{'s' * (self.rounds > 1)} of {size} prompts, the most max_gen_batches allows (verl: "
                              f"'Generated too many'); the rewards are too uniform -- raise --max-gen-batches (0: no limit)")
        self.rounds += 1
        return [a for _ in range(size) for a in self._admit_group()]
