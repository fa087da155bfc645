"""vLLM's eager mode (``enforce_eager=True``): the host seconds one engine step spends issuing its kernels.

With CUDA graphs (vLLM's default) a decode step replays captured graphs and the host's cost is the engine's
per-step overhead (``decode.overhead_s``). With ``enforce_eager`` every op of every layer is issued from Python
— a module call, the dispatcher and a kernel launch, :data:`EAGER_HOST_OP_S` each — while the GPU runs the
earlier ones; vLLM synchronises once per step (the sampled token ids go to the host), so the forward costs
the *larger* of the host's issue time and the GPU's time (``DecodeCost.iteration``). Small batches on large
models — the long tail of an RL rollout, a few sequences decoding for thousands of steps — are where the host
is the slower of the two.

The ops a step issues are counted from vLLM's model code (decode path, V1 engine, bf16; see ``docs/model.md``,
"vLLM's eager mode") for two releases, :data:`VLLM_RELEASES` — 0.11.0 (the default) and 0.8.5, which issues more:
Qwen3's per-head q/k norms as 16 torch ops a layer (its ``forward_native``), DeepSeek-V3's grouped top-k
Inductor-compiled (~7 launches more) and the expert alignment's fill and zeros (DeepSeek-V3 ~3.45k ops a step
against 0.11's ~3.0k); 0.11 adds the attention output's zero fill. Per layer: the attention block (norm, fused
QKV projection, rotary, KV-cache write, attention, output projection; Qwen3's per-head q/k norms; DeepSeek's MLA
with its low-rank projections and absorbed bmm's), the MLP (fused add-norm, gate-up, activation, down) or the MoE
block (router, top-k, the block alignment, two grouped-GEMM launches, activation, the sum over experts;
DeepSeek-V3's grouped top-k, its shared experts), a tensor-parallel all-reduce after each block; per step, the
embedding, the final norm, the LM head and the sampler. The per-op host time is the one Hugging Face
``generate``'s eager forward pays (``oppo_sim.engine.static_params``): the same PyTorch dispatch and launch.
A calibrated profile's fitted decode already holds its engine's host time, so it prices no extra term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.models.lookup import ModelSpec

__all__ = ["EAGER_HOST_OP_S", "EagerOps", "host_op_seconds", "VLLM_RELEASES", "DEFAULT_VLLM_RELEASE", "check_host_op_s", "check_vllm_release",
           "eager_ops_per_step", "eager_host_seconds"]

EAGER_HOST_OP_S = 22e-6
"""Host seconds of one eager PyTorch op on a GPU (the Python module call, the dispatcher, the kernel launch),
measured: the median of the H200's eager decode iterations (the project's decoder with CUDA graphs off, a
Qwen2.5-1.5B shape, 14 points, host-bound: kernels 15-26% of the wall time) over the 1,281 ops one iteration issues —
21.9 us, 15.9-34.1 over the points (``paper_figs/eager_host_op.py``, ``paper_figs/out/gpu_h200/eager_host_op*.csv``).
One x86 host CPU (the H200 machine's); an older or busier host is slower, and a Grace host (GH200, GB200, GB300) is
priced at ``Hardware.host_scale`` times it (:mod:`oppo_sim.hw.devices.gpu_table`). The same constant prices Hugging Face
``generate``'s eager forward (``static_params.HF_HOST_OP_S``)."""

@dataclass(frozen=True)
class EagerOps:
    """Host-issued ops of one eager decode step of one vLLM release, by part (module notes)."""

    step: int = 30  # outside the layers: the input copies (ids, positions, slot mapping, block table, start offsets),
    #                 the embedding, the final norm, the logits gather and LM head, the sampler (temperature, softmax,
    #                 sampling, casts) and the token ids' copy to the host (25-40 in both releases)
    attention: int = 7  # fused add-RMSNorm, QKV GEMM (bias fused), rotary, KV-cache write, the output's zero fill
    #                     (0.11), FlashAttention, output GEMM
    qk_norm: int = 4  # Qwen3: per-head RMSNorm of q and of k (0.11: a contiguous copy and the norm kernel each)
    mla: int = 31  # DeepSeek's MLA decode: norm, fused q_a/kv_a GEMM, the two low-rank norms (copy + kernel each),
    #                q_b GEMM, the YaRN rotary written as torch ops (13) and its copy-back, the output's zero fill,
    #                MLA cache write, W_UK bmm, concat, FlashMLA (split + combine), W_UV (bmm, two copies), output GEMM
    mlp: int = 4  # post-attention fused add-RMSNorm, gate-up GEMM, SiLU-and-mul, down GEMM
    moe: int = 11  # post-attention norm, router GEMM, fp32 cast, top-k softmax, renormalise (sum, div), block
    #                alignment, two grouped-GEMM (Triton) launches, SiLU-and-mul, the sum over the top-k
    grouped_topk: int = 2  # DeepSeek-V3's routing beyond plain top-k (the fused grouped top-k and its casts, less
    #                        the softmax and renormalisation it replaces)
    shared_expert: int = 3  # the shared experts' gate-up GEMM, SiLU-and-mul, down GEMM (their add is fused)
    mixer: int = 16  # a Mamba2 / linear-attention mixer layer (projections, conv, the scan, gating, norm): an estimate
    allreduces: int = 2  # tensor parallelism, per layer: after attention and after the MLP / MoE block


VLLM_RELEASES: dict[str, EagerOps] = {
    "0.11.0": EagerOps(),
    # 0.8.5: no zero fill of the attention output; Qwen3's q/k norms by forward_native (8 ops each); the MoE
    # alignment's Python fill_ and zeros (+2); DeepSeek-V3's grouped_topk compiled by Inductor (~7-10 launches
    # against the fused kernel's 1-2: +5); MLA's extra contiguous copies less the zero fill (+1)
    "0.8.5": EagerOps(attention=6, qk_norm=16, mla=32, moe=13, grouped_topk=7),
}
"""Eager op counts by the vLLM release they were counted on (pip wheels' sources, read op by op)."""
DEFAULT_VLLM_RELEASE = "0.11.0"


def check_vllm_release(v, where: str = "vllm_version") -> str:
    """A release in :data:`VLLM_RELEASES`; else a one-line ``ConfigError`` naming ``where`` and the known ones."""
    if v not in VLLM_RELEASES:
        raise ConfigError(f"{where} must be one of {', '.join(VLLM_RELEASES)} (the releases whose eager ops are "
                          f"counted), got {v!r}")
    return v


def check_host_op_s(v, where: str = "eager_host_op_s") -> float | None:
    """A host cost per op as given (seconds, finite, >= 0; None: :data:`EAGER_HOST_OP_S` on the GPU's host, see
    :func:`host_op_seconds`); else a one-line ``ConfigError`` naming ``where``."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError(f"{where} must be a finite number >= 0, got {v!r}")
    return float(v)


def host_op_seconds(given: float | None, host_scale: float) -> float:
    """Host seconds per eagerly issued op: ``given`` (the user's or a profile's, its own host's), else the x86-measured
    :data:`EAGER_HOST_OP_S` times the host's ``Hardware.host_scale``."""
    return EAGER_HOST_OP_S * host_scale if given is None else given


def eager_ops_per_step(model: ModelSpec, tp: int = 1, release: str = DEFAULT_VLLM_RELEASE) -> int:
    """Kernels one eager decode step of ``model`` on a ``tp``-GPU replica issues from the host, in vLLM ``release``."""
    c = VLLM_RELEASES[check_vllm_release(release)]
    attn_layers = model.attn_layers or model.layers
    mixer_layers = model.mixer_layers if model.attn_layers else 0
    attn = c.mla if model.kv_lora_rank else c.attention + (c.qk_norm if model.qk_norm else 0)
    moe_layers = model.layers - model.dense_layers if model.moe else 0
    moe = c.moe + (c.grouped_topk if model.router_bias else 0) + (c.shared_expert if model.shared_intermediate else 0)
    per_layer_comm = c.allreduces if tp > 1 else 0
    return (c.step + attn_layers * attn + mixer_layers * c.mixer + moe_layers * moe
            + (model.layers - moe_layers) * c.mlp + model.layers * per_layer_comm)


def eager_host_seconds(model: ModelSpec, tp: int = 1, host_op_s: float = EAGER_HOST_OP_S,
                       release: str = DEFAULT_VLLM_RELEASE) -> float:
    """Host seconds one eager engine step spends issuing its kernels (:func:`eager_ops_per_step` x ``host_op_s``)."""
    return eager_ops_per_step(model, tp, release) * host_op_s
