"""The simulator's timeline as each framework's stage timers time it (oppo_sim.frameworks.stages)."""

from __future__ import annotations

import pandas as pd
import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import colocated_placement, disaggregated_placement
from oppo_sim.core.results import TIMELINE_COLUMNS, SimResult
from oppo_sim.frameworks.stages import FRAMEWORKS, framework_timers, stage_groups, union_seconds
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.trace import Trace


def _made_up() -> SimResult:
    """One step by hand: generate 0-10, sleep 10-12, log-probs 12-15 beside the reference 13-16 (one pool),
    rule reward 12-12.5, actor 16-20, wake 20-21, sync 21-21.5."""
    rows = [("main", 8, "generate", "generate", 0, 0.0, 10.0), ("main", 8, "sleep", "sleep", 0, 10.0, 12.0),
            ("main", 8, "score", "logprob", 0, 12.0, 15.0), ("main", 8, "score", "reference", 0, 13.0, 16.0),
            ("cpu", 4, "score", "rule", 0, 12.0, 12.5), ("main", 8, "train", "actor", 0, 16.0, 20.0),
            ("main", 8, "wake", "wake", 0, 20.0, 21.0), ("main", 8, "sync", "sync", 0, 21.0, 21.5)]
    tl = pd.DataFrame([(*r, 0, 0.0, 0.0) for r in rows], columns=TIMELINE_COLUMNS)
    steps = pd.DataFrame({"step": [0], "start": [0.0], "end": [21.5]})
    return SimResult(steps, tl, {})


def test_each_timer_is_the_union_of_the_intervals_it_covers():
    res = _made_up()
    old = framework_timers(res, "verl-0.7").iloc[0]
    assert old["timing_s/gen"] == 10 + 2 + 1 + 0.5  # generate, sleep, wake, resharding
    assert old["timing_s/old_log_prob"] == 3 and old["timing_s/ref"] == 3 and old["timing_s/reward"] == 0.5
    assert old["timing_s/update_actor"] == 4 and old["timing_s/step"] == 21.5
    assert "timing_s/values" not in old and "timing_s/update_critic" not in old  # no critic: not logged
    new = framework_timers(res, "verl").iloc[0]
    assert new["timing_s/gen"] == 12 and new["timing_s/update_weights"] == 1.5
    nemo = framework_timers(res, "nemo-rl").iloc[0]
    assert nemo["timing/train/policy_and_reference_logprobs"] == 4  # 12-16: the two side by side count once
    assert nemo["timing/train/prepare_for_generation/total"] == 1.5 and nemo["timing/train/generation"] == 12
    orl = framework_timers(res, "openrlhf").iloc[0]
    assert orl["generation"] == 16 and orl["training"] == 5.5 and orl["e2e"] == 21.5  # make_experience 0-16
    new_orl = framework_timers(res, "openrlhf-timing").iloc[0]  # OpenRLHF's own train/timing/* (v0.9.6 on)
    assert new_orl["train/timing/generation"] == 12 and new_orl["train/timing/make_experience"] == 4  # 12-16
    assert new_orl["train/timing/ppo_train"] == 4 and new_orl["train/timing/broadcast"] == 1.5
    assert new_orl["train/timing/step_total"] == 21.5
    assert stage_groups(res, "openrlhf-timing").iloc[0]["scoring"] == 4
    groups = stage_groups(res, "verl-0.7").iloc[0]
    assert (groups["generation"], groups["scoring"], groups["training"]) == (13.5, 6, 4)
    assert pd.isna(stage_groups(res, "openrlhf").iloc[0]["scoring"])  # inside its generation latency
    assert list(framework_timers(res, "trl").columns) == ["step", "step_time"]  # TRL logs no stage: the step alone
    with pytest.raises(ConfigError, match="unknown framework"):
        framework_timers(res, "megatron-lm")
    assert union_seconds(pd.Series([0.0, 1.0, 5.0]).to_numpy(), pd.Series([2.0, 3.0, 6.0]).to_numpy()) == 4.0


def test_timers_of_a_simulated_run_add_up_to_its_steps():
    trace = Trace.from_arrays([100] * 16, [50, 80, 120, 200] * 4, name="stages")
    cfg = SimConfig(steps=2, batch=8, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu="h100-sxm",
                    placement=colocated_placement(2), max_response=512)
    res = simulate(trace, "baseline", cfg)
    tl = res.timeline
    for fw in FRAMEWORKS:
        t = framework_timers(res, fw)
        assert list(t["step"]) == [0, 1]
    t = framework_timers(res, "verl-0.7")
    for step in (0, 1):
        mine = tl[tl["step"] == step]
        span = lambda acts: float(sum(r.end - r.start for r in mine.itertuples() if r.activity in acts))  # noqa: E731
        gen = mine[mine["activity"] == "generate"]  # the two replicas (one GPU each) generate side by side
        assert len(gen) == 2 and gen["start"].nunique() == 1
        # generation (the longer replica), then sleep, wake and sync one after another on the pool
        assert t.loc[step, "timing_s/gen"] == pytest.approx(
            gen["end"].max() - gen["start"].min() + span(("sleep", "wake", "sync")), rel=1e-12)
        assert t.loc[step, "timing_s/update_actor"] == pytest.approx(
            float(sum(r.end - r.start for r in mine.itertuples() if r.activity == "train" and r.role == "actor")))
        # a synchronous step is the sum of what runs one after another: generation, scoring, training, sync
        s = res.steps.loc[step]
        assert t.loc[step, "timing_s/step"] == pytest.approx(s["end"] - s["start"], rel=1e-12)
    ver = framework_timers(res, "verl")
    assert (ver["timing_s/gen"] + ver["timing_s/update_weights"]).to_list() == pytest.approx(t["timing_s/gen"].to_list())


def test_nemo_rl_async_times_the_generation_its_trainer_waited_for():
    """Three async steps by hand (generation on its own GPUs): step 1's batch was ready before step 0 ended
    (nothing exposed), step 2's 3 s after step 1 ended."""
    rows = [("gen", 4, "generate", "generate", 0, 0.0, 10.0), ("train", 4, "score", "logprob", 0, 10.0, 12.0),
            ("train", 4, "train", "actor", 0, 12.0, 20.0), ("gen", 4, "sync", "sync", 0, 20.0, 21.0),
            ("train", 4, "train", "actor", 1, 22.0, 30.0), ("gen", 4, "sync", "sync", 2, 40.0, 41.0)]
    tl = pd.DataFrame([(*r, 0, 0.0, 0.0) for r in rows], columns=TIMELINE_COLUMNS)
    steps = pd.DataFrame({"step": [0, 1, 2], "start": [0.0, 10.0, 21.0], "end": [21.0, 31.0, 41.0],
                          "generation_s": [10.0, 8.0, 13.0]})  # step 1's ends at 18 (< 21), step 2's at 34 (> 31)
    t = framework_timers(SimResult(steps, tl, {}), "nemo-rl-async")
    assert t["timing/train/exposed_generation"].tolist() == [10.0, 0.0, 3.0]
    assert t["timing/train/weight_sync"].tolist() == [1.0, 0.0, 1.0]
    # the loop's step: from the previous step's end (the first: its start), not the background generation before it
    assert t["timing/train/total_step_time"].tolist() == [21.0, 10.0, 10.0]
    assert stage_groups(SimResult(steps, tl, {}), "nemo-rl-async")["generation"].tolist() == [10.0, 0.0, 3.0]


def test_a_nemo_rl_async_log_reads_with_the_async_loops_timers():
    from pathlib import Path

    from oppo_sim.frameworks.check_run import stage_map
    from oppo_sim.traces.runlog import read_run_log

    log = read_run_log(Path(__file__).parent / "fixtures" / "logs" / "nemo_rl_pr1052_timing.log")
    assert stage_map(log, None) == "nemo-rl-async" and stage_map(log, "nemo-rl") == "nemo-rl"
    assert "timing/train/exposed_generation" in log.table.columns and "timing/train/weight_sync" in log.table.columns


def test_an_async_steps_loop_timer_leaves_out_the_generation_that_overlapped_the_previous_step():
    """One step off on its own GPUs: generation of step t+1 runs while step t trains, so a step's start is before
    the previous step's end; the loop's step timer (NeMo RL's total_step_time, verl's step) is the simulator's
    step_time_s — the time between step ends — and the mean over the steps is the run's mean step time."""
    trace = Trace.from_arrays([100] * 32, [50, 80, 120, 400] * 8, name="async")
    cfg = SimConfig(gpu="h100-sxm", actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", batch=8,
                    placement=disaggregated_placement(gen=2, train=1, score=1), max_response=512)
    res = simulate(trace, "async", cfg)
    steps = res.steps
    assert (steps["start"].iloc[1:].to_numpy() < steps["end"].iloc[:-1].to_numpy()).any()  # the overlap is there
    for fw in ("nemo-rl-async", "verl-0.7"):
        t = framework_timers(res, fw)
        name = "timing/train/total_step_time" if fw == "nemo-rl-async" else "timing_s/step"
        assert t[name].tolist() == pytest.approx(steps["step_time_s"].tolist(), rel=1e-12)
        assert t[name].sum() == pytest.approx(float(steps["end"].iloc[-1] - steps["start"].iloc[0]), rel=1e-9)
