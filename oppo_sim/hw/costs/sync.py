"""Weight sync by mechanism: how the trained actor's weights reach the generation engines.

After each PPO update every generator GPU needs the new actor weights. The trainer first exports them tensor by
tensor as whole tensors on its ranks (the gathers its layout needs: :mod:`oppo_sim.hw.costs.weight_export`), then
hands them over one of four ways:

- ``ipc`` — the engines share the trainer's GPUs (colocated: verl's hybrid engine, NeMo RL and OpenRLHF
  colocated): each engine rank takes the full tensor through a CUDA IPC handle (or in the same process) and its
  loader copies its tensor-parallel share ``W / tp`` of the ``W`` weight bytes in device memory (``mem_bw``).
- ``nvlink`` — generators on other GPUs of the trainer's scale-up domain (one node, or one rack-scale NVLink
  domain such as GB200 NVL72's 72 GPUs: ``gpu_table.domain_gpus``): the trainer broadcasts each full tensor
  with NCCL over the GPU interconnect (``link_bw``: NVLink, Infinity Fabric, or PCIe peer-to-peer on PCIe cards)
  to every engine rank, whose loader slices it — so every generator GPU receives all ``W`` bytes whatever its
  tensor parallelism (verl's one-step-off and fully-async ``sync_rollout_weights``, OpenRLHF's
  ``_broadcast_to_vllm``, NeMo RL's ``packed_broadcast_producer``: a whole tensor to every rank).
- ``network`` — generators in another scale-up domain (on other nodes): the same broadcast, an NCCL ring, across
  the network (``net_bw`` per GPU: 400 Gb/s NDR InfiniBand per H100/H200 in a DGX, 200 Gb/s HDR per A100). A ring
  leaves a node through the NICs of the group's GPUs there, side by side (``links.ring_share``), so the group's
  make-up decides it (``SyncPlan.per_domain``, from ``--refit-group``): OpenRLHF's group is the trainer's rank 0
  and the engine ranks (``_model_update_group``, ``world_size = engines x tp + 1``), its root alone on its node
  with one NIC; NeMo RL's ``model_update_group`` (``grpo.py``: "world includes all training workers and all
  inference workers") and verl's ``actor_rollout`` group (``create_collective_group`` over the actor and rollout
  workers) hold every rank, so every node's NICs carry the ring, up to the scale-up link.
- ``host`` — staged through host memory: the full weights are gathered on one trainer rank, copied to
  its host over that rank's one PCIe link, then loaded into each generator GPU from host memory tensor
  by tensor (a state dict handed over by RPC or a file, as simple integrations and engine "refit" APIs
  taking host tensors do).

Cost, with ``eff`` and ``overhead_s`` the calibrated ``sync`` parameters (defaults 0.6 and 50 ms), every
bandwidth one direction per GPU (``oppo_sim.hw.devices.hardware``'s convention: H100 NVLink 450e9 B/s) and ``T`` the
model's parameter tensors (:attr:`ModelSpec.param_tensors`: 339 for a 7B Qwen2.5, 18,867 for Qwen3-30B-A3B,
45,395 for DeepSeek-V3), after the trainer's export::

    ipc:      overhead_s + (W / tp) / (mem_bw * eff) + T * SYNC_PER_TENSOR_S
    nvlink:   overhead_s + W / (link_bw * eff) + T * (SYNC_PER_TENSOR_S + latency of one NCCL call, NVLink)
    network:  overhead_s + W / (ring * eff)    + T * (SYNC_PER_TENSOR_S + latency of one NCCL call, network)
    host:     overhead_s + W / (host_bw * eff) + (W / tp) / (host_bw * eff) + T * HOST_PER_TENSOR_S

with ``ring = min(link_bw, per_domain x net_bw)`` (``per_domain`` 1 for OpenRLHF's group).

Every framework moves the weights **tensor by tensor**, even over NCCL: OpenRLHF gathers each ZeRO-3
parameter and broadcasts it to the engines one ``named_parameters()`` entry at a time, each with a Ray call
to the engines (``openrlhf/trainer/ray/ppo_actor.py`` ``_broadcast_to_vllm`` at dbdd43b0); verl's trainer
exports a generator of full tensors (``get_per_tensor_param``, ``verl/checkpoint_engine/base.py`` at
b178a3cd) that vLLM's ``load_weights`` consumes one by one; NeMo RL packs tensors into buffers for the
transfer but vLLM still loads them one by one. So a sync pays, per tensor, a Python iteration and the
engine's weight loader (name lookup, the TP slice, the copy) — :data:`SYNC_PER_TENSOR_S` — and the latency of
the collective it waits for (:func:`oppo_sim.hw.devices.hardware.collective_latency` of a two-party call on the
sync's path). The transfer itself is bandwidth-bound and counted once.

**Double-buffered refit** (``SyncPlan.buffers = 2``; ``--refit-buffers 2``, NeMo RL's): NeMo RL packs the exported
tensors into buffers and keeps two in flight — ``packed_broadcast_producer`` (``nemo_rl/utils/packed_tensor.py``,
``NRL_REFIT_NUM_BUFFERS`` = 2, each buffer 2% of the GPU's memory up to 5 GB, one NCCL broadcast per buffer) and the
colocated ``stream_weights_via_ipc_zmq_impl`` ("ping-pong double buffering to enable overlapping communication") at
the v0.5 commit 9dbd9adc — so the export of one buffer overlaps the hand-off of the previous: the sync takes the
longer of the export and the hand-off's transfer (``topology.weight_sync_legs`` adds a negative ``overlap`` leg of
the shorter), and the per-tensor NCCL latency becomes one per buffer (``T x SYNC_PER_TENSOR_S`` stays: vLLM still
loads tensor by tensor).

The sync keeps its own efficiency rather than the ``collective`` one the all-reduces inside a pool use:
a sync is measured end to end (``oppo-real``'s ``weight_sync_s``, fitted by
``calibration.with_sync_seconds``), and besides the NCCL broadcast it packs buckets and loads them into
the engine, so its fraction of the link is its own; both are fractions of the same one-direction bandwidth.

What makes a sync slow, with a worked example: ``docs/model.md`` (the model's stages, the weight sync).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.links import ring_share
from oppo_sim.hw.costs.weight_export import Payload
from oppo_sim.hw.devices.hardware import Hardware, collective_latency
from oppo_sim.hw.models.lookup import ModelSpec

__all__ = ["REFIT_GROUPS", "SyncMechanism", "SYNC_MECHANISMS", "check_refit_group", "HOST_PER_TENSOR_S", "SYNC_PER_TENSOR_S", "SyncPlan", "check_refit_buffers", "param_tensors",
           "per_tensor_seconds", "push_terms", "sync_legs", "sync_seconds", "tensor_host_seconds"]

HOST_PER_TENSOR_S = 2e-3
"""Fixed seconds per parameter tensor on the host path: a Python-level call per tensor, its
serialisation, and a synchronising copy from pageable host memory into the engine's buffer. An order of
magnitude, not a measurement; ``oppo-real``'s measured ``weight_sync_s`` is what a calibration fits."""

SYNC_PER_TENSOR_S = 1.5e-4
"""Fixed host seconds per parameter tensor on the NCCL paths (``nvlink``, ``network``), beyond the collective's
own latency: one Python iteration of the framework's per-tensor loop (~20 us: the name, the dtype/shape
message, the gathered tensor's view), the engine's ``load_weights`` for it (~50-100 us: the name -> parameter
lookup, the weight loader's tensor-parallel ``narrow`` and ``copy_``, a few kernel launches of ~5-10 us of
host time each) and the trainer-side export of the full tensor (FSDP ``full_tensor()`` / DeepSpeed's
``GatheredParameters`` bookkeeping, ~30 us). A first-principles estimate (no sync in this repository is
measured per tensor on a GPU), not fitted to any published time; a calibration of ``weight_sync_s``
absorbs what it misses."""


class SyncMechanism(str, Enum):
    """The path the actor's weights take from the trainer to the generators."""

    IPC = "ipc"
    NVLINK = "nvlink"
    NETWORK = "network"
    HOST = "host"


SYNC_MECHANISMS: tuple[str, ...] = tuple(m.value for m in SyncMechanism)
REFIT_GROUPS: tuple[str, ...] = ("rank0", "all")
"""Who joins a sync's broadcast between pools: the trainer's rank 0 and the engines, or every rank of both."""


@dataclass(frozen=True)
class SyncPlan:
    """How a weight sync runs: the mechanism and the generators' tensor parallelism (each generator GPU
    receives ``1 / gen_tp`` of the weights)."""

    mechanism: SyncMechanism = SyncMechanism.NVLINK
    gen_tp: int = 1
    buffers: int = 1  # 1: tensor by tensor (verl, OpenRLHF); 2: NeMo RL's packed ping-pong buffers (module notes)
    per_domain: int = 1  # the network path's ring: the group's GPUs in each scale-up domain, whose NICs it takes

    def __post_init__(self) -> None:
        check_refit_buffers(self.buffers)
        if not isinstance(self.mechanism, SyncMechanism):
            try:
                object.__setattr__(self, "mechanism", SyncMechanism(str(self.mechanism).strip().lower()))
            except ValueError:
                raise ConfigError(
                    f"unknown sync mechanism {self.mechanism!r}; known: {', '.join(SYNC_MECHANISMS)}"
                ) from None
        for name in ("gen_tp", "per_domain"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"sync: {name} must be an integer >= 1, got {v!r}")


def check_refit_buffers(buffers: object) -> int:
    """``buffers`` if it is a refit's buffer count (1: tensor by tensor, 2: double-buffered), else ``ConfigError``."""
    if isinstance(buffers, bool) or buffers not in (1, 2):
        raise ConfigError(f"refit_buffers must be 1 (tensor by tensor) or 2 (double-buffered), got {buffers!r}")
    return int(buffers)  # type: ignore[arg-type]


def check_refit_group(group: object) -> str:
    """``group`` if it is one of :data:`REFIT_GROUPS`, else ``ConfigError``."""
    if group not in REFIT_GROUPS:
        raise ConfigError(f"refit_group must be one of {', '.join(REFIT_GROUPS)}, got {group!r}")
    return str(group)


def param_tensors(model: ModelSpec) -> int:
    """Parameter tensors in ``model``'s state dict: :attr:`ModelSpec.param_tensors` (kept as a function for
    the callers that take one)."""
    return model.param_tensors


def sync_legs(model: ModelSpec, hw: Hardware, plan: SyncPlan, payload: Payload | None = None) -> dict[str, float]:
    """Seconds of each part of one weight sync (they add up to :func:`sync_seconds`) of ``payload`` (default the
    model's weights; LoRA's adapters where only they are handed over)."""
    op, g = hw.params.sync, hw.gpu
    p = Payload.weights(model) if payload is None else payload
    w = p.nbytes
    share = w / plan.gen_tp
    legs = {"overhead": op.overhead_s}
    if plan.mechanism is not SyncMechanism.HOST:
        nbytes, bw = push_terms(model, hw, plan, p)
        legs["transfer"] = nbytes / (bw * op.eff_memory)
    else:
        legs["to_host"] = w / (g.host_bw * op.eff_memory)  # whole model through one rank's host link
        legs["from_host"] = share / (g.host_bw * op.eff_memory)  # every generator GPU over its own link
    packed = plan.buffers > 1 and plan.mechanism is not SyncMechanism.HOST  # one call per buffer, not per tensor
    legs["per_tensor"] = p.tensors * (tensor_host_seconds(hw) if packed else per_tensor_seconds(hw, plan.mechanism))
    return legs


def push_terms(model: ModelSpec, hw: Hardware, plan: SyncPlan, payload: Payload | None = None) -> tuple[float, float]:
    """(bytes each generator GPU takes, the bandwidth it takes them at) on the ``ipc``, ``nvlink`` and
    ``network`` paths (module notes): its share from device memory, or every whole tensor over the link."""
    w, g = (Payload.weights(model) if payload is None else payload).nbytes, hw.gpu
    if plan.mechanism is SyncMechanism.IPC:
        return w / plan.gen_tp, g.mem_bw
    if plan.mechanism is SyncMechanism.NVLINK:
        return w, g.link_bw
    if plan.mechanism is SyncMechanism.NETWORK:
        return w, ring_share(g.link_bw, g.net_bw, plan.per_domain)
    raise ConfigError("push_terms: the host path has two legs (sync_legs)")


def tensor_host_seconds(hw: Hardware) -> float:
    """The host's seconds per parameter tensor on the device paths (``ipc``, ``nvlink``, ``network``): the frameworks'
    per-tensor loop and the engine's ``load_weights``. Measured where a calibration timed a sync
    (``hw.sync_tensor_s``); else :data:`SYNC_PER_TENSOR_S`, x86-estimated, times ``hw.host_scale``."""
    return SYNC_PER_TENSOR_S * hw.host_scale if hw.sync_tensor_s is None else hw.sync_tensor_s


def per_tensor_seconds(hw: Hardware, mechanism: SyncMechanism) -> float:
    """Fixed seconds per parameter tensor of a sync along ``mechanism``: the host's work
    (:func:`tensor_host_seconds`; and on the NVLink or network path one two-party NCCL call's latency);
    :data:`HOST_PER_TENSOR_S` on the host path (x86-estimated: times ``hw.host_scale``)."""
    if mechanism is SyncMechanism.HOST:
        return HOST_PER_TENSOR_S * hw.host_scale
    if mechanism is SyncMechanism.IPC:
        return tensor_host_seconds(hw)
    nodes = 2 if mechanism is SyncMechanism.NETWORK else 1
    return tensor_host_seconds(hw) + collective_latency(hw.params.collective, "broadcast", 2, nodes)


def sync_seconds(model: ModelSpec, hw: Hardware, plan: SyncPlan = SyncPlan()) -> float:
    """Seconds to push ``model``'s weights into the generation engines along ``plan``."""
    return sum(sync_legs(model, hw, plan).values())
