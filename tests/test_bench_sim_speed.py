"""The simulator-speed benchmark runs end to end at a tiny size and reports its figures (timings not asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_bench_sim_speed_reports_its_headline_with_the_simpy_floor(tmp_path):
    out = tmp_path / "head.json"
    p = subprocess.run(
        [sys.executable, "benchmarks/bench_sim_speed.py", "--steps", "3", "--repeat", "1", "--skip-scaling", "--cpu", "-1",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert "simpy_floor_s" in p.stdout and "events_per_sample" in p.stdout
    rows = json.loads(out.read_text())
    assert {(r["policy"], r["path"]) for r in rows} == {(q, how) for q in ("oppo", "baseline") for how in ("cli", "simulate")}
    for r in rows:
        assert r["simpy_floor_s"] > 0 and r["wall_s"] > 0
        assert r["events"] > 3 * 112  # every simulated sample took simulation events
        assert r["events_per_sample"] == pytest.approx(r["events"] / (3 * 112))


def test_bench_sim_speed_grpo_case_runs_tiny_or_says_why_it_is_skipped(tmp_path):
    out = tmp_path / "grpo.json"
    p = subprocess.run(
        [sys.executable, "benchmarks/bench_sim_speed.py", "--skip-headline", "--repeat", "1", "--cpu", "-1",
         "--grpo-steps", "2", "--grpo-prompts", "2", "--grpo-n", "4", "--grpo-json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert "== GRPO: 2 prompts x 4 responses, 16 x H100 colocated" in p.stdout
    doc = json.loads(out.read_text())
    if isinstance(doc, dict):  # groups not in the step machine yet: the case says so instead of mis-measuring
        assert "does not batch groups yet" in doc["skipped"] and doc["skipped"] in p.stdout
        return
    assert {r["policy"] for r in doc} == {"oppo", "baseline"}
    for r in doc:
        assert r["responses"] == 2 * 2 * 4 and r["samples_trained"] == 2 * 2 * 4
        assert r["wall_us_per_response"] == pytest.approx(1e6 * r["wall_s"] / 16)
