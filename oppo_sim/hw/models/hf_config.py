"""Reading a Hugging Face ``config.json`` into a :class:`~oppo_sim.hw.models.model_spec.ModelSpec`.

Any ``model_type`` with the standard keys works: ``num_hidden_layers``, ``hidden_size``,
``num_attention_heads``, ``intermediate_size``, ``vocab_size`` (required), ``num_key_value_heads``
(default: the attention heads), ``head_dim``, ``tie_word_embeddings`` (default false), ``torch_dtype``
(or ``dtype``; default bf16), ``attention_bias`` (default: on for ``qwen2``/``qwen2_moe``). Per-head
q/k RMSNorm is on for the ``qwen3`` family. Mixture-of-experts and MLA keys are read per family:

- ``qwen2_moe`` / ``qwen3_moe``: ``num_experts`` (``num_local_experts`` as transformers 5 saves it), ``num_experts_per_tok``, ``moe_intermediate_size``,
  ``shared_expert_intermediate_size`` (Qwen2-MoE, with its sigmoid gate), ``mlp_only_layers`` and
  ``decoder_sparse_step`` (a layer ``i`` not in ``mlp_only_layers`` is sparse when ``(i + 1) %
  decoder_sparse_step == 0``);
- ``deepseek_v2`` / ``deepseek_v3``: ``n_routed_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size``, ``n_shared_experts`` (each ``moe_intermediate_size`` wide),
  ``first_k_dense_replace`` and ``moe_layer_freq`` (layer ``i`` is sparse when ``i >=
  first_k_dense_replace`` and ``i % moe_layer_freq == 0``), the per-expert router bias of ``topk_method``
  ``noaux_tc``, and MLA's ``kv_lora_rank``, ``q_lora_rank`` (null: no query compression),
  ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``. DeepSeek-V3's multi-token-prediction
  layer (``num_nextn_predict_layers``) is a training aid RL frameworks neither train nor run: it is
  **not** counted (671B total, 37B active, as DeepSeek quotes them without it);
- ``mixtral``: ``num_local_experts``, ``num_experts_per_tok``, experts ``intermediate_size`` wide.

Quantised checkpoints (DeepSeek-V3 ships FP8 weights) are read at their ``torch_dtype`` (bf16), the
precision RL trainers hold them in. A missing file, unreadable JSON or a missing key is one
``ConfigError`` line naming the file and the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.userfiles import user_path
from oppo_sim.hw.models.hf_config_hybrid import hybrid_fields, vlm_text_config
from oppo_sim.hw.models.model_spec import ModelSpec

__all__ = ["model_from_hf_config", "read_hf_config", "hf_config_path"]

_HF_REQUIRED = (
    ("layers", "num_hidden_layers"),
    ("hidden", "hidden_size"),
    ("heads", "num_attention_heads"),
    ("intermediate", "intermediate_size"),
    ("vocab", "vocab_size"),
)
_HF_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float": 4, "half": 2}
_MLA_KEYS = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_DEEPSEEK_MOE = ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "glm4v_moe_text", "glm_moe_dsa")
_DSA_NOTE = ("sparse attention priced as dense (an upper bound past index_topk tokens); the indexer's weights "
             "are left out")


def _dtype_bytes(dtype: str, where: str) -> int:
    """Bytes a weight of ``torch_dtype`` takes: bf16 / fp16 / fp32 as named; an FP8 checkpoint is priced as bf16 (the
    engine and trainer kernels are; FP8 rollouts are not modelled); anything else is refused."""
    if dtype in _HF_DTYPE_BYTES:
        return _HF_DTYPE_BYTES[dtype]
    if dtype.startswith(("float8", "fp8")):
        return 2
    raise ConfigError(f"model config{where}: torch_dtype {dtype!r} is not one of {', '.join(_HF_DTYPE_BYTES)} (or an FP8 "
                      "type, priced as bfloat16)")


def _need(config: Mapping, key: str, where: str) -> Any:
    if key not in config or config[key] is None:
        raise ConfigError(f"model config{where} missing key '{key}'")
    return config[key]


def _sparse_layers_qwen(config: Mapping, layers: int) -> int:
    only = set(config.get("mlp_only_layers") or ())
    step = int(config.get("decoder_sparse_step") or 1)
    return sum(1 for i in range(layers) if i not in only and (i + 1) % step == 0)


def _sparse_layers_deepseek(config: Mapping, layers: int) -> int:
    first = int(config.get("first_k_dense_replace") or 0)
    freq = int(config.get("moe_layer_freq") or 1)
    return sum(1 for i in range(layers) if i >= first and i % freq == 0)


def _moe_fields(config: Mapping, family: str, layers: int, where: str) -> dict[str, Any]:
    """The ``ModelSpec`` MoE keywords of ``config`` (empty for a dense model)."""
    if family.startswith(("qwen2_moe", "qwen3")) and (config.get("num_experts") or config.get("num_local_experts")):
        key = "num_experts" if config.get("num_experts") is not None or "num_local_experts" not in config else "num_local_experts"
        kw = dict(experts=_need(config, key, where), moe_intermediate=_need(config, "moe_intermediate_size", where))
        shared = int(config.get("shared_expert_intermediate_size") or 0)
        kw.update(shared_intermediate=shared, shared_expert_gate=shared > 0)
        sparse = _sparse_layers_qwen(config, layers)
    elif family in _DEEPSEEK_MOE:
        moe_int = _need(config, "moe_intermediate_size", where)
        kw = dict(experts=_need(config, "n_routed_experts", where), moe_intermediate=moe_int,
                  shared_intermediate=int(config.get("n_shared_experts") or 0) * moe_int,
                  router_bias=config.get("topk_method") == "noaux_tc" or family.startswith("glm"))
        sparse = _sparse_layers_deepseek(config, layers)
    elif family in ("mixtral", "minimax_m2", "minimax", "minimax_m1"):
        kw = dict(experts=_need(config, "num_local_experts", where), moe_intermediate=config["intermediate_size"],
                  router_bias=bool(config.get("use_routing_bias")))
        sparse = layers
    else:
        return {}
    if not kw["experts"]:
        return {}
    kw["experts_per_token"] = _need(config, "num_experts_per_tok", where)
    kw["dense_layers"] = layers - sparse
    return kw


def _mla_fields(config: Mapping, where: str) -> dict[str, Any]:
    if not config.get("kv_lora_rank"):
        return {}
    kw = {k: _need(config, k, where) for k in _MLA_KEYS}
    kw["q_lora_rank"] = int(config.get("q_lora_rank") or 0)
    return kw


def model_from_hf_config(config: Mapping, id: str = "custom", name: str | None = None, source: str = "") -> ModelSpec:
    """A ``ModelSpec`` from a Hugging Face ``config.json`` dict (see the module docstring for the keys).
    ``source``: the file it came from, named in errors."""
    where = f" {source}" if source else ""
    if not isinstance(config, Mapping):
        raise ConfigError(f"model config{where} must be a JSON object, got {type(config).__name__}")
    config, note = vlm_text_config(config)
    if config.get("intermediate_size") is None and config.get("moe_intermediate_size"):  # every layer MoE
        config = {**config, "intermediate_size": config["moe_intermediate_size"]}
    kw: dict[str, Any] = {field: _need(config, key, where) for field, key in _HF_REQUIRED}
    kv = config.get("num_key_value_heads")
    kw["kv_heads"] = config["num_attention_heads"] if kv is None else kv  # 0 is an error (ModelSpec says so), not "unset"
    if config.get("head_dim") is not None:
        kw["head_dim"] = config["head_dim"]
    tied = config.get("tie_word_embeddings")
    if tied is not None and not isinstance(tied, bool):
        raise ConfigError(f"model config{where}: tie_word_embeddings must be true or false, got {tied!r}")
    kw["tied_embeddings"] = bool(tied)
    family = str(config.get("model_type", "")).lower()
    kw["qkv_bias"] = bool(config.get("attention_bias", family in ("qwen2", "qwen2_moe")))
    kw["qk_norm"] = family.startswith("qwen3") or bool(config.get("use_qk_norm"))
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").lower().removeprefix("torch.")
    kw["dtype_bytes"] = _dtype_bytes(dtype, where)
    kw.update(_moe_fields(config, family, int(kw["layers"]), where))
    kw.update(_mla_fields(config, where))
    kw.update(hybrid_fields(config, family, where, kw["dtype_bytes"]))
    if family == "glm_moe_dsa":
        note = "; ".join(filter(None, (note, _DSA_NOTE)))
    kw["note"] = note
    if kw.get("kv_lora_rank"):
        kw.pop("head_dim", None)  # MLA's head dims are its own
    label = name or str(config.get("_name_or_path") or id)
    try:
        return ModelSpec(id=id, name=label, **kw)
    except ConfigError as e:
        raise ConfigError(f"{e}{' (from ' + source + ')' if source else ''}") from None


def hf_config_path(arg: str | Path) -> Path:
    """The ``config.json`` that ``arg`` names: the file itself, or the one in a directory."""
    p = user_path(arg)
    return p / "config.json" if p.is_dir() else p


def read_hf_config(arg: str | Path) -> ModelSpec:
    """The ``ModelSpec`` of a Hugging Face ``config.json`` (a file, or a directory holding one). Its id
    is the model's directory name (``Qwen/Qwen3-30B-A3B/config.json`` -> ``Qwen3-30B-A3B``), or the
    file's stem when that is not ``config``."""
    path = hf_config_path(arg)
    if not path.is_file():
        raise ConfigError(f"model config {path}: no such file (give a model id, a config.json or a directory holding one)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"model config {path}: not readable JSON ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    stem = path.stem if path.stem.lower() != "config" else (path.resolve().parent.name or "model")
    return model_from_hf_config(config, id=stem, name=stem, source=str(path))
