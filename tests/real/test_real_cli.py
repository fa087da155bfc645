"""`oppo-real run`: end to end on vLLM + Ray for `baseline` and `oppo` (outputs, their schema, the rollout
trace the simulator can load), and bad input exiting 2 with one line on stderr.

The end-to-end test skips, with the reason, when vLLM is not importable.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from oppo_real.cli import main
from oppo_sim.traces.catalog import load_trace

SUMMARY_KEYS = {"step_time_s", "samples_per_s", "utilization", "samples_trained", "steps", "reward_curve"}


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oppo_real.cli", *args], capture_output=True, text=True, timeout=timeout)


def _one_line_error(p: subprocess.CompletedProcess, *words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_run_vllm_on_ray_baseline_and_oppo(models, vllm_ok, ray_started, tmp_path, capsys):
    from oppo_real.backends.vllm_actor import vllm_available

    ok, why = vllm_available()
    if not ok:
        pytest.skip(why)
    steps, batch = 3, 4
    outs = {}
    for policy in ("baseline", "oppo"):
        out = tmp_path / policy
        argv = ["run", "--policy", policy, "--steps", str(steps), "--batch", str(batch), "--max-response", "32",
                "--cache", str(models.root.parent), "--out", str(out)]
        assert main(argv) == 0
        outs[policy] = out
    printed = capsys.readouterr().out
    assert printed.count("step    2") == 2 and "final reward" in printed

    for policy, out in outs.items():
        for name in ("steps.csv", "timeline.csv", "summary.json", "rollouts.csv", "decisions.csv", "conservation.csv",
                     "rollout_trace.csv.gz"):
            assert (out / name).is_file(), f"{policy}: {name} missing"
        summary = json.loads((out / "summary.json").read_text())
        assert SUMMARY_KEYS <= set(summary), SUMMARY_KEYS - set(summary)
        assert summary["steps"] == steps and summary["samples_trained"] == steps * batch
        assert len(summary["reward_curve"]) == steps
        assert set(summary["utilization"]) == {"main", "score"}
        assert all(0.0 <= u <= 1.0 for u in summary["utilization"].values())
        assert summary["step_time_s"] > 0 and summary["samples_per_s"] > 0
        assert summary["backend"] == "vllm" and summary["workers"] == "ray"
        assert summary["admitted"] == summary["samples_trained"] + summary["in_flight_end"]

        st = pd.read_csv(out / "steps.csv")
        assert len(st) == steps and (st["samples"] == batch).all()
        tl = pd.read_csv(out / "timeline.csv")
        assert {"generate", "score", "train"} <= set(tl["activity"]) and set(tl["pool"]) == {"main", "score"}
        ro = pd.read_csv(out / "rollouts.csv")
        assert len(ro) == steps * batch and ro["sid"].is_unique
        cons = pd.read_csv(out / "conservation.csv")  # every admitted sample accounted for, every step
        assert len(cons) == steps and cons["balanced"].all()
        assert cons["admitted_total"].iloc[-1] == summary["admitted"]
        assert (ro["response_tokens"] <= 32).all()

        trace = load_trace(out / "rollout_trace.csv.gz")
        assert len(trace) == steps * batch
        assert list(trace.response_tokens) == ro["response_tokens"].tolist()

    # oppo over-commits (B + Δ in flight) and streams chunks to the scorers while the actor decodes
    s = json.loads((outs["oppo"] / "summary.json").read_text())
    assert s["admitted"] > s["samples_trained"]
    st = pd.read_csv(outs["oppo"] / "steps.csv")
    tl = pd.read_csv(outs["oppo"] / "timeline.csv")
    gen_end = dict(zip(st["step"], st["start"] + st["generation_s"]))
    scored_during_gen = tl[(tl["activity"] == "score") & (tl["start"] < tl["step"].map(gen_end))]
    assert len(scored_during_gen) > 0
    b = json.loads((outs["baseline"] / "summary.json").read_text())
    assert b["admitted"] == b["samples_trained"] and b["in_flight_end"] == 0


def test_unknown_policy_exits_2_with_one_line():
    _one_line_error(_cli("run", "--policy", "nope", "--steps", "1"), "unknown policy", "nope")


def test_model_not_a_directory_exits_2_with_one_line(tmp_path):
    missing = tmp_path / "no-such-model"
    _one_line_error(_cli("run", "--model", str(missing), "--steps", "1", "--out", str(tmp_path / "o")),
                    "not a directory", str(missing))


def test_bad_numbers_exit_2_with_one_line(tmp_path):
    _one_line_error(_cli("run", "--batch", "0"), "--batch")
    _one_line_error(_cli("run", "--backend", "tensorflow"), "--backend")


def test_resume_without_checkpoint_exits_2(models, tmp_path):
    p = _cli("run", "--policy", "baseline", "--steps", "1", "--batch", "4", "--backend", "torch", "--workers", "local",
             "--cache", str(models.root.parent), "--out", str(tmp_path / "empty"), "--resume")
    _one_line_error(p, "no checkpoint")


def test_resume_through_the_cli_continues_the_run(models, tmp_path, capsys):
    common = ["run", "--policy", "oppo", "--batch", "4", "--max-response", "32", "--backend", "torch", "--workers", "local",
              "--cache", str(models.root.parent), "--out", str(tmp_path / "r")]
    assert main([*common, "--steps", "2"]) == 0
    assert main([*common, "--steps", "3", "--resume"]) == 0
    st = pd.read_csv(tmp_path / "r" / "steps.csv")
    assert st["step"].tolist() == [0, 1, 2]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["samples_trained"] == 12 and len(summary["reward_curve"]) == 3
    capsys.readouterr()


def test_every_option_states_its_default():
    """``--help`` of every sub-command: each option's help says what it defaults to."""
    import argparse

    from oppo_real.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {"run", "profile", "validate", "engine-check"}
    for name, p in sub.choices.items():
        fmt = p._get_formatter()
        for act in p._actions:
            if not act.option_strings or act.help == argparse.SUPPRESS or "--help" in act.option_strings:
                continue
            text = fmt._expand_help(act) if act.help else ""
            assert "default" in text, f"oppo-real {name} {act.option_strings[0]}: help {text!r} states no default"
    assert "--steps STEPS PPO steps (default: 20)" in " ".join(sub.choices["run"].format_help().split())


def test_profile_driver_adds_the_costs_check_takes(models, tmp_path, capsys):
    """``oppo-real profile --driver``: the engines' profile plus the driver's measured steps and its fitted costs in
    meta.overheads (what run, compare and check charge: sim_config reads them); not with --moves."""
    from oppo_sim.cli import build_parser
    from oppo_sim.cli_setup import sim_config
    from oppo_sim.hw.fitting.profiles import read_profile

    out = tmp_path / "drv"
    argv = ["profile", "--backend", "torch", "--quick", "--ops", "decode", "--cache", str(models.root.parent), "--out", str(out)]
    assert main([*argv, "--driver", "local"]) == 0
    assert "per generation round trip" in capsys.readouterr().out
    steps = pd.read_csv(out / "driver.csv")
    assert {"policy", "batch", "calls", "samples", "tokens", "seconds"} <= set(steps.columns) and len(steps) > 4
    hw, meta = read_profile(out / "profile.json")
    assert meta["driver"]["workers"] == "local" and set(meta["overheads"]) == {"call_s", "step_s", "sample_s", "token_s"}
    assert meta["ops"] == ["decode"]  # the engines' profile is there too
    cfg = sim_config(build_parser().parse_args(["run", "--profile", str(out / "profile.json")]))
    assert cfg.overheads.call_s == pytest.approx(meta["overheads"]["call_s"])
    assert main(["profile", "--moves", "sync", "--driver", "local", "--out", str(tmp_path / "m")]) == 2
    assert "--driver adds the run driver's costs" in capsys.readouterr().err
