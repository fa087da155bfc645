"""The generation engine's sleep and wake where it takes turns with the roles sharing its GPUs: charged
only where the placement needs it, per vLLM sleep level, visible per step; and a policy that generates
beside training (async) on a shared pool is planned resident or refused."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import Placement, Pool, colocated_placement, disaggregated_placement, paper_placement
from oppo_sim.core.policies import make_policy
from oppo_sim.explore.plan import EvalTask, evaluate
from oppo_sim.explore.space import Candidate, PlacementSpec, PolicySpec
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.hw.costs.sleepwake import PAGEABLE_COPY, PINNED_COPY, sleep_wake
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits, colocation, fit_for_policy, sleep_wake_of
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.trace import Trace

TRACE = Trace.from_arrays([200, 300, 150, 400] * 6, [120, 900, 60, 300, 1500, 80] * 4, name="sw")
SMALL = SimConfig(steps=3, batch=8, max_response=2048)  # the paper's setup: 7B actor and reward, 7+1 H200
GEN_ONLY = Placement((Pool("gen", 4), Pool("train", 4)), generate="gen", reward="train", reference="train",
                     critic="train", logprob="train", train="train")


def _charge(cfg: SimConfig) -> float:
    return sleep_wake_of(cfg, check_fits(cfg, 2048 + 400, 2048)).step_s


@pytest.mark.parametrize("placement, charged", [
    (paper_placement(), True), (colocated_placement(), True),
    (disaggregated_placement(), False), (GEN_ONLY, False),
], ids=["paper", "colocated", "disaggregated", "generation-only-pool"])
def test_charged_only_where_generation_takes_turns(placement, charged):
    cfg = replace(SMALL, placement=placement)
    res = simulate(TRACE, "baseline", cfg)
    sw = res.steps["sleep_wake_s"]
    tl = res.timeline
    gen = placement.generate
    if charged:
        assert (sw > 0).all() and res.summary["sleep_level"] == 1 and res.summary["sleep_wake_s"] == sw.iloc[0]
        for act in ("sleep", "wake"):  # one of each per step, on the generation pool
            rows = tl[tl["activity"] == act]
            assert list(rows["step"]) == list(range(cfg.steps)) and set(rows["pool"]) == {gen}
    else:
        assert (sw == 0).all() and res.summary["sleep_level"] is None
        assert not tl["activity"].isin(["sleep", "wake"]).any()


RESIDENT = replace(SMALL, colocate="resident", engine=replace(SMALL.engine, gpu_memory_utilization=0.6))
"""Everything resident: the engine's share lowered so the trainer fits beside it (at 0.9 it would not)."""


def test_resident_charges_nothing_and_sleeping_costs_step_time():
    asleep = simulate(TRACE, "oppo", SMALL)
    resident = simulate(TRACE, "oppo", RESIDENT)
    assert (resident.steps["sleep_wake_s"] == 0).all() and resident.summary["sleep_level"] is None
    assert sleep_wake_of(RESIDENT, check_fits(RESIDENT)) is None
    # oppo streams to the score pool: nothing there hides the sleep, and the wake is always exposed
    assert asleep.summary["step_time_s"] > resident.summary["step_time_s"]


def test_level_1_moves_the_engine_weights_level_2_does_not():
    cfg = SMALL
    report = check_fits(cfg)
    pool, hw = report.pool("main"), get_hardware("h200")
    one, two = sleep_wake(pool, hw, 1), sleep_wake(pool, hw, 2)
    w = get_model("qwen2.5-7b").weight_bytes()
    assert one.engine_bytes == pytest.approx(w) and two.engine_bytes == 0.0
    assert one.state_bytes == two.state_bytes > 0
    to_host, from_host = (PINNED_COPY.rate(d, hw.gpu.host_bw) for d in ("to_host", "from_host"))
    assert one.step_s - two.step_s == pytest.approx(w / to_host + w / from_host, rel=1e-12)  # fixed costs the same
    assert _charge(replace(cfg, sleep_level=2)) < _charge(cfg)
    tp2 = replace(SMALL, placement=paper_placement(9), engine=replace(SMALL.engine, tp=2))  # 8 generating GPUs, tp 2
    assert sleep_wake(check_fits(tp2).pool("main"), hw, 1).engine_bytes == pytest.approx(w / 2)
    with pytest.raises(ConfigError, match="sleep_level must be 1"):
        replace(SMALL, sleep_level=3)


def test_step_column_equals_the_hand_computed_formula():
    """Paper setup on 7+1 H200: Qwen2.5-7B actor and critic trained under ZeRO-2 over 7 GPUs, the engine at tp 1."""
    res = simulate(TRACE, "baseline", SMALL)
    assert res.summary["zero_stage"] == 2
    m = get_model("qwen2.5-7b")
    psi, psi_c = m.params, m.params_scalar_head  # actor (lm_head) and critic (value head)
    state = sum(2 * p + 2 * p / 7 + 12 * p / 7 for p in (psi, psi_c))  # bf16 weights, sharded grads and Adam
    engine = 2 * psi  # level 1: bf16 weights over tp 1, out at sleep and back at wake
    h200 = get_hardware("h200")
    assert h200.gpu.host_bw == 64e9
    # a pinned copy: 24.43 GiB/s to the host, 23.54 back on a 32 GB/s link -> those fractions of 64 GB/s
    to_host, from_host = 24.43 * 2**30 / 32e9 * 64e9, 23.54 * 2**30 / 32e9 * 64e9
    step = 4 * 0.05 + (engine + state) * (1 / to_host + 1 / from_host)  # four legs of 50 ms each
    assert res.steps["sleep_wake_s"].to_list() == pytest.approx([step] * SMALL.steps, rel=1e-12)
    wake = res.timeline[res.timeline["activity"] == "wake"]  # nothing shares the pool while it wakes
    assert (wake["end"] - wake["start"]).to_list() == pytest.approx([step / 2] * SMALL.steps, rel=1e-9)  # the mean
    assert res.steps["sync_s"].max() < 0.2  # the sync column stays the weight sync alone


def test_pageable_optimizer_moves_price_the_adam_state_at_the_measured_rates():
    """NeMo RL's move_optimizer: the Adam part of the state leg through pageable memory (1.33 GiB/s to the host, 6.34
    back, no fixed cost), the rest of it and the engine pinned as before."""
    pageable = replace(SMALL, optimizer_move="pageable")
    m = get_model("qwen2.5-7b")
    adam = sum(12 * p / 7 for p in (m.params, m.params_scalar_head))
    base, slow = sleep_wake_of(SMALL, check_fits(SMALL)), sleep_wake_of(pageable, check_fits(pageable))
    assert slow.optimizer_bytes == pytest.approx(adam) and slow.optimizer_copy is PAGEABLE_COPY
    to_host, from_host = (PINNED_COPY.rate(d, 64e9) for d in ("to_host", "from_host"))
    moved_pinned = adam * (1 / to_host + 1 / from_host)
    moved_pageable = adam / (1.33 * 2**30) + adam / (6.34 * 2**30)
    assert slow.step_s - base.step_s == pytest.approx(moved_pageable - moved_pinned, rel=1e-12)
    assert "optimizer state by pageable .to()" in slow.describe()
    assert slow.optimizer_s == pytest.approx(moved_pageable) and base.optimizer_s == 0.0
    assert simulate(TRACE, "baseline", pageable).summary["step_time_s"] > simulate(TRACE, "baseline", SMALL).summary["step_time_s"]
    with pytest.raises(ConfigError, match="optimizer_move must be pinned or pageable"):
        replace(SMALL, optimizer_move="fast")


def test_async_on_a_shared_pool_is_planned_resident():
    policy = make_policy("async")
    cfg, report = fit_for_policy(SMALL, policy)
    assert cfg.colocate == "resident" and report.colocate == "resident" and sleep_wake_of(cfg, report) is None
    kv_sleep = check_fits(SMALL).pool("main").kv_cache
    assert report.pool("main").kv_cache < kv_sleep  # the engine gets what training leaves
    res = simulate(TRACE, policy, SMALL)
    assert res.summary["colocate"] == "resident" and (res.steps["sleep_wake_s"] == 0).all()
    # where generation has its own GPUs nothing changes; and a turn-taking policy keeps sleeping
    apart = replace(SMALL, placement=disaggregated_placement())
    assert colocation(apart, policy) is apart and colocation(SMALL, make_policy("oppo")) is SMALL


def test_async_on_a_shared_pool_that_cannot_hold_everything_is_refused_in_one_line():
    cfg = replace(SMALL, gpu="h100-sxm", actor="qwen2.5-14b")  # 14B engine beside 14B + 7B training state on 80 GB
    check_fits(cfg)  # taking turns it fits
    with pytest.raises(ConfigError) as e:
        fit_for_policy(cfg, make_policy("async"))
    msg = str(e.value)
    assert "\n" not in msg and "--placement disaggregated" in msg and "does not fit" in msg
    with pytest.raises(ConfigError, match="does not fit"):  # the same refusal through simulate
        simulate(TRACE, "async", cfg)
    tight = replace(cfg, gpu="a100-40gb", placement=paper_placement())  # does not fit even taking turns: said plainly
    with pytest.raises(ConfigError) as e:
        fit_for_policy(tight, make_policy("async"))
    assert "disaggregated" not in str(e.value)


def test_planner_charges_sleep_and_plans_async_resident():
    base = replace(SMALL, gpu="h100-sxm", actor="qwen2.5-14b", steps=2)
    shared = PlacementSpec("shared", 7, 7, 1)
    rows = {name: evaluate(EvalTask(Candidate(shared, spec), base, "synthetic:longtail"))
            for name, spec in (("baseline", PolicySpec("baseline")), ("async", PolicySpec("async", staleness=1)))}
    assert rows["baseline"]["status"] == "ok" and rows["baseline"]["sleep_wake_s"] > 0
    assert rows["baseline"]["colocate"] == "sleep"
    assert rows["async"]["status"] == "refused" and "--placement disaggregated" in rows["async"]["reason"]
    split = evaluate(EvalTask(Candidate(PlacementSpec("split", 3, 4, 1), PolicySpec("async", staleness=1)),
                              replace(base, actor="qwen2.5-7b"), "synthetic:longtail"))
    assert split["status"] == "ok" and split["sleep_wake_s"] == 0 and split["colocate"] == ""


def test_sleeping_keeps_runs_conserved_and_deterministic():
    a = simulate(TRACE, "oppo", SMALL)
    b = simulate(TRACE, "oppo", SMALL)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.timeline, b.timeline)
    assert a.conservation["balanced"].all() and list(a.conservation["step"]) == list(range(SMALL.steps))
    # the same samples train whichever level the engine sleeps at: only the times move
    two = simulate(TRACE, "oppo", replace(SMALL, sleep_level=2))
    pd.testing.assert_frame_equal(a.decisions, two.decisions)
    assert (two.steps["end"] < a.steps["end"]).all()


def test_cli_run_shows_the_column_and_takes_the_level(capsys):
    argv = ["run", "--trace", "synthetic:longtail", "--steps", "2", "--batch", "8", "--policy", "baseline"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "sleep_wake_s" in out and "the engine sleeps (vLLM level 1)" in out
    assert main([*argv, "--sleep-level", "2"]) == 0
    assert "the engine sleeps (vLLM level 2)" in capsys.readouterr().out
    assert "through pageable host memory" not in out
    assert main([*argv, "--optimizer-move", "pageable"]) == 0
    assert "s of it the optimizer state through pageable host memory)" in capsys.readouterr().out
