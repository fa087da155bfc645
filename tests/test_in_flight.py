"""Weights refit in flight (``Async(in_flight=True)``, NeMo RL's ``in_flight_weight_updates``): the next step generates
beside the previous one within a window of B x k groups, each step trains the groups it admitted — by the pure step
machine, by the simulator, and refused where it is not modelled."""

from __future__ import annotations

import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.ledger import Ledger
from oppo_sim.core.placement import disaggregated_placement
from oppo_sim.core.policies import Async, make_policy
from oppo_sim.core.protocol import EndGeneration, Launch, Progress
from oppo_sim.core.stepplan import StepContext
from oppo_sim.frameworks.export import Chosen, export
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

from framework_helpers import config_of

ROLES = ("reward", "reference")


def test_the_policy_plans_a_whole_batch_that_overlaps():
    p = Async(staleness=2, in_flight=True)
    plan = p.plan(p.initial_state(), StepContext(3, 8, carried_finished=5))
    assert plan.overlap and plan.admit == 8 and plan.max_staleness == 2
    assert p.label() == "async(k=2, in-flight)" and make_policy("async", in_flight=True) == Async(in_flight=True)
    assert not Async().plan(Async().initial_state(), StepContext(0, 8)).overlap and Async().label() == "async(k=1)"
    with pytest.raises(ConfigError, match="in_flight must be a bool"):
        Async(in_flight="yes")


def _launched(acts) -> list[int]:
    return [a.sid for a in acts if isinstance(a, Launch)]


def test_the_next_step_admits_as_the_window_frees_and_each_step_trains_its_own():
    lengths = {0: 10, 1: 2, 2: 1, 3: 1}  # step 0's first response is its straggler
    ledger = Ledger(Async(in_flight=True), 2, ROLES, (), lambda sid, step: lengths[sid])
    m0 = ledger.begin(0, ledger.plan(0))
    assert _launched(m0.start()) == [0, 1] and ledger.in_window == 2
    assert ledger.may_start(1)  # the staleness gate is open at version 0 ...
    m1 = ledger.begin(1, ledger.plan(1))
    assert _launched(m1.start()) == [] and m1.to_admit == 2 and not m1.ended  # ... but the window is full
    acts = m0.report([Progress(1, 2, True)])  # a step-0 group completes: its slot goes to step 1
    assert _launched(acts) == [2] and ledger.tracks[2].admit_step == 1 and m1.to_admit == 1
    acts = m1.report([Progress(2, 1, True)])  # step 1's own group completes: it takes the slot itself
    assert _launched(acts) == [3] and m1.to_admit == 0 and ledger.in_window == 2
    acts = m1.report([Progress(3, 1, True)])
    assert any(isinstance(a, EndGeneration) for a in acts) and not m0.ended  # step 1 ended before step 0
    m1.stopped({})
    assert m1.batch == (2, 3) and ledger.ready == [1]  # its own, though step 0's sid 1 finished first
    assert any(isinstance(a, EndGeneration) for a in m0.report([Progress(0, 10, True)]))
    m0.stopped({})
    assert m0.batch == (1, 0) and ledger.in_window == 0
    for m in (m0, m1):
        for role in ROLES:
            ledger.scored(role, m.batch)
    assert ledger.complete(0, 0.0, 1.0, 0.0).trained == 2 and ledger.complete(1, 1.0, 2.0, 0.0).trained == 2
    assert [d.staleness for d in ledger.decisions] == [(1, 1), (0, 0)]  # (recorded as each batch formed: 1, then 0)


def _trace():
    return generate_longtail(LongTailSpec(cap=2048), 400, seed=3, name="in_flight")


def _cfg(**kw) -> SimConfig:
    return SimConfig(batch=8, steps=6, gpu="h100-sxm", actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", max_response=2048,
                     placement=disaggregated_placement(4, 3, 1), **kw)


def test_simulated_steps_train_what_they_admitted_and_repeat_exactly():
    res = simulate(_trace(), Async(in_flight=True), _cfg())
    steps = res.steps
    assert len(steps) == 6 and (steps["step_time_s"] > 0).all()
    assert res.summary["in_flight_end"] == 0  # every admitted sample trained (conservation is checked every step)
    again = simulate(_trace(), Async(in_flight=True), _cfg())
    assert again.steps.equals(steps)
    # generation of step t+1 starts before step t's ends somewhere in the run (it is not drained first)
    starts, ends = steps["start"].to_numpy(), (steps["start"] + steps["generation_s"]).to_numpy()
    assert (starts[1:] < ends[:-1]).any()


def test_each_step_reports_its_own_staleness_and_generation_though_batches_form_out_of_order():
    res = simulate(_trace(), Async(in_flight=True, staleness=3), _cfg())
    d = res.decisions
    assert list(d["step"]) == sorted(d["step"])  # in step order, though batches form out of it here (k = 3)
    assert list(res.steps["staleness_max"]) == [max(s) for s in d["staleness"]] and res.steps["staleness_max"].max() <= 3
    gen = res.timeline[res.timeline["activity"] == "generate"]
    assert (gen["step"] == 0).any()  # an iteration goes to the earliest step still generating


def test_refused_where_it_is_not_modelled():
    with pytest.raises(ConfigError, match="dynamic sampling"):
        simulate(_trace(), Async(in_flight=True), _cfg(algorithm=config_of("--algorithm", "dapo", "--n", "2").algorithm))
    from oppo_real.executor.real_driver import Driver

    with pytest.raises(ConfigError, match="simulated only"):
        Driver(_real_cfg(), Async(in_flight=True), None, {"gen": None, "train": None, "score": None})
    from oppo_real.executor.runner import run_real

    with pytest.raises(ConfigError, match="simulated only"):  # before a worker starts
        run_real(_real_cfg(), Async(in_flight=True))


def _real_cfg():
    from oppo_real.config import RealConfig

    return RealConfig()


def test_exports_write_or_name_the_refit_in_flight():
    cfg = config_of("--algorithm", "grpo", "--n", "4", "--reward", "rule", "--batch", "16", "--placement",
                    "gen-apart 4+4", "--devices", "8")
    nemo = export(cfg, "nemo-rl", Chosen("async(k=1, in-flight)"))
    assert "in_flight_weight_updates: true" in nemo and "async_engine: true" in nemo
    drained = export(cfg, "nemo-rl", Chosen("async(k=1)"))
    assert "in_flight_weight_updates: false" in drained and "plan with --in-flight-weight-updates" in drained
    for framework in ("verl", "openrlhf"):
        assert "# the plan refits the weights in flight" in export(cfg, framework, Chosen("async(k=1, in-flight)"))
        assert "in flight" not in export(cfg, framework, Chosen("async(k=1)"))
