"""Devices: GPU spec table, cost-model parameters and the ``Hardware`` pair that joins them.

A ``GPUSpec`` holds nominal datasheet numbers (dense bf16 peak, memory bandwidth, memory size,
interconnect, scale-up domain); their table lives in :mod:`oppo_sim.hw.gpu_table` and is re-exported
here (``GPUS``, ``get_gpu``). ``CostParams`` holds the calibrated efficiencies and fixed overheads the
roofline cost model (``oppo_sim.hw.costmodel``) applies per operation kind. ``Hardware`` is "a device": a
spec plus its parameters and where those come from (``params_source``: a calibrated profile, a
measurement of that GPU, or the uncalibrated defaults). A calibrated CPU is just another ``Hardware``
(see ``oppo_sim.hw.calibration``).

Units — the one convention of the whole package:

- **Bandwidth**, bytes per second. Links (``link_bw`` to the other GPUs of its scale-up domain, see
  ``gpu_table``; ``host_bw`` to host memory; ``net_bw`` to other nodes): what ONE GPU moves in ONE
  direction. Vendors quote NVLink and PCIe with both directions summed (H100 "NVLink 900 GB/s" is 450 GB/s each way; PCIe 4.0 x16 "64 GB/s" is
  32 GB/s each way): the table halves those figures. NICs are quoted per direction already (400 Gb/s NDR
  InfiniBand = 50e9 B/s each way). ``mem_bw`` is the device memory's datasheet figure (reads and writes
  together). Printed as GB/s (1e9 B/s), as datasheets and nccl-tests print them.
- **Memory capacity** (``mem_bytes`` and every byte count of ``oppo_sim.hw.memory``): bytes as the
  device reports them (``nvidia-smi --query-gpu=memory.total`` in MiB x ``MiB``): an "80GB" H100 holds
  81,559 MiB = 79.6 GiB = 85.5e9 B. Every printed memory figure is in GiB (``GiB`` = 2**30 B) and says
  "GiB".
- **Collectives**: a ring all-reduce of ``S`` bytes over ``n`` GPUs costs
  ``overhead_s + 2(n-1)/n * S / (bw * eff_memory)`` with the ``collective`` op's parameters (see
  :func:`allreduce_seconds`): each GPU sends and receives ``2(n-1)/n * S`` ("bus bytes", what nccl-tests'
  busbw counts) over its one-direction ``bw``, at the calibrated fraction ``eff_memory`` of it.

Cost-model contract, shared with ``costmodel.py`` and ``calibration.py``::

    time(op) = overhead_s + max(flops / (devices * peak_flops * eff_compute),
                                bytes / (devices * bw * eff_memory))

where ``bw`` is ``mem_bw`` for decode / prefill / train and, for sync, the bandwidth of the path the
weights take (``link_bw``, ``net_bw`` or ``host_bw``: see ``oppo_sim.hw.sync``; sync has no FLOPs). For
``collective``, ``bytes`` are bus bytes, ``bw`` is ``link_bw`` (``net_bw`` for a ring that leaves its
scale-up domain, ``gpu_table.domain_gpus``) and
there is no ``devices`` divisor (each GPU moves its own bus bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.gpu_table import GPUS, GiB, GPUSpec, MiB, domain_gpus, get_gpu

__all__ = [
    "GiB",
    "MiB",
    "GPUSpec",
    "GPUS",
    "get_gpu",
    "domain_gpus",
    "OpParams",
    "CostParams",
    "OP_KINDS",
    "DEFAULT_COST_PARAMS",
    "GPU_COST_PARAMS",
    "default_params",
    "default_params_source",
    "UNCALIBRATED",
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


_DEFAULT_COLLECTIVE = OpParams(1.0, 0.8, 8e-6)
"""NCCL reaches ~370 of NVLink 4's 450 GB/s each way on a ring (its protocol costs ~20%:
NVIDIA/nccl-tests#212) -> eff_memory 0.8; 8 us per call, the scale of a small NVLink all-reduce."""


@dataclass(frozen=True)
class CostParams:
    """One ``OpParams`` per operation kind (see ``OP_KINDS``)."""

    decode: OpParams  # one generation iteration (mixed decode + chunked-prefill batch)
    prefill: OpParams  # a scorer forward pass (reward/reference/critic/actor log-probs)
    train: OpParams  # forward+backward over tokens (train flops = 3 x forward flops)
    sync: OpParams  # weight sync: overhead + bytes / (path bandwidth * eff_memory), see oppo_sim.hw.sync
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


def collective_seconds(op: OpParams, bus_bytes: float, bw: float) -> float:
    """Seconds of one collective call in which each GPU sends (and receives) ``bus_bytes`` over links of
    ``bw`` bytes/s each way, at the ``collective`` parameters ``op``: ``overhead_s + bus_bytes / (bw *
    eff_memory)``. Bus bytes: ``2(n-1)/n`` of the buffer for an all-reduce, ``(n-1)/n`` for an all-gather
    or a reduce-scatter over ``n`` GPUs."""
    return op.overhead_s + bus_bytes / (bw * op.eff_memory)


def allreduce_seconds(op: OpParams, nbytes: float, devices: int, bw: float) -> float:
    """Seconds of one ring all-reduce of ``nbytes`` over ``devices`` GPUs (0 on one device):
    ``overhead_s + 2(n-1)/n * nbytes / (bw * eff_memory)``."""
    if devices <= 1:
        return 0.0
    return collective_seconds(op, 2.0 * (devices - 1) / devices * nbytes, bw)


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

    def __post_init__(self) -> None:
        if not isinstance(self.gpu, GPUSpec):
            raise ConfigError(f"Hardware: gpu must be a GPUSpec, got {type(self.gpu).__name__}")
        if not isinstance(self.params, CostParams):
            raise ConfigError(f"Hardware: params must be a CostParams, got {type(self.params).__name__}")
        if not isinstance(self.params_source, str) or not self.params_source.strip():
            raise ConfigError(f"Hardware: params_source must be a non-empty string, got {self.params_source!r}")

    @property
    def id(self) -> str:
        return self.gpu.id

    @property
    def label(self) -> str:
        """``<id> (<params_source>)``: the GPU as a command's header names it."""
        return f"{self.gpu.id} ({self.params_source})"


def get_hardware(gpu: str) -> Hardware:
    """A GPU-table id -> ``Hardware(get_gpu(id))`` with the default cost parameters (a calibrated profile
    or a datasheet YAML is read by ``oppo_sim.hw.profiles.resolve_hardware`` at the command-line boundary)."""
    text = str(gpu).strip()
    if text.lower() in GPUS:
        return Hardware(GPUS[text.lower()], default_params(text), default_params_source(text))
    raise ConfigError(f"unknown GPU {text!r}; known: {', '.join(GPUS)} (a calibrated .json profile: --profile)")
