"""The newer model families RL recipes name: vision-language models priced by their language backbone, hybrid
Mamba2 / linear-attention stacks (attention layers alone hold a KV cache; the others a constant state per
sequence), gpt-oss's sliding-window layers, GLM, MiniMax and Moonlight — their sizes against the totals their
model cards publish, the hybrid accounting worked out by hand, and a short run of each kind end to end."""

from __future__ import annotations

import pytest

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.request import EngineConfig, kv_blocks_for
from oppo_sim.frameworks.translation import model_arg
from oppo_sim.hw.memory.engine_memory import engine_memory, kv_blocks
from oppo_sim.hw.models.hf_config import model_from_hf_config
from oppo_sim.hw.models.lookup import MODELS

GIB = 1024**3


@pytest.mark.parametrize("mid, total, active", [  # billions, as the model cards give them
    ("qwen2.5-vl-7b", 7.6, None), ("qwen2.5-vl-3b", 3.1, None), ("qwen2.5-vl-72b", 72.7, None),  # the LLM part
    ("qwen3-vl-8b", 8.2, None), ("qwen3-vl-30b-a3b", 30.5, 3.3), ("qwen3-vl-235b-a22b", 235, 22),
    ("glm-4.1v-9b", 9.4, None), ("gemma-3-27b", 27.0, None),
    ("qwen3.5-27b", 27, None), ("qwen3.5-122b-a10b", 122, 10), ("qwen3.5-397b-a17b", 397, 17),
    ("nemotron-nano-12b-v2", 12.31, None), ("nemotron-3-nano-30b-a3b", 31.6, 3.6),  # 3.6B active with embeddings
    ("nemotron-3-super-120b-a12b", 120.67, None),  # 123.6B of BF16 weights less its 2.94B MTP layer
    ("gpt-oss-20b", 20.9, None), ("gpt-oss-120b", 116.8, None), ("moonlight-16b-a3b", 16.0, 3.0),
    ("glm-4.5-air", 106, None), ("glm-5.1", 744, 40), ("minimax-m2.7", 229, None), ("seed-oss-36b", 36.2, None),
    ("fsfairx-llama3-rm", 8.0, None), ("qwen2.5-coder-14b", 14.7, None),
])
def test_family_models_have_their_published_sizes(mid, total, active):
    m = MODELS[mid]
    assert m.params / 1e9 == pytest.approx(total, rel=0.03)
    if active is not None:
        assert m.active_params / 1e9 == pytest.approx(active, rel=0.05)


def test_gpt_oss_active_count_is_openais_without_the_input_embedding():
    for mid, active in (("gpt-oss-20b", 3.61), ("gpt-oss-120b", 5.13)):
        m = MODELS[mid]
        assert (m.active_params - m.vocab * m.hidden) / 1e9 == pytest.approx(active, rel=0.01)


def test_nemotron_h_counts_attention_layers_for_kv_and_mamba_layers_as_a_state():
    m = MODELS["nemotron-3-nano-30b-a3b"]  # 52 layers: 23 Mamba2 (M), 6 attention (*), 23 MoE (E)
    assert (m.layers, m.full_attn_layers, m.mixer_layers, m.moe_layers) == (23, 6, 23, 23)
    assert m.kv_bytes_per_token() == 2 * 6 * 2 * 128 * 2  # K and V, 6 layers, 2 KV heads of 128, bf16
    ssm = 64 * 64 * 128 * 4  # heads x head dim x state, fp32
    conv = (64 * 64 + 2 * 8 * 128) * 3 * 2  # (d_inner + 2 G N) channels x (kernel - 1), bf16
    assert m.mixer_state_bytes == 23 * (ssm + conv)
    assert m.pair_flops == 4.0 * 6 * 32 * 128 and not m.gated_mlp and m.router_bias


def test_gated_deltanet_hybrid_counts_full_attention_layers_only():
    m = MODELS["qwen3.5-35b-a3b"]  # 40 layers, full attention every 4th
    assert (m.full_attn_layers, m.mixer_layers, m.q_gate, m.qk_norm) == (10, 30, True, True)
    assert m.kv_bytes_per_token() == 2 * 10 * 2 * 256 * 2
    assert m.mixer_state_bytes == 30 * (32 * 128 * 128 * 4 + (2 * 16 * 128 + 32 * 128) * 3 * 2)
    assert m.attn_width == 16 * 256 and m._attn_matmul_params == 2048 * 4096 * 2 + 2 * 2048 * 512 + 4096 * 2048


def test_gpt_oss_sliding_window_layers_hold_only_the_window():
    m = MODELS["gpt-oss-20b"]  # 24 layers alternating sliding (128 tokens) and full attention
    assert (m.full_attn_layers, m.mixer_layers) == (12, 12)
    assert m.kv_bytes_per_token() == 2 * 12 * 8 * 64 * 2
    assert m.mixer_state_bytes == 12 * 128 * 2 * 8 * 64 * 2


def test_a_vlm_is_its_language_backbone_and_says_so():
    text = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000}
    plain = model_from_hf_config(text)
    vlm = model_from_hf_config({"model_type": "qwen2_5_vl", "text_config": text, "vision_config": {"depth": 32}})
    assert vlm.params == plain.params and vlm.kv_bytes_per_token() == plain.kv_bytes_per_token()
    assert "vision tower not modelled" in vlm.note and "left out" in vlm.note and not plain.note
    arg, how = model_arg("actor_rollout_ref.model.path", "Qwen/Qwen3-VL-8B-Instruct")
    assert arg == "qwen3-vl-8b" and "vision tower not modelled" in how
    assert "sparse attention priced as dense" in MODELS["glm-5.1"].note


def test_a_hybrid_state_is_set_aside_before_the_kv_cache():
    m, cfg = MODELS["nemotron-3-nano-30b-a3b"], EngineConfig(tp=1, max_num_seqs=64)
    e = engine_memory(m, 1, 64, cfg.max_num_batched_tokens)
    free = 80 * GIB * cfg.gpu_memory_utilization - (e.non_kv - e.seq_state)  # the KV share without the state
    plain, less = kv_blocks(free, m, 1, cfg.block_size), kv_blocks_for(m, 80 * GIB, cfg, "x")
    assert plain - less == pytest.approx(64 * m.mixer_state_bytes / (m.kv_bytes_per_token() * cfg.block_size), abs=1)


def test_minimax_lightning_attention_layers_keep_a_state_and_no_kv_cache():
    m = MODELS["minimax-text-01"]  # 456B total, 45.9B active (without the input embedding: within 3%)
    assert m.params / 1e9 == pytest.approx(456, rel=0.01)
    assert (m.active_params - m.vocab * m.hidden) / 1e9 == pytest.approx(45.9, rel=0.03)
    assert (m.full_attn_layers, m.mixer_layers) == (10, 70) and m.kv_bytes_per_token() == 2 * 10 * 8 * 128 * 2
    assert m.mixer_state_bytes == 70 * 64 * 128 * 128 * 4  # heads x head_dim x head_dim, fp32


@pytest.mark.parametrize("config, msg", [
    ({"hybrid_override_pattern": "M*X"}, "layers other than M \\* - E"),
    ({"hybrid_override_pattern": "M*E"}, "must match num_hidden_layers"),
])
def test_bad_hybrid_configs_are_one_line(config, msg):
    base = {"model_type": "nemotron_h", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 1000, "mamba_num_heads": 4, "mamba_head_dim": 32,
            "ssm_state_size": 16}
    with pytest.raises(ConfigError, match=msg):
        model_from_hf_config(base | config)


@pytest.mark.parametrize("mid", ["nemotron-3-nano-30b-a3b", "qwen3.5-9b", "gpt-oss-20b", "qwen2.5-vl-3b"])
def test_a_short_run_of_each_kind(mid, capsys):
    assert main(["run", "--actor", mid, "--steps", "1", "--batch", "4", "--n", "2", "--max-response", "64",
                 "--max-prompt", "64", "--devices", "8"]) == 0
    assert "step_time_s" in capsys.readouterr().out
