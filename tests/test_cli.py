"""The oppo-sim command line: tables, JSON keys, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from oppo_sim.cli import main


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


SMALL = ["--steps", "3", "--batch", "16", "--actor", "qwen2.5-0.5b", "--reward", "qwen2.5-0.5b"]


def test_run_writes_json_with_required_keys(capsys, tmp_path):
    path = tmp_path / "r.json"
    code, out, _ = run_cli(capsys, "run", "--policy", "oppo", *SMALL, "--json", str(path))
    assert code == 0
    assert "oppo(C=500" in out
    data = json.loads(path.read_text())
    for key in ("step_time_s", "samples_per_s", "utilization", "samples_trained", "steps"):
        assert key in data
    assert data["samples_trained"] == 48 and data["steps"] == 3
    assert all(0 <= u <= 1 for u in data["utilization"].values())


def test_compare_prints_speedups(capsys, tmp_path):
    path = tmp_path / "c.json"
    code, out, _ = run_cli(capsys, "compare", *SMALL, "--policies", "intra,inter,oppo", "--json", str(path))
    assert code == 0
    assert "speedup" in out and "baseline" in out
    data = json.loads(path.read_text())
    assert data["speedup"]["baseline"] == 1.0
    assert set(data["policies"]) == {"baseline", "intra", "inter", "oppo"}


def test_replay_reports_latencies(capsys, tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("prompt_tokens,response_tokens,timestamp\n" + "\n".join(f"{100 + i},{20 + i},{i * 0.1}" for i in range(30)))
    path = tmp_path / "r.json"
    code, out, _ = run_cli(capsys, "replay", "--trace", str(csv), "--model", "qwen2.5-0.5b", "--json", str(path))
    assert code == 0
    data = json.loads(path.read_text())
    for key in ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "makespan_s", "output_tokens_per_s"):
        assert data[key] > 0
    assert data["requests"] == 30


@pytest.mark.parametrize("args, msg", [
    (["run", "--policy", "nope"], "unknown policy"),
    (["run", "--gpu", "v100"], "unknown GPU"),
    (["run", "--actor", "gpt-5"], "unknown model"),
    (["run", "--trace", "no-such-trace"], "no-such-trace"),
    (["run", "--actor", "qwen2.5-72b", "--gpu", "rtx-4090"], "does not fit"),
    (["run", "--tp", "3"], "multiple of tensor parallelism"),
    (["run", "--placement", "weird"], "unknown placement"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, msg):
    code, _, err = run_cli(capsys, *args)
    assert code == 2
    assert msg in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_trace_file_is_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt_tokens,response_tokens\n10,20\n10,-5\n")
    code, _, err = run_cli(capsys, "run", "--trace", str(bad), *SMALL)
    assert code == 2 and "row 2" in err and "response_tokens" in err and err.count("\n") == 1


def test_entry_point_argparse_errors_are_one_line():
    p = subprocess.run([sys.executable, "-m", "oppo_sim.cli", "run", "--batch", "-1"], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "--batch" in p.stderr


def test_outputs_go_into_folders_that_do_not_exist_yet(capsys, tmp_path):
    out = tmp_path / "new" / "deeper"
    rc = main(["run", "--steps", "2", "--batch", "8", "--actor", "qwen2.5-0.5b", "--reward", "qwen2.5-0.5b",
               "--json", str(out / "run.json"), "--plot", str(out / "t.png"), "--steps-csv", str(out / "s.csv")])
    assert rc == 0
    assert json.loads((out / "run.json").read_text())["steps"] == 2
    assert (out / "t.png").stat().st_size > 0 and (out / "s.csv").exists()
