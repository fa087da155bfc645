"""The trainer's side of a weight sync: the collectives that put every *full* parameter tensor on the trainer's
ranks before it is handed to the generation engines (``CostModel.weight_sync`` prices the hand-off itself).

Every framework exports the trained weights tensor by tensor, as Hugging Face tensors, and materialises each
whole tensor on every trainer rank — the engines' loaders then take their tensor-parallel slice:

- FSDP / DeepSpeed ZeRO-3 (verl's FSDP ``per_tensor_generator`` with ``full_tensor()``; OpenRLHF's
  ``deepspeed.zero.GatheredParameters`` per parameter): one all-gather of each tensor over the sharded group
  (every rank of the pool, or ``fsdp_size`` of them under hybrid sharding) — each rank receives ``(n - 1) / n``
  of the weights. ZeRO-0/1/2 keep whole weights on
  every rank: nothing to gather (with expert parallelism, the routed experts over their group).
- Megatron-Core (verl's ``megatron_utils.per_tensor_generator``; NeMo RL through Megatron-Bridge's
  ``export_hf_weights``, whose own comment says it "does PP/TP/EP gathers to materialize full unsharded tensors"):
  for each tensor, a broadcast from the pipeline stage that holds it to its pipeline group, then an all-gather of
  its tensor-parallel shards over the TP group, and for a routed expert an all-gather over the expert-parallel
  group (each EP rank's expert of that index; with expert tensor parallelism, its shards too). Per rank:
  ``(pp - 1) / pp`` of a stage's shards ``dense / tp + routed / (ep · etp)`` over the pipeline group's path (the
  network whenever the pool spans scale-up domains: pipeline neighbours are ``devices / pp`` apart),
  ``(tp - 1) / tp`` of the dense weights over the TP group and ``(ep · etp - 1) / (ep · etp)`` of the routed
  experts over the expert group — each group over the link where it sits (``links.ring_bw``:
  Megatron's rank order, an EP group of ``ep`` consecutive ranks).

Seconds: those bytes at the ``collective`` op's efficiency, plus one collective's latency
(``hardware.collective_latency``) per tensor and group it crosses — Megatron loops over its own tensors, a
routed expert's all-gather yielding ``ep`` of the Hugging Face ones. So a MoE trained with EP over two nodes
gathers almost all its experts over the network every step (DeepSeek-V3 under NeMo RL's EP16: ~1.2 TB a rank).

Not modelled: overlap of a tensor's gather with the engine's load of the previous one (the frameworks' loops are
sequential per tensor; NeMo RL streams buckets to the engine's process, which can overlap part of it), and the
newer paths that send each engine rank only its own shard (NeMo RL's NCCL reshard refit, 2026-07).
"""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.hw.costs.links import group_nodes, ring_bw
from oppo_sim.hw.devices.hardware import collective_latency
from oppo_sim.hw.models.lora import LoRA
from oppo_sim.hw.models.model_spec import ModelSpec

__all__ = ["Payload", "export_legs", "export_seconds"]


@dataclass(frozen=True)
class Payload:
    """What a weight sync moves: its bytes and (Hugging Face) tensors, and the routed experts' part of each — the
    model's weights (:meth:`weights`), or under LoRA with an adapter-only sync its adapters (:meth:`adapters`)."""

    nbytes: float
    tensors: int
    routed_bytes: float = 0.0
    routed_tensors: int = 0

    @classmethod
    def weights(cls, model: ModelSpec) -> "Payload":
        if not model.moe:
            return cls(float(model.weight_bytes()), model.param_tensors)
        return cls(float(model.weight_bytes()), model.param_tensors, float(model.routed_expert_params * model.dtype_bytes),
                   model.moe_layers * 3 * model.experts)

    @classmethod
    def adapters(cls, model: ModelSpec, lora: LoRA) -> "Payload":
        b = model.dtype_bytes
        return cls(float(lora.params(model) * b), lora.tensors(model), float(lora.routed_params(model) * b),
                   lora.routed_tensors(model))


def export_legs(cost, model: ModelSpec, devices: int, payload: Payload | None = None) -> dict[str, float]:
    """Seconds of each collective of the trainer's export on a ``devices``-GPU pool priced by ``cost`` (a
    ``CostModel``: its ``layout``, ``zero_stage`` and ``expert_parallel``) of ``payload`` (default the model's
    weights); empty where the trainer holds whole tensors (one device, or ZeRO below 3 on a dense model). Module
    notes."""
    if devices <= 1:
        return {}
    coll, lay = cost.hw.params.collective, cost.layout
    p = Payload.weights(model) if payload is None else payload
    w, routed, routed_tensors = p.nbytes, p.routed_bytes, p.routed_tensors
    dense, dense_tensors = w - routed, p.tensors - routed_tensors
    ep = cost.expert_parallel if model.moe else 1

    def leg(nbytes: float, span: int, calls: float, kind: str = "all-gather", nodes: int | None = None) -> float:
        n = group_nodes(cost, span, devices) if nodes is None else nodes
        return calls * collective_latency(coll, kind, span, n) + nbytes / (ring_bw(cost, span, devices) * coll.eff_memory)

    if not lay.megatron:
        if cost.zero_stage >= 3:  # over the shard group (the pool, or fsdp_size ranks under hybrid sharding)
            s = lay.shard_ranks(devices)
            return {"all-gather": leg((s - 1) / s * w, s, p.tensors)} if s > 1 else {}
        return {"expert all-gather": leg((ep - 1) / ep * routed, ep, routed_tensors / ep)} if ep > 1 else {}
    out: dict[str, float] = {}
    egroup = ep * lay.expert_tp if model.moe else 1
    loops = dense_tensors + routed_tensors / egroup  # the rank's own (Megatron) tensors, each stage's in turn
    if lay.pp > 1:
        shard = dense / lay.tp + routed / egroup
        pp_nodes = min(lay.pp, group_nodes(cost, devices, devices))
        out["pipeline broadcast"] = (loops * collective_latency(coll, "broadcast", lay.pp, pp_nodes)
                                     + (lay.pp - 1) / lay.pp * shard
                                     / (ring_bw(cost, devices, devices, stride=devices // lay.pp) * coll.eff_memory))
    if lay.tp > 1:
        out["tensor all-gather"] = leg((lay.tp - 1) / lay.tp * dense, lay.tp, dense_tensors)
    if egroup > 1:
        out["expert all-gather"] = leg((egroup - 1) / egroup * routed, egroup, routed_tensors / egroup)
    return out


def export_seconds(cost, model: ModelSpec, devices: int, payload: Payload | None = None) -> float:
    """Seconds of the trainer's export before a weight sync (:func:`export_legs`, summed)."""
    return sum(export_legs(cost, model, devices, payload).values())
