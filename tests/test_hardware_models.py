"""GPU and model tables: completeness, derived numbers against published totals, invariants."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.devices.hardware import (
    DEFAULT_COST_PARAMS,
    GPUS,
    OP_KINDS,
    CostParams,
    GiB,
    GPUSpec,
    Hardware,
    MiB,
    OpParams,
    allreduce_seconds,
    collective_seconds,
    get_gpu,
    get_hardware,
)
from oppo_sim.hw.models.lookup import MODELS, ModelSpec, get_model, model_from_hf_config

GPU_IDS = ["a100-40gb", "a100-80gb", "h100-sxm", "h200", "gh200", "l40s", "rtx-4090", "rtx-pro-6000",
           "h20", "h800", "a800-80gb", "b200", "gb200", "b300", "gb300", "mi300x"]
MODEL_IDS = [
    "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b",
    "qwen2.5-72b", "qwen3-8b", "qwen3-32b", "llama-3.1-8b", "llama-3.1-70b",
    "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "qwen2.5-math-7b", "llama-2-7b", "llama-2-13b", "llama-2-70b",
    "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-14b", "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b", "qwen2-72b",
    "qwen1.5-moe-a2.7b", "qwen2-57b-a14b", "llama-3-8b", "llama-3-70b", "llama-3.2-1b", "llama-3.2-3b", "mistral-nemo",
    "deepseek-llm-7b", "deepseek-llm-67b", "gemma-2-2b", "gemma-2-9b", "gemma-3-1b", "gemma-3-4b",
    "llama-3.3-70b", "qwen2.5-math-1.5b", "deepseek-r1-distill-qwen-1.5b",
    # the newer families (oppo_sim/hw/models/model_table_families.py; their sizes: tests/test_model_families.py)
    "qwen2.5-vl-3b", "qwen2.5-vl-7b", "qwen2.5-vl-32b", "qwen2.5-vl-72b", "qwen3-vl-2b", "qwen3-vl-4b", "qwen3-vl-8b",
    "qwen3-vl-32b", "qwen3-vl-30b-a3b", "qwen3-vl-235b-a22b", "glm-4.1v-9b", "minicpm-o-2-6", "gemma-3-27b",
    "qwen3.5-9b", "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b", "nemotron-nano-12b-v2",
    "nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b", "gpt-oss-20b", "gpt-oss-120b", "moonlight-16b-a3b",
    "glm-4.5-air", "glm-5.1", "glm-5", "minimax-m2.7", "minimax-m2.5", "mimo-7b", "seed-oss-36b", "qwen2.5-coder-7b",
    "qwen2.5-coder-14b", "qwen2.5-coder-32b", "fsfairx-llama3-rm", "minimax-text-01", "minimax-m1",
]


# ---------------------------------------------------------------------------------------- GPUs
def test_gpu_table_complete_and_read_only():
    assert set(GPUS) == set(GPU_IDS)
    for gid, g in GPUS.items():
        assert g.id == gid
        assert g.source
    with pytest.raises(TypeError):
        GPUS["x"] = GPUS["h200"]  # type: ignore[index]


@pytest.mark.parametrize(
    "gid, peak, bw, mib, link",
    [  # memory: nvidia-smi's memory.total (MiB); link: one direction (NVIDIA's NVLink/PCIe figure halved)
        ("a100-40gb", 312e12, 1555e9, 40_960, 300e9),  # NVLink 3 "600 GB/s"
        ("a100-80gb", 312e12, 2039e9, 81_920, 300e9),
        ("h100-sxm", 989e12, 3350e9, 81_559, 450e9),  # NVLink 4 "900 GB/s"
        ("h200", 989e12, 4800e9, 143_771, 450e9),
        ("gh200", 989e12, 4900e9, 146_831, 450e9),
        ("l40s", 362e12, 864e9, 46_068, 32e9),  # PCIe 4.0 x16 "64 GB/s"
        ("rtx-4090", 165.2e12, 1008e9, 24_564, 32e9),
        ("rtx-pro-6000", 503.8e12, 1792e9, 97_887, 64e9),  # PCIe 5.0 x16 "128 GB/s"
        ("h20", 148e12, 4000e9, 97_871, 450e9),
        ("h800", 989e12, 3350e9, 81_559, 200e9),  # NVLink cut to "400 GB/s"
        ("a800-80gb", 312e12, 2039e9, 81_920, 200e9),
        ("b200", 2250e12, 8000e9, 183_359, 900e9),  # NVLink 5 "1.8 TB/s"
        ("gb200", 2500e12, 8000e9, 189_471, 900e9),
        ("mi300x", 1307.4e12, 5300e9, 196_608, 448e9),  # 7 Infinity Fabric links x 64 GB/s each way
    ],
)
def test_gpu_values(gid, peak, bw, mib, link):
    g = get_gpu(gid)
    assert (g.peak_flops, g.mem_bw, g.mem_bytes, g.link_bw) == (peak, bw, mib * 2**20, link)


def test_units_convention():
    assert (MiB, GiB) == (1024**2, 1024**3)
    h100 = get_gpu("h100-sxm")
    # an "80GB" H100 reports 81,559 MiB: 79.6 GiB, 85.5e9 bytes
    assert h100.mem_bytes == 85_520_809_984 and round(h100.mem_bytes / GiB, 1) == 79.6
    # every bandwidth one direction per GPU: NVLink 4 450 GB/s each way, NDR InfiniBand 400 Gb/s = 50 GB/s,
    # the host link PCIe 5.0 x16 64 GB/s each way
    assert (h100.link_bw, h100.net_bw, h100.host_bw) == (450e9, 400e9 / 8, 64e9)
    for g in GPUS.values():  # per GPU and direction, the NIC and the host link never outrun the GPU-to-GPU link
        assert max(g.net_bw, g.host_bw) <= g.link_bw < g.mem_bw


def test_ring_allreduce_formula():
    op = OpParams(1.0, 0.8, 8e-6)
    # 2(n-1)/n of the buffer each way over the one-direction link, at eff_memory of it, plus the latency: the
    # base and 2(n-1) NVLink hops of 0.6 us (NCCL's ring, hardware.collective_latency)
    lat = 8e-6 + 14 * 0.6e-6
    assert allreduce_seconds(op, 1e9, 8, 450e9) == pytest.approx(lat + 2 * 7 / 8 * 1e9 / (450e9 * 0.8), rel=1e-15)
    assert allreduce_seconds(op, 1e9, 1, 450e9) == 0.0
    assert collective_seconds(op, 0.0, 450e9) == op.overhead_s  # no kind: the base latency alone
    half, full = OpParams(1.0, 0.4, 0.0), OpParams(1.0, 0.8, 0.0)
    hops = 6 * 0.6e-6
    assert allreduce_seconds(half, 1e9, 4, 450e9) - hops == pytest.approx(2 * (allreduce_seconds(full, 1e9, 4, 450e9) - hops))


def test_get_gpu_case_insensitive_and_unknown():
    assert get_gpu("H100-SXM") is GPUS["h100-sxm"]
    with pytest.raises(ConfigError, match=r"unknown GPU 'v100'; known: a100-40gb, .*rtx-pro-6000") as e:
        get_gpu("v100")
    assert "\n" not in str(e.value)


def test_gpu_spec_validation():
    good = dataclasses.asdict(GPUS["h200"])
    for field, bad in [("peak_flops", 0), ("mem_bw", -1.0), ("mem_bytes", float("nan")), ("link_bw", "fast"),
                       ("id", "H 200"), ("name", "")]:
        with pytest.raises(ConfigError, match=field if field not in ("id",) else "lowercase"):
            GPUSpec(**{**good, field: bad})


def test_op_params_validation_and_defaults():
    assert DEFAULT_COST_PARAMS.decode == OpParams(0.5, 0.7, 3e-3)
    assert DEFAULT_COST_PARAMS.prefill == OpParams(0.55, 0.7, 2e-3)
    assert DEFAULT_COST_PARAMS.train == OpParams(0.4, 0.7, 5e-3)
    assert DEFAULT_COST_PARAMS.sync == OpParams(1.0, 0.6, 0.05)
    assert DEFAULT_COST_PARAMS.collective == OpParams(1.0, 0.8, 6.6e-6)  # NCCL's base latency of an LL ring call
    OpParams(1.0, 1.0, 0.0)
    for args in [(0.0, 0.5, 0.0), (0.5, 1.01, 0.0), (0.5, 0.5, -1e-3), (float("nan"), 0.5, 0.0),
                 (0.5, 0.5, float("inf"))]:
        with pytest.raises(ConfigError, match="OpParams"):
            OpParams(*args)
    with pytest.raises(ConfigError, match="decode"):
        CostParams(decode=None, prefill=DEFAULT_COST_PARAMS.prefill, train=DEFAULT_COST_PARAMS.train,  # type: ignore[arg-type]
                   sync=DEFAULT_COST_PARAMS.sync)
    assert [DEFAULT_COST_PARAMS.op(k) for k in OP_KINDS] == [
        DEFAULT_COST_PARAMS.decode, DEFAULT_COST_PARAMS.prefill, DEFAULT_COST_PARAMS.train, DEFAULT_COST_PARAMS.sync,
        DEFAULT_COST_PARAMS.collective]
    # the collective op may be left out (its default), as callers from before it do
    four = {k: DEFAULT_COST_PARAMS.op(k) for k in ("decode", "prefill", "train", "sync")}
    assert CostParams(**four) == DEFAULT_COST_PARAMS
    with pytest.raises(ConfigError, match="unknown op 'x'"):
        DEFAULT_COST_PARAMS.op("x")


def test_get_hardware_gpu_id():
    hw = get_hardware("H200")
    assert hw == Hardware(GPUS["h200"], DEFAULT_COST_PARAMS)
    with pytest.raises(ConfigError, match="unknown GPU 'tpu-v5'"):
        get_hardware("tpu-v5")
    with pytest.raises(ConfigError):
        Hardware("h200")  # type: ignore[arg-type]


# -------------------------------------------------------------------------------------- models
def test_model_table_complete():
    assert set(MODELS) == set(MODEL_IDS)
    for mid, m in MODELS.items():
        assert m.id == mid
    assert get_model("Qwen2.5-7B") is MODELS["qwen2.5-7b"]
    with pytest.raises(ConfigError, match=r"unknown model 'gpt-5'; known: qwen2.5-0.5b, .*llama-3.1-70b"):
        get_model("gpt-5")


@pytest.mark.parametrize(
    "mid, published",
    [
        ("qwen2.5-0.5b", 0.49e9),
        ("qwen2.5-1.5b", 1.54e9),
        ("qwen2.5-3b", 3.09e9),
        ("qwen2.5-7b", 7.61e9),
        ("qwen2.5-14b", 14.7e9),
        ("qwen2.5-32b", 32.5e9),
        ("qwen2.5-72b", 72.7e9),
        ("qwen3-8b", 8.2e9),
        ("qwen3-32b", 32.8e9),
        ("llama-3.1-8b", 8.03e9),
        ("llama-3.1-70b", 70.6e9),
        ("llama-3.3-70b", 70.6e9),
        ("qwen2.5-math-1.5b", 1.54e9),
        ("deepseek-r1-distill-qwen-1.5b", 1.78e9),  # Qwen2.5-Math-1.5B with untied embeddings
    ],
)
def test_params_match_published(mid, published):
    m = get_model(mid)
    assert m.params == pytest.approx(published, rel=0.02)
    assert m.weight_bytes() == 2 * m.params
    # value head: lm_head (vocab x hidden) replaced by hidden x 1 (a tied table stays as input embedding)
    if m.tied_embeddings:
        assert m.params_scalar_head == m.params + m.hidden
    else:
        assert m.params_scalar_head == m.params - m.vocab * m.hidden + m.hidden
    assert m.weight_bytes(scalar_head=True) == 2 * m.params_scalar_head
    assert m.matmul_params < m.params or m.tied_embeddings


def test_exact_derived_numbers():
    q7 = get_model("qwen2.5-7b")
    assert q7.kv_bytes_per_token() == 57344
    assert q7.hd == 128 and q7.attn_width == 3584
    assert q7.params == 7_615_616_512  # HF safetensors total for Qwen2.5-7B
    assert get_model("llama-3.1-8b").params == 8_030_261_248
    q3 = get_model("qwen3-8b")
    assert q3.hd == 128 and q3.attn_width == 4096
    assert get_model("qwen3-32b").attn_width == 64 * 128  # != hidden: head_dim set explicitly


@pytest.mark.parametrize("mid", MODEL_IDS)
@pytest.mark.parametrize("gid", GPU_IDS)
def test_prefill_compute_bound_at_large_n(mid, gid):
    m, g, p = get_model(mid), get_gpu(gid), DEFAULT_COST_PARAMS.prefill
    compute_s = m.forward_flops(8192) / (g.peak_flops * p.eff_compute)
    memory_s = m.weight_bytes() / (g.mem_bw * p.eff_memory)
    assert compute_s > memory_s


def test_forward_flops_formula():
    m = get_model("qwen2.5-0.5b")
    n, c = 100, 50
    attn = 4 * m.layers * m.attn_width * (n * c + n * (n + 1) / 2)
    assert m.forward_flops(n, c) == pytest.approx(2 * m.matmul_params * n + attn)
    head_diff = 2 * n * (m.vocab * m.hidden - m.hidden)
    assert m.forward_flops(n, c) - m.forward_flops(n, c, scalar_head=True) == pytest.approx(head_diff)
    assert m.forward_flops(0, 1000) == 0.0
    arr = m.forward_flops(np.array([1, 10, 100]), np.array([0, 5, 50]))
    assert arr.shape == (3,)
    assert arr[2] == pytest.approx(m.forward_flops(100, 50))
    assert isinstance(m.forward_flops(3), float)
    with pytest.raises(ConfigError):
        m.forward_flops(-1)


@settings(max_examples=50, deadline=None)
@given(
    mid=st.sampled_from(MODEL_IDS),
    n=st.integers(0, 100_000),
    c=st.integers(0, 100_000),
    dn=st.integers(1, 10_000),
    dc=st.integers(1, 10_000),
)
def test_forward_flops_monotone(mid, n, c, dn, dc):
    m = get_model(mid)
    f = m.forward_flops(n, c)
    assert m.forward_flops(n + dn, c) > f
    assert m.forward_flops(n, c + dc) >= f
    if n > 0:
        assert m.forward_flops(n, c + dc) > f


def test_model_validation_and_with():
    q = get_model("qwen2.5-7b")
    assert q.with_(layers=2).layers == 2 and q.layers == 28
    with pytest.raises(ConfigError, match="kv_heads"):
        q.with_(kv_heads=3)
    with pytest.raises(ConfigError, match="layers"):
        q.with_(layers=0)
    with pytest.raises(ConfigError, match="head_dim"):
        ModelSpec("x", "x", 2, 100, 3, 1, 10, 10)
    with pytest.raises(ConfigError, match="nope"):
        q.with_(nope=1)


def test_model_from_hf_config():
    qwen7 = {
        "model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
        "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    m = model_from_hf_config(qwen7, id="q7")
    ref = get_model("qwen2.5-7b")
    assert m.id == "q7" and m.params == ref.params and m.kv_bytes_per_token() == ref.kv_bytes_per_token()
    qwen3 = {
        "model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 12288, "vocab_size": 151936, "head_dim": 128,
        "tie_word_embeddings": False, "attention_bias": False,
    }
    assert model_from_hf_config(qwen3).params == get_model("qwen3-8b").params
    llama = {
        "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "attention_bias": False,
    }
    assert model_from_hf_config(llama).params == get_model("llama-3.1-8b").params
    bad = dict(llama)
    del bad["hidden_size"]
    with pytest.raises(ConfigError, match="missing key 'hidden_size'"):
        model_from_hf_config(bad)
