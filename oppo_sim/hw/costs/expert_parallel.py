"""Expert parallelism: what sharding a mixture-of-experts model's experts over ranks changes in the cost.

**Generation** (vLLM ``enable_expert_parallel``): a replica of ``tp`` GPUs holds ``E / tp`` whole
experts per GPU instead of a ``1 / tp`` slice of every expert. Each MoE layer's tensor-parallel
all-reduce after the MLP becomes an all-to-all *dispatch* (every token's hidden vector to the GPUs of its
top-k experts) and an all-to-all *combine* (the expert outputs back); the attention keeps its
all-reduce. The tokens are split over the ranks for the expert layers (as the all-to-all kernels vLLM
uses for EP run them), so each GPU sends ``tokens / tp · k · hidden · dtype_bytes · (tp − 1) / tp``
bytes per all-to-all under uniform routing, priced like any other call with the calibrated
``collective`` parameters.

**Training** (Megatron / verl ``expert_model_parallel_size`` = ``ep``): the routed experts' weights,
gradients and Adam state are split over ``ep`` ranks; the rest of the model is data parallel as before.
So per device the expert state is ``state_bytes(routed / ep)`` over ``devices / ep`` expert-data-parallel
ranks, each device reads ``1 / ep`` of the expert weights, the expert gradients are all-reduced over
``devices / ep`` ranks (``1 / ep`` of their bytes), and every MoE layer adds four all-to-alls per
micro-batch (dispatch and combine, forward and backward) of the device's tokens, timed in
``oppo_sim.hw.costs.trainer_cost``: over the scale-up link when the EP group (``ep`` consecutive ranks) fits in
one scale-up domain, over the network only when it spans domains.

Not modelled: load imbalance between ranks (uniform routing: every rank gets its share), a replica's
GPUs computing their experts at a different efficiency than slices, expert parallelism across replicas
(vLLM's data-parallel attention with EP over ``dp x tp``), token dropping and capacity factors, the
recomputed forward's all-to-alls under full recomputation, and overlap of the all-to-alls with compute.
"""

from __future__ import annotations

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.devices.hardware import OpParams, allreduce_seconds, collective_latency
from oppo_sim.hw.models.model_spec import ModelSpec

__all__ = ["alltoall_bytes_per_token", "check_expert_parallel", "decode_comm_coeffs", "dispatch_bytes_per_token",
           "dispatch_kind", "expert_split"]


def check_expert_parallel(model: ModelSpec, ep: int, devices: int | None = None, what: str = "--ep") -> None:
    """``ep`` (> 1) must name a MoE model whose experts and ``devices`` it divides; one line if not."""
    if isinstance(ep, bool) or not isinstance(ep, int) or ep < 1:
        raise ConfigError(f"expert parallelism ({what}) must be an integer >= 1, got {ep!r}")
    if ep == 1:
        return
    if not model.moe:
        raise ConfigError(f"expert parallelism ({what} {ep}) needs a mixture-of-experts model; '{model.id}' is dense")
    if model.experts % ep:
        raise ConfigError(f"expert parallelism ({what} {ep}) must divide the {model.experts} experts of '{model.id}'")
    if devices is not None and devices % ep:
        raise ConfigError(f"expert parallelism ({what} {ep}) must divide the {devices} training devices")


def alltoall_bytes_per_token(model: ModelSpec, ranks: int) -> float:
    """Bytes one GPU sends per token it holds in one all-to-all over ``ranks``: its hidden vector to each
    of its top-k experts, ``(ranks - 1) / ranks`` of which sit on other GPUs under uniform routing."""
    return model.experts_per_token * model.hidden * model.dtype_bytes * (ranks - 1) / ranks


def dispatch_bytes_per_token(model: ModelSpec, ranks: int, dispatcher: str = "alltoall") -> float:
    """Bytes one GPU moves per token it holds in one dispatch (or combine) of a trainer's MoE layer over ``ranks``
    expert-parallel ranks (``TrainerLayout.moe_dispatcher``): ``alltoall`` and ``flex`` send the token to its top-k
    experts (:func:`alltoall_bytes_per_token`); ``allgather`` receives every other rank's tokens — the all-gather
    of the hidden states before the experts and the reduce-scatter of their output after — ``(ranks - 1)`` hidden
    vectors a token, whatever the top-k (Megatron-Core ``MoEAllGatherTokenDispatcher``)."""
    if dispatcher == "allgather":
        return (ranks - 1) * model.hidden * model.dtype_bytes
    return alltoall_bytes_per_token(model, ranks)


def dispatch_kind(dispatcher: str = "alltoall") -> str:
    """The NCCL collective whose latency one dispatch of ``dispatcher`` pays."""
    return "all-gather" if dispatcher == "allgather" else "all-to-all"


def decode_comm_coeffs(model: ModelSpec, op: OpParams, tp: int, bw: float, expert_parallel: bool,
                       nodes: int = 1, a2a_bw: float | None = None) -> tuple[float, float]:
    """(fixed, per-token) seconds of one generation iteration's collectives on a ``tp``-GPU replica over
    ``nodes`` nodes: two all-reduces of ``tokens · hidden · dtype_bytes`` per layer at ``bw``; with expert
    parallelism a MoE layer keeps one and adds a dispatch and a combine all-to-all at ``a2a_bw`` (default ``bw``;
    each GPU holding ``1 / tp`` of the tokens). Each call's latency grows with ``tp`` and the nodes
    (``hardware.collective_latency``)."""
    fixed = allreduce_seconds(op, 0.0, tp, bw, nodes)
    per_token = allreduce_seconds(op, model.hidden * model.dtype_bytes, tp, bw, nodes) - fixed
    if not (expert_parallel and model.moe) or tp == 1:
        return 2.0 * model.layers * fixed, 2.0 * model.layers * per_token
    reduces = 2 * model.layers - model.moe_layers
    a2a_per_token = alltoall_bytes_per_token(model, tp) / tp / ((bw if a2a_bw is None else a2a_bw) * op.eff_memory)
    return (reduces * fixed + 2 * model.moe_layers * collective_latency(op, "all-to-all", tp, nodes),
            reduces * per_token + 2 * model.moe_layers * a2a_per_token)


def expert_split(model: ModelSpec, params: int, ep: int) -> tuple[int, float]:
    """(parameters every data-parallel rank holds, routed-expert parameters each expert-parallel rank
    holds) of a model with ``params`` parameters under ``ep``-way expert parallelism."""
    routed = model.routed_expert_params if ep > 1 else 0
    return params - routed, routed / ep
