"""vLLM's eager mode (``enforce_eager=True``): the host seconds one engine step spends issuing its kernels.

With CUDA graphs (vLLM's default) a decode step replays captured graphs and the host's cost is the engine's
per-step overhead (``decode.overhead_s``). With ``enforce_eager`` every op of every layer is issued from Python
— a module call, the dispatcher and a kernel launch, :data:`EAGER_HOST_OP_S` each — while the GPU runs the
earlier ones; vLLM synchronises once per step (the sampled token ids go to the host), so the forward costs
the *larger* of the host's issue time and the GPU's time (``DecodeCost.iteration``). Small batches on large
models — the long tail of an RL rollout, a few sequences decoding for thousands of steps — are where the host
is the slower of the two.

The ops a step issues are counted from vLLM 0.11.0's model code (decode path, V1 engine, bf16; see
``docs/model.md``, "vLLM's eager mode"; 0.8.5 issues more: Qwen3's q/k norms as 16 torch ops a layer, DeepSeek-V3
~3.5k a step against 0.11's ~3.0k): per layer, the attention block (norm, fused QKV projection, rotary,
KV-cache write, attention, output projection; Qwen3's per-head q/k norms; DeepSeek's MLA with its low-rank
projections and absorbed bmm's), the MLP (fused add-norm, gate-up, activation, down) or the MoE block (router,
top-k, the block alignment, two grouped-GEMM launches, activation, the sum over experts; DeepSeek-V3's grouped
top-k written as torch ops, its shared experts), a tensor-parallel all-reduce after each block; per step, the
embedding, the final norm, the LM head and the sampler. The per-op host time is the one Hugging Face
``generate``'s eager forward pays (``oppo_sim.engine.static_params``): the same PyTorch dispatch and launch.
A calibrated profile's fitted decode already holds its engine's host time, so it prices no extra term.
"""

from __future__ import annotations

import math

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.models.lookup import ModelSpec

__all__ = ["EAGER_HOST_OP_S", "check_host_op_s", "eager_ops_per_step", "eager_host_seconds"]

EAGER_HOST_OP_S = 22e-6
"""Host seconds of one eager PyTorch op on a GPU (the Python module call, the dispatcher, the kernel launch),
measured: the median of the H200's eager decode iterations (the project's decoder with CUDA graphs off, a
Qwen2.5-1.5B shape, 14 points, host-bound: kernels 15-26% of the wall time) over the 1,281 ops one iteration issues —
21.9 us, 15.9-34.1 over the points (``paper_figs/eager_host_op.py``, ``paper_figs/out/gpu_h200/eager_host_op*.csv``).
One host CPU (the H200 machine's); an older or busier host is slower. The same constant prices Hugging Face
``generate``'s eager forward (``static_params.HF_HOST_OP_S``)."""

STEP_OPS = 30
"""Ops of a step outside the layers: the input copies (ids, positions, slot mapping, block table, start
offsets), the embedding, the final norm, the logits gather and LM head, the sampler (temperature, softmax,
sampling, casts) and the token ids' copy to the host (25-40 in vLLM 0.11)."""
ATTENTION_OPS = 7  # fused add-RMSNorm, QKV GEMM (bias fused), rotary, KV-cache write, the output's zero fill,
#                    FlashAttention, output GEMM
QK_NORM_OPS = 4  # Qwen3: per-head RMSNorm of q and of k (a contiguous copy and the norm kernel each)
MLA_OPS = 31  # DeepSeek's MLA decode: norm, fused q_a/kv_a GEMM, the two low-rank norms (copy + kernel each),
#               q_b GEMM, the YaRN rotary written as torch ops (13) and its copy-back, the output's zero fill,
#               MLA cache write, W_UK bmm, concat, FlashMLA (split + combine), W_UV (bmm, two copies), output GEMM
MLP_OPS = 4  # post-attention fused add-RMSNorm, gate-up GEMM, SiLU-and-mul, down GEMM
MOE_OPS = 11  # post-attention norm, router GEMM, fp32 cast, top-k softmax, renormalise (sum, div), block
#               alignment, two grouped-GEMM (Triton) launches, SiLU-and-mul, the sum over the top-k
GROUPED_TOPK_OPS = 2  # DeepSeek-V3's routing beyond plain top-k: the fused grouped top-k and its casts, less
#                       the softmax and renormalisation it replaces
SHARED_EXPERT_OPS = 3  # the shared experts' gate-up GEMM, SiLU-and-mul, down GEMM (their add is fused)
MIXER_OPS = 16  # a Mamba2 / linear-attention mixer layer (projections, conv, the scan, gating, norm): an estimate
ALLREDUCES_PER_LAYER = 2  # tensor parallelism: after attention and after the MLP / MoE block


def check_host_op_s(v, where: str = "eager_host_op_s") -> float:
    """A host cost per op as given (seconds, finite, >= 0); else a one-line ``ConfigError`` naming ``where``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"{where} must be a finite number >= 0, got {v!r}")
    return float(v)


def eager_ops_per_step(model: ModelSpec, tp: int = 1) -> int:
    """Kernels one eager decode step of ``model`` on a ``tp``-GPU replica issues from the host."""
    attn_layers = model.attn_layers or model.layers
    mixer_layers = model.mixer_layers if model.attn_layers else 0
    attn = MLA_OPS if model.kv_lora_rank else ATTENTION_OPS + (QK_NORM_OPS if model.qk_norm else 0)
    moe_layers = model.layers - model.dense_layers if model.moe else 0
    moe = MOE_OPS + (GROUPED_TOPK_OPS if model.router_bias else 0) + (SHARED_EXPERT_OPS if model.shared_intermediate else 0)
    per_layer_comm = ALLREDUCES_PER_LAYER if tp > 1 else 0
    return (STEP_OPS + attn_layers * attn + mixer_layers * MIXER_OPS + moe_layers * moe
            + (model.layers - moe_layers) * MLP_OPS + model.layers * per_layer_comm)


def eager_host_seconds(model: ModelSpec, tp: int = 1, host_op_s: float = EAGER_HOST_OP_S) -> float:
    """Host seconds one eager engine step spends issuing its kernels (:func:`eager_ops_per_step` x ``host_op_s``)."""
    return eager_ops_per_step(model, tp) * host_op_s
