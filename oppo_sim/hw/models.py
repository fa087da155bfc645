"""Transformer model shapes and the numbers derived from them (parameters, KV bytes, FLOPs).

Every count is derived from the shape (as in the models' ``config.json``), never typed in. The layout
is the standard Llama / Qwen decoder: per layer q, k, v, o projections (optional q/k/v bias), a gated
MLP (gate, up, down), two RMSNorms (plus per-head q/k RMSNorm for Qwen3); then a final RMSNorm and an
lm_head that is either its own matrix or tied to the input embedding.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from oppo_sim.core.errors import ConfigError

__all__ = ["ModelSpec", "MODELS", "get_model", "model_from_hf_config"]


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer."""

    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    head_dim: int | None = None  # default hidden // heads (Qwen3 sets 128 explicitly)
    tied_embeddings: bool = False
    qkv_bias: bool = False
    dtype_bytes: int = 2
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3); adds 2 * head_dim params per layer

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ConfigError(f"model id must be a non-empty string, got {self.id!r}")
        for f in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "dtype_bytes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise ConfigError(f"model '{self.id}': {f} must be a positive integer, got {v!r}")
        if self.head_dim is not None and (
            isinstance(self.head_dim, bool) or not isinstance(self.head_dim, (int, np.integer))
            or self.head_dim <= 0
        ):
            raise ConfigError(f"model '{self.id}': head_dim must be a positive integer or None, got {self.head_dim!r}")
        if self.head_dim is None and self.hidden % self.heads:
            raise ConfigError(
                f"model '{self.id}': hidden {self.hidden} not divisible by heads {self.heads}; set head_dim"
            )
        if self.heads % self.kv_heads:
            raise ConfigError(f"model '{self.id}': heads {self.heads} not divisible by kv_heads {self.kv_heads}")
        for f in ("tied_embeddings", "qkv_bias", "qk_norm"):
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f"model '{self.id}': {f} must be a bool, got {getattr(self, f)!r}")

    # ---- derived shape -------------------------------------------------------------------------
    @cached_property
    def hd(self) -> int:
        """Per-head dimension."""
        return int(self.head_dim) if self.head_dim is not None else self.hidden // self.heads

    @cached_property
    def attn_width(self) -> int:
        """Width of the concatenated query heads (heads * hd)."""
        return self.heads * self.hd

    @cached_property
    def kv_width(self) -> int:
        """Width of the concatenated key (or value) heads (kv_heads * hd)."""
        return self.kv_heads * self.hd

    # ---- parameter counts ----------------------------------------------------------------------
    @cached_property
    def _layer_matmul_params(self) -> int:
        h, a, kv = self.hidden, self.attn_width, self.kv_width
        attn = h * a + 2 * h * kv + a * h  # q, k, v, o
        mlp = 3 * h * self.intermediate  # gate, up, down
        return attn + mlp

    @cached_property
    def _layer_other_params(self) -> int:
        bias = (self.attn_width + 2 * self.kv_width) if self.qkv_bias else 0
        norms = 2 * self.hidden + (2 * self.hd if self.qk_norm else 0)
        return bias + norms

    @cached_property
    def _backbone_params(self) -> int:
        """Decoder layers + final norm (no embedding, no head)."""
        return self.layers * (self._layer_matmul_params + self._layer_other_params) + self.hidden

    @cached_property
    def params(self) -> int:
        """Total parameters: embedding, layers, final norm and (untied) lm_head."""
        emb = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else emb
        return emb + self._backbone_params + head

    @cached_property
    def params_scalar_head(self) -> int:
        """Same backbone with the vocab lm_head replaced by a 1-output value head (reward / critic)."""
        return self.vocab * self.hidden + self._backbone_params + self.hidden

    @cached_property
    def matmul_params(self) -> int:
        """Weights that take part in per-token matmuls: layer projections + lm_head (a tied head counted
        once). Excludes the input-embedding lookup, norms and biases."""
        return self.layers * self._layer_matmul_params + self.vocab * self.hidden

    def _matmul_params(self, scalar_head: bool) -> int:
        head = self.hidden if scalar_head else self.vocab * self.hidden
        return self.layers * self._layer_matmul_params + head

    # ---- bytes and FLOPs -----------------------------------------------------------------------
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token: 2 (K and V) * layers * kv_heads * hd * dtype_bytes."""
        return 2 * self.layers * self.kv_heads * self.hd * self.dtype_bytes

    def weight_bytes(self, scalar_head: bool = False) -> int:
        """Bytes of all weights (``params`` or ``params_scalar_head``) at ``dtype_bytes``."""
        return (self.params_scalar_head if scalar_head else self.params) * self.dtype_bytes

    def forward_flops(
        self,
        new_tokens: int | np.ndarray,
        context_tokens: int | np.ndarray = 0,
        scalar_head: bool = False,
    ) -> float | np.ndarray:
        """FLOPs of one forward pass over ``new_tokens`` tokens of one sequence that already has
        ``context_tokens`` cached: ``2 * matmul_params * n`` plus causal attention (QK^T and AV)
        ``4 * layers * attn_width * (n * context + n * (n + 1) / 2)``. Arrays broadcast elementwise.
        With ``scalar_head`` the lm_head term is ``hidden * 1``."""
        n = np.asarray(new_tokens, dtype=np.float64)
        c = np.asarray(context_tokens, dtype=np.float64)
        if np.any(n < 0) or np.any(c < 0):
            raise ConfigError("forward_flops: new_tokens and context_tokens must be >= 0")
        per_token, per_pair = self.flop_coeffs(scalar_head)
        out = per_token * n + per_pair * (n * c + n * (n + 1.0) / 2.0)
        return float(out) if out.ndim == 0 else out

    def flop_coeffs(self, scalar_head: bool = False) -> tuple[float, float]:
        """(FLOPs per token through the matmuls, FLOPs per causal attention (query, key) pair) — the one
        derivation every FLOP count uses, with the vocabulary head or a scalar (reward/value) head."""
        return 2.0 * self._matmul_params(scalar_head), 4.0 * self.layers * self.attn_width

    def with_(self, **changes: Any) -> "ModelSpec":
        """A copy with ``changes`` applied (validated again)."""
        try:
            return dataclasses.replace(self, **changes)
        except TypeError as e:
            raise ConfigError(f"model '{self.id}': {e}") from None


_QWEN25 = dict(qkv_bias=True)
_MODEL_LIST = (
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

MODELS: Mapping[str, ModelSpec] = MappingProxyType({m.id: m for m in _MODEL_LIST})


def get_model(model_id: str) -> ModelSpec:
    """The model spec for ``model_id`` (case-insensitive); unknown id -> ``ConfigError`` listing the known ones."""
    key = str(model_id).strip().lower()
    try:
        return MODELS[key]
    except KeyError:
        raise ConfigError(f"unknown model {model_id!r}; known: {', '.join(MODELS)}") from None


_HF_REQUIRED = (
    ("layers", "num_hidden_layers"),
    ("hidden", "hidden_size"),
    ("heads", "num_attention_heads"),
    ("intermediate", "intermediate_size"),
    ("vocab", "vocab_size"),
)
_HF_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float": 4, "half": 2}


def model_from_hf_config(config: dict, id: str = "custom") -> ModelSpec:
    """A ``ModelSpec`` from a Hugging Face ``config.json`` dict.

    Required: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size.
    Optional: num_key_value_heads (default: num_attention_heads), head_dim, tie_word_embeddings
    (default False), torch_dtype (default bf16 = 2 bytes). qkv bias is inferred from
    ``attention_bias`` or, for ``model_type`` qwen2, set; qk-norm is set for ``model_type`` qwen3.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"model config must be a dict, got {type(config).__name__}")
    kw: dict[str, Any] = {}
    for field, key in _HF_REQUIRED:
        if key not in config:
            raise ConfigError(f"model config missing key '{key}'")
        kw[field] = config[key]
    kw["kv_heads"] = config.get("num_key_value_heads") or config["num_attention_heads"]
    if config.get("head_dim") is not None:
        kw["head_dim"] = config["head_dim"]
    kw["tied_embeddings"] = bool(config.get("tie_word_embeddings", False))
    model_type = str(config.get("model_type", "")).lower()
    kw["qkv_bias"] = bool(config.get("attention_bias", model_type == "qwen2"))
    kw["qk_norm"] = model_type.startswith("qwen3")
    dtype = str(config.get("torch_dtype", "bfloat16")).lower().removeprefix("torch.")
    kw["dtype_bytes"] = _HF_DTYPE_BYTES.get(dtype, 2)
    name = str(config.get("_name_or_path") or id)
    return ModelSpec(id=id, name=name, **kw)
