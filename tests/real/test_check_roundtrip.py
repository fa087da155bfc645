"""The CPU round trip of `oppo-sim check` at the tiniest size, end to end (benchmarks/bench_check_roundtrip.py):
a real baseline run's verl metrics -> check calibrated on its first steps -> the profile -> oppo's predicted
speedup with a range, beside a real oppo run's. No timing is asserted: the chain is."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from oppo_sim.hw.fitting.profiles import read_profile
from oppo_sim.traces.runlog import read_run_log

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_check_roundtrip", ROOT / "benchmarks" / "bench_check_roundtrip.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_the_round_trip_runs_end_to_end_at_tiny_size(models, tmp_path):
    import ray

    b = _bench()
    s = b.Sizes(steps=4, batch=2, max_response=8, repeats=1, calibrate=2)
    was = ray.is_initialized()
    rows, meta = b.roundtrip(s, tmp_path, cache=str(models.root.parent))
    assert ray.is_initialized() == was  # the Ray it started is stopped: later ray.init calls in this process work
    assert len(rows) == 1 and meta["summary"]["repeats"] == 1 and meta["sizes"]["steps"] == 4
    r = rows.iloc[0]
    for policy in ("baseline", "oppo"):  # each real run wrote verl's metrics, 4 steps
        assert read_run_log(tmp_path / f"{policy}_0" / "verl.log").steps == [1, 2, 3, 4]
        assert r[f"{policy}_step_s"] > 0 and r[f"others_cores_{policy}"] >= 0
    assert r["measured_speedup"] == pytest.approx(r["baseline_step_s"] / r["oppo_step_s"])
    # the check: calibrated on steps 1-2, the held-out error on steps 3-4, the profile, the prediction with a range
    printed = (tmp_path / "check_baseline_0.txt").read_text()
    assert "calibrated on steps 1..2" in printed and "held-out steps (after K)" in printed
    assert r["heldout_step_err_pct"] >= 0
    profile = tmp_path / "profile_baseline_0.json"
    meta_check = json.loads(profile.read_text())["meta"]["check"]
    assert meta_check["calibration_steps"] == [1, 2] and "timing_s/step" in meta_check["held_out"]
    read_profile(str(profile))  # what run/compare/plan --profile take
    assert r["predicted_lo"] <= r["predicted_speedup"] <= r["predicted_hi"] and r["predicted_lo"] < r["predicted_hi"]
    assert r["step_noise_pct"] > 0  # 4 steps with a step timer: the run's own noise is in the range
    assert r["in_range"] == (r["predicted_lo"] <= r["measured_speedup"] <= r["predicted_hi"])
    # the driver's own costs were measured on the runs' (Ray) workers and rode along into the fitted profile
    driver = meta["driver_overheads"]
    assert meta["sizes"]["workers"] == "ray" and driver["call_s"] >= 0 and (tmp_path / "profile" / "driver.csv").exists()
    assert meta["start_profile"] == "oppo-real profile --backend torch"
    kept = json.loads(profile.read_text())["meta"]["overheads"]
    assert kept["call_s"] == pytest.approx(driver["call_s"]) and kept["step_s"] >= driver["step_s"]
    assert json.loads(profile.read_text())["meta"]["driver"]["workers"] == "ray"  # where they were measured
