"""Conservation, observed: every admitted sample is trained exactly once or in exactly one state, each
state read from the container that holds it (:meth:`oppo_sim.core.ledger.Ledger.check_conservation`),
and every sample deferred at a step's end is resumed by the next step — checked at every step of
random runs of every policy, by the simulator and by a scripted lockstep driver, and shown to fail when
a sample is planted lost, held twice or forgotten."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Callable, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oppo_sim.core.ledger import STATES, ConservationError, Ledger
from oppo_sim.core.policies import POLICY_NAMES, Inter, PartialRollout, Policy, make_policy
from oppo_sim.core.stepplan import PolicyState, StepContext, StepPlan
from oppo_sim.core.protocol import Launch, Progress
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.trace import Trace

ROLES, STREAMED = ("reward", "reference"), ("reward",)


@dataclass(frozen=True)
class AsyncPartial(Policy):
    """Partial rollout under a staleness bound of 1: the one plan where a step can train while the next
    one has requests paused (not one of the shipped policies; it reaches the ``paused`` state)."""

    budget: int = 4
    name: ClassVar[str] = "async-partial"

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return replace(PartialRollout(budget=self.budget).plan(state, ctx), max_staleness=1)


def policy_of(name: str, chunk: int, delta: int, budget: int, staleness: int) -> Policy:
    if name == "async-partial":
        return AsyncPartial(budget=budget)
    return make_policy(name, chunk=chunk, delta=delta, budget=budget, staleness=staleness,
                       candidates=(chunk, 2 * chunk), every=3)


# -- a scripted lockstep driver: every generating request gains one token per report ------------------------
def drive(policy: Policy, lengths: list[int], batch: int, steps: int, train_after: Callable[[int], int] = lambda t: 0,
          between: Callable[[Ledger, int], None] | None = None) -> Ledger:
    """Run ``steps`` steps on a bare ledger. A step's training completes once the next step has made
    ``train_after(t)`` reports (or earlier, when the staleness gate needs it); ``between(ledger, t)`` runs
    after step t's generation stopped (a place to plant a bug)."""
    ledger = Ledger(policy, batch, ROLES, STREAMED, lambda sid, step: lengths[sid % len(lengths)])
    ledger.log = []
    training: list[int] = []

    def complete() -> None:
        ledger.complete(training.pop(0), 0.0, 1.0, 0.0)

    for t in range(steps):
        while not ledger.may_start(t):
            complete()
        m = ledger.begin(t, ledger.plan(t))
        m.start()
        reports = 0
        while not m.ended:
            if training and reports == train_after(t):
                complete()  # a training finishes while this step generates
            tracks = ledger.tracks
            m.report([Progress(s, tracks[s].generated + 1, tracks[s].generated + 1 >= tracks[s].target) for s in m.active])
            reports += 1
        m.stopped({s: ledger.tracks[s].generated for s in m.active})
        for role in ROLES:
            ledger.scored(role, m.batch)
        assert m.trained
        training.append(t)
        if between is not None:
            between(ledger, t)
    while training:
        complete()
    return ledger


def assert_conserved(ledger_rows, decisions, batch: int, steps: int) -> None:
    """What the conservation table and the decisions table must show for a run that finished."""
    rows = list(ledger_rows)
    assert [r.step for r in rows] == list(range(steps))
    for r in rows:
        assert r.balanced, r.describe()
        assert r.trained == batch and r.trained_total == batch * (r.step + 1)
        assert r.admitted_total == r.trained_total + sum(getattr(r, k) for k in STATES[1:])
    d = {x.step: x for x in decisions}
    admitted = [s for t in range(steps) for s in d[t].admitted]
    trained = [s for t in range(steps) for s in d[t].trained]
    assert len(set(admitted)) == len(admitted) and len(set(trained)) == len(trained) and set(trained) <= set(admitted)
    for t in range(steps):
        assert len(set(d[t].resumed)) == len(d[t].resumed)  # each resumed once per step
        if t:  # every sample deferred at t - 1's end is resumed at t's start, in deferral order
            assert d[t].resumed[:len(d[t - 1].deferred)] == d[t - 1].deferred
    last = rows[-1]  # the run is over: what is not trained is deferred or finished, waiting
    assert last.in_batch == last.generating == last.paused == 0
    assert len(set(admitted) - set(trained)) == last.deferred + last.ready
    assert set(d[steps - 1].deferred) <= set(admitted) - set(trained)


NAMES = (*POLICY_NAMES, "async-partial")
lengths = st.lists(st.integers(1, 40), min_size=1, max_size=12)
knobs = dict(batch=st.integers(1, 5), delta=st.integers(0, 4), chunk=st.integers(1, 12), budget=st.integers(1, 10),
             staleness=st.integers(1, 2))


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=100, deadline=None)
@given(lengths=lengths, steps=st.integers(1, 6), train_after=st.lists(st.integers(0, 8), min_size=1, max_size=6), **knobs)
def test_scripted_runs_conserve_every_sample(name, lengths, steps, train_after, batch, delta, chunk, budget, staleness):
    policy = policy_of(name, chunk, delta, budget, staleness)
    ledger = drive(policy, lengths, batch, steps, lambda t: train_after[t % len(train_after)])
    assert_conserved(ledger.conservation, ledger.decisions, batch, steps)


SIM = SimConfig(steps=4, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu="h100-sxm", ppo_epochs=1)


@pytest.mark.parametrize("name", POLICY_NAMES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 300)), min_size=1, max_size=24), **knobs)
def test_simulated_runs_conserve_every_sample(name, rows, batch, delta, chunk, budget, staleness):
    trace = Trace.from_arrays([r[0] for r in rows], [r[1] for r in rows], name="hyp")
    cfg = replace(SIM, batch=batch)
    p = Pipeline(cfg, trace, policy_of(name, 8 * chunk, delta, 16 * budget, staleness))
    p.run()
    assert_conserved(p.ledger.conservation, p.ledger.decisions, batch, cfg.steps)


def test_simulate_carries_the_table():
    r = simulate(Trace.from_arrays([20] * 8, [5, 400, 30, 60, 700, 10, 90, 20], name="t"), Inter(delta=3),
                 replace(SIM, batch=3))
    c = r.conservation
    assert list(c["step"]) == list(range(SIM.steps)) and c["balanced"].all()
    assert (c["deferred"] > 0).any()  # the table counts real carried work, not zeros
    assert (c["admitted_total"] == c["trained_total"] + c[list(STATES[1:])].sum(axis=1)).all()


def test_every_state_is_reached():
    """The scripted runs put samples in every state the table counts (at some step)."""
    seen = set()
    for name, train_after in (("async-partial", 3), ("async", 2), ("async", 1000), ("inter", 0)):
        ledger = drive(policy_of(name, 4, 3, 3, 1), [3, 30, 7, 50, 2, 9], 2, 5, lambda t, k=train_after: k)
        seen |= {k for r in ledger.conservation for k in STATES if getattr(r, k)}
    assert seen == set(STATES) - {"waiting", "dropped", "trimmed"}  # states of groups only (tests/test_groups.py)


# -- planted bugs: the check can fail ---------------------------------------------------------------------
TRACE = Trace.from_arrays([20] * 8, [5, 400, 30, 60, 700, 10, 90, 20], name="planted")


def test_a_sample_dropped_from_deferred_fails_the_check(monkeypatch):
    dropped: list[int] = []

    def take_deferred(self):  # the bug: one deferred sample is silently never resumed
        out, self.deferred = self.deferred, []
        if out and not dropped:
            dropped.append(out.pop(0))
        return out

    monkeypatch.setattr(Ledger, "take_deferred", take_deferred)
    p = Pipeline(replace(SIM, batch=3), TRACE, Inter(delta=3))
    with pytest.raises(ConservationError, match=r"lost: \[(\d+)\].*not resumed: \[\1\]") as err:
        p.run()
    (sid,) = dropped
    row = p.ledger.conservation[-1]
    assert row.lost == row.unresumed == (sid,) and not row.balanced and f"step {row.step}:" in str(err.value)
    # the old count (admitted = trained + tracks) cannot see it: the lost sample still has its track
    assert p.ledger.admitted_total == p.ledger.trained_total + p.ledger.in_flight()


def plant(kind: str, kept: list[Ledger]) -> Callable[[Ledger, int], None]:
    def between(ledger: Ledger, t: int) -> None:
        kept[:] = [ledger]
        if t != 0:
            return
        if kind == "ready-dropped":  # a finished sample vanishes from the carried list
            ledger.ready.pop()
        elif kind == "twice":  # a deferred sample is also kept as finished
            ledger.ready.append(ledger.deferred[0])
        elif kind == "forgotten":  # a deferred sample is dropped with its track: nothing names it any more
            del ledger.tracks[ledger.deferred.pop(0)]
    return between


LENGTHS = [3, 3, 3, 3, 40, 40]  # B=2, Δ=4: step 0 trains 0 and 1, keeps 2 and 3 finished, defers 4 and 5


@pytest.mark.parametrize("kind, found", [("ready-dropped", {"lost": (3,)}), ("twice", {"duplicated": (4,)}),
                                         ("forgotten", {})])
def test_planted_losses_fail_the_check(kind, found):
    kept: list[Ledger] = []
    with pytest.raises(ConservationError, match=r"^step 0: 6 admitted vs 2 trained"):
        drive(Inter(delta=4), LENGTHS, 2, 3, between=plant(kind, kept))
    bad = kept[0].conservation[-1]
    assert bad.step == 0 and not bad.balanced
    assert {k: getattr(bad, k) for k in ("lost", "duplicated", "stray", "unresumed") if getattr(bad, k)} == found
    if kind == "forgotten":  # no sample is misplaced, but the counts no longer add up
        assert bad.admitted_total == 6 and bad.trained_total + sum(getattr(bad, k) for k in STATES[1:]) == 5


def test_an_untouched_run_of_the_same_script_balances():
    ledger = drive(Inter(delta=4), LENGTHS, 2, 3)
    assert all(r.balanced for r in ledger.conservation)
    first = ledger.conservation[0]
    assert (first.ready, first.deferred, ledger.decision(0).deferred) == (2, 2, (4, 5))


# -- resumed is listed once per step ------------------------------------------------------------------------
def test_a_request_paused_and_refilled_twice_in_one_step_is_resumed_once():
    # B=1, budget 2: sample 0 pauses, a fresh prompt (1) refills it, pauses; then the paused ones take turns
    ledger = drive(PartialRollout(budget=2), [9], 1, 1)
    resumes = [a.sid for t, a in ledger.log if isinstance(a, Launch) and not a.fresh]
    assert resumes.count(0) >= 2 and resumes.count(1) >= 2  # the case: each resumed more than once
    assert ledger.decision(0).resumed == (0, 1)
    assert ledger.decision(0).admitted == (0, 1)


def test_the_table_survives_a_checkpoint():
    ledger = drive(Inter(delta=4), LENGTHS, 2, 3)
    doc = json.loads(json.dumps(ledger.to_json()))
    again = Ledger(Inter(delta=4), 2, ROLES, STREAMED, lambda sid, step: LENGTHS[sid % len(LENGTHS)])
    again.load_json(doc)
    assert again.conservation == ledger.conservation and len(again.conservation) == 3
    del doc["conservation"]  # a checkpoint written before the table existed
    again.load_json(doc)
    assert again.conservation == []


def test_a_checkpoint_holds_a_step_whose_batch_is_training_and_reopens_it():
    """Under async a step's batch can be training when a checkpoint is taken: the ledger writes that open
    step and load_json re-opens it, so completing it after a restart balances as it would have."""
    from oppo_sim.core.stepmachine import StepMachine

    ledger = Ledger(make_policy("async"), 2, ("reward",), (), lambda sid, step: 10)
    m = ledger.begin(0, ledger.plan(0))
    for _ in range(2):
        m.admitted.append(ledger.new_sample(0))
    with pytest.raises(RuntimeError, match="still generating or scoring"):
        ledger.to_json()
    m.batch, m.ended, m.trained = tuple(m.admitted), True, True
    ledger.record(m)
    doc = json.loads(json.dumps(ledger.to_json()))
    again = Ledger(make_policy("async"), 2, ("reward",), (), lambda sid, step: 10)
    again.load_json(doc)
    assert set(again.open) == {0} and isinstance(again.open[0], StepMachine)
    assert again.open[0].batch == m.batch and again.open[0].plan == m.plan
    again.complete(0, 0.0, 1.0, 0.5)
    assert again.conservation[-1].balanced and again.trained_total == 2 and not again.tracks
