"""A run's life cycle as a user meets it: an existing run directory is never overwritten by accident, a
resumed run's summary describes its steps (not the outage before the resume), and nothing a killed run
started outlives it (Ray's raylet, workers and agents)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from oppo_real.cli import main

COMMON = ["run", "--policy", "oppo", "--batch", "4", "--max-response", "32", "--backend", "torch"]


def _args(models, out, *extra):
    return [*COMMON, "--workers", "local", "--cache", str(models.root.parent), "--out", str(out), *extra]


def test_existing_run_directory_is_refused_without_resume_or_overwrite(models, tmp_path, capsys):
    assert main(_args(models, tmp_path / "r", "--steps", "1")) == 0
    before = (tmp_path / "r" / "checkpoint" / "driver.json").read_bytes()
    said = capsys.readouterr().out
    assert f"checkpoints: after every step in {tmp_path / 'r' / 'checkpoint'}" in said  # the console says when
    assert main(_args(models, tmp_path / "r", "--steps", "1")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resume" in err[0] and "--overwrite" in err[0], err
    assert (tmp_path / "r" / "checkpoint" / "driver.json").read_bytes() == before  # untouched
    assert main(_args(models, tmp_path / "r", "--steps", "1", "--overwrite")) == 0


def test_resumed_summary_describes_the_steps_not_the_outage(models, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(_args(models, out, "--steps", "2")) == 0
    time.sleep(4.0)  # the outage: the process is gone, the checkpoint waits
    assert main(_args(models, out, "--steps", "4", "--resume")) == 0
    capsys.readouterr()
    st = pd.read_csv(out / "steps.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert st["step"].tolist() == [0, 1, 2, 3]
    # the resumed steps continue the clock where the checkpointed run stopped: no 4 s gap anywhere
    gaps = st["start"].iloc[1:].to_numpy() - st["end"].iloc[:-1].to_numpy()
    assert gaps.max() < 1.0, gaps
    assert st["step_time_s"].max() < 3.0, st["step_time_s"].tolist()
    assert summary["wall_s"] == pytest.approx(st["end"].max() - st["start"].min(), rel=1e-6)
    assert summary["wall_s"] < st["step_time_s"].sum() + 1.0
    assert summary["utilization"]["main"] > 0.3, summary["utilization"]


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def test_nothing_outlives_a_killed_run(models, tmp_path):
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("ray")
    cmd = [sys.executable, "-m", "oppo_real.cli", *COMMON, "--workers", "ray", "--steps", "50",
           "--cache", str(models.root.parent), "--out", str(tmp_path / "k")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen: dict[int, float] = {}
    try:
        deadline = time.time() + 240
        for line in p.stdout:  # wait until it trains: Ray, its agents and the workers are all up
            if line.startswith("step") or time.time() > deadline:
                break
        for child in _descendants(p.pid):
            try:
                seen[child.pid] = child.create_time()
            except psutil.Error:
                pass
        assert seen, "the run started no processes"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        alive = []
        for _ in range(60):  # the reaper polls every second and gives processes 3 s to exit
            alive = []
            for pid, created in seen.items():
                try:
                    q = psutil.Process(pid)
                    if abs(q.create_time() - created) < 1e-3 and q.status() != psutil.STATUS_ZOMBIE:
                        alive.append(f"{pid} {' '.join(q.cmdline()[:3])}")
                except psutil.Error:
                    pass
            if not alive:
                break
            time.sleep(0.5)
        assert not alive, alive
    finally:
        if p.poll() is None:
            p.kill()
