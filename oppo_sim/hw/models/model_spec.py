"""The shape of a decoder-only transformer — dense, mixture-of-experts (MoE) or with multi-head latent
attention (MLA) — and every count derived from it: parameters, KV-cache bytes, FLOPs, bytes a decode
iteration reads.

Nothing is typed in but the shape (the numbers of the model's ``config.json``). Per layer:

- **attention**: standard (grouped-query) attention has q, k, v, o projections (optional q/k/v bias,
  optional per-head q/k RMSNorm as in Qwen3); **MLA** (DeepSeek-V2/V3, ``kv_lora_rank`` > 0) has
  ``q_a`` (hidden -> ``q_lora_rank``, with its RMSNorm) and ``q_b`` (-> heads x (``qk_nope_head_dim`` +
  ``qk_rope_head_dim``)), or one ``q_proj`` when ``q_lora_rank`` is 0; ``kv_a`` (hidden ->
  ``kv_lora_rank`` + ``qk_rope_head_dim``, with an RMSNorm on the latent); ``kv_b`` (latent -> heads x
  (``qk_nope_head_dim`` + ``v_head_dim``)); ``o`` (heads x ``v_head_dim`` -> hidden).
- **MLP**: a gated MLP (gate, up, down) of width ``intermediate`` — or, in a **MoE layer**, a router
  (hidden x ``experts``, plus DeepSeek-V3's per-expert score bias), ``experts`` routed experts of width
  ``moe_intermediate`` of which each token runs ``experts_per_token`` (top-k), and shared experts every
  token runs (total width ``shared_intermediate``; Qwen2-MoE adds a sigmoid gate, hidden -> 1). The
  first ``dense_layers`` layers' worth of MLPs stay dense (DeepSeek ``first_k_dense_replace``, Qwen3-MoE
  ``mlp_only_layers``).
- two RMSNorms; then a final RMSNorm and an lm_head, its own matrix or tied to the input embedding.

Three parameter counts serve three purposes: :attr:`ModelSpec.params` (all of them: memory, weight
sync, optimizer state), :attr:`ModelSpec.matmul_params` (the weights one token multiplies through — for
a MoE model the *active* ones: router, top-k experts, shared experts; FLOPs), and
:meth:`ModelSpec.weight_bytes_read` (the weights one forward over ``b`` tokens reads — for a MoE model
only the experts those tokens touch; the roofline's bytes). Under uniform routing a batch of ``b``
tokens touches ``E·(1 − (1 − k/E)^b)`` distinct experts per MoE layer in expectation (each expert is
missed by one token with probability ``1 − k/E``): one token reads ``k`` experts, a large batch all ``E``.
Real routers are not uniform (popular experts make the true number smaller); that is not modelled.

MLA caches the compressed latent and the shared rotary key per token, ``layers · (kv_lora_rank +
qk_rope_head_dim) · dtype_bytes`` bytes (what vLLM caches for MLA), instead of K and V per head;
attention costs ``2·heads·(qk head dim + v_head_dim)`` FLOPs per (query, key) pair per layer, the
unabsorbed form training and prefill run (vLLM's decode absorbs ``kv_b`` into the query and output and
attends over the latent instead: more FLOPs per pair, the same bytes; not modelled).

**Hybrid stacks** (Nemotron-H's Mamba2 layers, Qwen3-Next/3.5's Gated DeltaNet linear attention): only the
``attn_layers`` softmax-attention layers have a KV cache and per-(query, key) attention cost; each of the
``mixer_layers`` other layers is priced as its weights (``mixer_params``: 2 FLOPs per weight per token, read
like any weight) and keeps a recurrent state of constant size per sequence (``mixer_state_bytes`` over all of
them; :mod:`oppo_sim.hw.models.hf_config_hybrid` derives both from the config). A non-gated MLP (``gated_mlp``
False: Nemotron-H's ReLU², up and down) has two matrices; a latent MoE (``moe_latent``) runs its routed experts
in that width between a down and an up projection per MoE layer; ``q_gate``: the query projection also emits
an output gate (Qwen3-Next/3.5).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from oppo_sim.core.errors import ConfigError

__all__ = ["ModelSpec"]

_POSITIVE = ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "dtype_bytes")
_NONNEG = ("experts", "experts_per_token", "moe_intermediate", "shared_intermediate", "dense_layers",
           "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "attn_layers",
           "mixer_layers", "mixer_params", "mixer_tensors", "mixer_act_width", "mixer_state_bytes", "moe_latent")
_BOOLS = ("tied_embeddings", "qkv_bias", "qk_norm", "shared_expert_gate", "router_bias", "gated_mlp", "q_gate")


def _is_int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer))


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer (dense when ``experts`` is 0; MLA when ``kv_lora_rank`` > 0)."""

    id: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int  # a dense MLP's width (MoE models: the dense-first layers')
    vocab: int
    head_dim: int | None = None  # default hidden // heads (Qwen3 sets 128 explicitly)
    tied_embeddings: bool = False
    qkv_bias: bool = False
    dtype_bytes: int = 2
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3); adds 2 * head_dim params per layer
    # mixture of experts (experts = 0: dense)
    experts: int = 0  # routed experts per MoE layer, E
    experts_per_token: int = 0  # top-k, k
    moe_intermediate: int = 0  # one routed expert's width
    shared_intermediate: int = 0  # the shared experts' total width (0: none)
    shared_expert_gate: bool = False  # Qwen2-MoE's sigmoid gate on the shared expert (hidden -> 1)
    router_bias: bool = False  # DeepSeek-V3's per-expert score correction bias
    dense_layers: int = 0  # layers whose MLP stays dense
    # multi-head latent attention (kv_lora_rank = 0: standard attention)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0: a full q_proj
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # hybrid stacks and variants (module docstring)
    attn_layers: int = 0  # layers with softmax attention (0: every one of ``layers``)
    mixer_layers: int = 0  # Mamba2 / linear-attention layers
    mixer_params: int = 0  # one mixer layer's weights
    mixer_tensors: int = 0  # one mixer layer's parameter tensors
    mixer_act_width: int = 0  # per token, what one mixer layer keeps for its backward
    mixer_state_bytes: int = 0  # one sequence's recurrent state over all mixer layers (constant in its length)
    gated_mlp: bool = True  # gate, up, down; False: up, down (Nemotron-H)
    moe_latent: int = 0  # routed experts' input width (0: hidden)
    q_gate: bool = False  # q_proj also emits an output gate (twice as wide)
    note: str = ""  # what the reader left out (a VLM's vision tower, ...), said where the model is echoed

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise ConfigError(f"model id must be a non-empty string, got {self.id!r}")
        for f in _POSITIVE + _NONNEG:
            v = getattr(self, f)
            if not _is_int(v) or v < (1 if f in _POSITIVE else 0):
                kind = "a positive integer" if f in _POSITIVE else "an integer >= 0"
                raise ConfigError(f"model '{self.id}': {f} must be {kind}, got {v!r}")
        if self.head_dim is not None and (not _is_int(self.head_dim) or self.head_dim <= 0):
            raise ConfigError(f"model '{self.id}': head_dim must be a positive integer or None, got {self.head_dim!r}")
        if self.head_dim is None and not self.mla and self.hidden % self.heads:
            raise ConfigError(
                f"model '{self.id}': hidden {self.hidden} not divisible by heads {self.heads}; set head_dim"
            )
        if self.heads % self.kv_heads:
            raise ConfigError(f"model '{self.id}': heads {self.heads} not divisible by kv_heads {self.kv_heads}")
        for f in _BOOLS:
            if not isinstance(getattr(self, f), bool):
                raise ConfigError(f"model '{self.id}': {f} must be a bool, got {getattr(self, f)!r}")
        self._check_moe()
        if self.mixer_layers and not self.mixer_params:
            raise ConfigError(f"model '{self.id}': {self.mixer_layers} mixer layers need mixer_params >= 1")
        if self.mla and (self.qk_rope_head_dim + self.qk_nope_head_dim < 1 or self.v_head_dim < 1):
            raise ConfigError(f"model '{self.id}': MLA needs qk_rope_head_dim + qk_nope_head_dim >= 1 and v_head_dim >= 1")

    def _check_moe(self) -> None:
        if not self.moe:
            if self.experts_per_token or self.moe_intermediate or self.shared_intermediate or self.dense_layers:
                raise ConfigError(f"model '{self.id}': expert settings given but experts is 0 (a dense model)")
            return
        if not 1 <= self.experts_per_token <= self.experts:
            raise ConfigError(f"model '{self.id}': experts_per_token must be in [1, experts = {self.experts}], "
                              f"got {self.experts_per_token}")
        if self.moe_intermediate < 1:
            raise ConfigError(f"model '{self.id}': a MoE model needs moe_intermediate >= 1")
        if self.dense_layers >= self.layers:
            raise ConfigError(f"model '{self.id}': dense_layers {self.dense_layers} leaves no MoE layer of {self.layers}")

    # ---- derived shape -------------------------------------------------------------------------
    @property
    def moe(self) -> bool:
        """A mixture-of-experts model."""
        return self.experts > 0

    @property
    def mla(self) -> bool:
        """Multi-head latent attention."""
        return self.kv_lora_rank > 0

    @property
    def pipeline_layers(self) -> int:
        """The layers a Megatron pipeline splits: ``layers``, where each holds its attention (or mixer) and MLP; a
        Nemotron-H pattern's characters each (mixer, attention and MLP layers apart: more than ``layers``)."""
        split = self.attn_layers + self.mixer_layers
        return self.layers if split <= self.layers else self.layers + split

    @cached_property
    def full_attn_layers(self) -> int:
        """Layers with softmax attention (a KV cache): ``attn_layers``, or every layer."""
        return self.attn_layers or self.layers

    @cached_property
    def _mlp_mats(self) -> int:
        return 3 if self.gated_mlp else 2

    @cached_property
    def moe_layers(self) -> int:
        """Layers with a routed-expert MLP (0 for a dense model)."""
        return self.layers - self.dense_layers if self.moe else 0

    @cached_property
    def hd(self) -> int:
        """Per-head query/key dimension (MLA: ``qk_nope_head_dim + qk_rope_head_dim``)."""
        if self.mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return int(self.head_dim) if self.head_dim is not None else self.hidden // self.heads

    @cached_property
    def attn_width(self) -> int:
        """Width of the concatenated query heads (heads * hd)."""
        return self.heads * self.hd

    @cached_property
    def kv_width(self) -> int:
        """Width of the concatenated key (or value) heads (kv_heads * hd)."""
        return self.kv_heads * self.hd

    @cached_property
    def attn_act_width(self) -> int:
        """Width of the attention tensors a layer keeps per token for its backward: Q, the attention
        output, K and V (MLA: K and V per head after ``kv_b``, plus the two latents); averaged over the layers of
        a hybrid stack with its mixer layers' ``mixer_act_width``."""
        if not self.mla:
            attn = 2 * self.attn_width + 2 * self.kv_width
        else:
            v = self.heads * self.v_head_dim
            attn = 2 * self.attn_width + 2 * v + self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim
        if not self.attn_layers:
            return attn
        return (self.full_attn_layers * attn + self.mixer_layers * self.mixer_act_width) // self.layers

    @cached_property
    def mlp_act_width(self) -> float:
        """Intermediate width one token passes through in an average layer's MLP: ``intermediate`` in a
        dense layer; the top-k experts' and the shared experts' widths in a MoE layer."""
        if not self.moe:
            return self.intermediate
        moe = self.experts_per_token * self.moe_intermediate + self.shared_intermediate
        return (self.dense_layers * self.intermediate + self.moe_layers * moe) / self.layers

    # ---- parameter counts ----------------------------------------------------------------------
    @cached_property
    def _attn_matmul_params(self) -> int:
        h = self.hidden
        if not self.mla:
            a, kv = self.attn_width, self.kv_width
            return h * a * (2 if self.q_gate else 1) + 2 * h * kv + a * h  # q (and its gate), k, v, o
        q = (h * self.q_lora_rank + self.q_lora_rank * self.attn_width) if self.q_lora_rank else h * self.attn_width
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_b = self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_a + kv_b + self.heads * self.v_head_dim * h

    @cached_property
    def _layer_other_params(self) -> int:
        """Biases and norms of one layer (the two RMSNorms, q/k bias and norm, MLA's latent norms)."""
        bias = (self.attn_width + 2 * self.kv_width) if self.qkv_bias else 0
        norms = 2 * self.hidden + (2 * self.hd if self.qk_norm else 0) + self.q_lora_rank + self.kv_lora_rank
        return bias + norms

    @cached_property
    def expert_params(self) -> int:
        """One routed expert's weights (gate, up, down; up, down when not gated; in ``moe_latent`` width)."""
        return self._mlp_mats * (self.moe_latent or self.hidden) * self.moe_intermediate

    @cached_property
    def routed_expert_params(self) -> int:
        """All routed experts' weights over all MoE layers (what expert parallelism shards)."""
        return self.moe_layers * self.experts * self.expert_params

    def _mlp_params(self, experts_run: float) -> float:
        """MLP weights over all layers, with ``experts_run`` routed experts per MoE layer: dense MLPs, and
        per MoE layer the router, those experts, the shared experts (and their gate)."""
        h = self.hidden
        dense = (self.layers - self.moe_layers) * self._mlp_mats * h * self.intermediate
        if not self.moe:
            return dense
        per_moe = h * self.experts + self._mlp_mats * h * self.shared_intermediate + (h if self.shared_expert_gate else 0)
        per_moe += 2 * h * self.moe_latent  # a latent MoE's down and up projections
        return dense + self.moe_layers * (per_moe + experts_run * self.expert_params)

    @cached_property
    def _backbone_params(self) -> int:
        """Decoder layers + final norm (no embedding, no head)."""
        bias = self.moe_layers * self.experts if self.router_bias else 0
        return (self._mixing_params + self.layers * self._layer_other_params + int(self._mlp_params(self.experts))
                + bias + self.hidden)

    @cached_property
    def _mixing_params(self) -> int:
        """Attention projections over the attention layers, and the mixer layers' weights."""
        return self.full_attn_layers * self._attn_matmul_params + self.mixer_layers * self.mixer_params

    @cached_property
    def params(self) -> int:
        """Total parameters: embedding, layers (every expert), final norm and (untied) lm_head."""
        emb = self.vocab * self.hidden
        head = 0 if self.tied_embeddings else emb
        return emb + self._backbone_params + head

    @cached_property
    def param_tensors(self) -> int:
        """Parameter tensors in the model's state dict (what a weight sync moves one by one): per layer q, k,
        v, o, gate, up, down and two norms (+3 q/k/v biases, +2 q/k norms); MLA's attention has q_a, its
        norm, q_b (or one q_proj), kv_a, its norm, kv_b and o; a MoE layer's MLP has the router (and its
        score bias), gate/up/down of every routed expert, and of the shared experts (and their gate) — no
        dense MLP; then the embedding, the final norm and an untied lm_head. Qwen3-30B-A3B: 18,867;
        DeepSeek-V3: 45,395 (checked in ``tests/test_sync.py``)."""
        attn = (5 + (2 if self.q_lora_rank else 0)) if self.mla else 4
        per_layer = attn + 3 + 2 + (3 if self.qkv_bias else 0) + (2 if self.qk_norm else 0)
        moe = 1 + (1 if self.router_bias else 0) + 3 * self.experts + (1 if self.shared_expert_gate else 0)
        moe += 0 if self.shared_intermediate else -3  # the layer's 3 MLP tensors are the shared expert's, or none
        mixing = (self.full_attn_layers - self.layers) * attn + self.mixer_layers * self.mixer_tensors
        return self.layers * per_layer + mixing + self.moe_layers * moe + 2 + (0 if self.tied_embeddings else 1)

    @cached_property
    def params_scalar_head(self) -> int:
        """Same backbone with the vocab lm_head replaced by a 1-output value head (reward / critic)."""
        return self.vocab * self.hidden + self._backbone_params + self.hidden

    @cached_property
    def active_params(self) -> int:
        """Parameters one token uses: ``params`` less the routed experts it does not run (= ``params`` for
        a dense model; the "activated parameters" MoE model cards quote)."""
        idle = self.moe_layers * (self.experts - self.experts_per_token) * self.expert_params
        return self.params - idle

    @cached_property
    def matmul_params(self) -> int:
        """Weights one token multiplies through: layer projections (MoE: router, top-k and shared
        experts) + lm_head (a tied head counted once). Excludes the input-embedding lookup, norms and
        biases. ``2 * matmul_params`` is the FLOPs per token."""
        return self._matmul_params(False)

    def head_params(self, scalar_head: bool = False) -> int:
        """Weights of the output layer a token multiplies through: ``vocab x hidden`` (tied or not), or a scalar
        (reward / value) head's ``hidden``."""
        return self.hidden if scalar_head else self.vocab * self.hidden

    def _matmul_params(self, scalar_head: bool) -> int:
        return self._mixing_params + int(self._mlp_params(self.experts_per_token)) + self.head_params(scalar_head)

    # ---- bytes and FLOPs -----------------------------------------------------------------------
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token: ``2 (K and V) * layers * kv_heads * hd * dtype_bytes``; MLA: the
        latent and the rotary key, ``layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes`` (a hybrid
        stack: its attention layers only)."""
        if self.mla:
            return self.full_attn_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        return 2 * self.full_attn_layers * self.kv_heads * self.hd * self.dtype_bytes

    def replica_kv_bytes_per_token(self, tp: int = 1) -> int:
        """KV-cache bytes one token takes over a ``tp``-GPU replica: :meth:`kv_bytes_per_token`, split over
        the GPUs by head; MLA's latent has no heads to split, so every GPU holds all of it (``tp`` times)."""
        return self.kv_bytes_per_token() * (tp if self.mla else 1)

    def weight_bytes(self, scalar_head: bool = False) -> int:
        """Bytes of all weights (``params`` or ``params_scalar_head``) at ``dtype_bytes``."""
        return (self.params_scalar_head if scalar_head else self.params) * self.dtype_bytes

    def touched_experts(self, tokens: float | np.ndarray) -> float | np.ndarray:
        """Expected distinct routed experts per MoE layer that ``tokens`` tokens run, under uniform
        routing: ``E * (1 - (1 - k/E) ** tokens)`` (k at one token, -> E for a large batch; 0 if dense)."""
        if not self.moe:
            return 0.0
        e, k = float(self.experts), float(self.experts_per_token)
        return e * (1.0 - (1.0 - k / e) ** np.asarray(tokens, dtype=np.float64))

    def weight_bytes_read(self, tokens: float, scalar_head: bool = False) -> float:
        """Weight bytes one forward over ``tokens`` tokens reads: all of them for a dense model
        (:meth:`weight_bytes`), and for a MoE model all but the routed experts those tokens do not touch
        (:meth:`touched_experts`)."""
        total = self.weight_bytes(scalar_head)
        if not self.moe:
            return total
        touched = float(self.touched_experts(max(float(tokens), 0.0)))
        idle = self.moe_layers * (self.experts - touched) * self.expert_params * self.dtype_bytes
        return total - idle

    @cached_property
    def pair_flops(self) -> float:
        """FLOPs per causal attention (query, key) pair over all (attention) layers: QK^T and attention x V,
        ``4 * layers * attn_width`` (MLA: ``2 * layers * heads * (hd + v_head_dim)``)."""
        if self.mla:
            return 2.0 * self.full_attn_layers * self.heads * (self.hd + self.v_head_dim)
        return 4.0 * self.full_attn_layers * self.attn_width

    def forward_flops(
        self,
        new_tokens: int | np.ndarray,
        context_tokens: int | np.ndarray = 0,
        scalar_head: bool = False,
    ) -> float | np.ndarray:
        """FLOPs of one forward pass over ``new_tokens`` tokens of one sequence that already has
        ``context_tokens`` cached: ``2 * matmul_params * n`` plus causal attention (QK^T and AV)
        ``pair_flops * (n * context + n * (n + 1) / 2)``. Arrays broadcast elementwise.
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
        return 2.0 * self._matmul_params(scalar_head), self.pair_flops

    def with_(self, **changes: Any) -> "ModelSpec":
        """A copy with ``changes`` applied (validated again)."""
        try:
            return dataclasses.replace(self, **changes)
        except TypeError as e:
            raise ConfigError(f"model '{self.id}': {e}") from None
