"""`oppo-sim check`: a run's log against the simulator stage by stage, the fit on the first K steps (parameters
found back on a log constructed at known ones, held-out error reported, the profile taken by run/plan), the
what-if with its range, and the one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oppo_sim.cli import main
from oppo_sim.frameworks.check_fit import PARAMS, upper
from oppo_sim.frameworks.check_policies import stretched
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.fitting.profiles import read_profile
from oppo_sim.traces.runlog import read_run_log
from oppo_sim.traces.trace import Trace

LOGS = Path(__file__).parent / "fixtures" / "logs"
SCRIPT = LOGS / "verl_check_grpo_3b.sh"
LOG = LOGS / "verl_check_grpo_3b_constructed.log"
TRUE = {"decode": 0.55, "prefill": 0.7, "train": 0.6, "sync_s": 1.2}  # what make_check_log.py made the log at
BASE = ["check", "--from-verl", str(SCRIPT), "--gpu", "h100-sxm"]


def _run(argv, capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One calibrated check with every output (K = 4 of 8 steps, one policy beside baseline)."""
    d = tmp_path_factory.mktemp("check")
    argv = [*BASE, "--log", str(LOG), "--steps-to", "8", "--calibrate", "4", "--policies", "baseline,oppo",
            "--write-profile", str(d / "p.json"), "--csv", str(d / "t.csv"), "--plot", str(d / "f.png")]
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return d, buf.getvalue()


def test_uncalibrated_table_is_the_log_against_the_simulated_stages(tmp_path, capsys):
    rc, out, _ = _run([*BASE, "--log", str(LOG), "--steps-from", "3", "--steps-to", "5", "--csv",
                       str(tmp_path / "t.csv")], capsys)
    assert rc == 0
    assert "stage map verl;" in out and "policy baseline, B=64 x n=8" in out
    assert "the prompt and response lengths: the trace" not in out  # they come from the log, not a default trace
    assert "outside verl's stage map (in the step, so in the fixed step cost): timing_s/adv" in out
    t = pd.read_csv(tmp_path / "t.csv")
    assert list(t.columns) == ["step", "stage", "measured_s", "predicted_s", "error_pct"]
    assert sorted(set(t["step"])) == [3, 4, 5]
    assert list(dict.fromkeys(t["stage"])) == ["timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/ref",
                                               "timing_s/update_actor", "timing_s/update_weights", "timing_s/step"]
    log = read_run_log(LOG).table.set_index("step")
    for _, r in t.iterrows():  # measured is the log's own value; the error is the stated formula
        assert r["measured_s"] == pytest.approx(log.loc[r["step"], r["stage"]])
        assert r["error_pct"] == pytest.approx(100 * (r["predicted_s"] - r["measured_s"]) / r["measured_s"])
    # uncalibrated defaults are faster than the log's (made at 0.55-0.7 of them): generation predicted short
    gen = t[t["stage"] == "timing_s/gen"]
    assert (gen["predicted_s"] < gen["measured_s"]).all()


def test_calibration_finds_the_parameters_back_within_bounds(calibrated):
    d, out = calibrated
    hw, meta = read_profile(d / "p.json")
    fitted = meta["check"]["parameters"]
    assert set(fitted) == set(PARAMS)  # every parameter pinned by a logged verl timer
    h100 = get_hardware("h100-sxm")
    for name in ("decode", "prefill", "train"):
        assert 0 < fitted[name] <= upper(h100, name)
        op = hw.params.op(PARAMS[name][0])
        assert 0 < op.eff_compute <= 1 and 0 < op.eff_memory <= 1
        assert op.eff_memory == pytest.approx(h100.params.op(PARAMS[name][0]).eff_memory * fitted[name])
        assert fitted[name] == pytest.approx(TRUE[name], rel=0.1), name
    assert hw.params.sync.overhead_s == pytest.approx(TRUE["sync_s"], rel=0.15) and hw.params.sync.overhead_s >= 0
    assert 0 <= meta["overheads"]["step_s"] and meta["overheads"]["step_s"] == pytest.approx(1.5, abs=0.6)
    assert meta["check"]["calibration_steps"] == [1, 2, 3, 4]
    assert "calibrated on steps 1..4" in out


def test_held_out_error_is_reported_on_the_steps_after_k(calibrated):
    d, out = calibrated
    t = pd.read_csv(d / "t.csv")
    assert set(t.loc[t["part"] == "held-out", "step"]) == {5, 6, 7, 8}
    assert set(t.loc[t["part"] == "calibration", "step"]) == {1, 2, 3, 4}
    assert "held-out steps (after K): median |error| per stage" in out
    held = t[t["part"] == "held-out"].groupby("stage")["error_pct"].apply(lambda e: np.median(np.abs(e)))
    assert (held < 10).all(), held  # the log's noise is 4 %
    meta = json.loads((d / "p.json").read_text())["meta"]["check"]
    assert meta["held_out"]["timing_s/gen"] == pytest.approx(held["timing_s/gen"])
    assert (d / "f.png").stat().st_size > 0


def test_the_profile_is_taken_by_run_and_plan(calibrated, capsys):
    d, _ = calibrated
    profile = str(d / "p.json")
    rc, out, err = _run(["run", "--profile", profile, "--actor", "qwen2.5-3b", "--reward", "rule", "--algorithm", "grpo",
                         "--batch", "8", "--steps", "1", "--devices", "4", "--placement", "colocated", "--policy", "baseline"],
                        capsys)
    assert rc == 0, err
    assert f"calibrated profile {profile}" in out
    from oppo_sim.cli import build_parser
    from oppo_sim.cli_setup import sim_config

    cfg = sim_config(build_parser().parse_args(["run", "--profile", profile]))  # the fitted per-step cost rides along
    assert cfg.overheads.step_s == pytest.approx(json.loads((d / "p.json").read_text())["meta"]["overheads"]["step_s"])
    rc, out, err = _run(["plan", "--gpus", f"4x{profile}", "--actor", "qwen2.5-3b", "--steps", "1", "--batch", "8",
                         "--policies", "baseline", "--layouts", "colocated", "--tps", "1", "--trials", "2",
                         "--processes", "1", "--top", "1"], capsys)
    assert rc == 0, err
    assert "best:" in out


def test_policies_come_with_a_range(calibrated):
    _, out = calibrated
    lines = out[out.index("what each policy would buy"):].splitlines()
    rows = {ln.split()[0]: [float(v) for v in ln.split()[1:]] for ln in lines[2:4]}
    assert set(rows) == {"baseline", "oppo"}
    for t, lo, hi, sp, sp_lo, sp_hi in rows.values():
        assert lo <= t <= hi and lo < hi and sp_lo <= sp <= sp_hi
    assert rows["baseline"][3:] == [1.0, 1.0, 1.0]
    assert "range: smallest to largest over 5 variants" in out
    assert "with the run's step-to-step noise in quadrature" in out  # 8 steps with a step timer


def test_the_stage_map_follows_the_log(tmp_path, capsys):
    old = tmp_path / "old.log"  # verl before update_weights: its gen holds the wake and the sync
    old.write_text("\n".join(ln.replace("timing_s/update_weights", "timing_s/other") for ln in LOG.read_text().splitlines()))
    rc, out, _ = _run([*BASE, "--log", str(old), "--steps-to", "2"], capsys)
    assert rc == 0 and "stage map verl-0.7;" in out and "update_weights" not in out.split("per step")[1]


def test_stretched_lengths_keep_the_cap_rows_and_the_mean():
    resp = np.array([1024, 100, 200, 300, 400, 1024, 500, 600])
    t = Trace.from_arrays(np.full(8, 10), resp, step=np.array([1] * 4 + [2] * 4))
    for k in (0.7, 1.3):
        s = stretched(t, k, 1024).to_frame()
        r = s["response_tokens"].to_numpy()
        assert (r[resp == 1024] == 1024).all() and (r[resp < 1024] < 1024).all()
        assert r[1:4].mean() == pytest.approx(resp[1:4].mean(), abs=1)
        assert np.ptp(r[1:4]) == pytest.approx(k * np.ptp(resp[1:4]), abs=2)


@pytest.mark.parametrize("extra, message", [
    (["--framework", "nemo-rl"], "is a verl log; its timers read as verl or verl-0.7"),
    (["--steps-from", "40"], "--steps-from 40: out of the log's steps 1..12"),
    (["--steps-to", "4", "--calibrate", "4"], "--calibrate 4: needs 1 <= K < the 4 logged steps"),
    (["--write-profile", "x.json"], "--write-profile needs --calibrate K"),
    (["--steps", "5"], "--steps: check simulates the logged steps with their logged lengths"),
])
def test_refusals_are_one_line(extra, message, capsys):
    rc, _, err = _run([*BASE, "--log", str(LOG), *extra], capsys)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_log_without_timers_is_refused(tmp_path, capsys):
    bare = tmp_path / "lengths.log"
    bare.write_text("step:1 - response_length/mean:300.0 - response_length/max:1024.0 - prompt_length/mean:100.0\n"
                    "step:2 - response_length/mean:310.0 - response_length/max:1024.0 - prompt_length/mean:100.0\n")
    rc, _, err = _run([*BASE, "--log", str(bare)], capsys)
    assert rc == 2 and "no stage timer of verl-0.7 logged" in err and len(err.strip().splitlines()) == 1


def test_a_config_of_another_framework_is_refused(capsys):
    recipe = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl" / "grpo_math_1B.yaml"
    rc, _, err = _run(["check", "--from-nemo-rl", str(recipe), "--gpu", "h100-sxm", "--log", str(LOG)], capsys)
    assert rc == 2 and "is a verl log: give the config and the log of one run" in err


def test_jsonl_and_csv_exports_of_the_log_check_alike(tmp_path, capsys):
    table = read_run_log(LOG).table.head(3)
    jsonl, csv = tmp_path / "run.jsonl", tmp_path / "run.csv"
    jsonl.write_text("\n".join(json.dumps({k: (int(v) if k == "step" else float(v)) for k, v in r.items()})
                               for r in table.to_dict("records")) + "\n")
    table.rename(columns={"step": "_step"}).to_csv(csv, index=False)
    got = []
    for path in (LOG, jsonl, csv):
        rc, _, err = _run([*BASE, "--log", str(path), "--steps-to", "3", "--csv", str(tmp_path / "o.csv")], capsys)
        assert rc == 0, err
        got.append(pd.read_csv(tmp_path / "o.csv"))
    pd.testing.assert_frame_equal(got[0], got[1])
    pd.testing.assert_frame_equal(got[0], got[2])


def _self_made_log(path: Path, flag: str, config: str, framework: str, names: dict[str, str], policy: str = "baseline",
                   options: tuple = ()) -> None:
    """A JSONL log of ``framework``'s timers as the simulator predicts them for ``config`` (3 steps): what ``check``
    must then match exactly, stage by stage."""
    from oppo_sim.cli import build_parser
    from oppo_sim.cli_setup import sim_config
    from oppo_sim.frameworks.check_run import CheckRun, predicted_timers
    from oppo_sim.frameworks.framework_args import with_framework_args
    from oppo_sim.traces.runlog import RunLog

    parser = build_parser()
    cfg = sim_config(parser.parse_args(with_framework_args(parser, ["run", flag, config, "--gpu", "h100-sxm"], echo=False)))
    lengths = pd.DataFrame({"step": [1, 2, 3], names["resp"]: [200.0, 260.0, 240.0], names["prompt"]: [90.0, 95.0, 88.0]})
    log_framework = "nemo-rl" if framework == "nemo-rl-async" else framework
    run = CheckRun(RunLog(lengths, log_framework, "jsonl", str(path)), framework, cfg, policy, options)
    timers = predicted_timers(run, cfg.hardware_of(cfg.placement.generate))
    rows = lengths.merge(timers, on="step")
    path.write_text("\n".join(json.dumps({k: (int(v) if k == "step" else float(v)) for k, v in r.items()})
                              for r in rows.to_dict("records")) + "\n")


NEMO_RL = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl"


@pytest.mark.parametrize("recipe, stage_map, policy, options, typed, stages", [
    (NEMO_RL / "grpo_math_1B.yaml", "nemo-rl", "baseline", (), ["--policy", "baseline"],
     {"timing/train/generation", "timing/train/policy_training", "timing/train/policy_and_reference_logprobs",
      "timing/train/total_step_time"}),
    # the async GRPO loop logs the generation its trainer waited for and the refit; its recipe's async policy,
    # refit in flight
    (NEMO_RL / "recipes" / "llm" / "performance" / "grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml", "nemo-rl-async",
     "async", (("staleness", 1), ("in_flight", True)), [],
     {"timing/train/exposed_generation", "timing/train/weight_sync", "timing/train/policy_training",
      "timing/train/total_step_time"}),
], ids=["sync", "async"])
def test_nemo_rl_timers_are_mapped_and_matched(tmp_path, capsys, recipe, stage_map, policy, options, typed, stages):
    log = tmp_path / "nemo.jsonl"
    _self_made_log(log, "--from-nemo-rl", str(recipe), stage_map,
                   {"resp": "train/mean_gen_tokens_per_sample", "prompt": "train/mean_prompt_length"},
                   policy=policy, options=options)
    rc, out, err = _run(["check", "--from-nemo-rl", str(recipe), "--gpu", "h100-sxm", "--log", str(log), *typed,
                         "--csv", str(tmp_path / "t.csv")], capsys)
    assert rc == 0, err
    assert f"stage map {stage_map};" in out
    t = pd.read_csv(tmp_path / "t.csv")
    assert stages <= set(t["stage"])
    assert t["error_pct"].abs().max() < 1e-6  # the simulator's own timers, the same lengths and seed: no error


def test_a_run_faster_than_efficiency_one_allows_gets_its_per_call_cost_fitted(tmp_path):
    """Generation made at efficiency 1 and a tenth of the default per-iteration cost: the decode factor stops at
    its bound and the per-call fixed cost (params.decode.overhead_s) is fitted beside it, near the truth."""
    from dataclasses import replace

    from oppo_sim.cli import build_parser
    from oppo_sim.cli_setup import sim_config
    from oppo_sim.frameworks.check_fit import fit, hardware_at
    from oppo_sim.frameworks.check_run import CheckRun, predicted_timers
    from oppo_sim.frameworks.framework_args import with_framework_args
    from oppo_sim.hw.devices.hardware import CostParams, Hardware
    from oppo_sim.traces.runlog import RunLog

    parser = build_parser()
    cfg = sim_config(parser.parse_args(with_framework_args(parser, ["run", "--from-verl", str(SCRIPT), "--gpu", "h100-sxm"],
                                                           echo=False)))
    base = cfg.hardware_of(cfg.placement.generate)
    truth = hardware_at(base, {"decode": upper(base, "decode")})
    truth = Hardware(truth.gpu, CostParams(**{**{k: truth.params.op(k) for k in ("decode", "prefill", "train", "sync",
                                                                                  "collective")},
                                              "decode": replace(truth.params.decode, overhead_s=3e-4)}))
    lengths = pd.DataFrame({"step": [1, 2, 3, 4], "response_length/mean": [200.0, 300.0, 250.0, 280.0],
                            "response_length/max": [1024.0] * 4, "prompt_length/mean": [100.0] * 4})
    run = CheckRun(RunLog(lengths, "verl", "jsonl", "made"), "verl", cfg, "baseline")
    timers = predicted_timers(run, truth)
    run = CheckRun(RunLog(lengths.merge(timers, on="step"), "verl", "jsonl", "made"), "verl", cfg, "baseline")
    f = fit(run, base, 3)
    assert "decode" in f.at_bound and f.sigma["decode"] == 0.0  # at its bound: reported, not varied
    assert f.theta["decode_call_s"] == pytest.approx(3e-4, rel=0.25)
    assert f.hardware().params.decode.overhead_s == pytest.approx(f.theta["decode_call_s"])


def test_the_configs_step_count_is_not_the_checked_steps(capsys):
    rc, out, err = _run(["check", "--from-verl", str(SCRIPT), "--from-verl", "trainer.total_training_steps=50", "--gpu",
                         "h100-sxm", "--log", str(LOG), "--steps-to", "2"], capsys)
    assert rc == 0, err
    assert "steps 1..2 (2)" in out and "trainer.total_training_steps = 50" in out  # listed as ignored, not refused


def test_an_async_verl_run_is_simulated_with_its_own_schedule(tmp_path, capsys):
    script = str(Path(__file__).parent / "fixtures" / "frameworks" / "verl" / "one_step_off_grpo_0.6b_gsm8k_fsdp2_2_6.sh")
    log = tmp_path / "async.jsonl"
    from oppo_sim.cli import build_parser
    from oppo_sim.cli_setup import sim_config
    from oppo_sim.frameworks.check_run import CheckRun, predicted_timers
    from oppo_sim.frameworks.framework_args import with_framework_args
    from oppo_sim.traces.runlog import RunLog

    parser = build_parser()
    a = parser.parse_args(with_framework_args(parser, ["run", "--from-verl", script, "--gpu", "h100-sxm"], echo=False))
    assert a.policy == "async"  # verl's one-step-off trainer, as the reader says
    lengths = pd.DataFrame({"step": [1, 2], "response_length/mean": [300.0, 320.0], "response_length/max": [1024.0] * 2,
                            "prompt_length/mean": [100.0] * 2})
    run = CheckRun(RunLog(lengths, "verl", "jsonl", str(log)), "verl", sim_config(a), "async")
    rows = lengths.merge(predicted_timers(run, sim_config(a).hardware_of(run.cfg.placement.generate)), on="step")
    log.write_text("\n".join(json.dumps({k: (int(v) if k == "step" else float(v)) for k, v in r.items()})
                             for r in rows.to_dict("records")) + "\n")
    rc, out, err = _run(["check", "--from-verl", script, "--gpu", "h100-sxm", "--log", str(log), "--policies", "baseline",
                         "--csv", str(tmp_path / "t.csv")], capsys)
    assert rc == 0, err
    assert "simulated: policy async" in out
    assert pd.read_csv(tmp_path / "t.csv")["error_pct"].abs().max() < 1e-6


def test_an_openrlhf_log_with_its_own_timers_is_checked_stage_by_stage(capsys):
    frameworks = Path(__file__).parent / "fixtures" / "frameworks"
    rc, out, err = _run(["check", "--from-openrlhf", str(frameworks / "openrlhf_ppo_llama_ray.sh"), "--gpu", "h200",
                         "--log", str(LOGS / "openrlhf_console_constructed.log")], capsys)
    assert rc == 0, err
    assert "openrlhf (openrlhf-console), steps 1..3 (3); stage map openrlhf-timing" in out
    summary = out[out.index("all steps (uncalibrated)"):]
    for timer in ("generation", "make_experience", "ppo_train", "broadcast", "step_total"):
        assert f"train/timing/{timer} " in summary


def test_an_openrlhf_log_is_calibrated_on_its_own_timers(tmp_path, capsys):
    """--calibrate on OpenRLHF's timers: each class pinned by the timer that holds it (generation -> decode,
    make_experience -> prefill, ppo_train -> train, broadcast -> the sync), within bounds, the held-out step
    reported, the profile taken by run."""
    frameworks = Path(__file__).parent / "fixtures" / "frameworks"
    rc, out, err = _run(["check", "--from-openrlhf", str(frameworks / "openrlhf_ppo_llama_ray.sh"), "--gpu", "h200",
                         "--log", str(LOGS / "openrlhf_console_constructed.log"), "--calibrate", "2",
                         # the constructed log was made near the prediction before --adam_offload's CPU step was priced
                         "--optimizer-offload", "0",
                         "--policies", "baseline,oppo", "--write-profile", str(tmp_path / "p.json")], capsys)
    assert rc == 0, err
    assert "calibrated on steps 1..2" in out and "held-out steps (after K)" in out
    hw, meta = read_profile(tmp_path / "p.json")
    assert meta["check"]["framework"] == "openrlhf-timing" and meta["check"]["calibration_steps"] == [1, 2]
    assert meta["check"]["stages"] == {"decode": ["train/timing/generation"], "prefill": ["train/timing/make_experience"],
                                       "train": ["train/timing/ppo_train"], "sync_s": ["train/timing/broadcast"]}
    h200 = get_hardware("h200")
    for name in ("decode", "prefill", "train"):
        assert 0 < meta["check"]["parameters"][name] <= upper(h200, name)
    assert set(meta["check"]["held_out"]) >= {"train/timing/generation", "train/timing/step_total"}
    rc, out, err = _run(["run", "--profile", str(tmp_path / "p.json"), "--actor", "llama-3-8b", "--batch", "8",
                         "--steps", "1", "--devices", "8", "--placement", "colocated"], capsys)
    assert rc == 0, err


def test_the_run_noise_is_a_robust_spread_of_the_step_timer():
    from oppo_sim.frameworks.check_policies import step_noise, widened

    ratios = [1.0, 1.05, 0.95, 1.02, 0.98, 3.0]  # a warm-up step three times as long does not set the spread
    table = pd.DataFrame({"step": range(6), "stage": "timing_s/step", "measured_s": ratios, "predicted_s": 1.0,
                          "error_pct": 0.0})
    s, n = step_noise(table, "verl")
    r = np.log(ratios)
    assert n == 6 and s == pytest.approx(1.4826 * np.median(np.abs(r - np.median(r))))
    assert 0.02 < s < 0.06
    assert step_noise(table.head(2), "verl") == (0.0, 2)  # too few steps to tell
    lo, hi = widened(1.1, 1.08, 1.12, 0.03)  # each side: the variants' deviation and the noise in quadrature
    assert np.log(1.1 / lo) == pytest.approx(np.hypot(np.log(1.1 / 1.08), 0.03))
    assert np.log(hi / 1.1) == pytest.approx(np.hypot(np.log(1.12 / 1.1), 0.03))
    assert widened(1.1, 1.08, 1.12, 0.0) == (1.08, 1.12)


def test_driver_costs_given_in_the_profile_are_simulated_and_kept(tmp_path, capsys):
    """A ``--gpu`` profile's ``meta.overheads`` (an oppo-real driver's measured cost per round trip) is charged in
    every simulated step, and the written profile keeps it, its per-step cost raised by the fitted one."""
    from oppo_sim.hw.fitting.profiles import save_profile

    given = {"call_s": 0.05, "step_s": 0.25, "sample_s": 0.0, "token_s": 0.0}
    save_profile(get_hardware("h100-sxm"), tmp_path / "g.json", {"overheads": given})
    argv = ["check", "--from-verl", str(SCRIPT), "--log", str(LOG), "--steps-to", "6"]
    rc, out_plain, _ = _run([*argv, "--gpu", "h100-sxm", "--csv", str(tmp_path / "a.csv")], capsys)
    rc2, _, _ = _run([*argv, "--gpu", str(tmp_path / "g.json"), "--csv", str(tmp_path / "b.csv")], capsys)
    assert rc == rc2 == 0
    a, b = (pd.read_csv(tmp_path / f"{n}.csv").set_index(["step", "stage"])["predicted_s"] for n in "ab")
    extra = (b - a).xs("timing_s/step", level="stage")
    assert (extra >= given["step_s"] + given["call_s"] - 1e-9).all()  # at least one round trip and the step's own cost
    rc, _, _ = _run([*argv, "--gpu", str(tmp_path / "g.json"), "--calibrate", "3", "--write-profile",
                     str(tmp_path / "p.json")], capsys)
    assert rc == 0
    kept = read_profile(tmp_path / "p.json")[1]["overheads"]
    fitted = read_profile(tmp_path / "p.json")[1]["check"]
    assert kept["call_s"] == given["call_s"] and kept["step_s"] >= given["step_s"]
    assert "parameters" in fitted
