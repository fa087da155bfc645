"""The simulator's shape (``ModelSpec``) of a local Hugging Face model directory, the dtype a device
computes in, and the shapes a profile can be run at: what every profiler needs to price a timed call
with the cost model's formulas.

``--shape`` of ``oppo-real profile`` names a model-table entry (``oppo_sim.hw.models.lookup``: the dense Qwen2.5
shapes 0.5B–7B, ...) or one of :data:`PROFILE_SHAPES`, mixtures of experts small enough to profile on one
GPU: **qwen3-moe-2.8b-a0.5b**, Qwen3-30B-A3B's routing (128 experts, top-8, no shared expert, q/k-norm,
4 KV heads of 128) at half its width (hidden 1024, experts 384 wide) and a third of its depth (16
layers): 2.81B parameters, 0.55B active. A decode batch of ``b`` sequences sends ``8b`` token-expert pairs
to 128 experts, so up to b = 16 most experts see one token or none — the grouped-expert GEMM at few
tokens per expert that the cost model prices from the experts touched (``ModelSpec.weight_bytes_read``).
**qwen3-moe-tiny** is the same architecture at a size the CPU tests run end to end.
"""

from __future__ import annotations

import json
from pathlib import Path

from oppo_sim.hw.models.lookup import ModelSpec, get_model, model_from_hf_config


def _qwen3_moe(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, experts: int, top_k: int,
               moe_intermediate: int, vocab: int) -> dict:
    return {"model_type": "qwen3_moe", "num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": head_dim, "intermediate_size": 3 * hidden, "vocab_size": vocab,
            "num_experts": experts, "num_experts_per_tok": top_k, "moe_intermediate_size": moe_intermediate,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16"}


PROFILE_SHAPES: dict[str, tuple[str, dict]] = {
    "qwen3-moe-2.8b-a0.5b": ("Qwen3-MoE-like 2.8B-A0.5B (Qwen3-30B-A3B routing, half width, 16 layers)",
                             _qwen3_moe(16, 1024, 16, 4, 128, 128, 8, 384, 151936)),
    "qwen3-moe-tiny": ("Qwen3-MoE-like tiny (CPU tests)", _qwen3_moe(2, 64, 4, 2, 16, 16, 4, 32, 512)),
}
"""Shapes only the profiler builds (id -> (name, the Hugging Face config it is built from))."""


def profile_shape(name: str) -> ModelSpec:
    """The shape ``--shape`` names: one of :data:`PROFILE_SHAPES`, else a model-table id or config path."""
    key = str(name).strip().lower()
    if key in PROFILE_SHAPES:
        label, config = PROFILE_SHAPES[key]
        return model_from_hf_config(config, id=key, name=label)
    return get_model(name)


def model_spec(model_dir: Path, dtype_bytes: int = 4) -> ModelSpec:
    """The simulator's shape of a local HF model (the tiny models run in float32)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    if str(cfg.get("model_type", "")).endswith("_moe") and "num_experts" not in cfg and "num_local_experts" in cfg:
        cfg["num_experts"] = cfg["num_local_experts"]  # the name transformers 5 saves Qwen-MoE's expert count under
    return model_from_hf_config(cfg, id=Path(model_dir).parent.name or "local").with_(dtype_bytes=dtype_bytes)


def expert_columns(spec: ModelSpec, tokens: int, model=None) -> dict:
    """For a mixture of experts, the columns a timed forward over ``tokens`` tokens adds to its row: the
    token-expert pairs per expert (``tokens * k / E``), the distinct experts per layer it touches under
    uniform routing (what the cost model charges the weight reads of), and the experts implementation
    transformers ran (``grouped_mm`` or ``eager``: the model's ``config._experts_implementation``); {} if
    dense."""
    if not spec.moe:
        return {}
    impl = getattr(getattr(model, "config", None), "_experts_implementation", None)
    return {"tokens_per_expert": tokens * spec.experts_per_token / spec.experts,
            "experts_touched": float(spec.touched_experts(tokens)), "experts_impl": impl or ""}


def compute_dtype(device: str) -> tuple[str, int]:
    """(dtype, bytes per element) a device computes in: bf16 on a GPU, fp32 on the CPU."""
    return ("bfloat16", 2) if device.startswith("cuda") else ("float32", 4)
