"""A run's log read into one per-step table of the framework's own names (oppo_sim.traces.runlog): real
public logs (tests/fixtures/logs, each with its source URL) and constructed ones for every format, the
one-line refusals of bad input, and the trace drawn from a log's lengths."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oppo_real.executor.verl_metrics import console_line, verl_step_metrics
from oppo_sim.core.errors import ConfigError, OppoError, TraceError
from oppo_sim.traces.metrics_import import metrics_to_trace
from oppo_sim.traces.runlog import read_run_log

LOGS = Path(__file__).parent / "fixtures" / "logs"


# -- real logs -----------------------------------------------------------------------------------------


def test_verl_issue_1208_ray_prefix_and_the_timers():
    log = read_run_log(LOGS / "verl_issue1208_gh200_sglang.log")
    assert (log.framework, log.format, log.steps) == ("verl", "verl-console", [2])
    row = log.table.iloc[0]
    # by hand from the pasted line
    assert row["timing_s/gen"] == 74.020 and row["timing_s/old_log_prob"] == 3.566 and row["timing_s/ref"] == 3.420
    assert row["timing_s/adv"] == 1.167 and row["timing_s/update_actor"] == 14.302 and row["timing_s/step"] == 96.551
    assert row["response_length/mean"] == 324.958 and row["response_length/clip_ratio"] == 0.004
    assert row["prompt_length/max"] == 256.0 and row["critic/advantages/min"] == -0.730
    assert len(log.table.columns) == 1 + 44  # step + every key of the line, under its own name
    assert log.table["step"].dtype == np.int64 and log.table.attrs["framework"] == "verl"
    assert math.isnan(log.metric("timing_s/values").iloc[0])  # GRPO: no critic, no values timer


def test_verl_issue_106_step_83():
    log = read_run_log(LOGS / "verl_awesome_ml_sys_issue106_step83.log")
    assert log.steps == [83]
    row = log.table.iloc[0]
    assert row["timing_s/gen"] == 29.641 and row["timing_s/reward"] == 1.042 and row["timing_s/ref"] == 6.307
    assert row["training/global_step"] == 83.0 and row["prompt_length/mean"] == 362.969


def test_verl_validation_only_step_is_left_out():
    log = read_run_log(LOGS / "verl_issue2060_validation_then_step1.log")
    assert log.steps == [1]  # step 0 logs only val-core/val-aux metrics
    assert not any(c.startswith("val-") for c in log.table.columns)
    assert log.table.iloc[0]["response_length/max"] == 963.0 and log.table.iloc[0]["actor/ppo_kl"] == -0.0
    with pytest.raises(TraceError, match="no column 'prompt_length/mean'"):  # the pasted line stops before it
        metrics_to_trace(log, prompts_per_step=8)


def test_nemo_rl_timing_block():
    log = read_run_log(LOGS / "nemo_rl_pr1052_timing.log")
    assert (log.framework, log.format, log.steps) == ("nemo-rl", "nemo-rl-console", [1])
    row = log.table.iloc[0]
    assert row["timing/train/total_step_time"] == 66.55 and row["timing/train/exposed_generation"] == 32.52
    assert row["timing/train/policy_and_reference_logprobs"] == 4.78 and row["timing/train/weight_sync"] == 0.13
    assert row["train/loss"] == 0.1032 and row["train/reward"] == 0.3486 and row["Avg Trajectory Age"] == 1.0
    assert sum(c.startswith("timing/train/") for c in log.table.columns) == 9


def test_a_real_log_becomes_a_trace_of_its_steps():
    imp = metrics_to_trace(LOGS / "verl_issue1208_gh200_sglang.log", prompts_per_step=64, seed=1)
    f = imp.trace.to_frame()
    assert f["step"].unique().tolist() == [2]
    assert abs(f["response_tokens"].mean() - 324.958) <= 1 / 64 and f["response_tokens"].max() == 1024
    assert f["prompt_tokens"].max() == 256 and "verl verl-console log" in imp.source


# -- constructed logs of each format ----------------------------------------------------------------------


VERL_LINES = [
    "\x1b[36m(TaskRunner pid=4242)\x1b[0m step:1 - timing_s/gen:np.float64(10.5) - timing_s/update_actor:4.0 - "
    "response_length/mean:300.0 - response_length/max:1024 - prompt_length/mean:100.0 - actor/ok:True",
    "(TaskRunner pid=4242) Training Progress:  10%|█         | 1/10 [00:15<02:15, 15.0s/it]",
    "(TaskRunner pid=4242) step:2 - timing_s/gen:12.25 - timing_s/update_actor:4.5 - response_length/mean:350.5 - "
    "response_length/max:1024 - prompt_length/mean:101.0 - actor/ok:False [repeated 2x across cluster]",
    "step:2 - timing_s/gen:12.5 - timing_s/update_actor:4.5 - response_length/mean:351.0 - response_length/max:1024 "
    "- prompt_length/mean:101.0",  # the step logged again (a resumed run): the last values count
]


def _write(path: Path, lines) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_verl_console_colours_numpy_values_and_relogged_steps(tmp_path):
    log = read_run_log(_write(tmp_path / "train.log", VERL_LINES))
    assert log.steps == [1, 2]
    assert log.table["timing_s/gen"].tolist() == [10.5, 12.5]
    assert log.table["response_length/mean"].tolist() == [300.0, 351.0]
    assert log.table["actor/ok"].iloc[0] == 1.0 and math.isnan(log.table["actor/ok"].iloc[1])


def test_nemo_rl_console_several_steps(tmp_path):
    lines = []
    for step, (gen, train) in enumerate([(20.0, 10.0), (22.5, 9.5), (21.0, 11.25)], 1):
        lines += [f"========================= Step {step}/3 =========================", "▶ Generating responses...",
                  "", "📊 Training Results:", "  • Loss: 0.5", f"  • Mean Generation Length: {300 + step}.0000", "",
                  "⏱️  Timing:", f"  • Total step time: {gen + train + 1:.2f}s", f"  • generation: {gen:.2f}s (60.0%)",
                  f"  • policy_training: {train:.2f}s (30.0%)", "  • prepare_for_generation: 1.00s (3.0%)"]
    log = read_run_log(_write(tmp_path / "nemo.txt", lines))
    assert log.steps == [1, 2, 3]
    assert log.table["timing/train/generation"].tolist() == [20.0, 22.5, 21.0]
    assert log.table["timing/train/total_step_time"].tolist() == [31.0, 33.0, 33.25]
    assert log.table["train/mean_gen_tokens_per_sample"].tolist() == [301.0, 302.0, 303.0]


def test_wandb_export_keeps_the_logged_names(tmp_path):
    frame = pd.DataFrame({"_step": [1, 2, 3], "_runtime": [10.0, 20.0, 30.0], "grpo - timing_s/gen": [5.0, 6.0, 7.0],
                          "grpo - timing_s/gen__MIN": [1.0, 1.0, 1.0], "grpo - response_length/mean": [100.0, 110.0, 120.0],
                          "grpo - prompt_length/mean": [50.0, 50.0, 50.0], "grpo - rollout/table": ["a", None, "c"]})
    frame.to_csv(tmp_path / "wandb.csv", index=False)
    log = read_run_log(tmp_path / "wandb.csv")
    assert (log.framework, log.format, log.steps) == ("verl", "csv", [1, 2, 3])
    assert log.table["timing_s/gen"].tolist() == [5.0, 6.0, 7.0]
    assert "timing_s/gen__MIN" not in log.table and "rollout/table" not in log.table  # ranges, text: not metrics


def test_nemo_rl_wandb_keys_and_openrlhf_keys(tmp_path):
    pd.DataFrame({"_step": [1, 2], "timing/train/generation": [3.0, 4.0], "timing/train/policy_training": [2.0, 2.5],
                  "train/mean_gen_tokens_per_sample": [200.0, 210.0]}).to_csv(tmp_path / "nemo.csv", index=False)
    assert read_run_log(tmp_path / "nemo.csv").framework == "nemo-rl"
    pd.DataFrame({"train/global_step": [1, 2], "train/response_length": [300.0, 320.0],
                  "train/total_length": [400.0, 425.0], "train/reward": [0.1, 0.2]}).to_csv(tmp_path / "o.csv", index=False)
    log = read_run_log(tmp_path / "o.csv")
    assert (log.framework, log.steps) == ("openrlhf", [1, 2])
    f = metrics_to_trace(log, prompts_per_step=16, max_response=1024).trace.to_frame()  # prompt = total - response
    assert f.groupby("step")["prompt_tokens"].mean().tolist() == [100.0, 105.0]
    assert f.groupby("step")["response_tokens"].mean().tolist() == [300.0, 320.0]


def test_openrlhf_console_status_lines_and_its_timers_in_wandb(tmp_path):
    log = read_run_log(LOGS / "openrlhf_console_constructed.log")  # "✨ Global step N: {...}" (OpenRLHF v0.9.6 on)
    assert (log.framework, log.format, log.steps) == ("openrlhf", "openrlhf-console", [1, 2, 3])
    assert log.table["train/timing/ppo_train"].tolist() == [118.4, 120.9, 123.0]  # named as its wandb logger names it
    f = metrics_to_trace(log, prompts_per_step=64, max_response=1024).trace.to_frame()
    assert f.groupby("step")["response_tokens"].mean().tolist() == pytest.approx([402.7, 418.3, 431.9], abs=0.5)
    line = "[INFO] ✨ Global step 4: {'timing/generation': 3.5, 'timing/ppo_train': nan, 'rollout/truncated_rate': 0.1}"
    (tmp_path / "o.log").write_text(line + "\n")
    t = read_run_log(tmp_path / "o.log").table
    assert t["train/timing/generation"].tolist() == [3.5] and "train/timing/ppo_train" not in t  # nan only: dropped
    (tmp_path / "bad.log").write_text("✨ Global step 1: {'timing/generation': 'fast'}\n")
    with pytest.raises(TraceError, match="line 1: 'timing/generation': not a number"):
        read_run_log(tmp_path / "bad.log")
    (tmp_path / "bad2.log").write_text("✨ Global step 1: {'timing/generation': 3.5\n")
    with pytest.raises(TraceError, match="not a dict"):
        read_run_log(tmp_path / "bad2.log")
    pd.DataFrame({"train/global_step": [1, 2], "train/timing/generation": [3.0, 4.0],  # its wandb export
                  "train/rollout/response_length_mean": [300.0, 320.0], "train/total_length": [400.0, 425.0]}
                 ).to_csv(tmp_path / "w.csv", index=False)
    assert read_run_log(tmp_path / "w.csv").framework == "openrlhf"


def test_tensorboard_scalar_files_and_folder(tmp_path):
    folder = tmp_path / "tb"
    folder.mkdir()
    for tag, values in {"timing_s/gen": [9.0, 8.0], "timing_s/update_actor": [3.0, 3.5],
                        "response_length/mean": [200.0, 210.0], "prompt_length/mean": [64.0, 64.0]}.items():
        pd.DataFrame({"Wall time": [1.7e9, 1.7e9 + 60], "Step": [1, 2], "Value": values}).to_csv(
            folder / f"run-grpo-tag-{tag.replace('/', '_')}.csv", index=False)
    log = read_run_log(folder)
    assert (log.framework, log.format, log.steps) == ("verl", "tensorboard-scalars", [1, 2])
    assert log.table["timing_s/update_actor"].tolist() == [3.0, 3.5]  # '_' in the file name put back to '/'
    one = read_run_log(folder / "run-grpo-tag-timing_s_gen.csv")  # a single scalar file
    assert one.format == "csv" and one.table["timing_s/gen"].tolist() == [9.0, 8.0]
    assert metrics_to_trace(log, prompts_per_step=8, max_response=512).trace.to_frame()["step"].nunique() == 2


def test_jsonl_flat_and_nested(tmp_path):
    _write(tmp_path / "m.jsonl", [json.dumps({"step": 1, "timing_s/gen": 1.5, "response_length/mean": 10.0}),
                                  json.dumps({"step": 2, "data": {"timing_s/gen": 2.5}})])
    log = read_run_log(tmp_path / "m.jsonl")
    assert (log.format, log.steps, log.table["timing_s/gen"].tolist()) == ("jsonl", [1, 2], [1.5, 2.5])


# -- refusals: one line, no traceback ------------------------------------------------------------------------


@pytest.mark.parametrize("name,lines,words", [
    ("bad_value.log", ["step:1 - timing_s/gen:fast - response_length/mean:3"], ["line 1", "'timing_s/gen'", "'fast'"]),
    ("bad_step.log", ["step:1 - timing_s/gen:1.0", "step:two - timing_s/gen:1.0"], ["line 2", "not a step number"]),
    ("no_colon.log", ["step:1 - timing_s/gen 1.0"], ["line 1", "not name:value"]),
    ("unknown.log", ["epoch 1 loss 0.3", "epoch 2 loss 0.2"], ["not a run log", "step:N - timing_s/gen", "Timing"]),
    ("no_step.jsonl", [json.dumps({"timing_s/gen": 1.0})], ["line 1", "no step"]),
    ("text.jsonl", [json.dumps({"step": 1, "timing_s/gen": "slow"})], ["'timing_s/gen'", "not a number"]),
    ("broken.jsonl", ["{\"step\": 1,"], ["line 1", "not JSON"]),
    ("nemo_early.log", ["⏱️  Timing:", "  • generation: 1.00s (50.0%)", "===== Step 1/2 ====="], ["before any"]),
    ("nemo_value.log", ["===== Step 1/2 =====", "⏱️  Timing:", "  • generation: ?s (50.0%)"], ["'timing/train/generation'"]),
    ("only_val.log", ["step:0 - val-core/acc:0.5"], ["only validation"]),
    ("other.jsonl", [json.dumps({"step": 1, "loss": 0.5})], ["no metric of verl"]),
])
def test_bad_logs_are_one_line_errors(tmp_path, name, lines, words):
    with pytest.raises(OppoError) as e:
        read_run_log(_write(tmp_path / name, lines))
    msg = str(e.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg


def test_bad_csvs_and_paths(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_run_log(tmp_path / "missing.log")
    pd.DataFrame({"step": [1, 2], "timing_s/gen": [1.0, "x"], "response_length/mean": [3.0, 4.0]}).to_csv(
        tmp_path / "bad.csv", index=False)
    with pytest.raises(TraceError, match="row 2, column 'timing_s/gen': not a number 'x'"):
        read_run_log(tmp_path / "bad.csv")
    pd.DataFrame({"step": [1, 1.5], "timing_s/gen": [1.0, 2.0]}).to_csv(tmp_path / "step.csv", index=False)
    with pytest.raises(TraceError, match="row 2, column 'step': not a step number"):
        read_run_log(tmp_path / "step.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="no \\*.csv"):
        read_run_log(tmp_path / "empty")
    with pytest.raises(ConfigError, match="--run"):
        read_run_log(_write(tmp_path / "v.log", VERL_LINES), run="a")


def test_cli_import_reads_a_console_log(tmp_path, capsys):
    from oppo_sim.cli import main

    out = tmp_path / "t.csv.gz"
    assert main(["import", str(LOGS / "verl_awesome_ml_sys_issue106_step83.log"), "--out", str(out),
                 "--prompts-per-step", "32"]) == 0
    assert "1 steps" in capsys.readouterr().out
    bad = _write(tmp_path / "bad.log", ["step:x - timing_s/gen:1"])
    assert main(["import", str(bad), "--out", str(tmp_path / "u.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a step number" in err[0]


# -- what oppo-real run --verl-metrics writes, read back (no run: a hand-made result) ------------------------


def _result():
    steps = pd.DataFrame({"step": [0, 1], "start": [0.0, 5.0], "end": [5.0, 9.0], "step_time_s": [5.0, 4.0],
                          "generation_s": [2.0, 1.5], "sync_s": [0.25, 0.5]})
    rows = [  # pool, devices, activity, role, step, start, end
        ("main", "all", "generate", "generate", 0, 0.0, 2.0), ("main", "all", "sleep", "sleep", 0, 2.5, 2.75),
        ("score", "1", "score", "reward", 0, 2.0, 2.5), ("score", "1", "score", "reference", 0, 2.0, 2.25),
        ("main", "all", "score", "logprob", 0, 2.75, 3.0), ("main", "all", "score", "critic", 0, 3.0, 3.25),
        ("main", "all", "train", "actor", 0, 3.5, 4.75), ("main", "all", "wake", "wake", 0, 4.75, 4.8),
        ("main", "all", "generate", "generate", 1, 5.0, 6.5), ("cpu", "driver", "score", "rule", 1, 6.5, 6.75),
        ("main", "all", "score", "logprob", 1, 6.75, 7.0), ("main", "all", "train", "actor", 1, 7.0, 8.5),
    ]
    tl = pd.DataFrame(rows, columns=["pool", "devices", "activity", "role", "step", "start", "end"])
    rollouts = pd.DataFrame({"step": [0, 0, 1, 1], "prompt_tokens": [10, 20, 30, 30], "response_tokens": [64, 16, 64, 64],
                             "rm_score": [1.0, 0.0, 0.5, 0.5]})
    return steps, tl, rollouts


def test_verl_timers_from_the_timeline():
    m0, m1 = verl_step_metrics(*_result(), max_response=64)
    assert m0["timing_s/gen"] == 2.25 and m0["timing_s/reward"] == 0.5 and m0["timing_s/ref"] == 0.25
    assert m0["timing_s/old_log_prob"] == 0.25 and m0["timing_s/values"] == 0.25 and m0["timing_s/adv"] == 0.25
    assert m0["timing_s/update_actor"] == 1.25 and m0["timing_s/update_weights"] == 0.25 and m0["timing_s/step"] == 5.0
    assert m0["response_length/clip_ratio"] == 0.5 and m0["prompt_length/mean"] == 15.0 and m0["critic/score/mean"] == 0.5
    assert "timing_s/ref" not in m1 and "timing_s/values" not in m1 and "timing_s/update_critic" not in m1
    assert m1["timing_s/reward"] == 0.25 and m1["timing_s/adv"] == 0.0 and m1["training/global_step"] == 2


def test_console_line_reads_back(tmp_path):
    per_step = verl_step_metrics(*_result(), max_response=64)
    path = _write(tmp_path / "verl.log", [console_line(m["training/global_step"], m) for m in per_step])
    log = read_run_log(path)
    assert log.steps == [1, 2]
    for name in per_step[0]:
        assert log.table[name].iloc[0] == per_step[0][name], name
