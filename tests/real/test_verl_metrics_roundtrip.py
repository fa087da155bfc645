"""`oppo-real run --verl-metrics`: a tiny real run (torch, in-process workers) writes verl's console lines,
the run-log reader reads them back with verl's names, and they say what the run's own outputs say."""

from __future__ import annotations

import pandas as pd
import pytest

from oppo_real.cli import main
from oppo_sim.traces.metrics_import import metrics_to_trace
from oppo_sim.traces.runlog import read_run_log


def test_a_real_run_reads_back_as_a_verl_log(models, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "--policy", "baseline", "--steps", "2", "--batch", "4", "--max-response", "32", "--backend", "torch",
            "--workers", "local", "--no-checkpoint", "--cache", str(models.root.parent), "--out", str(out),
            "--verl-metrics", str(out / "verl.log")]
    assert main(argv) == 0
    assert "verl.log: 2 steps of verl's metrics" in capsys.readouterr().out
    log = read_run_log(out / "verl.log")
    assert (log.framework, log.format, log.steps) == ("verl", "verl-console", [1, 2])  # verl counts from 1
    steps = pd.read_csv(out / "steps.csv")
    rollouts = pd.read_csv(out / "rollouts.csv")
    t = log.table
    assert t["timing_s/step"].tolist() == pytest.approx(steps["step_time_s"].tolist())
    assert t["timing_s/update_weights"].tolist() == pytest.approx(steps["sync_s"].tolist())
    assert (t["timing_s/gen"] >= steps["generation_s"] - 1e-9).all()
    for name in ("timing_s/reward", "timing_s/old_log_prob", "timing_s/ref", "timing_s/values", "timing_s/adv",
                 "timing_s/update_actor"):  # PPO with a reward model and a KL term: every stage ran, within the step
        assert ((t[name] >= 0) & (t[name] <= t["timing_s/step"])).all(), name
    by_step = rollouts.groupby("step")
    assert t["response_length/mean"].tolist() == pytest.approx(by_step["response_tokens"].mean().tolist())
    assert t["response_length/max"].tolist() == by_step["response_tokens"].max().tolist()
    assert t["prompt_length/mean"].tolist() == pytest.approx(by_step["prompt_tokens"].mean().tolist())
    assert t["response_length/clip_ratio"].tolist() == pytest.approx(
        by_step["response_tokens"].apply(lambda r: (r >= 32).mean()).tolist())
    # and the log drives a trace of the same steps: per step, the run's mean response length
    trace = metrics_to_trace(log, prompts_per_step=4).trace.to_frame()
    assert trace.groupby("step")["response_tokens"].mean().tolist() == pytest.approx(
        by_step["response_tokens"].mean().tolist(), abs=0.25)
