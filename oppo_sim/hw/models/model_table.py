"""The models ``--actor``/``--reward`` know by id: their shapes, from their published ``config.json``.

The Qwen2.5, Qwen3 and Llama-3.1 entries are written as shapes; the newer ones (two Qwen3 MoE models,
DeepSeek-V3, Qwen2.5-Math-7B, Llama-2) are the shape keys of their Hugging Face ``config.json``, read by
the same reader a user's config goes through (:func:`oppo_sim.hw.models.hf_config.model_from_hf_config`); the
test suite holds the full files (``tests/fixtures/hf_configs/<id>/config.json``) and checks that each
reads to its table entry. Counts, with the reader's conventions (DeepSeek-V3 without its
multi-token-prediction layer): Qwen3-30B-A3B 30.5B total / 3.3B active, Qwen3-235B-A22B 235B / 22B,
DeepSeek-V3 671B / 37B, Llama-2 6.74B / 13.0B / 69.0B.

The models RL recipes (verl's, OpenRLHF's, NeMo RL's examples) use most are here too, so that a hub id or
a local path ending in one (``Qwen/Qwen3-4B``, ``/root/models/deepseek-llm-7b-chat``) resolves offline:
Qwen3-0.6B/1.7B from ``aiconfigurator-core`` 0.12.0's ``model_configs/`` (Apache-2.0, copies of the Hub's
``config.json``; also in ``tests/fixtures/hf_configs/``), the others from their Hub ``config.json`` values
(Qwen3-4B/14B, Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B and Gemma-3-4B cross-checked against public copies of
them). An -Instruct/-chat/-base variant has its base's shape (Llama-3.3-70B: Llama-3.1-70B's; DeepSeek-R1-Distill-Qwen-1.5B:
Qwen2.5-Math-1.5B's, embeddings untied).
Gemma-2/3's sliding-window layers are counted with a full KV cache (an upper bound on their KV memory).
The newer families recipes name (VLMs, hybrids, gpt-oss, GLM, MiniMax, Moonlight) are in
:mod:`oppo_sim.hw.models.model_table_families`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from oppo_sim.hw.models.hf_config import model_from_hf_config
from oppo_sim.hw.models.model_spec import ModelSpec
from oppo_sim.hw.models.model_table_families import FAMILY_CONFIGS, text_config

__all__ = ["MODELS", "HF_CONFIGS"]

_QWEN25 = dict(qkv_bias=True)
_SHAPES = (
    ModelSpec("qwen2.5-0.5b", "Qwen2.5-0.5B", 24, 896, 14, 2, 4864, 151936, tied_embeddings=True, **_QWEN25),
    ModelSpec("qwen2.5-1.5b", "Qwen2.5-1.5B", 28, 1536, 12, 2, 8960, 151936, tied_embeddings=True, **_QWEN25),
    ModelSpec("qwen2.5-3b", "Qwen2.5-3B", 36, 2048, 16, 2, 11008, 151936, tied_embeddings=True, **_QWEN25),
    ModelSpec("qwen2.5-7b", "Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, **_QWEN25),
    ModelSpec("qwen2.5-14b", "Qwen2.5-14B", 48, 5120, 40, 8, 13824, 152064, **_QWEN25),
    ModelSpec("qwen2.5-32b", "Qwen2.5-32B", 64, 5120, 40, 8, 27648, 152064, **_QWEN25),
    ModelSpec("qwen2.5-72b", "Qwen2.5-72B", 80, 8192, 64, 8, 29568, 152064, **_QWEN25),
    ModelSpec("qwen3-8b", "Qwen3-8B", 36, 4096, 32, 8, 12288, 151936, head_dim=128, qk_norm=True),
    ModelSpec("qwen3-32b", "Qwen3-32B", 64, 5120, 64, 8, 25600, 151936, head_dim=128, qk_norm=True),
    ModelSpec("llama-3.1-8b", "Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256),
    ModelSpec("llama-3.1-70b", "Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256),
)


def _qwen3_moe(layers: int, hidden: int, heads: int, moe_intermediate: int, intermediate: int) -> dict:
    return {"model_type": "qwen3_moe", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": intermediate, "vocab_size": 151936,
            "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": moe_intermediate,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _llama2(layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int) -> dict:
    return {"model_type": "llama", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "intermediate_size": intermediate, "vocab_size": 32000,
            "tie_word_embeddings": False, "torch_dtype": "float16"}


_dense = text_config  # a dense decoder's config keys (one helper for both tables)


HF_CONFIGS: Mapping[str, tuple[str, Mapping]] = MappingProxyType({
    "qwen3-30b-a3b": ("Qwen3-30B-A3B", _qwen3_moe(48, 2048, 32, 768, 6144)),
    "qwen3-235b-a22b": ("Qwen3-235B-A22B", _qwen3_moe(94, 4096, 64, 1536, 12288)),
    "deepseek-v3": ("DeepSeek-V3", {
        "model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
        "num_key_value_heads": 128, "intermediate_size": 18432, "vocab_size": 129280,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
        "first_k_dense_replace": 3, "moe_layer_freq": 1, "topk_method": "noaux_tc", "num_nextn_predict_layers": 1,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "attention_bias": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "qwen2.5-math-7b": ("Qwen2.5-Math-7B", {
        "model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
        "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}),
    "llama-2-7b": ("Llama-2-7B", _llama2(32, 4096, 32, 32, 11008)),
    "llama-2-13b": ("Llama-2-13B", _llama2(40, 5120, 40, 40, 13824)),
    "llama-2-70b": ("Llama-2-70B", _llama2(80, 8192, 64, 8, 28672)),
    "qwen3-0.6b": ("Qwen3-0.6B", _dense("qwen3", 28, 1024, 16, 8, 3072, 151936, True, 128, attention_bias=False)),
    "qwen3-1.7b": ("Qwen3-1.7B", _dense("qwen3", 28, 2048, 16, 8, 6144, 151936, True, 128, attention_bias=False)),
    "qwen3-4b": ("Qwen3-4B", _dense("qwen3", 36, 2560, 32, 8, 9728, 151936, True, 128, attention_bias=False)),
    "qwen3-14b": ("Qwen3-14B", _dense("qwen3", 40, 5120, 40, 8, 17408, 151936, False, 128, attention_bias=False)),
    "qwen2-0.5b": ("Qwen2-0.5B", _dense("qwen2", 24, 896, 14, 2, 4864, 151936, True)),
    "qwen2-1.5b": ("Qwen2-1.5B", _dense("qwen2", 28, 1536, 12, 2, 8960, 151936, True)),
    "qwen2-7b": ("Qwen2-7B", _dense("qwen2", 28, 3584, 28, 4, 18944, 152064, False)),
    "qwen2-72b": ("Qwen2-72B", _dense("qwen2", 80, 8192, 64, 8, 29568, 152064, False)),
    "qwen1.5-moe-a2.7b": ("Qwen1.5-MoE-A2.7B", _dense(
        "qwen2_moe", 24, 2048, 16, 16, 5632, 151936, False, num_experts=60, num_experts_per_tok=4,
        moe_intermediate_size=1408, shared_expert_intermediate_size=5632, decoder_sparse_step=1, mlp_only_layers=[])),
    "qwen2-57b-a14b": ("Qwen2-57B-A14B", _dense(
        "qwen2_moe", 28, 3584, 28, 4, 18944, 151936, False, num_experts=64, num_experts_per_tok=8,
        moe_intermediate_size=2560, shared_expert_intermediate_size=20480, decoder_sparse_step=1, mlp_only_layers=[])),
    "llama-3-8b": ("Llama-3-8B", _dense("llama", 32, 4096, 32, 8, 14336, 128256, False)),
    "llama-3-70b": ("Llama-3-70B", _dense("llama", 80, 8192, 64, 8, 28672, 128256, False)),
    "llama-3.3-70b": ("Llama-3.3-70B", _dense("llama", 80, 8192, 64, 8, 28672, 128256, False)),
    "qwen2.5-math-1.5b": ("Qwen2.5-Math-1.5B", _dense("qwen2", 28, 1536, 12, 2, 8960, 151936, True)),
    "deepseek-r1-distill-qwen-1.5b": ("DeepSeek-R1-Distill-Qwen-1.5B", _dense("qwen2", 28, 1536, 12, 2, 8960, 151936, False)),
    "deepseek-llm-7b": ("DeepSeek-LLM-7B", _dense("llama", 30, 4096, 32, 32, 11008, 102400, False)),
    "deepseek-llm-67b": ("DeepSeek-LLM-67B", _dense("llama", 95, 8192, 64, 8, 22016, 102400, False)),
    "llama-3.2-1b": ("Llama-3.2-1B", _dense("llama", 16, 2048, 32, 8, 8192, 128256, True, 64)),
    "llama-3.2-3b": ("Llama-3.2-3B", _dense("llama", 28, 3072, 24, 8, 8192, 128256, True, 128)),
    "mistral-nemo": ("Mistral-Nemo-12B", _dense("mistral", 40, 5120, 32, 8, 14336, 131072, False, 128)),
    "gemma-2-2b": ("Gemma-2-2B", _dense("gemma2", 26, 2304, 8, 4, 9216, 256000, True, 256)),
    "gemma-2-9b": ("Gemma-2-9B", _dense("gemma2", 42, 3584, 16, 8, 14336, 256000, True, 256)),
    "gemma-3-1b": ("Gemma-3-1B", _dense("gemma3_text", 26, 1152, 4, 1, 6912, 262144, True, 256)),
    "gemma-3-4b": ("Gemma-3-4B", _dense("gemma3_text", 34, 2560, 8, 4, 10240, 262208, True, 256)),
})
"""Shape keys of each table model's ``config.json`` (id -> (display name, keys))."""

MODELS: Mapping[str, ModelSpec] = MappingProxyType(
    {m.id: m for m in _SHAPES}
    | {mid: model_from_hf_config(cfg, id=mid, name=name) for mid, (name, cfg) in (HF_CONFIGS | FAMILY_CONFIGS).items()}
)
