"""Devices: GPU spec table, cost-model parameters and the ``Hardware`` pair that joins them.

A ``GPUSpec`` holds nominal datasheet numbers (dense bf16 peak, memory bandwidth, memory size,
interconnect, scale-up domain); their table lives in :mod:`oppo_sim.hw.devices.gpu_table` and is re-exported
here (``GPUS``, ``get_gpu``). ``CostParams`` holds the calibrated efficiencies and fixed overheads the
roofline cost model (``oppo_sim.hw.costs.costmodel``) applies per operation kind. ``Hardware`` is "a device": a
spec plus its parameters and where those come from (``params_source``: a calibrated profile, a
measurement of that GPU, or the uncalibrated defaults). A calibrated CPU is just another ``Hardware``
(see ``oppo_sim.hw.fitting.calibration``).

Units — the one convention of the whole package:

- **Bandwidth**, bytes per second. Links (``link_bw`` to the other GPUs of its scale-up domain, see
  ``gpu_table``; ``host_bw`` to host memory; ``net_bw`` to other nodes): what ONE GPU moves in ONE
  direction. Vendors quote NVLink and PCIe with both directions summed (H100 "NVLink 900 GB/s" is 450 GB/s each way; PCIe 4.0 x16 "64 GB/s" is
  32 GB/s each way): the table halves those figures. NICs are quoted per direction already (400 Gb/s NDR
  InfiniBand = 50e9 B/s each way). ``mem_bw`` is the device memory's datasheet figure (reads and writes
  together). Printed as GB/s (1e9 B/s), as datasheets and nccl-tests print them.
- **Memory capacity** (``mem_bytes`` and every byte count of ``oppo_sim.hw.memory.train_memory``): bytes as the
  device reports them (``nvidia-smi --query-gpu=memory.total`` in MiB x ``MiB``): an "80GB" H100 holds
  81,559 MiB = 79.6 GiB = 85.5e9 B. Every printed memory figure is in GiB (``GiB`` = 2**30 B) and says
  "GiB".
- **Collectives**: a ring all-reduce of ``S`` bytes over ``n`` GPUs on ``N`` nodes costs
  ``latency(n, N) + 2(n-1)/n * S / (bw * eff_memory)`` with the ``collective`` op's parameters (see
  :func:`allreduce_seconds`): each GPU sends and receives ``2(n-1)/n * S`` ("bus bytes", what nccl-tests'
  busbw counts) over its one-direction ``bw``, at the calibrated fraction ``eff_memory`` of it. The latency
  grows with the ranks and depends on the path (:func:`collective_latency`, NCCL's own latency model).

Cost-model contract, shared with ``costmodel.py`` and ``calibration.py``::

    time(op) = overhead_s + max(flops / (devices * peak_flops * eff_compute),
                                bytes / (devices * bw * eff_memory))

where ``bw`` is ``mem_bw`` for decode / prefill / train and, for sync, the bandwidth of the path the
weights take (``link_bw``, ``net_bw`` or ``host_bw``: see ``oppo_sim.hw.costs.sync``; sync has no FLOPs). For
``collective``, ``bytes`` are bus bytes, ``bw`` is ``link_bw`` (``net_bw`` for a ring that leaves its
scale-up domain, ``gpu_table.domain_gpus``) and
there is no ``devices`` divisor (each GPU moves its own bus bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Mapping

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.devices.gpu_table import GPUS, GiB, GPUSpec, MiB, domain_gpus, get_gpu

__all__ = [
    "GiB",
    "MiB",
    "GPUSpec",
    "GPUS",
    "get_gpu",
    "domain_gpus",
    "OpParams",
    "CostParams",
    "HOST_OVERHEAD_OPS",
    "datasheet_hardware",
    "OP_KINDS",
    "DEFAULT_COST_PARAMS",
    "GPU_COST_PARAMS",
    "default_params",
    "default_params_source",
    "UNCALIBRATED",
    "NCCL_HOP_S",
    "NCCL_TREE_NET_HOP_S",
    "COLLECTIVE_KINDS",
    "collective_latency",
    "nodes_spanned",
    "collective_seconds",
    "allreduce_seconds",
    "Hardware",
    "get_hardware",
]


# --------------------------------------------------------------------------------------------------
# Cost-model parameters


OP_KINDS: tuple[str, ...] = ("decode", "prefill", "train", "sync", "collective")


@dataclass(frozen=True)
class OpParams:
    """Calibrated coefficients of one operation kind."""

    eff_compute: float  # fraction of peak FLOP/s achieved, (0, 1]
    eff_memory: float  # fraction of peak bandwidth achieved, (0, 1]
    overhead_s: float  # fixed seconds per call (launch / scheduler / Python)

    def __post_init__(self) -> None:
        for f in ("eff_compute", "eff_memory"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 1):
                raise ConfigError(f"OpParams: {f} must be in (0, 1], got {v!r}")
        v = self.overhead_s
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"OpParams: overhead_s must be a finite number >= 0, got {v!r}")


_DEFAULT_COLLECTIVE = OpParams(1.0, 0.8, 6.6e-6)
"""NCCL reaches ~370 of NVLink 4's 450 GB/s each way on a ring (its protocol costs ~20%:
NVIDIA/nccl-tests#212) -> eff_memory 0.8; ``overhead_s`` 6.6 us, NCCL's base latency of a ring call with
its low-latency (LL) protocol (``baseLat``, ``src/graph/tuning.cc``), to which :func:`collective_latency`
adds the per-step latency of each hop."""


@dataclass(frozen=True)
class CostParams:
    """One ``OpParams`` per operation kind (see ``OP_KINDS``)."""

    decode: OpParams  # one generation iteration (mixed decode + chunked-prefill batch)
    prefill: OpParams  # a scorer forward pass (reward/reference/critic/actor log-probs)
    train: OpParams  # forward+backward over tokens (train flops = 3 x forward flops)
    sync: OpParams  # weight sync: overhead + bytes / (path bandwidth * eff_memory), see oppo_sim.hw.costs.sync
    # NCCL collectives inside a pool (tensor-parallel and gradient all-reduces, ZeRO-3's all-gather):
    # overhead_s is the latency of one call, eff_memory the fraction of the one-direction link bandwidth
    # its bus bytes move at (see ``allreduce_seconds``); eff_compute is unused (no FLOPs). A default, so
    # that profiles and callers from before this op keep working.
    collective: OpParams = _DEFAULT_COLLECTIVE

    def __post_init__(self) -> None:
        for f in fields(self):
            if not isinstance(getattr(self, f.name), OpParams):
                raise ConfigError(f"CostParams: {f.name} must be an OpParams, got {getattr(self, f.name)!r}")

    def op(self, kind: str) -> OpParams:
        """The parameters of operation ``kind``; unknown kind -> ``ConfigError``."""
        if kind not in OP_KINDS:
            raise ConfigError(f"unknown op {kind!r}; known: {', '.join(OP_KINDS)}")
        return getattr(self, kind)


DEFAULT_COST_PARAMS = CostParams(
    decode=OpParams(0.5, 0.7, 3e-3),
    prefill=OpParams(0.55, 0.7, 2e-3),
    train=OpParams(0.4, 0.7, 5e-3),
    sync=OpParams(1.0, 0.6, 0.05),
    collective=_DEFAULT_COLLECTIVE,
)


GPU_COST_PARAMS: Mapping[str, CostParams] = MappingProxyType({})
"""Default cost parameters per GPU-table id where a measurement set them (``scripts/gpu_measure.sh``:
``gpu_summary.json``'s suggested defaults, fitted against that entry's datasheet numbers); other GPUs
use ``DEFAULT_COST_PARAMS``. Empty until a GPU measurement is taken: README's paper-scale table says
which measurement its parameters come from."""


def default_params(gpu_id: str) -> CostParams:
    """The default cost parameters of a GPU-table entry (its measured family's, else ``DEFAULT_COST_PARAMS``)."""
    return GPU_COST_PARAMS.get(str(gpu_id).strip().lower(), DEFAULT_COST_PARAMS)


NCCL_HOP_S: Mapping[str, float] = MappingProxyType({"nvlink": 0.6e-6, "network": 2.7e-6})
"""Seconds one step of a ring adds to a collective's latency, by the path that step crosses: NCCL's
``hwLat`` for the ring algorithm and the LL protocol (the one NCCL picks for the small, latency-bound
messages where latency matters), NVLink 0.6 us, network 2.7 us (NVIDIA/nccl ``src/graph/tuning.cc``,
unchanged from 2.12 to 2.2x). PCIe peer-to-peer (1.0 us there) is priced as NVLink."""

NCCL_TREE_NET_HOP_S = 5.0e-6
"""Seconds one network level of NCCL's tree algorithm adds (``hwLat`` NET, tree, LL)."""

COLLECTIVE_KINDS: tuple[str, ...] = ("all-reduce", "all-gather", "reduce-scatter", "broadcast", "all-to-all")


def nodes_spanned(ranks: int, domain: int) -> int:
    """Nodes (scale-up domains of ``domain`` GPUs; 0: unbounded) a group of ``ranks`` consecutive GPUs spans."""
    return 1 if domain <= 0 or ranks <= domain else -(-ranks // domain)


def collective_latency(op: OpParams, kind: str, ranks: int, nodes: int = 1) -> float:
    """Latency (seconds, no bytes) of one NCCL collective of ``kind`` over ``ranks`` GPUs on ``nodes`` nodes,
    as NCCL's tuner models it (``src/graph/tuning.cc``: ``baseLat + steps x hwLat`` by path):

    - ring: ``overhead_s`` (the base latency) plus one hop per step, ``2(n-1)`` steps for an all-reduce,
      ``n-1`` for an all-gather, reduce-scatter or broadcast; of them ``2(N-1)`` (resp. ``N-1``) cross the
      network (:data:`NCCL_HOP_S`), the rest NVLink — so the latency grows linearly with the ranks;
    - tree (all-reduce across nodes): ``overhead_s + 2 ((n/N - 1) x NVLink hop + ceil(log2 N) x``
      :data:`NCCL_TREE_NET_HOP_S` ``)`` — logarithmic in the nodes; NCCL picks the faster of the two at
      small sizes, so an all-reduce takes the smaller;
    - all-to-all (grouped point-to-point, every peer at once): the base latency plus one hop on the
      slowest path.

    0 on one rank. ``kind`` unknown or ``ranks``/``nodes`` not positive -> ``ConfigError``."""
    if kind not in COLLECTIVE_KINDS:
        raise ConfigError(f"unknown collective {kind!r}; known: {', '.join(COLLECTIVE_KINDS)}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1 or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"collective_latency: ranks and nodes must be integers >= 1, got {ranks!r}, {nodes!r}")
    if ranks == 1:
        return 0.0
    nodes = min(nodes, ranks)
    nv, net = NCCL_HOP_S["nvlink"], NCCL_HOP_S["network"]
    if kind == "all-to-all":
        return op.overhead_s + (net if nodes > 1 else nv)
    per = 2 if kind == "all-reduce" else 1
    steps, inter = per * (ranks - 1), per * (nodes - 1)
    ring = op.overhead_s + (steps - inter) * nv + inter * net
    if kind != "all-reduce" or nodes == 1:
        return ring
    tree = op.overhead_s + 2.0 * ((ranks // nodes - 1) * nv + math.ceil(math.log2(nodes)) * NCCL_TREE_NET_HOP_S)
    return min(ring, tree)


def collective_seconds(op: OpParams, bus_bytes: float, bw: float, kind: str | None = None, ranks: int = 2,
                       nodes: int = 1) -> float:
    """Seconds of one collective call in which each GPU sends (and receives) ``bus_bytes`` over links of
    ``bw`` bytes/s each way, at the ``collective`` parameters ``op``: its latency plus ``bus_bytes / (bw *
    eff_memory)``. Bus bytes: ``2(n-1)/n`` of the buffer for an all-reduce, ``(n-1)/n`` for an all-gather
    or a reduce-scatter over ``n`` GPUs. The latency is :func:`collective_latency` of ``kind`` over
    ``ranks`` GPUs on ``nodes`` nodes; without a ``kind``, the base latency ``overhead_s`` alone."""
    lat = op.overhead_s if kind is None else collective_latency(op, kind, ranks, nodes)
    return lat + bus_bytes / (bw * op.eff_memory)


def allreduce_seconds(op: OpParams, nbytes: float, devices: int, bw: float, nodes: int = 1) -> float:
    """Seconds of one all-reduce of ``nbytes`` over ``devices`` GPUs on ``nodes`` nodes (0 on one device):
    ``collective_latency(op, "all-reduce", n, N) + 2(n-1)/n * nbytes / (bw * eff_memory)``."""
    if devices <= 1:
        return 0.0
    return collective_seconds(op, 2.0 * (devices - 1) / devices * nbytes, bw, "all-reduce", devices, nodes)


UNCALIBRATED = "uncalibrated defaults"
"""``Hardware.params_source`` of the default cost parameters no measurement set (``DEFAULT_COST_PARAMS``)."""


def default_params_source(gpu_id: str) -> str:
    """Where :func:`default_params` of ``gpu_id`` come from: ``measured defaults for <id>`` or
    ``uncalibrated defaults``."""
    key = str(gpu_id).strip().lower()
    return f"measured defaults for {key}" if key in GPU_COST_PARAMS else UNCALIBRATED


@dataclass(frozen=True)
class Hardware:
    """A device: nominal spec plus calibrated cost parameters, and where those parameters come from
    (``params_source``, printed in the header of ``oppo-sim run``/``compare``/``plan``; not compared)."""

    gpu: GPUSpec
    params: CostParams = DEFAULT_COST_PARAMS
    params_source: str = field(default=UNCALIBRATED, compare=False)
    ops: object | None = None  # measured kernel fractions (``oppo_sim.hw.costs.op_cost.OpCosts``); None: the roofline
    host_scale: float = 1.0  # multiplies the x86-measured per-op and per-tensor host constants (datasheet hardware:
    #                          the GPU's host_op_scale; a profile: the one it was fitted with, saved in it; values
    #                          given by the user or measured on the host are that host's own and never multiplied)
    sync_tensor_s: float | None = None  # a weight sync's measured seconds per parameter tensor (calibration's
    #                          with_sync_seconds); None: oppo_sim.hw.costs.sync's constants (x86-estimated, times host_scale)

    def __post_init__(self) -> None:
        if not isinstance(self.gpu, GPUSpec):
            raise ConfigError(f"Hardware: gpu must be a GPUSpec, got {type(self.gpu).__name__}")
        if not isinstance(self.params, CostParams):
            raise ConfigError(f"Hardware: params must be a CostParams, got {type(self.params).__name__}")
        if not isinstance(self.params_source, str) or not self.params_source.strip():
            raise ConfigError(f"Hardware: params_source must be a non-empty string, got {self.params_source!r}")
        h = self.host_scale
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not math.isfinite(h) or h <= 0:
            raise ConfigError(f"Hardware: host_scale must be a positive number, got {h!r}")
        t = self.sync_tensor_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0):
            raise ConfigError(f"Hardware: sync_tensor_s must be None or a number >= 0, got {t!r}")

    @property
    def id(self) -> str:
        return self.gpu.id

    @property
    def label(self) -> str:
        """``<id> (<params_source>)``: the GPU as a command's header names it."""
        return f"{self.gpu.id} ({self.params_source})"


HOST_OVERHEAD_OPS: tuple[str, ...] = ("decode", "prefill", "train", "sync")
"""The operations whose fixed ``overhead_s`` is host time (the engine's scheduler step, a pass's or a sync's call
from Python); the collective's is NCCL's latency on the links, not the host's."""


def datasheet_hardware(gpu: GPUSpec, params: CostParams = DEFAULT_COST_PARAMS, source: str = UNCALIBRATED,
                       own: tuple[str, ...] = ()) -> Hardware:
    """``gpu`` priced from its datasheet: on a host slower than the x86 servers the constants were measured on
    (``gpu.host_op_scale`` > 1, Grace), the default parameters' host overheads (:data:`HOST_OVERHEAD_OPS`) are
    that much longer, and ``host_scale`` carries the ratio to the per-op and per-tensor host constants. The ops in
    ``own`` hold parameters measured or given for this GPU (on its own host): kept as they are."""
    k = gpu.host_op_scale
    scaled = {op: replace(params.op(op), overhead_s=params.op(op).overhead_s * k)
              for op in HOST_OVERHEAD_OPS if op not in own and k != 1.0}
    return Hardware(gpu, replace(params, **scaled), source, host_scale=k)


def get_hardware(gpu: str) -> Hardware:
    """A GPU-table id -> its :func:`datasheet_hardware` with the default cost parameters (a calibrated profile
    or a datasheet YAML is read by ``oppo_sim.hw.fitting.profiles.resolve_hardware`` at the command-line boundary)."""
    text = str(gpu).strip()
    if text.lower() in GPUS:
        source = default_params_source(text)  # measured defaults were taken on that GPU's own host: kept
        return datasheet_hardware(GPUS[text.lower()], default_params(text), source, OP_KINDS if source != UNCALIBRATED else ())
    raise ConfigError(f"unknown GPU {text!r}; known: {', '.join(GPUS)} (a calibrated .json profile: --profile)")
