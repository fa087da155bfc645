"""Where a simulated configuration's pools sit and what their operations cost: the scale-up domains each
pool's devices span, the weight-sync mechanism the placement implies, and one cost model per pool (with the
training setup the memory plan resolved and the trainer's layout)."""

from __future__ import annotations

from collections import Counter

from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.devices.gpu_table import domain_gpus
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.hw.memory.pool_memory import MemoryReport
from oppo_sim.hw.costs.sync import SyncMechanism, SyncPlan, push_terms, sync_legs
from oppo_sim.hw.costs.weight_export import Payload, export_legs, export_seconds
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.pipeline.config import SimConfig


def domain_block(cfg: SimConfig) -> int:
    """GPUs per scale-up domain block of the configuration (``gpu_table.domain_gpus``); where pools run on
    different GPUs, the smallest block of theirs holds for all (two kinds of GPU share no NVLink)."""
    total = cfg.placement.total_devices
    return min(domain_gpus(cfg.hardware_of(p.name).gpu, total, cfg.nodes) for p in cfg.placement.pools)


def _pool_layout(cfg: SimConfig) -> dict[str, Counter]:
    """Per pool, its GPUs in each scale-up domain it sits in (domain index -> GPUs), the pools laid out in order over
    blocks of :func:`domain_block` GPUs."""
    block, out, start = domain_block(cfg), {}, 0
    for p in cfg.placement.pools:
        out[p.name] = Counter(d // block for d in range(start, start + p.devices))
        start += p.devices
    return out


def pool_domains(cfg: SimConfig) -> dict[str, frozenset[int]]:
    """The scale-up domains each pool's devices sit in (``gpu_table.domain_gpus``: blocks of whole nodes
    that share ``link_bw``; ``nodes`` nodes of equal size, pools laid out in order). Where pools run on
    different GPUs, the smallest block of theirs holds for all (two kinds of GPU share no NVLink)."""
    return {name: frozenset(c) for name, c in _pool_layout(cfg).items()}


def sync_plan(cfg: SimConfig) -> SyncPlan:
    """``cfg.sync``, or for ``auto``: ``ipc`` when generation runs on the training pool (colocated: the engines
    take the exported tensors on the same GPUs), else NVLink when the two pools sit in one scale-up domain (one
    node, or one rack-scale NVLink domain such as GB200 NVL72's), the network otherwise."""
    pl = cfg.placement
    if cfg.sync != "auto":
        return SyncPlan(SyncMechanism(cfg.sync), cfg.engine.tp, cfg.refit_buffers, _ring_members(cfg))
    if pl.generate == pl.train:
        return SyncPlan(SyncMechanism.IPC, cfg.engine.tp, cfg.refit_buffers)
    domains = pool_domains(cfg)
    one = len(domains[pl.generate] | domains[pl.train]) == 1
    return SyncPlan(SyncMechanism.NVLINK if one else SyncMechanism.NETWORK, cfg.engine.tp, cfg.refit_buffers,
                    _ring_members(cfg))


def _ring_members(cfg: SimConfig) -> int:
    """The sync ring's GPUs in each scale-up domain it crosses (``SyncPlan.per_domain``): 1 where the trainer's rank 0
    alone joins the engines (``refit_group`` rank0), else the fewest GPUs the trainer's or the engines' pool has in one
    of its domains."""
    if cfg.refit_group == "rank0":
        return 1
    pl = cfg.placement
    fewest = fewest_per_domain(cfg)
    return min(fewest[pl.generate], fewest[pl.train])


def fewest_per_domain(cfg: SimConfig) -> dict[str, int]:
    """Per pool, the fewest of its GPUs in one of its scale-up domains (laid out as :func:`pool_domains` lays them)."""
    return {name: min(c.values()) for name, c in _pool_layout(cfg).items()}


def cost_models(cfg: SimConfig, report: MemoryReport) -> dict[str, CostModel]:
    """One cost model per pool, with the report's training setup, the configuration's sync plan, its
    scale-up domain (a tensor-parallel group larger than a domain runs its all-reduces over the network) and
    the trainer's layout on the pool that trains."""
    t, plan, domains, block, fewest = report.train, sync_plan(cfg), pool_domains(cfg), domain_block(cfg), fewest_per_domain(cfg)
    return {
        p.name: CostModel(cfg.hardware_of(p.name), t.zero_stage, t.recompute, t.flash_attention, plan,
                          cross_node=len(domains[p.name]) > 1, expert_parallel=cfg.expert_parallel, domain=block,
                          pool_domain_gpus=fewest[p.name],
                          host_gpus=-(-cfg.placement.total_devices // cfg.nodes), host_op_s=cfg.host_op_s(p.name),
                          **_trainer_fields(cfg, t, p.name == cfg.placement.train))
        for p in cfg.placement.pools
    }


def _trainer_fields(cfg: SimConfig, t: TrainMemoryConfig, trains: bool) -> dict:
    """The cost model's trainer layout: the configuration's on the pool that trains (its training and the
    forwards beside it run under it), plain data parallel elsewhere (a full copy per device), with the same
    ``balance_batch``."""
    if trains:
        return {"layout": cfg.trainer, "micro": t.micro, "forward_micro": t.forward_micro, "sequence_parallel": t.sequence_parallel}
    return {"layout": TrainerLayout(balance_batch=cfg.trainer.balance_batch), "micro": t.micro, "forward_micro": t.forward_micro}


def sync_terms(cfg: SimConfig, report: MemoryReport) -> tuple[float, float, SyncMechanism, float]:
    """What a measured end-to-end weight sync of ``cfg``'s actor is fitted on (``calibration.with_sync_seconds``),
    in the terms the simulation prices it: (bytes each generator GPU takes, the bandwidth it takes them at, the
    mechanism, the trainer's export seconds — ``weight_export`` — which the fit leaves as they are). On the host
    path both legs' bytes cross the host link."""
    plan, pl = sync_plan(cfg), cfg.placement
    actor = cfg.models()["train"]
    costs = cost_models(cfg, report)
    tcost, gcost = costs[pl.train], costs[pl.generate]
    payload = sync_payload(cfg)
    export = export_seconds(tcost, actor, pl.pool(pl.train).devices, payload)
    if plan.mechanism is SyncMechanism.HOST:
        w = payload.nbytes
        return w + w / plan.gen_tp, gcost.hw.gpu.host_bw, plan.mechanism, export
    nbytes, bw = push_terms(actor, gcost.hw, plan, payload)
    return nbytes, bw, plan.mechanism, export


def sync_payload(cfg: SimConfig) -> Payload:
    """What ``cfg``'s weight sync moves: the actor's weights, or under LoRA with ``sync="adapter"`` its adapters alone
    (verl: the base weights stay in the engine after the first sync)."""
    actor, lora = cfg.models()["train"], cfg.trainer.lora
    return Payload.adapters(actor, lora) if lora is not None and lora.sync == "adapter" else Payload.weights(actor)


def weight_sync_legs(cfg: SimConfig, costs: dict[str, CostModel]) -> dict[str, float]:
    """Seconds of each part of one weight sync of ``cfg``'s actor with the pools' ``costs`` (:func:`cost_models`):
    the trainer's export (``export <collective>``: ``weight_export``), then the hand-off to the engines
    (``hand-off <leg>``: ``sync``). Their sum is what a simulated step's sync takes."""
    pl = cfg.placement
    actor = cfg.models()["train"]
    train, gen = costs[pl.train], costs[pl.generate]
    payload = sync_payload(cfg)
    legs = {f"export {k}": v for k, v in export_legs(train, actor, pl.pool(pl.train).devices, payload).items()}
    legs.update({f"hand-off {k}": v for k, v in sync_legs(actor, gen.hw, gen.sync, payload).items()})
    exported = sum(v for k, v in legs.items() if k.startswith("export "))
    overlap = min(exported, legs.get("hand-off transfer", 0.0)) if gen.sync.buffers > 1 else 0.0
    if overlap > 0:  # double-buffered: each buffer's export beside the previous one's hand-off
        legs["overlap (double-buffered)"] = -overlap
    return legs
