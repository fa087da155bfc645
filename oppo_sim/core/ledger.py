"""The ledger: everything that carries from one step to the next, and the rules that span steps.

A :class:`Ledger` owns the policy's controller state, the policy version, every admitted sample's
:class:`~oppo_sim.core.stepmachine.Track`, the deferred and the finished-but-untrained samples, and
the decisions each step made. Both drivers use it the same way::

    wait until ledger.may_start(t)           # the staleness gate
    plan = ledger.plan(t)                    # the policy's plan, from what is carried over
    m = ledger.begin(t, plan)                # the step machine (see stepmachine.py)
    ... drive m ...; ledger.scored(role, sids) as scores complete -> Train actions
    ledger.complete(t, start, end, reward)   # step time, policy update, one more policy version

Rules that live here: the **staleness gate** (:meth:`Ledger.may_start`: generation of step t starts
once the policy version is at least t - k), **staleness** of a trained sample (step - version that
admitted it), and **step time** (:meth:`Ledger.complete`: from the previous step's end, or from the
step's own start for the first step and the first after a restart), and **conservation**
(:meth:`Ledger.check_conservation`, run by :meth:`Ledger.complete` for every step): every admitted
sample is trained exactly once or in exactly one state (in a batch not trained yet, generating,
paused, deferred, finished but untrained), counted from the containers that hold it, and every sample
deferred at a step's end is resumed at the next step's start. The per-step accounting is the
conservation table (:meth:`Ledger.conservation_frame`); a step that breaks it raises
:class:`ConservationError` (a bug, not bad input). The decisions table (:meth:`Ledger.decisions_frame`)
names the samples.

With groups (``group_size`` = n > 1, see ``stepmachine.py``) sample ids come in blocks of n, the plan's
context counts groups (``carried``: deferred groups, ``carried_finished``: complete groups not yet in a
batch), and conservation holds per group too: all members of a group are in one state (``split`` names
the groups that are not), where two states exist only for groups -- ``waiting`` (finished members of a
group still generating in a step not stopped yet), ``dropped`` (groups dynamic sampling dropped,
never trained) and ``trimmed`` (informative groups a synchronous dapo step kept beyond its B and discarded,
as verl does; never trained) -- the last two counted in total since the run began: the waste of dynamic
sampling.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Mapping, Sequence

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import Policy
from oppo_sim.core.stepplan import PolicyState, StepContext, StepOutcome, StepPlan
from oppo_sim.core.protocol import Action
from oppo_sim.core.stepmachine import StepMachine
from oppo_sim.core.track import Track

DECISION_FIELDS = ("step", "admitted", "resumed", "deferred", "trained", "delta", "chunk", "staleness", "rounds",
                   "dropped", "trimmed")
"""Columns of the decisions table: sample ids admitted fresh, resumed, deferred at the step's end and
trained; the Δ and C in force; the staleness of each trained sample; the generation rounds the step ran
(dapo's dynamic sampling; 1 otherwise) and the sample ids of the groups it dropped and trimmed."""


CONSERVATION_FIELDS = (
    "step", "admitted_total", "trained_total", "trained", "in_batch", "generating", "paused", "deferred", "ready",
    "waiting", "dropped", "trimmed", "lost", "duplicated", "stray", "unresumed", "split", "balanced",
)
"""Columns of the conservation table, one row per trained step (see :class:`Conservation`)."""

STATES = ("trained", "in_batch", "generating", "paused", "deferred", "ready", "waiting", "dropped", "trimmed")
"""The states an admitted sample is in once a step has trained, each read from its own container."""


class ConservationError(RuntimeError):
    """A sample was lost, held twice or not resumed: a bug in the step machine or a driver, not bad input."""


@dataclass(frozen=True)
class Conservation:
    """Where every admitted sample is once step ``step`` has trained (:meth:`Ledger.check_conservation`).

    The six state counts are read from the containers that hold the samples. ``balanced`` holds when no
    sample is lost, duplicated or stray, none is unresumed, and admitted_total = trained_total + in_batch +
    generating + paused + deferred + ready."""

    step: int
    admitted_total: int
    trained_total: int  # trained by this step and every step before it
    trained: int  # in this step's batch
    in_batch: int  # in a later step's batch, formed but not trained yet (asynchronous plans)
    generating: int  # generating in a step that has not stopped yet (asynchronous plans)
    paused: int  # paused in a step that has not stopped yet (deferred when it stops)
    deferred: int  # deferred at the end of the latest stopped step: the next step resumes them at its start
    ready: int  # finished and in no batch yet (carried to a later batch)
    waiting: int  # finished members of groups still generating (groups only)
    dropped: int  # in groups dynamic sampling dropped, since the run began (never trained)
    trimmed: int  # in kept groups a synchronous dapo step discarded beyond its B, since the run began
    lost: tuple[int, ...]  # admitted and not trained, but in no state
    duplicated: tuple[int, ...]  # in more than one state
    stray: tuple[int, ...]  # in a state but trained already (or never admitted)
    unresumed: tuple[int, ...]  # deferred at the end of step - 1, not resumed by step
    split: tuple[int, ...]  # groups whose members are in more than one state
    balanced: bool

    def describe(self) -> str:
        states = " + ".join(f"{getattr(self, k)} {k}" for k in STATES[1:])
        out = f"step {self.step}: {self.admitted_total} admitted vs {self.trained_total} trained + {states}"
        for name, sids in (("lost", self.lost), ("in two states", self.duplicated), ("trained or never admitted",
                           self.stray), (f"deferred at step {self.step - 1}'s end and not resumed", self.unresumed),
                          ("groups split between states", self.split)):
            if sids:
                out += f"; {name}: {list(sids)}"
        return out


@dataclass(frozen=True)
class StepDecisions:
    step: int
    admitted: tuple[int, ...]
    resumed: tuple[int, ...]
    deferred: tuple[int, ...]
    trained: tuple[int, ...]
    delta: int
    chunk: int | None
    staleness: tuple[int, ...]
    rounds: int = 1  # generation rounds (dapo's dynamic sampling)
    dropped: tuple[int, ...] = ()  # sample ids of the groups dropped in the step (all rewards equal)
    trimmed: tuple[int, ...] = ()  # sample ids of the kept groups discarded beyond B (synchronous dapo)


class Ledger:
    """Cross-step state of a run under ``policy`` with batch size B (pure; JSON-checkpointable)."""

    def __init__(self, policy: Policy, batch: int, roles: Sequence[str], streamed: Sequence[str],
                 target_of: Callable[[int, int], int], group_size: int = 1, filter_groups: bool = False,
                 gen_batch_size: int | None = None, max_gen_batches: int = 0) -> None:
        self.policy = policy
        self.batch = batch  # B: prompts (groups) per step
        self.group_size = group_size  # samples per group (Algorithm.group_size): sids come in blocks of it
        self.filter_groups = filter_groups  # dynamic sampling (dapo): drop groups whose rewards are all equal
        self.gen_batch_size = gen_batch_size  # dapo: prompts per generation round (None: B)
        self.max_gen_batches = max_gen_batches  # dapo: most rounds per step (0: no limit)
        self.dropped: list[int] = []  # sids of dropped groups (never trained)
        self.trimmed: list[int] = []  # sids of kept groups discarded beyond B (never trained)
        self.roles = tuple(roles)  # every role that must score a sample before it is trained
        self.streamed = tuple(r for r in roles if r in streamed)  # roles that may receive streamed chunks
        self.target_of = target_of  # (sample id, step admitting it) -> most response tokens it can generate
        self.state: PolicyState = policy.initial_state()
        self.version = 0
        self.next_sid = 0
        self.tracks: dict[int, Track] = {}
        self.deferred: list[int] = []
        self.ready: list[int] = []
        self.open: dict[int, StepMachine] = {}  # steps whose batch is not trained yet
        self.decisions: list[StepDecisions] = []
        self.conservation: list[Conservation] = []  # one row per trained step
        self.trained_total = 0
        self.last_end: float | None = None
        self.log: list[tuple[int, Action]] | None = None  # set to a list to record every action, by step
        self.in_window = 0  # groups generating under overlapping plans: at most B x k at once (NeMo RL's semaphore)

    def note(self, step: int, acts: list[Action]) -> list[Action]:
        if self.log is not None:
            self.log.extend((step, a) for a in acts)
        return acts

    # -- steps ----------------------------------------------------------------------------------
    def plan(self, step: int) -> StepPlan:
        n = self.group_size
        ctx = StepContext(step, self.batch, carried=len(self.deferred) // n, carried_finished=len(self.ready) // n,
                          gen_batch=self.gen_batch_size if self.filter_groups else None)
        return self.policy.plan(self.state, ctx)

    def may_start(self, step: int) -> bool:
        """The staleness gate: step t generates once the weights are at most k versions behind (k from the
        plan the policy would make now). Drivers plan *after* passing the gate, so a synchronous step's plan
        sees the outcome of the step before it."""
        return self.version >= step - self.plan(step).max_staleness

    def begin(self, step: int, plan: StepPlan) -> StepMachine:
        if plan.overlap and self.filter_groups:
            raise ConfigError("weights refit in flight (async --in-flight-weight-updates) with dapo's dynamic sampling: "
                              "not modelled; drop one of them")
        m = StepMachine(self, step, plan)
        self.open[step] = m
        return m

    def scored(self, role: str, sids: Iterable[int]) -> list[Action]:
        """Scores of ``role`` are final for ``sids``: the steps whose batch is now complete may train."""
        tracks = self.tracks
        sids = tuple(sid for sid in sids if sid in tracks)  # (a score of a dropped group comes to nothing)
        for sid in sids:
            tracks[sid].scored.add(role)
        acts: list[Action] = []
        for m in self.open.values():
            m.scored(role, sids)
            acts += self.note(m.step, m.maybe_train())
        return acts

    def complete(self, step: int, start: float, end: float, mean_reward: float) -> StepOutcome:
        """Step ``step`` trained and synced at ``end``: its conservation is checked (raises
        :class:`ConservationError` if broken), the policy learns its outcome, the version moves on."""
        row = self.check_conservation(step)
        self.conservation.append(row)
        if not row.balanced:
            raise ConservationError(row.describe())
        m = self.open.pop(step)
        prev = self.last_end if self.last_end is not None else start
        self.last_end = end
        self.trained_total += len(m.batch or ())
        for sid in m.batch or ():
            del self.tracks[sid]
        outcome = StepOutcome(step, end - prev, mean_reward, len(m.batch or ()), len(m.deferred))
        self.state = self.policy.update(self.state, outcome)
        self.version += 1
        return outcome

    def restarted(self) -> None:
        """The run was resumed from a checkpoint: the next step's time starts at its own start."""
        self.last_end = None

    # -- the window of groups in flight (overlapping plans) ------------------------------------------
    def window_free(self, plan: StepPlan) -> int:
        """Groups a step under ``plan`` may start now: B x k in flight across the steps generating."""
        return max(0, self.batch * plan.max_staleness - self.in_window)

    def group_done(self) -> list[Action]:
        """A group under an overlapping plan finished: its slot goes to the earliest step still waiting to admit
        (its launches, noted under that step)."""
        self.in_window -= 1
        for t in sorted(self.open):
            m = self.open[t]
            if m.to_admit and not m.ended:
                return self.note(t, m.admit_waiting())
        return []

    # -- samples --------------------------------------------------------------------------------
    def new_sample(self, step: int) -> int:
        sid = self.next_sid
        self.next_sid += 1
        self.tracks[sid] = Track(sid, step, self.version, self.target_of(sid, step))
        return sid

    def take_deferred(self) -> list[int]:
        out, self.deferred = self.deferred, []
        return out

    def defer(self, sids: Iterable[int]) -> None:
        self.deferred.extend(sids)

    def drop(self, sids: Sequence[int], trimmed: bool = False) -> None:
        """Dynamic sampling dropped this group (``trimmed``: kept, then discarded beyond B): it is never
        trained (its tracks are forgotten)."""
        (self.trimmed if trimmed else self.dropped).extend(sids)
        for sid in sids:
            del self.tracks[sid]

    def take_ready(self, n: int, step: int | None = None) -> tuple[int, ...]:
        """The first ``n`` finished samples not trained yet (``step``: of those that step admitted)."""
        if step is None:
            out, self.ready = tuple(self.ready[:n]), self.ready[n:]
            return out
        own = [s for s in self.ready if self.tracks[s].admit_step == step][:n]
        taken = set(own)
        self.ready = [s for s in self.ready if s not in taken]
        return tuple(own)

    @property
    def admitted_total(self) -> int:
        return self.next_sid

    def in_flight(self) -> int:
        """Admitted samples not trained yet (deferred, finished, generating or in a batch in training)."""
        return len(self.tracks)

    # -- conservation ---------------------------------------------------------------------------
    def check_conservation(self, step: int) -> Conservation:
        """Account for every admitted sample once step ``step`` has trained (before :meth:`complete` forgets
        its batch). Each state is read from the container that holds it: this step's batch, the formed
        batches of later steps, what a step not stopped yet has generating or paused, the deferred and the
        finished-but-untrained lists — never from the number of tracks, which only names the admitted
        samples not trained yet. Checks (a) each of those is in exactly one state and nothing else is,
        (b) every sample deferred at the end of step - 1 was resumed by step (a step resumes *every* deferred
        sample at its start; one that still does not finish is deferred again at its end, it is never carried
        without being resumed), (c) admitted = trained + the other states."""
        held: dict[str, list[int]] = {k: [] for k in STATES}
        held["deferred"], held["ready"] = list(self.deferred), list(self.ready)
        for t, m in self.open.items():
            if m.batch is not None:
                held["trained" if t == step else "in_batch"].extend(m.batch)
            else:
                held["generating"].extend(m.active)
                held["paused"].extend(m.paused)
                for sids in m.waiting.values():
                    held["waiting"].extend(sids)
        seen: dict[int, int] = {}
        for k, sids in held.items():
            for sid in sids:
                seen[sid] = seen.get(sid, 0) + 1
        split = self._split_groups(held)
        held["dropped"], held["trimmed"] = list(self.dropped), list(self.trimmed)  # forgotten by the tracks: counted
        tracks = self.tracks
        lost = tuple(sorted(s for s in tracks if s not in seen))
        duplicated = tuple(sorted(s for s, n in seen.items() if n > 1))
        stray = tuple(sorted(s for s in seen if s not in tracks))
        prev, cur = self._decision(step - 1), self._decision(step)
        resumed = set(cur.resumed) if cur is not None else set()
        # a finished member of a deferred group is carried without a launch: it waits for its group
        # (or dropped since, with its group)
        gone = set(prev.dropped) | set(cur.dropped) if prev is not None and cur is not None else set(self.dropped)
        unresumed = tuple(s for s in (prev.deferred if prev is not None else ()) if s not in resumed
                          and not (tracks[s].finished if s in tracks else s in gone))
        n = {k: len(v) for k, v in held.items()}
        trained_total = self.trained_total + n["trained"]
        adds_up = self.next_sid == trained_total + sum(n[k] for k in STATES[1:])
        return Conservation(step, self.next_sid, trained_total, *(n[k] for k in STATES), lost, duplicated, stray,
                            unresumed, split, adds_up and not (lost or duplicated or stray or unresumed or split))

    def _split_groups(self, held: Mapping[str, list[int]]) -> tuple[int, ...]:
        """Groups whose members are not all in one state (a step's generating, paused and waiting members
        are one state of the group: generating in that step)."""
        n = self.group_size
        if n == 1:
            return ()
        state_of: dict[int, set[str]] = {}
        for k, sids in held.items():
            key = "generating" if k in ("paused", "waiting") else k
            for sid in sids:
                state_of.setdefault(sid // n, set()).add(key)
        return tuple(sorted(g for g, states in state_of.items() if len(states) > 1))

    def conservation_frame(self):
        import pandas as pd

        rows = [tuple(getattr(c, f) for f in CONSERVATION_FIELDS) for c in self.conservation]
        return pd.DataFrame(rows, columns=list(CONSERVATION_FIELDS))

    # -- decisions ------------------------------------------------------------------------------
    def record(self, m: StepMachine) -> None:
        batch = m.batch or ()
        self.decisions.append(StepDecisions(
            m.step, tuple(m.admitted), tuple(m.resumed), m.deferred, batch, m.plan.delta, m.plan.chunk,
            tuple(m.step - self.tracks[s].admit_version for s in batch), m.rounds, tuple(m.dropped), tuple(m.trimmed),
        ))

    def decision(self, step: int) -> StepDecisions:
        d = self._decision(step)
        if d is None:
            raise KeyError(f"no decisions recorded for step {step}")
        return d

    def _decision(self, step: int) -> StepDecisions | None:
        return next((d for d in reversed(self.decisions) if d.step == step), None)

    def decisions_frame(self):
        import pandas as pd

        rows = [tuple(getattr(d, f) for f in DECISION_FIELDS)  # in step order (asdict deep-copies)
                for d in sorted(self.decisions, key=lambda d: d.step)]
        return pd.DataFrame(rows, columns=list(DECISION_FIELDS))

    # -- checkpoints ----------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The run so far: the completed steps, and the open steps whose batch is training (``async``) —
        :meth:`load_json` re-opens those, so their training is done again and completed in order."""
        return {
            "open": [m.to_json() for m in self.open.values()],
            "state": asdict(self.state), "version": self.version, "next_sid": self.next_sid,
            "tracks": [t.to_json() for t in self.tracks.values()], "deferred": self.deferred, "ready": self.ready,
            "dropped": self.dropped, "trimmed": self.trimmed,
            "decisions": [asdict(d) for d in self.decisions], "trained_total": self.trained_total,
            "conservation": [asdict(c) for c in self.conservation],
        }

    def load_json(self, doc: Mapping) -> None:
        ps = doc["state"]
        self.state = PolicyState(delta=ps["delta"], chunk=ps["chunk"], rewards=tuple(ps["rewards"]),
                                 tune_trials=tuple(tuple(x) for x in ps["tune_trials"]))
        self.version, self.next_sid = doc["version"], doc["next_sid"]
        self.tracks = {d["sid"]: Track.from_json(d) for d in doc["tracks"]}
        self.deferred, self.ready = list(doc["deferred"]), list(doc["ready"])
        self.dropped, self.trimmed = list(doc.get("dropped", ())), list(doc.get("trimmed", ()))
        self.decisions = [StepDecisions(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
                          for d in doc["decisions"]]
        self.conservation = [Conservation(**{"waiting": 0, "dropped": 0, "trimmed": 0, "split": (),  # (older checkpoints)
                                             **{k: tuple(v) if isinstance(v, list) else v for k, v in c.items()}})
                             for c in doc.get("conservation", ())]  # (checkpoints written before it had none)
        self.trained_total = doc["trained_total"]
        self.open = {d["step"]: StepMachine.from_json(self, d) for d in doc.get("open", ())}
        self.restarted()
