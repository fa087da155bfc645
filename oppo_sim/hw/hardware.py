"""Devices: GPU spec table, cost-model parameters and the ``Hardware`` pair that joins them.

A ``GPUSpec`` holds nominal datasheet numbers (dense bf16 peak, memory bandwidth, memory size,
interconnect). ``CostParams`` holds the calibrated efficiencies and fixed overheads the roofline cost
model (``oppo_sim.hw.costmodel``) applies per operation kind. ``Hardware`` is "a device": a spec plus its
parameters. A calibrated CPU is just another ``Hardware`` (see ``oppo_sim.hw.calibration``).

Cost-model contract, shared with ``costmodel.py`` and ``calibration.py``::

    time(op) = overhead_s + max(flops / (devices * peak_flops * eff_compute),
                                bytes / (devices * bw * eff_memory))

where ``bw`` is ``mem_bw`` for decode / prefill / train and, for sync, the bandwidth of the path the
weights take (``link_bw``, ``net_bw`` or ``host_bw``: see ``oppo_sim.hw.sync``; sync has no FLOPs).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Mapping

from oppo_sim.core.errors import ConfigError

__all__ = [
    "GPUSpec",
    "GPUS",
    "get_gpu",
    "OpParams",
    "CostParams",
    "OP_KINDS",
    "DEFAULT_COST_PARAMS",
    "GPU_COST_PARAMS",
    "default_params",
    "Hardware",
    "get_hardware",
]

_ID_RE = re.compile(r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$")


def _check_positive(owner: str, name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{owner}: {name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{owner}: {name} must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class GPUSpec:
    """Nominal datasheet numbers of one accelerator (or a nominal CPU, see ``calibration.cpu_spec``)."""

    id: str  # CLI id, lowercase-dashed, e.g. "h100-sxm"
    name: str  # human name
    peak_flops: float  # peak DENSE bf16 tensor FLOP/s (no sparsity)
    mem_bw: float  # bytes/s device-memory bandwidth
    mem_bytes: float  # bytes of device memory (1 GB = 1e9 B, as vendors count)
    link_bw: float  # bytes/s per-GPU interconnect within a node (NVLink for SXM parts, PCIe for PCIe cards),
    #                 as vendors quote it (both directions); the fitted sync efficiency absorbs the convention
    source: str  # where the numbers come from
    host_bw: float = 32e9  # bytes/s GPU <-> host memory, one direction (default: PCIe 4.0 x16)
    net_bw: float = 25e9  # bytes/s per GPU to other nodes, one direction (default: a 200 Gb/s NIC per GPU)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID_RE.match(self.id):
            raise ConfigError(f"GPU id must be lowercase-dashed (e.g. 'h100-sxm'), got {self.id!r}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"GPU '{self.id}': name must be a non-empty string")
        if not isinstance(self.source, str):
            raise ConfigError(f"GPU '{self.id}': source must be a string")
        for f in ("peak_flops", "mem_bw", "mem_bytes", "link_bw", "host_bw", "net_bw"):
            _check_positive(f"GPU '{self.id}'", f, getattr(self, f))

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound at nominal peak."""
        return self.peak_flops / self.mem_bw


_PCIE4_X16 = 64e9  # PCIe 4.0 x16: 64 GB/s bidirectional (32 GB/s each way)
_PCIE5_X16 = 128e9  # PCIe 5.0 x16: 128 GB/s bidirectional (64 GB/s each way)
_HOST_PCIE4 = 32e9  # host link, one direction: PCIe 4.0 x16
_HOST_PCIE5 = 64e9  # host link, one direction: PCIe 5.0 x16
_NET_200G = 25e9  # 200 Gb/s per GPU (InfiniBand HDR / 200 GbE), one direction
_NET_400G = 50e9  # 400 Gb/s per GPU (InfiniBand NDR / 400 GbE), one direction
_NET_100G = 12.5e9  # 100 Gb/s per GPU, one direction

# host_bw: the GPU's host interface (PCIe generation from the datasheet; C2C for Grace Hopper).
# net_bw: one NIC per GPU as in NVIDIA's reference nodes (DGX A100: 8 x ConnectX-6 HDR 200 Gb/s for
# compute; DGX H100 / H200: 8 x ConnectX-7 NDR 400 Gb/s); for PCIe cards no reference node fixes it, so
# the value is an assumption, marked as such.
_GPU_LIST = (
    GPUSpec(
        "a100-40gb", "NVIDIA A100 40GB SXM4", 312e12, 1555e9, 40e9, 600e9,
        "NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS dense, HBM2 1,555 GB/s, NVLink 600 GB/s, PCIe 4.0 host; "
        "DGX A100: 8 x ConnectX-6 HDR 200 Gb/s (one per GPU)",
        host_bw=_HOST_PCIE4, net_bw=_NET_200G,
    ),
    GPUSpec(
        "a100-80gb", "NVIDIA A100 80GB SXM4", 312e12, 2039e9, 80e9, 600e9,
        "NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS dense, HBM2e 2,039 GB/s, NVLink 600 GB/s, PCIe 4.0 host; "
        "DGX A100: 8 x ConnectX-6 HDR 200 Gb/s (one per GPU)",
        host_bw=_HOST_PCIE4, net_bw=_NET_200G,
    ),
    GPUSpec(
        "h100-sxm", "NVIDIA H100 SXM5 80GB", 989e12, 3350e9, 80e9, 900e9,
        "NVIDIA H100 datasheet: BF16 tensor 989 TFLOPS dense (1,979 sparse), HBM3 3.35 TB/s, NVLink 900 GB/s, "
        "PCIe 5.0 host; DGX H100: 8 x ConnectX-7 NDR 400 Gb/s (one per GPU)",
        host_bw=_HOST_PCIE5, net_bw=_NET_400G,
    ),
    GPUSpec(
        "h200", "NVIDIA H200 SXM 141GB", 989e12, 4800e9, 141e9, 900e9,
        "NVIDIA H200 datasheet: BF16 tensor 989 TFLOPS dense (1,979 sparse), HBM3e 4.8 TB/s, NVLink 900 GB/s, "
        "PCIe 5.0 host; DGX H200: 8 x ConnectX-7 NDR 400 Gb/s (one per GPU)",
        host_bw=_HOST_PCIE5, net_bw=_NET_400G,
    ),
    GPUSpec(
        "gh200", "NVIDIA GH200 Grace Hopper (144GB HBM3e)", 989e12, 4900e9, 144e9, 900e9,
        "NVIDIA GH200 datasheet (HBM3e variant): BF16 989 TFLOPS dense, 4.9 TB/s, NVLink 900 GB/s, "
        "NVLink-C2C 900 GB/s to Grace memory (450 GB/s each way); one ConnectX-7 400 Gb/s per superchip",
        host_bw=450e9, net_bw=_NET_400G,
    ),
    GPUSpec(
        "l40s", "NVIDIA L40S 48GB", 362e12, 864e9, 48e9, _PCIE4_X16,
        "NVIDIA L40S datasheet: BF16 tensor 362.05 TFLOPS dense (733 sparse), GDDR6 864 GB/s, "
        "PCIe 4.0 x16 (64 GB/s bidirectional); network assumed 200 Gb/s per GPU",
        host_bw=_HOST_PCIE4, net_bw=_NET_200G,
    ),
    GPUSpec(
        "rtx-4090", "NVIDIA GeForce RTX 4090", 165.2e12, 1008e9, 24e9, _PCIE4_X16,
        "NVIDIA Ada Lovelace whitepaper: BF16 tensor w/ FP32 accumulate 165.2 TFLOPS dense, "
        "GDDR6X 1,008 GB/s, PCIe 4.0 x16 (64 GB/s bidirectional), no NVLink; network assumed 100 Gb/s per GPU",
        host_bw=_HOST_PCIE4, net_bw=_NET_100G,
    ),
    GPUSpec(
        "rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell 96GB", 503.8e12, 1792e9, 96e9, _PCIE5_X16,
        "NVIDIA RTX PRO 6000 Blackwell datasheet/whitepaper: BF16 tensor ~503.8 TFLOPS dense (approx.), "
        "GDDR7 1,792 GB/s, PCIe 5.0 x16 (128 GB/s bidirectional); network assumed 400 Gb/s per GPU",
        host_bw=_HOST_PCIE5, net_bw=_NET_400G,
    ),
)

GPUS: Mapping[str, GPUSpec] = MappingProxyType({g.id: g for g in _GPU_LIST})


def get_gpu(gpu_id: str) -> GPUSpec:
    """The GPU spec for ``gpu_id`` (case-insensitive); unknown id -> ``ConfigError`` listing the known ones."""
    key = str(gpu_id).strip().lower()
    try:
        return GPUS[key]
    except KeyError:
        raise ConfigError(f"unknown GPU {gpu_id!r}; known: {', '.join(GPUS)}") from None


# --------------------------------------------------------------------------------------------------
# Cost-model parameters


OP_KINDS: tuple[str, ...] = ("decode", "prefill", "train", "sync")


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


@dataclass(frozen=True)
class CostParams:
    """One ``OpParams`` per operation kind (see ``OP_KINDS``)."""

    decode: OpParams  # one generation iteration (mixed decode + chunked-prefill batch)
    prefill: OpParams  # a scorer forward pass (reward/reference/critic/actor log-probs)
    train: OpParams  # forward+backward over tokens (train flops = 3 x forward flops)
    sync: OpParams  # weight sync: bytes / (link_bw * eff_memory) + overhead

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
)


GPU_COST_PARAMS: Mapping[str, CostParams] = MappingProxyType({})
"""Default cost parameters per GPU-table id where a measurement set them (``scripts/gpu_measure.sh``:
``gpu_summary.json``'s suggested defaults, fitted against that entry's datasheet numbers); other GPUs
use ``DEFAULT_COST_PARAMS``. Empty until a GPU measurement is taken: README's paper-scale table says
which measurement its parameters come from."""


def default_params(gpu_id: str) -> CostParams:
    """The default cost parameters of a GPU-table entry (its measured family's, else ``DEFAULT_COST_PARAMS``)."""
    return GPU_COST_PARAMS.get(str(gpu_id).strip().lower(), DEFAULT_COST_PARAMS)


@dataclass(frozen=True)
class Hardware:
    """A device: nominal spec plus calibrated cost parameters."""

    gpu: GPUSpec
    params: CostParams = DEFAULT_COST_PARAMS

    def __post_init__(self) -> None:
        if not isinstance(self.gpu, GPUSpec):
            raise ConfigError(f"Hardware: gpu must be a GPUSpec, got {type(self.gpu).__name__}")
        if not isinstance(self.params, CostParams):
            raise ConfigError(f"Hardware: params must be a CostParams, got {type(self.params).__name__}")

    @property
    def id(self) -> str:
        return self.gpu.id


def get_hardware(gpu: str) -> Hardware:
    """A GPU-table id -> ``Hardware(get_gpu(id))`` with the default cost parameters (a calibrated profile
    is read by ``oppo_sim.hw.profiles.resolve_hardware`` at the command-line boundary)."""
    text = str(gpu).strip()
    if text.lower() in GPUS:
        return Hardware(GPUS[text.lower()], default_params(text))
    raise ConfigError(f"unknown GPU {text!r}; known: {', '.join(GPUS)} (a calibrated .json profile: --profile)")
