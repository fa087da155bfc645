"""Decision parity: the simulator's driver and the real executor's driver, fed the same scripted event
stream, take identical decisions — action for action, step for step — for every policy.

The script: forced response lengths from one trace; engines that decode in lockstep (every running
request gains one token per iteration; the simulator's vLLM-style engine without KV pressure, and a
scripted actor backend behind the real generation worker); the same per-step wall times and rewards
(a policy wrapper hands both drivers' controllers the scripted values, so chunk-autotune and the Δ
rule see the same inputs). The real driver runs its real workers' code paths (generation worker with
its report marks, the driver's action handling) on workers that do no model work.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import pytest

from oppo_real.config import RealConfig
from oppo_real.executor.real_driver import Driver
from oppo_real.workers.gen import GenWorker, GenWorkerConfig
from oppo_real.workers.handles import LocalHandle
from oppo_real.workers.null import NullScoreWorker, NullTrainWorker
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.ledger import Ledger
from oppo_sim.core.placement import Placement, Pool
from oppo_sim.core.policies import Policy, make_policy
from oppo_sim.core.protocol import (
    Emit,
    EndGeneration,
    FormBatch,
    Launch,
    Pause,
    ScoreWhole,
    Train,
)
from oppo_sim.core.stepplan import PolicyState, StepContext, StepOutcome, StepPlan
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.traces.trace import Trace

B, STEPS, CAP = 4, 8, 200
PPO = Algorithm()
LENGTHS = [5, 9, 7, 70, 6, 11, 8, 4, 90, 10, 6, 8, 120, 5, 7, 9, 12, 6, 60, 8, 3, 14, 7, 45, 33, 2, 17, 80]


@dataclass(frozen=True)
class Scripted(Policy):
    """``inner``, whose controller sees scripted step times and rewards instead of measured ones."""

    inner: Policy = None
    name: ClassVar[str] = "scripted"

    def initial_state(self) -> PolicyState:
        return self.inner.initial_state()

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return self.inner.plan(state, ctx)

    def update(self, state: PolicyState, outcome: StepOutcome) -> PolicyState:
        t = outcome.step
        chunk = state.chunk or 0
        scripted = replace(outcome, step_time_s=1.0 + abs(chunk - 16) / 100.0,  # C=16 is the fastest
                           mean_reward=[0.1, 0.2, 0.3, 0.35, 0.3, 0.2, 0.1, 0.05, 0.0, 0.0][t % 10])
        return self.inner.update(state, scripted)


POLICIES = {
    "baseline": make_policy("baseline"),
    "stream": make_policy("stream"),
    "intra": make_policy("intra", chunk=8),
    "inter": make_policy("inter", delta=3),
    "dynamic-delta": make_policy("dynamic-delta", delta=2),
    "oppo": make_policy("oppo", chunk=8, delta=2),
    "chunk-autotune": make_policy("chunk-autotune", chunk=8, candidates=(8, 16, 32), every=4),
    "partial-rollout": make_policy("partial-rollout", budget=16, delta=1),
    "async": make_policy("async", staleness=1),
}


# -- the real driver on scripted engines -----------------------------------------------------------------
def real_actions(policy: Policy, trace: Trace, algorithm: Algorithm = PPO) -> list:
    return real_ledger(policy, trace, algorithm).log


def real_ledger(policy: Policy, trace: Trace, algorithm: Algorithm = PPO, trace_rewards: bool = False) -> Ledger:
    cfg = RealConfig(batch=B, steps=STEPS, backend="torch", workers="inline", max_response=CAP, main_cores=None,
                     score_cores=None, algorithm=algorithm)
    handles = {
        "gen": LocalHandle("gen", GenWorker, GenWorkerConfig(actor="unused", backend="lockstep")),
        "score": LocalHandle("score", NullScoreWorker),
        "train": LocalHandle("train", NullTrainWorker),
    }
    d = Driver(cfg, policy, trace, handles)
    # the lockstep engine's responses are all alike, so their rule rewards are all equal: the real driver
    # reports no rewards with its finishes here, as the simulator draws none — or, with trace_rewards, the
    # trace's reward column, the rewards the simulator reads (the dapo parity test with drops)
    d.report_rewards = trace_rewards
    if trace_rewards:
        d._finish_reward = lambda step, sid: float(trace.reward[sid % len(trace)])
    d.ledger.log = []
    while d.step < STEPS:
        d.run_step()
    d.drain()
    return d.ledger


# -- the simulator ----------------------------------------------------------------------------------------
def sim_actions(policy: Policy, trace: Trace, algorithm: Algorithm = PPO) -> list:
    return sim_ledger(policy, trace, algorithm).log


def sim_ledger(policy: Policy, trace: Trace, algorithm: Algorithm = PPO) -> Ledger:
    cfg = SimConfig(batch=B, steps=STEPS, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu="h100-sxm", ppo_epochs=4,
                    placement=Placement((Pool("main", 1), Pool("score", 1)), reward="score", reference="score"),
                    max_response=CAP, algorithm=algorithm)
    p = Pipeline(cfg, trace, policy)
    p.ledger.log = []
    p.run()
    return p.ledger


def by_step(log: list) -> dict[int, list]:
    out: dict[int, list] = {}
    for step, a in log:
        out.setdefault(step, []).append(a)
    return out


@pytest.mark.parametrize("name", list(POLICIES))
def test_simulator_and_executor_take_identical_decisions(name):
    trace = Trace.from_arrays([12] * len(LENGTHS), LENGTHS, name="parity")
    policy = Scripted(inner=POLICIES[name])
    sim, real = by_step(sim_actions(policy, trace)), by_step(real_actions(policy, trace))
    assert sorted(sim) == sorted(real) == list(range(STEPS))
    for t in range(STEPS):
        assert sim[t] == real[t], f"{name}: step {t} differs"


def test_the_script_exercises_every_kind_of_decision():
    """The scripted stream is not trivial: across the policies it produces every action kind."""
    trace = Trace.from_arrays([12] * len(LENGTHS), LENGTHS, name="parity")
    kinds = set()
    for pol in POLICIES.values():
        kinds |= {type(a) for _, a in sim_actions(Scripted(inner=pol), trace)}
    assert kinds >= {Launch, Emit, Pause, EndGeneration, FormBatch, ScoreWhole, Train}
    resumed = [a for _, a in sim_actions(Scripted(inner=POLICIES["oppo"]), trace) if isinstance(a, Launch) and not a.fresh]
    assert resumed, "oppo must resume deferred requests in this script"


@pytest.mark.parametrize("name", list(POLICIES))
def test_both_drivers_conserve_every_sample(name):
    """Both drivers' ledgers account for every sample at every step (a step that does not balance raises);
    a synchronous plan's accounting is the same in both (an asynchronous one's depends on when each
    driver's training finishes relative to the next step's generation)."""
    trace = Trace.from_arrays([12] * len(LENGTHS), LENGTHS, name="parity")
    policy = Scripted(inner=POLICIES[name])
    sim, real = sim_ledger(policy, trace).conservation, real_ledger(policy, trace).conservation
    assert [r.step for r in sim] == [r.step for r in real] == list(range(STEPS))
    assert all(r.balanced for r in sim + real)
    if name != "async":
        assert sim == real


ALGORITHMS = {
    "grpo": Algorithm("grpo", n=2),
    "rloo-rule": Algorithm("rloo", n=3, reward="rule"),
    "reinforce++-no-kl": Algorithm("reinforce++", n=2, kl=False),
    "grpo-n1": Algorithm("grpo"),
    "dapo": Algorithm("dapo", n=2, reward="rule"),
    "dapo-rounds-of-6": Algorithm("dapo", n=2, reward="rule", gen_batch_size=6),  # B = 4: a synchronous step trims 2
}


@pytest.mark.parametrize("alg", list(ALGORITHMS))
@pytest.mark.parametrize("name", list(POLICIES))
def test_both_drivers_take_identical_decisions_for_every_algorithm(alg, name):
    """Groups (admission, batch, deferral of whole groups), the algorithm's roles and the rule reward: the
    same decisions in both drivers. dapo here drops nothing: the real driver is told not to report rewards
    with its finishes (``Driver.report_rewards``, ``Progress.reward``), so neither driver has a group to drop
    (the simulator's draw is informative when no fraction is stated); drops in both drivers:
    test_dapo_drops_the_same_groups_in_both_drivers."""
    trace = Trace.from_arrays([12] * len(LENGTHS), LENGTHS, name="parity")
    policy, algorithm = Scripted(inner=POLICIES[name]), ALGORITHMS[alg]
    sim, real = sim_ledger(policy, trace, algorithm), real_ledger(policy, trace, algorithm)
    a, b = by_step(sim.log), by_step(real.log)
    assert sorted(a) == sorted(b) == list(range(STEPS))
    for t in range(STEPS):
        assert a[t] == b[t], f"{alg} {name}: step {t} differs"
    n = algorithm.group_size
    assert all(len(d.trained) == B * n for d in sim.decisions)
    assert all(r.balanced and not r.split for r in sim.conservation + real.conservation)
    if name != "async":
        assert sim.conservation == real.conservation


@pytest.mark.parametrize("gen_batch", [None, 3, 6])
@pytest.mark.parametrize("name", list(POLICIES))
def test_dapo_drops_the_same_groups_in_both_drivers(name, gen_batch):
    """Dynamic sampling with drops, in rounds of ``gen_batch`` prompts (None: B): both drivers see the same
    rewards (the trace's reward column, which the simulator reads and the real driver is handed in place of
    its rule), drop the same all-equal groups, run the same rounds, trim or defer the same groups and take
    identical decisions."""
    rewards = [float(i % 3 == 0) for i in range(len(LENGTHS))]  # pairs (4,5), (10,11), ... are all-equal
    trace = Trace.from_arrays([12] * len(LENGTHS), LENGTHS, name="parity", reward=rewards)
    policy, algorithm = Scripted(inner=POLICIES[name]), Algorithm("dapo", n=2, reward="rule", gen_batch_size=gen_batch)
    sim, real = sim_ledger(policy, trace, algorithm), real_ledger(policy, trace, algorithm, trace_rewards=True)
    a, b = by_step(sim.log), by_step(real.log)
    assert sorted(a) == sorted(b) == list(range(STEPS))
    for t in range(STEPS):
        assert a[t] == b[t], f"dapo {name}: step {t} differs"
    assert sim.dropped and sorted(sim.dropped) == sorted(real.dropped) and sim.trimmed == real.trimmed
    assert [(d.rounds, d.dropped, d.trimmed) for d in sim.decisions] == [(d.rounds, d.dropped, d.trimmed) for d in real.decisions]
    rounds = [d.rounds for d in sim.decisions]
    if POLICIES[name].plan(POLICIES[name].initial_state(), StepContext(0, B)).end_after is None:  # verl's synchronous step
        assert sim.trimmed and (max(rounds) > 1 or gen_batch == 6)  # further rounds (rounds of 6 > B: one) and a surplus
    assert all(r.balanced for r in sim.conservation + real.conservation)
    assert all(len(set(rewards[s % len(rewards)] for s in d.trained[i:i + 2])) == 2
               for d in sim.decisions for i in range(0, len(d.trained), 2))


@pytest.mark.parametrize("alg", ["ppo", "grpo"])
@pytest.mark.parametrize("name", list(POLICIES))
def test_both_drivers_replay_a_stepped_trace_alike(alg, name):
    """A trace with a ``step`` column: both drivers take each step's rows from its trace step
    (oppo_sim.traces.rowmap: one rule), so they take identical decisions; the steps here have 5 rows, fewer
    than a step admits (cycled), and are listed out of order in the file."""
    steps = [(7 * i) % 5 for i in range(len(LENGTHS) - 3)]  # 5 trace steps, rows interleaved
    trace = Trace.from_arrays([12] * len(steps), LENGTHS[:len(steps)], step=steps, name="stepped")
    policy, algorithm = Scripted(inner=POLICIES[name]), (PPO if alg == "ppo" else Algorithm("grpo", n=2))
    sim, real = sim_ledger(policy, trace, algorithm), real_ledger(policy, trace, algorithm)
    a, b = by_step(sim.log), by_step(real.log)
    assert sorted(a) == sorted(b) == list(range(STEPS))
    for t in range(STEPS):
        assert a[t] == b[t], f"{alg} {name}: step {t} differs"
    unstepped = sim_ledger(policy, Trace.from_arrays([12] * len(steps), LENGTHS[:len(steps)], name="flat"), algorithm)
    assert by_step(unstepped.log) != a  # the step column changed what was replayed
