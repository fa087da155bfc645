"""Devices and memory, checked on the CPU: device maps parse and reject nonsense with one line; Ray GPU
fractions and bundles; a run that cannot fit a stated GPU memory is refused before anything is built;
the model-table shapes are built exactly (on the meta device; a tiny custom shape on disk)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from oppo_real.config import RealConfig
from oppo_real.devices.device_map import DeviceMap, check_available, ray_gpu_plan, worker_device
from oppo_sim.core.errors import ConfigError


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oppo_real.cli", *args], capture_output=True, text=True, timeout=timeout)


def _one_line(p: subprocess.CompletedProcess, *words: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("text, want", [
    ("cpu", ("cpu", "cpu", "cpu")), ("cuda", ("cuda:0",) * 3), ("CUDA:1", ("cuda:1",) * 3),
    ("gen=cuda:0,score=cuda:1,train=cuda:0", ("cuda:0", "cuda:1", "cuda:0")),
    (" train = cpu , gen=cuda , score=cpu ", ("cuda:0", "cpu", "cpu")),
])
def test_device_maps_parse(text, want):
    d = DeviceMap.parse(text)
    assert (d.gen, d.score, d.train) == want


@pytest.mark.parametrize("text, words", [
    ("tpu", ("unknown device", "tpu")), ("cuda:x", ("unknown device",)), ("cpu:0", ("takes no index",)),
    ("gen=cuda:0,train=cuda:0", ("no device for score",)), ("gen=cpu,gen=cpu,score=cpu,train=cpu", ("given twice",)),
    ("gen=cpu,critic=cpu,score=cpu,train=cpu", ("unknown role", "critic")), ("gen=,score=cpu,train=cpu", ("role=device",)),
])
def test_device_maps_reject_nonsense_with_one_line(text, words):
    with pytest.raises(ConfigError) as e:
        DeviceMap.parse(text)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_bad_device_on_the_command_line_exits_2_with_one_line():
    _one_line(_cli("run", "--device", "gen=cuda:0,score=tpu,train=cpu", "--steps", "1"), "--device", "tpu")


def test_dtypes_sharing_and_ray_resources():
    cpu = DeviceMap()
    assert cpu.dtype("gen") == "float32" and not cpu.uses_cuda and not cpu.shared("gen", "train")
    m = DeviceMap.parse("gen=cuda:0,score=cuda:1,train=cuda:0")
    assert m.dtype("train") == "bfloat16" and m.dtype_bytes("score") == 2
    assert m.shared("gen", "train") and not m.shared("gen", "score")
    plan = ray_gpu_plan(m, {"gen": 0.5, "train": 0.5, "score": 1.0})
    assert plan.bundles == ({"GPU": 1.0, "CPU": 1.0}, {"GPU": 1.0, "CPU": 1.0})
    assert plan.num_gpus == {"gen": 0.5, "train": 0.5, "score": 1.0} and plan.bundle == {"gen": 0, "train": 0, "score": 1}
    one = ray_gpu_plan(DeviceMap.parse("cuda"), {})
    assert len(one.bundles) == 1 and all(abs(f - 1 / 3) < 1e-12 for f in one.num_gpus.values())
    none = ray_gpu_plan(cpu, {})
    assert none.bundles == () and set(none.num_gpus.values()) == {0.0}
    assert worker_device("cuda:1", "ray") == "cuda:0" and worker_device("cuda:1", "local") == "cuda:1"
    assert worker_device("cpu", "ray") == "cpu"


def test_missing_gpu_is_one_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="no CUDA device is visible"):
        check_available(DeviceMap.parse("cuda"))


def test_config_colocation_and_placement():
    cpu = RealConfig()
    assert cpu.colocate_mode == "resident" and [p.name for p in cpu.placement().pools] == ["main", "score"]
    one = RealConfig(devices=DeviceMap.parse("cuda"), shape="qwen2.5-0.5b")
    assert one.colocate_mode == "sleep"
    assert [p.name for p in one.placement().pools] == ["main"] and one.placement().reward == "main"
    two = RealConfig(devices=DeviceMap.parse("gen=cuda:0,score=cuda:1,train=cuda:0"))
    assert [p.name for p in two.placement().pools] == ["main", "score"]
    assert RealConfig(colocate="sleep").colocate_mode == "sleep"
    assert one.max_model_len % 256 == 0 and one.max_model_len >= one.max_response + one.task.prompt_len_max
    with pytest.raises(ConfigError, match="unknown model"):
        RealConfig(shape="qwen9-1t")
    with pytest.raises(ConfigError, match="not both"):
        RealConfig(shape="qwen2.5-0.5b", model_dir="/tmp")
    with pytest.raises(ConfigError, match="gpu_memory_gib"):
        RealConfig(gpu_memory_gib=0)


def test_a_run_that_cannot_fit_is_refused_before_anything_is_built(tmp_path):
    from oppo_real.devices.memory_fit import check_fit

    big = RealConfig(devices=DeviceMap.parse("cuda"), shape="qwen2.5-7b", gpu_memory_gib=80)
    with pytest.raises(ConfigError) as e:
        check_fit(big)
    msg = str(e.value)
    assert "\n" not in msg and "does not fit" in msg and "qwen2.5-7b" in msg and "GiB" in msg and "(80 GiB stated)" in msg, msg
    small = RealConfig(devices=DeviceMap.parse("cuda"), shape="qwen2.5-0.5b", gpu_memory_gib=80)
    import torch

    if not torch.cuda.is_available():  # fits by the numbers, then the missing GPU is the error
        with pytest.raises(ConfigError, match="no CUDA device"):
            check_fit(small)
    # through the command line: exit 2, one line, and the model cache stays empty
    cache = tmp_path / "cache"
    p = _cli("run", "--device", "cuda", "--shape", "qwen2.5-7b", "--gpu-memory", "80", "--steps", "1",
             "--cache", str(cache), "--out", str(tmp_path / "o"), "--workers", "local", "--backend", "torch")
    _one_line(p, "does not fit", "GiB")
    assert not cache.exists() or not any(cache.iterdir())


def test_the_kv_cache_counts_and_colocation_lowers_the_peak():
    from oppo_real.devices.memory_fit import kv_cache_bytes, pools, run_specs

    cfg = RealConfig(devices=DeviceMap.parse("cuda"), shape="qwen2.5-1.5b", gpu_memory_gib=80, backend="torch", batch=16)
    actor, _ = run_specs(cfg)
    assert kv_cache_bytes(cfg, actor) == 2 * 16 * (cfg.task.prompt_len_max + cfg.max_response) * actor.with_(dtype_bytes=2).kv_bytes_per_token()
    from dataclasses import replace

    sleep = pools(cfg, *run_specs(cfg))[0].peak
    resident = pools(replace(cfg, colocate="resident"), *run_specs(cfg))[0].peak
    assert sleep < resident
    long = replace(cfg, batch=512, max_response=4096)
    with pytest.raises(ConfigError, match="does not fit"):
        from oppo_real.devices.memory_fit import check_fit

        check_fit(replace(long, gpu_memory_gib=24))


def test_a_critic_free_run_holds_no_critic_reward_model_or_reference():
    """grpo with a rule reward and no KL: the trainer holds the actor alone (no critic weights, gradients or
    Adam states), the scorer nothing; the same responses per step (B x n) hold the same KV cache."""
    from dataclasses import replace

    from oppo_real.devices.memory_fit import kv_cache_bytes, role_memory, run_specs
    from oppo_sim.core.algorithms import Algorithm

    ppo = RealConfig(devices=DeviceMap.parse("gen=cuda:0,score=cuda:1,train=cuda:0"), shape="qwen2.5-1.5b",
                     gpu_memory_gib=80, backend="torch", batch=16)
    grpo = replace(ppo, batch=4, algorithm=Algorithm("grpo", n=4, reward="rule", kl=False))
    actor, reward = run_specs(ppo)
    a, b = role_memory(ppo, actor, reward), role_memory(grpo, actor, reward)
    per_param = sum(getattr(a["train"][0], k) for k in ("weights", "grads", "optimizer")) / (actor.params + reward.params_scalar_head)
    assert sum(getattr(b["train"][0], k) for k in ("weights", "grads", "optimizer")) == pytest.approx(per_param * actor.params)
    assert "critic" not in b["train"][0].label and b["score"][0].weights == 0
    assert kv_cache_bytes(grpo, actor) == kv_cache_bytes(ppo, actor)


@pytest.mark.parametrize("model_id", ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen3-8b", "llama-3.1-8b"])
def test_shaped_models_have_the_table_shape(model_id):
    from oppo_real.models.shaped import meta_param_counts
    from oppo_sim.hw.models.lookup import get_model

    lm, head = meta_param_counts(model_id)
    spec = get_model(model_id)
    assert lm == spec.params
    assert head == spec.params_scalar_head + 1  # the score head's bias


def test_build_shaped_models_on_disk(tmp_path):
    import torch
    from transformers import AutoConfig

    from oppo_real.models.shaped import build_shaped_models
    from oppo_real.models.tiny import load_causal_lm, load_value_model
    from oppo_sim.hw.models.lookup import ModelSpec

    spec = ModelSpec("mini", "mini", 2, 64, 4, 2, 128, 256, tied_embeddings=True, qkv_bias=True)
    paths = build_shaped_models(tmp_path, spec, max_position=512)
    assert paths.reference == paths.actor and paths.critic == paths.reward
    assert build_shaped_models(tmp_path, spec, max_position=512).root == paths.root  # cached
    cfg = AutoConfig.from_pretrained(paths.actor)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads, cfg.vocab_size) == (2, 64, 2, 256)
    assert cfg.tie_word_embeddings
    actor, reward = load_causal_lm(paths.actor), load_value_model(paths.reward)
    assert sum(p.numel() for p in actor.parameters()) == spec.params
    out = reward(input_ids=torch.tensor([[5, 6, 7]])).logits
    assert out.shape == (1, 3, 1) and torch.isfinite(out).all()


def test_async_on_a_shared_device_is_planned_resident_as_the_simulator_plans_it():
    """One rule on both sides (``oppo_sim.hw.memory.pool_memory.colocate_for``): a policy that trains while it generates
    keeps a shared device resident. The real check refuses async where only taking turns fits and accepts it
    where everything fits at once, with the simulator's line; the simulator refuses async on a shared pool where
    no engine share leaves the trainer room, and takes turns under oppo on the same pool."""
    from dataclasses import replace

    from oppo_real.devices.memory_fit import check_fit, colocation, pools, run_specs
    from oppo_sim.core.placement import colocated_placement
    from oppo_sim.core.policies import make_policy
    from oppo_sim.hw.devices.hardware import GiB
    from oppo_sim.pipeline.config import SimConfig
    from oppo_sim.pipeline.fit_check import fit_for_policy

    cfg = RealConfig(devices=DeviceMap.parse("cuda"), shape="qwen2.5-1.5b", gpu_memory_gib=80, backend="torch", batch=16)
    sleep, resident = (pools(cfg, *run_specs(cfg), mode)[0].peak for mode in ("sleep", "resident"))
    between = replace(cfg, gpu_memory_gib=(sleep + resident) / 2 / 0.92 / GiB)
    real_async = "async(k=1) generates while the previous step trains, so pool 'cuda:0' must hold the engine"
    with pytest.raises(ConfigError, match=r"^" + real_async.replace("(", r"\(").replace(")", r"\)")):
        check_fit(between, make_policy("async"))
    assert (colocation(between, make_policy("async")), colocation(between, make_policy("oppo"))) == ("resident", "sleep")

    def fits(c, policy):  # the check's verdict (check_fit itself goes on to ask for the GPU, absent here)
        return all(p.error() is None for p in pools(c, *run_specs(c), colocation(c, make_policy(policy))))

    assert fits(between, "oppo") and fits(replace(cfg, gpu_memory_gib=resident * 1.01 / 0.92 / GiB), "async")
    split = replace(between, devices=DeviceMap.parse("gen=cuda:0,score=cuda:0,train=cuda:1"))
    assert colocation(split, make_policy("async")) == "resident" and fits(split, "async")

    sim = SimConfig(actor="qwen2.5-7b", reward="qwen2.5-0.5b", gpu="h100-sxm", placement=colocated_placement(2),
                    steps=1, batch=8)
    with pytest.raises(ConfigError, match=r"^async\(k=1\) generates while the previous step trains, so pool 'main'"):
        fit_for_policy(sim, make_policy("async"), 2000, 1500)
    assert fit_for_policy(sim, make_policy("oppo"), 2000, 1500)[0].colocate == "sleep"
    small = replace(sim, actor="qwen2.5-3b")  # fits resident once the engine's share is lowered beside the trainer
    run, _ = fit_for_policy(small, make_policy("async"), 2000, 1500)
    assert run.colocate == "resident" and run.engine.gpu_memory_utilization < sim.engine.gpu_memory_utilization
