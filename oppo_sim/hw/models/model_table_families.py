"""Table models of the newer families RL recipes name (verl's, NeMo RL's, OpenRLHF's examples): vision-language
models, hybrid Mamba2 / linear-attention stacks, gpt-oss, GLM, MiniMax, Moonlight — and dense models whose
shape another table model already has (a reward model on Llama-3-8B, a Coder variant of Qwen2.5).

Each is the shape keys of its Hugging Face ``config.json`` (read by :mod:`oppo_sim.hw.models.hf_config` and
:mod:`oppo_sim.hw.models.hf_config_hybrid`, like a user's file), written in this table's own helpers. Sources:
Qwen3-VL, Qwen3.5 (27B, 35B-A3B, 122B-A10B, 397B-A17B), Nemotron-3 Nano/Super, gpt-oss, MiniMax-M2.7,
GLM-5/5.1 and MiMo-7B from ``aiconfigurator-core`` 0.12.0's ``model_configs/`` (Apache-2.0, copies of the
Hub's files); the others (Qwen2.5-VL, Qwen3.5-9B, GLM-4.1V, MiniCPM-o 2.6, Gemma-3-27B, Nemotron-Nano-12B-v2,
Moonlight-16B-A3B, GLM-4.5-Air, Seed-OSS-36B, MiniMax-Text-01/M1) from their Hub ``config.json`` as published, checked against the
parameter counts their model cards give (``tests/test_model_families.py``).
A VLM's entry keeps the wrapper (``text_config``), so its note says the vision tower is left out.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["FAMILY_CONFIGS"]


def text_config(model_type: str, layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int | None,
                vocab: int, tied: bool, head_dim: int | None = None, **extra) -> dict:
    """A decoder's shape keys as its ``config.json`` holds them (bf16; ``intermediate`` None where the MLP width
    comes from other keys); the dense rows of :mod:`oppo_sim.hw.models.model_table` use it too."""
    out = {"model_type": model_type, "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "vocab_size": vocab, "tie_word_embeddings": tied, "torch_dtype": "bfloat16"}
    if intermediate is not None:
        out["intermediate_size"] = intermediate
    if head_dim is not None:
        out["head_dim"] = head_dim
    return out | extra


def _vlm(model_type: str, text: dict) -> dict:
    """A vision-language model: its language backbone under ``text_config`` (the vision tower: not modelled)."""
    return {"model_type": model_type, "text_config": text, "vision_config": {},
            "tie_word_embeddings": text["tie_word_embeddings"]}


def _qwen25_vl(layers: int, hidden: int, heads: int, kv: int, inter: int, vocab: int, tied: bool) -> dict:
    return _vlm("qwen2_5_vl", text_config("qwen2_5_vl_text", layers, hidden, heads, kv, inter, vocab, tied, attention_bias=True))


def _qwen3_vl(layers: int, hidden: int, heads: int, kv: int, inter: int, tied: bool, **moe) -> dict:
    kind = "qwen3_vl_moe" if moe else "qwen3_vl"
    return _vlm(kind, text_config(f"{kind}_text", layers, hidden, heads, kv, inter, 151936, tied, 128, **moe))


def _qwen35(layers: int, hidden: int, heads: int, kv: int, value_heads: int, inter: int | None = None, **moe) -> dict:
    kind = "qwen3_5_moe" if moe else "qwen3_5"
    return _vlm(kind, text_config(f"{kind}_text", layers, hidden, heads, kv, inter, 248320, False, 256, attn_output_gate=True,
                            full_attention_interval=4, linear_conv_kernel_dim=4, linear_key_head_dim=128,
                            linear_num_key_heads=16, linear_num_value_heads=value_heads, linear_value_head_dim=128,
                            mamba_ssm_dtype="float32", **moe))


def _qwen35_moe(experts: int, top_k: int, width: int) -> dict:
    return dict(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width,
                shared_expert_intermediate_size=width, decoder_sparse_step=1, mlp_only_layers=[])


def _nemotron_h(pattern: str, hidden: int, heads: int, kv: int, inter: int, mamba_heads: int, mamba_head_dim: int,
                **extra) -> dict:
    return text_config("nemotron_h", len(pattern), hidden, heads, kv, inter, 131072, False, 128,
                 hybrid_override_pattern=pattern, mamba_num_heads=mamba_heads, mamba_head_dim=mamba_head_dim,
                 ssm_state_size=128, n_groups=8, conv_kernel=4, use_conv_bias=True, **extra)


def _nemotron3_moe(experts: int, top_k: int, width: int, shared: int, **latent) -> dict:
    return dict(n_routed_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width, n_shared_experts=1,
                moe_shared_expert_intermediate_size=shared, mamba_ssm_cache_dtype="float32", **latent)


def _gpt_oss(layers: int, experts: int) -> dict:
    return text_config("gpt_oss", layers, 2880, 64, 8, 2880, 201088, False, 64, attention_bias=True, num_local_experts=experts,
                 num_experts_per_tok=4, sliding_window=128,
                 layer_types=["sliding_attention", "full_attention"] * (layers // 2))


def _deepseek_moe(model_type: str, layers: int, hidden: int, heads: int, inter: int, vocab: int, experts: int,
                  top_k: int, width: int, shared: int, first_dense: int, **extra) -> dict:
    return text_config(model_type, layers, hidden, heads, extra.pop("kv", heads), inter, vocab, False, extra.pop("head_dim", None),
                 n_routed_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=width,
                 n_shared_experts=shared, first_k_dense_replace=first_dense, moe_layer_freq=1, topk_method="noaux_tc",
                 **extra)


def _minimax01() -> dict:
    """MiniMax-Text-01 / M1: lightning attention, softmax attention every 8th layer, 32 experts top-2."""
    return text_config("minimax", 80, 6144, 64, 8, 9216, 200064, False, 128, num_local_experts=32, num_experts_per_tok=2,
                 attn_type_list=([0] * 7 + [1]) * 10)


_MLA = dict(kv_lora_rank=512, qk_rope_head_dim=64)
_NANO3 = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
_SUPER3 = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"
_NANO_V2 = "M-M-M-M*-" * 6 + "M-M-M-M-"  # the model card's 62 layers: 28 Mamba2, 6 attention, 28 MLP (order: counts only)

FAMILY_CONFIGS: Mapping[str, tuple[str, Mapping]] = {
    # vision-language models, priced by their language backbone
    "qwen2.5-vl-3b": ("Qwen2.5-VL-3B", _qwen25_vl(36, 2048, 16, 2, 11008, 151936, True)),
    "qwen2.5-vl-7b": ("Qwen2.5-VL-7B", _qwen25_vl(28, 3584, 28, 4, 18944, 152064, False)),
    "qwen2.5-vl-32b": ("Qwen2.5-VL-32B", _qwen25_vl(64, 5120, 40, 8, 27648, 152064, False)),
    "qwen2.5-vl-72b": ("Qwen2.5-VL-72B", _qwen25_vl(80, 8192, 64, 8, 29568, 152064, False)),
    "qwen3-vl-2b": ("Qwen3-VL-2B", _qwen3_vl(28, 2048, 16, 8, 6144, True)),
    "qwen3-vl-4b": ("Qwen3-VL-4B", _qwen3_vl(36, 2560, 32, 8, 9728, True)),
    "qwen3-vl-8b": ("Qwen3-VL-8B", _qwen3_vl(36, 4096, 32, 8, 12288, False)),
    "qwen3-vl-32b": ("Qwen3-VL-32B", _qwen3_vl(64, 5120, 64, 8, 25600, False)),
    "qwen3-vl-30b-a3b": ("Qwen3-VL-30B-A3B", _qwen3_vl(48, 2048, 32, 4, 6144, False, num_experts=128, num_experts_per_tok=8,
                                                       moe_intermediate_size=768, decoder_sparse_step=1, mlp_only_layers=[])),
    "qwen3-vl-235b-a22b": ("Qwen3-VL-235B-A22B", _qwen3_vl(94, 4096, 64, 4, 12288, False, num_experts=128,
                                                           num_experts_per_tok=8, moe_intermediate_size=1536,
                                                           decoder_sparse_step=1, mlp_only_layers=[])),
    "glm-4.1v-9b": ("GLM-4.1V-9B", _vlm("glm4v", text_config("glm4v_text", 40, 4096, 32, 2, 13696, 151552, False, 128,
                                                        attention_bias=True))),
    "minicpm-o-2-6": ("MiniCPM-o-2.6", _vlm("minicpmo", text_config("qwen2", 28, 3584, 28, 4, 18944, 151700, False))),
    "gemma-3-27b": ("Gemma-3-27B", _vlm("gemma3", text_config("gemma3_text", 62, 5376, 32, 16, 21504, 262208, True, 128))),
    # Qwen3.5: Gated DeltaNet hybrids (and VLMs)
    "qwen3.5-9b": ("Qwen3.5-9B", _qwen35(32, 4096, 16, 4, 32, 12288)),
    "qwen3.5-27b": ("Qwen3.5-27B", _qwen35(64, 5120, 24, 4, 48, 17408)),
    "qwen3.5-35b-a3b": ("Qwen3.5-35B-A3B", _qwen35(40, 2048, 16, 2, 32, **_qwen35_moe(256, 8, 512))),
    "qwen3.5-122b-a10b": ("Qwen3.5-122B-A10B", _qwen35(48, 3072, 32, 2, 64, **_qwen35_moe(256, 8, 1024))),
    "qwen3.5-397b-a17b": ("Qwen3.5-397B-A17B", _qwen35(60, 4096, 32, 2, 64, **_qwen35_moe(512, 10, 1024))),
    # Nemotron-H: Mamba2 + attention (+ MoE)
    "nemotron-nano-12b-v2": ("Nemotron-Nano-12B-v2", _nemotron_h(_NANO_V2, 5120, 40, 8, 20480, 128, 80)),
    "nemotron-3-nano-30b-a3b": ("Nemotron-3-Nano-30B-A3B", _nemotron_h(_NANO3, 2688, 32, 2, 1856, 64, 64,
                                                                       **_nemotron3_moe(128, 6, 1856, 3712))),
    "nemotron-3-super-120b-a12b": ("Nemotron-3-Super-120B-A12B", _nemotron_h(
        _SUPER3, 4096, 32, 2, 2688, 128, 64, **_nemotron3_moe(512, 22, 2688, 5376, moe_latent_size=1024))),
    # MoE families
    "gpt-oss-20b": ("gpt-oss-20b", _gpt_oss(24, 32)),
    "gpt-oss-120b": ("gpt-oss-120b", _gpt_oss(36, 128)),
    "moonlight-16b-a3b": ("Moonlight-16B-A3B", _deepseek_moe("deepseek_v3", 27, 2048, 16, 11264, 163840, 64, 6, 1408, 2, 1,
                                                             q_lora_rank=None, qk_nope_head_dim=128, v_head_dim=128, **_MLA)),
    "glm-4.5-air": ("GLM-4.5-Air", _deepseek_moe("glm4_moe", 46, 4096, 96, 10944, 151552, 128, 8, 1408, 1, 1, kv=8,
                                                 head_dim=128, attention_bias=True)),
    "glm-5.1": ("GLM-5.1", _deepseek_moe("glm_moe_dsa", 78, 6144, 64, 12288, 154880, 256, 8, 2048, 1, 3, q_lora_rank=2048,
                                         qk_nope_head_dim=192, v_head_dim=256, **_MLA)),
    "glm-5": ("GLM-5", _deepseek_moe("glm_moe_dsa", 78, 6144, 64, 12288, 154880, 256, 8, 2048, 1, 3, q_lora_rank=2048,
                                     qk_nope_head_dim=192, v_head_dim=256, **_MLA)),
    "minimax-m2.7": ("MiniMax-M2.7", text_config("minimax_m2", 62, 3072, 48, 8, 1536, 200064, False, 128, num_local_experts=256,
                                           num_experts_per_tok=8, use_qk_norm=True, use_routing_bias=True)),
    "minimax-text-01": ("MiniMax-Text-01", _minimax01()),
    "minimax-m1": ("MiniMax-M1", _minimax01()),
    "minimax-m2.5": ("MiniMax-M2.5", text_config("minimax_m2", 62, 3072, 48, 8, 1536, 200064, False, 128, num_local_experts=256,
                                           num_experts_per_tok=8, use_qk_norm=True, use_routing_bias=True)),
    # dense models named by recipes (MiMo's multi-token-prediction layer is not counted, as DeepSeek-V3's)
    "mimo-7b": ("MiMo-7B", text_config("mimo", 36, 4096, 32, 8, 11008, 151680, False, 128, attention_bias=True)),
    "seed-oss-36b": ("Seed-OSS-36B", text_config("seed_oss", 64, 5120, 80, 8, 27648, 155136, False, 128, attention_bias=True)),
    "qwen2.5-coder-7b": ("Qwen2.5-Coder-7B", text_config("qwen2", 28, 3584, 28, 4, 18944, 152064, False)),
    "qwen2.5-coder-14b": ("Qwen2.5-Coder-14B", text_config("qwen2", 48, 5120, 40, 8, 13824, 152064, False)),
    "qwen2.5-coder-32b": ("Qwen2.5-Coder-32B", text_config("qwen2", 64, 5120, 40, 8, 27648, 152064, False)),
    "fsfairx-llama3-rm": ("FsfairX-LLaMA3-RM (Llama-3-8B)", text_config("llama", 32, 4096, 32, 8, 14336, 128256, False)),
}
"""Shape keys of each family model's ``config.json`` (id -> (display name, keys))."""
