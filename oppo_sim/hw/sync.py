"""Weight sync by mechanism: how the trained actor's weights reach the generation engines.

After each PPO update every generator GPU needs the new actor weights (its tensor-parallel share
``W / tp`` of the ``W`` weight bytes; all of them — a mixture-of-experts model sends every expert, and
its share is the same whether the replica slices or shards the experts). RLHF frameworks move them one of three ways:

- ``nvlink`` — trainer and generators in one scale-up domain (one node, or one rack-scale NVLink
  domain such as GB200 NVL72's 72 GPUs: ``gpu_table.domain_gpus``). The trainer ranks broadcast the
  weights in large buckets with NCCL over the GPU interconnect (``link_bw``: NVLink, Infinity Fabric, or
  PCIe peer-to-peer on PCIe cards), every GPU's link busy at once; when generation shares the trainer's
  GPUs this is the all-gather of ZeRO-3 shards plus CUDA-IPC handles (OpenRLHF, verl ``update_weights``).
- ``network`` — generators in another scale-up domain (on other nodes): the same bucketed broadcast
  over each GPU's own NIC (``net_bw``: 400 Gb/s NDR InfiniBand per H100/H200 in a DGX, 200 Gb/s HDR
  per A100).
- ``host`` — staged through host memory: the full weights are gathered on one trainer rank, copied to
  its host over that rank's one PCIe link, then loaded into each generator GPU from host memory tensor
  by tensor (a state dict handed over by RPC or a file, as simple integrations and engine "refit" APIs
  taking host tensors do).

Cost, with ``eff`` and ``overhead_s`` the calibrated ``sync`` parameters (defaults 0.6 and 50 ms) and
every bandwidth one direction per GPU (``oppo_sim.hw.hardware``'s convention: H100 NVLink 450e9 B/s)::

    nvlink:   overhead_s + (W / tp) / (link_bw * eff)
    network:  overhead_s + (W / tp) / (net_bw * eff)
    host:     overhead_s + W / (host_bw * eff) + (W / tp) / (host_bw * eff) + tensors * HOST_PER_TENSOR_S

Bucketed broadcasts pipeline their buckets, so the per-bucket latency (tens of microseconds) hides under
the transfer and is not counted; the host path pays a fixed cost per parameter tensor.

The sync keeps its own efficiency rather than the ``collective`` one the all-reduces inside a pool use:
a sync is measured end to end (``oppo-real``'s ``weight_sync_s``, fitted by
``calibration.with_sync_seconds``), and besides the NCCL broadcast it packs buckets and loads them into
the engine, so its fraction of the link is its own; both are fractions of the same one-direction bandwidth.

What makes a sync slow, in this model — and what separates Baidu's 15-minute parameter sync from its
20-second "refit" (a 10B model on 16 x A100 with TRT-LLM generators): (1) funnelling the whole model
through one rank's host link instead of every GPU sending over its own link in parallel; (2) a fixed
cost per tensor instead of a few large buckets; (3) the path's bandwidth (PCIe or a NIC instead of
NVLink). Baidu's slow path also rebuilt the TRT-LLM engine from a saved checkpoint (a disk round trip
and an engine compile, minutes of work this module does not model); the refit kept the built engine
and replaced its weights from host memory, which is this module's ``host`` path: for ~20 GB of weights
and ~400 tensors on an A100 node it costs 20e9/19.2e9 + 20e9/19.2e9 + 400 x 2 ms ~ 2.9 s before the
engine's own per-tensor work, against 20e9/(300e9 x 0.6) ~ 0.11 s for the bucketed NVLink broadcast
(A100 NVLink 3: 300 GB/s each way).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.hardware import Hardware
from oppo_sim.hw.models import ModelSpec

__all__ = ["SyncMechanism", "SYNC_MECHANISMS", "HOST_PER_TENSOR_S", "SyncPlan", "param_tensors", "sync_legs", "sync_seconds"]

HOST_PER_TENSOR_S = 2e-3
"""Fixed seconds per parameter tensor on the host path: a Python-level call per tensor, its
serialisation, and a synchronising copy from pageable host memory into the engine's buffer. An order of
magnitude, not a measurement; ``oppo-real``'s measured ``weight_sync_s`` is what a calibration fits."""


class SyncMechanism(str, Enum):
    """The path the actor's weights take from the trainer to the generators."""

    NVLINK = "nvlink"
    NETWORK = "network"
    HOST = "host"


SYNC_MECHANISMS: tuple[str, ...] = tuple(m.value for m in SyncMechanism)


@dataclass(frozen=True)
class SyncPlan:
    """How a weight sync runs: the mechanism and the generators' tensor parallelism (each generator GPU
    receives ``1 / gen_tp`` of the weights)."""

    mechanism: SyncMechanism = SyncMechanism.NVLINK
    gen_tp: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, SyncMechanism):
            try:
                object.__setattr__(self, "mechanism", SyncMechanism(str(self.mechanism).strip().lower()))
            except ValueError:
                raise ConfigError(
                    f"unknown sync mechanism {self.mechanism!r}; known: {', '.join(SYNC_MECHANISMS)}"
                ) from None
        if isinstance(self.gen_tp, bool) or not isinstance(self.gen_tp, int) or self.gen_tp < 1:
            raise ConfigError(f"sync: gen_tp must be an integer >= 1, got {self.gen_tp!r}")


def param_tensors(model: ModelSpec) -> int:
    """Parameter tensors in the model's state dict: per layer q, k, v, o, gate, up, down and two norms (+3
    q/k/v biases, +2 q/k norms); then the embedding, the final norm and an untied lm_head. MLA's attention
    has q_a, its norm, q_b (or one q_proj), kv_a, its norm, kv_b and o; a MoE layer's MLP has the router
    (and its bias), gate/up/down of every routed expert, and of the shared experts (and their gate)."""
    attn = (5 + (2 if model.q_lora_rank else 0)) if model.mla else 4
    per_layer = attn + 3 + 2 + (3 if model.qkv_bias else 0) + (2 if model.qk_norm else 0)
    moe = 1 + (1 if model.router_bias else 0) + 3 * model.experts + (1 if model.shared_expert_gate else 0)
    moe += 0 if model.shared_intermediate else -3  # the dense MLP's 3 tensors are the shared expert's, or none
    return model.layers * per_layer + model.moe_layers * moe + 2 + (0 if model.tied_embeddings else 1)


def sync_legs(model: ModelSpec, hw: Hardware, plan: SyncPlan) -> dict[str, float]:
    """Seconds of each part of one weight sync (they add up to :func:`sync_seconds`)."""
    op, g = hw.params.sync, hw.gpu
    w = float(model.weight_bytes())
    share = w / plan.gen_tp
    legs = {"overhead": op.overhead_s}
    if plan.mechanism is SyncMechanism.NVLINK:
        legs["transfer"] = share / (g.link_bw * op.eff_memory)
    elif plan.mechanism is SyncMechanism.NETWORK:
        legs["transfer"] = share / (g.net_bw * op.eff_memory)
    else:
        legs["to_host"] = w / (g.host_bw * op.eff_memory)  # whole model through one rank's host link
        legs["from_host"] = share / (g.host_bw * op.eff_memory)  # every generator GPU over its own link
        legs["per_tensor"] = param_tensors(model) * HOST_PER_TENSOR_S
    return legs


def sync_seconds(model: ModelSpec, hw: Hardware, plan: SyncPlan = SyncPlan()) -> float:
    """Seconds to push ``model``'s weights into the generation engines along ``plan``."""
    legs = sync_legs(model, hw, plan)
    if plan.mechanism is not SyncMechanism.HOST:
        return legs["overhead"] + legs["transfer"]  # the historical formula, to the last bit
    return sum(legs.values())
