"""Devices: GPU spec table, cost-model parameters and the ``Hardware`` pair that joins them.

A ``GPUSpec`` holds nominal datasheet numbers (dense bf16 peak, memory bandwidth, memory size,
interconnect). ``CostParams`` holds the calibrated efficiencies and fixed overheads the roofline cost
model (``oppo_sim.hw.costmodel``) applies per operation kind. ``Hardware`` is "a device": a spec plus its
parameters. A calibrated CPU is just another ``Hardware`` (see ``oppo_sim.hw.calibration``).

Units — the one convention of the whole package:

- **Bandwidth**, bytes per second. Links (``link_bw`` to the node's other GPUs, ``host_bw`` to host
  memory, ``net_bw`` to other nodes): what ONE GPU moves in ONE direction. Vendors quote NVLink and PCIe
  with both directions summed (H100 "NVLink 900 GB/s" is 450 GB/s each way; PCIe 4.0 x16 "64 GB/s" is
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
``collective``, ``bytes`` are bus bytes, ``bw`` is ``link_bw`` (``net_bw`` for a ring across nodes) and
there is no ``devices`` divisor (each GPU moves its own bus bytes).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Mapping

from oppo_sim.core.errors import ConfigError

__all__ = [
    "GiB",
    "MiB",
    "GPUSpec",
    "GPUS",
    "get_gpu",
    "OpParams",
    "CostParams",
    "OP_KINDS",
    "DEFAULT_COST_PARAMS",
    "GPU_COST_PARAMS",
    "default_params",
    "collective_seconds",
    "allreduce_seconds",
    "Hardware",
    "get_hardware",
]

MiB = 2**20
"""Bytes in a mebibyte: ``nvidia-smi`` reports memory in MiB."""
GiB = 2**30
"""Bytes in a gibibyte: the unit of every printed memory figure."""

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
    mem_bytes: float  # bytes of device memory as the device reports them (nvidia-smi MiB x MiB)
    link_bw: float  # bytes/s per GPU, one direction, to the other GPUs of its node (NVLink for SXM parts,
    #                 PCIe peer-to-peer for PCIe cards)
    source: str  # where the numbers come from
    host_bw: float = 32e9  # bytes/s per GPU, one direction, to host memory (default: PCIe 4.0 x16)
    net_bw: float = 25e9  # bytes/s per GPU, one direction, to other nodes (default: a 200 Gb/s NIC per GPU)

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


# Interconnects, bytes/s per GPU in one direction (see the module docstring).
_NVLINK3 = 300e9  # A100 NVLink 3: 12 links x 25 GB/s each way; NVIDIA quotes "600 GB/s" (both directions)
_NVLINK4 = 450e9  # H100/H200/GH200 NVLink 4: 18 links x 25 GB/s each way; NVIDIA quotes "900 GB/s"
_PCIE4_X16 = 32e9  # PCIe 4.0 x16: 16 GT/s x 16 lanes (31.5e9 after 128b/130b coding); quoted "64 GB/s" both ways
_PCIE5_X16 = 64e9  # PCIe 5.0 x16: 32 GT/s x 16 lanes (63e9 after coding); quoted "128 GB/s" both ways
_NET_100G = 12.5e9  # a 100 Gb/s NIC per GPU
_NET_200G = 25e9  # a 200 Gb/s NIC per GPU (InfiniBand HDR / 200 GbE)
_NET_400G = 50e9  # a 400 Gb/s NIC per GPU (InfiniBand NDR / 400 GbE)

# mem_bytes: ``nvidia-smi --query-gpu=memory.total`` (MiB) of each card. A100 40/80GB, H100 80GB, L40S:
# the totals listed in modal-labs/modal-client PR #2797 ("nvidia quotes GB on their GPUs not GiB");
# H200 and RTX 4090: nvidia-smi outputs quoted in public issues (e.g. RLinf/RLinf#255 for the 4090);
# RTX PRO 6000 Blackwell (Workstation and Max-Q): 97,887 MiB in several public nvidia-smi logs; GH200
# 144G HBM3e: 146,831 MiB from one public test fixture (the same 1,019.7 MiB per sold "GB" as the H200's
# HBM3e). CUDA's ``cudaMemGetInfo`` total is ~0.5 GiB lower (an H100 here: 85.0e9 B,
# ``paper_figs/out/gpu_summary.json``); ``gpu_memory_utilization`` leaves room for it.
# host_bw: the GPU's host interface (PCIe generation from the datasheet; C2C for Grace Hopper).
# net_bw: one NIC per GPU as in NVIDIA's reference nodes (DGX A100: 8 x ConnectX-6 HDR 200 Gb/s for
# compute; DGX H100 / H200: 8 x ConnectX-7 NDR 400 Gb/s); for PCIe cards no reference node fixes it, so
# the value is an assumption, marked as such.
_GPU_LIST = (
    GPUSpec(
        "a100-40gb", "NVIDIA A100 40GB SXM4", 312e12, 1555e9, 40_960 * MiB, _NVLINK3,
        "NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS dense, HBM2 1,555 GB/s, NVLink 600 GB/s (both directions), "
        "PCIe 4.0 host; nvidia-smi 40,960 MiB; DGX A100: 8 x ConnectX-6 HDR 200 Gb/s (one per GPU)",
        host_bw=_PCIE4_X16, net_bw=_NET_200G,
    ),
    GPUSpec(
        "a100-80gb", "NVIDIA A100 80GB SXM4", 312e12, 2039e9, 81_920 * MiB, _NVLINK3,
        "NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS dense, HBM2e 2,039 GB/s, NVLink 600 GB/s (both directions), "
        "PCIe 4.0 host; nvidia-smi 81,920 MiB; DGX A100: 8 x ConnectX-6 HDR 200 Gb/s (one per GPU)",
        host_bw=_PCIE4_X16, net_bw=_NET_200G,
    ),
    GPUSpec(
        "h100-sxm", "NVIDIA H100 SXM5 80GB", 989e12, 3350e9, 81_559 * MiB, _NVLINK4,
        "NVIDIA H100 datasheet: BF16 tensor 989 TFLOPS dense (1,979 sparse), HBM3 3.35 TB/s, NVLink 900 GB/s "
        "(both directions), PCIe 5.0 host; nvidia-smi 81,559 MiB; DGX H100: 8 x ConnectX-7 NDR 400 Gb/s (one per GPU)",
        host_bw=_PCIE5_X16, net_bw=_NET_400G,
    ),
    GPUSpec(
        "h200", "NVIDIA H200 SXM 141GB", 989e12, 4800e9, 143_771 * MiB, _NVLINK4,
        "NVIDIA H200 datasheet: BF16 tensor 989 TFLOPS dense (1,979 sparse), HBM3e 4.8 TB/s, NVLink 900 GB/s "
        "(both directions), PCIe 5.0 host; nvidia-smi 143,771 MiB; DGX H200: 8 x ConnectX-7 NDR 400 Gb/s (one per GPU)",
        host_bw=_PCIE5_X16, net_bw=_NET_400G,
    ),
    GPUSpec(
        "gh200", "NVIDIA GH200 Grace Hopper (144GB HBM3e)", 989e12, 4900e9, 146_831 * MiB, _NVLINK4,
        "NVIDIA GH200 datasheet (HBM3e variant): BF16 989 TFLOPS dense, 4.9 TB/s, NVLink 900 GB/s (both "
        "directions), NVLink-C2C 900 GB/s to Grace memory (450 GB/s each way); nvidia-smi 146,831 MiB; "
        "one ConnectX-7 400 Gb/s per superchip",
        host_bw=450e9, net_bw=_NET_400G,
    ),
    GPUSpec(
        "l40s", "NVIDIA L40S 48GB", 362e12, 864e9, 46_068 * MiB, _PCIE4_X16,
        "NVIDIA L40S datasheet: BF16 tensor 362.05 TFLOPS dense (733 sparse), GDDR6 864 GB/s, "
        "PCIe 4.0 x16 (64 GB/s both directions); nvidia-smi 46,068 MiB; network assumed 200 Gb/s per GPU",
        host_bw=_PCIE4_X16, net_bw=_NET_200G,
    ),
    GPUSpec(
        "rtx-4090", "NVIDIA GeForce RTX 4090", 165.2e12, 1008e9, 24_564 * MiB, _PCIE4_X16,
        "NVIDIA Ada Lovelace whitepaper: BF16 tensor w/ FP32 accumulate 165.2 TFLOPS dense, GDDR6X 1,008 GB/s, "
        "PCIe 4.0 x16 (64 GB/s both directions), no NVLink; nvidia-smi 24,564 MiB; network assumed 100 Gb/s per GPU",
        host_bw=_PCIE4_X16, net_bw=_NET_100G,
    ),
    GPUSpec(
        "rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell 96GB", 503.8e12, 1792e9, 97_887 * MiB, _PCIE5_X16,
        "NVIDIA RTX PRO 6000 Blackwell datasheet/whitepaper: BF16 tensor ~503.8 TFLOPS dense (approx.), "
        "GDDR7 1,792 GB/s, PCIe 5.0 x16 (128 GB/s both directions); nvidia-smi 97,887 MiB; "
        "network assumed 400 Gb/s per GPU",
        host_bw=_PCIE5_X16, net_bw=_NET_400G,
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
