"""Megatron-Core's host time: the seconds the host spends issuing one micro-batch's kernels through a pipeline
stage's layers, forward and backward.

Megatron trains eagerly (NeMo RL and verl capture no CUDA graphs for training): every kernel of every layer is
issued from the host — Transformer Engine's modules, Megatron's own autograd functions, the token dispatcher's
permutations and collectives, one GEMM per local expert inside Transformer Engine's grouped linear, and in the
backward one data-parallel hook per trainable weight (each an ``add_`` into its gradient buffer). The GPU runs the
kernels while the host issues the next ones, so a pass costs the *larger* of the two — the rule vLLM's eager mode
is priced with (:mod:`oppo_sim.hw.costs.eager`), at the same measured host cost per op
(:data:`~oppo_sim.hw.costs.eager.EAGER_HOST_OP_S`). A dense layer issues few, large kernels and stays GPU-bound; a
MoE layer issues ~90 kernels forward and ~150 backward, and where its GEMMs are small (few active parameters, a
fast GPU) the host is the slower one — what Megatron-Bridge's MoE guide names as what matters most on GB200
("host overhead").

The ops are counted from source (Megatron-LM 2f3fa0fce5, about NeMo RL v0.5's pinned fork; Transformer Engine
2.8; Megatron-Bridge 1e9a459b; NeMo RL 9dbd9adc's settings: no apex gradient-accumulation fusion, fused RoPE,
unfused permutation, the allgather dispatcher), per layer per micro-batch (:class:`MegatronOps`): GPU ops —
kernels, copies, fills and NCCL launches. Full recomputation re-runs the forward inside the backward.

Not modelled: the host syncs inside a MoE layer's forward (``tokens_per_expert.cpu()`` and the permutation's
``masked_select``: 2-3 a layer), which keep the host from running ahead into the next layer — taking the larger
of host and GPU per pass rather than per segment between syncs is a lower bound; Transformer Engine's heavier
module calls (an unmeasured 2-5x an eager op) against the cheaper launches from C++ inside one call (the grouped
GEMMs), both priced at one eager op; the per-sequence loop of NeMo RL's loss (~200 ops a packed sequence, outside
the layers). The per-op cost is an x86 server host's; a Grace host's is ``Hardware.host_scale`` times it
(:mod:`oppo_sim.hw.devices.gpu_table`, "Host CPU"), applied where the cost model is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.hw.models.model_spec import ModelSpec

__all__ = ["MegatronOps", "MEGATRON_OPS", "layer_ops", "host_seconds"]


@dataclass(frozen=True)
class MegatronOps:
    """GPU ops one Megatron-Core layer issues per micro-batch, (forward, backward), by part."""

    attention: tuple[int, int] = (10, 19)  # fused-norm QKV GEMM, query copy, RoPE q and k, cuDNN attention (zero fill,
    #                                        offsets, kernel), output GEMM, residual add; backward the same with dgrad
    #                                        and wgrad, the fills of dQ/dK/dV and one DDP hook add per weight
    qk_norm: tuple[int, int] = (3, 6)  # Qwen3: the per-head q and k RMSNorms (a contiguous copy and the norm)
    mla: tuple[int, int] = (56, 66)  # DeepSeek's MLA with NeMo RL's recipe (its RoPE unfused: ~18 ops each for q and k)
    mlp: tuple[int, int] = (8, 15)  # fused-norm gate-up GEMM, SwiGLU, down GEMM, residual add
    moe: tuple[int, int] = (51, 36)  # the MoE block less its expert GEMMs: norm, the router (fp64 cast and GEMM, top-k
    #                                  softmax and scatters: ~14), three all-gathers, the local map, the permutation and
    #                                  its syncs, SwiGLU, unpermute, the combine's casts and reduce-scatter, residual add
    per_expert: tuple[int, int] = (2, 6)  # a local expert: one GEMM each for fc1 and fc2; backward dgrad and wgrad
    #                                       GEMMs and the two DDP hook adds
    grouped_topk: tuple[int, int] = (15, 6)  # DeepSeek-V3's routing beyond plain top-k (sigmoid, bias, group top-k, masks)
    shared_expert: tuple[int, int] = (3, 8)  # the shared expert's GEMMs and activation (with their hooks)
    mixer: tuple[int, int] = (16, 30)  # a Mamba2 / linear-attention layer: an estimate
    tensor_parallel: tuple[int, int] = (4, 6)  # TP with sequence parallelism: the all-gathers and reduce-scatters


MEGATRON_OPS = MegatronOps()


def layer_ops(model: ModelSpec, tp: int = 1, local_experts: float = 0.0, c: MegatronOps = MEGATRON_OPS
              ) -> tuple[float, float]:
    """(forward, backward) GPU ops of the whole ``model``'s layers per micro-batch on one rank: its attention (or
    MLA, or mixer) layers, its dense MLPs and MoE blocks (``local_experts`` experts on the rank), TP collectives."""
    attn_layers = model.attn_layers or model.layers
    mixer_layers = model.mixer_layers if model.attn_layers else 0
    moe_layers = model.moe_layers if model.moe else 0

    def part(i: int) -> float:
        attn = c.mla[i] if model.kv_lora_rank else c.attention[i] + (c.qk_norm[i] if model.qk_norm else 0)
        moe = (c.moe[i] + c.per_expert[i] * local_experts + (c.grouped_topk[i] if model.router_bias else 0)
               + (c.shared_expert[i] if model.shared_intermediate else 0))
        return (attn_layers * attn + mixer_layers * c.mixer[i] + moe_layers * moe + (model.layers - moe_layers) * c.mlp[i]
                + (model.layers * c.tensor_parallel[i] if tp > 1 else 0))
    return part(0), part(1)


def host_seconds(model: ModelSpec, host_op_s: float, share: float = 1.0, tp: int = 1, local_experts: float = 0.0,
                 recompute: str = "none") -> tuple[float, float]:
    """(forward, backward) host seconds of one micro-batch through a pipeline stage holding ``share`` of the layers
    (``1 / pp`` split evenly; ``TrainerLayout.stage_layers`` over the layers); under full recomputation the backward
    issues the forward's ops again."""
    fwd, bwd = layer_ops(model, tp, local_experts)
    if recompute == "full":
        bwd += fwd
    return fwd * host_op_s * share, bwd * host_op_s * share
