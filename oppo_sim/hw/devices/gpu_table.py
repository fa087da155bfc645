"""The GPU table (datasheet numbers with their sources) and which GPUs share a scale-up link.

One ``GPUSpec`` per accelerator the simulator knows by name (``--gpu h20``), each ``source`` saying
where its numbers come from, and :func:`domain_gpus`, the rule that says which GPUs reach each other
over ``link_bw`` and which over the network.

Units are those of :mod:`oppo_sim.hw.devices.hardware` (its module docstring): every link is what ONE GPU moves
in ONE direction, in bytes per second (vendors sum both directions: NVLink 4 "900 GB/s" is 450e9 B/s
here); memory is what the device reports (``nvidia-smi --query-gpu=memory.total`` in MiB x ``MiB``,
``rocm-smi --showmeminfo vram`` in bytes).

**Scale-up domain.** ``link_bw`` is the bandwidth between GPUs that share a scale-up fabric — NVLink
through NVSwitch on HGX/DGX boards, NVLink through the NVLink Switch trays of a GB200 NVL72 rack,
AMD Infinity Fabric on an MI300X platform, PCIe peer-to-peer on PCIe cards. ``nvlink_domain`` says
how many GPUs one such domain spans, and ``domain_spans_nodes`` whether it reaches past a node:

- HGX/DGX boards (A100, A800, H100, H800, H20, H200, B200, B300): 8 GPUs, the whole node; never past it.
  GH200: a node of 4 superchips.
- GB200 and GB300 NVL72: 72 GPUs over 18 compute trays of 4 GPUs — the domain spans nodes (``True``).
- MI300X platforms: 8 GPUs fully connected by Infinity Fabric inside the node.
- PCIe cards (L40S, RTX 4090, RTX PRO 6000): 1 — no GPU shares an NVLink with another. Their peers are
  reached over PCIe, which is what their ``link_bw`` holds, and PCIe reaches every GPU of the node; so
  for them, as for every domain that ends at the node, the node is what bounds ``link_bw``.

:func:`domain_gpus` turns this into the one rule the simulator applies wherever it picks between the
scale-up link and the network (the weight-sync path, a pool's gradient all-reduce, the planner's
tensor-parallel groups): consecutive GPUs, in blocks of whole nodes, share ``link_bw``; a block is one
node, or — where the domain spans nodes and is larger than a node — as many whole nodes as the domain
holds (16 GB200 over 4 trays of 4: all in one 72-GPU block, NVLink throughout; 144 GB200 over 36
trays: two racks, the network between them; 8 H200 over 2 nodes: two blocks of 4, the network between
them). The nodes are taken to fill a domain in order, as a scheduler that places a job rack by rack
does. A node the user declares larger than the domain is taken as one fabric, as before this rule
existed (16 H100 on ``--nodes 1``: ``link_bw`` between all 16).

**Host CPU.** What the host does — issue every op of an eager pass, run the engine's scheduler each step, load
each tensor of a weight sync — is priced with constants measured on x86 server hosts. ``host_op_scale`` is how
much longer the same work takes on this GPU's host: 1 for x86 hosts; for NVIDIA's Grace hosts the ratio of one
public measurement (NVIDIA/TransformerEngine#2053, 2025-08: the host time of one ``torch.nn.Linear`` forward,
bf16, 8,192 tokens x 2,048, 37.08 us on GB200 and 33.17 us on GH200 against 13.48 us on a DGX H100's Xeon
Platinum 8480C): :data:`GRACE_HOST_OP_SCALE` for GB200 (and GB300, the same Grace CPU; not measured),
:data:`GH200_HOST_OP_SCALE` for GH200. How it applies: :mod:`oppo_sim.hw.devices.hardware`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from oppo_sim.core.errors import ConfigError

MiB = 2**20
"""Bytes in a mebibyte: ``nvidia-smi`` reports memory in MiB."""
GiB = 2**30
"""Bytes in a gibibyte: the unit of every printed memory figure."""

GRACE_HOST_OP_SCALE = 37.08 / 13.48
"""GB200's host seconds per PyTorch op over a DGX H100's (NVIDIA/TransformerEngine#2053): 2.75."""
GH200_HOST_OP_SCALE = 33.17 / 13.48
"""GH200's host seconds per PyTorch op over a DGX H100's (the same measurement): 2.46."""

_ID_RE = re.compile(r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$")


def _check_positive(owner: str, name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{owner}: {name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{owner}: {name} must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class GPUSpec:
    """Nominal datasheet numbers of one accelerator (or a nominal CPU, see ``profiles.cpu_spec``)."""

    id: str  # CLI id, lowercase-dashed, e.g. "h100-sxm"
    name: str  # human name
    peak_flops: float  # peak DENSE bf16 tensor FLOP/s (no sparsity)
    mem_bw: float  # bytes/s device-memory bandwidth
    mem_bytes: float  # bytes of device memory as the device reports them (nvidia-smi MiB x MiB)
    link_bw: float  # bytes/s per GPU, one direction, to the GPUs of its scale-up domain (NVLink for SXM
    #                 parts, Infinity Fabric for MI300X, PCIe peer-to-peer for PCIe cards)
    source: str  # where the numbers come from
    host_bw: float = 32e9  # bytes/s per GPU, one direction, to host memory (default: PCIe 4.0 x16)
    net_bw: float = 25e9  # bytes/s per GPU, one direction, to other nodes (default: a 200 Gb/s NIC per GPU)
    nvlink_domain: int = 8  # GPUs one scale-up link domain spans (8: an HGX board; 72: GB200 NVL72; 1: PCIe)
    domain_spans_nodes: bool = False  # the domain reaches past a node (GB200 NVL72's trays), see domain_gpus
    host_op_scale: float = 1.0  # the host CPU's seconds per PyTorch op over an x86 server host's (GRACE_HOST_OP_SCALE)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID_RE.match(self.id):
            raise ConfigError(f"GPU id must be lowercase-dashed (e.g. 'h100-sxm'), got {self.id!r}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"GPU '{self.id}': name must be a non-empty string")
        if not isinstance(self.source, str):
            raise ConfigError(f"GPU '{self.id}': source must be a string")
        for f in ("peak_flops", "mem_bw", "mem_bytes", "link_bw", "host_bw", "net_bw", "host_op_scale"):
            _check_positive(f"GPU '{self.id}'", f, getattr(self, f))
        d = self.nvlink_domain
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ConfigError(f"GPU '{self.id}': nvlink_domain must be an integer >= 1, got {d!r}")
        if not isinstance(self.domain_spans_nodes, bool):
            raise ConfigError(f"GPU '{self.id}': domain_spans_nodes must be true or false, "
                              f"got {self.domain_spans_nodes!r}")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity (FLOP/byte) above which a kernel is compute-bound at nominal peak."""
        return self.peak_flops / self.mem_bw


def domain_gpus(gpu: GPUSpec, devices: int, nodes: int) -> int:
    """GPUs per block that shares ``gpu.link_bw`` when ``devices`` GPUs are spread over ``nodes`` nodes
    (``ceil(devices / nodes)`` a node, in order): GPU ``d`` is in block ``d // domain_gpus(...)``, and two
    GPUs in different blocks talk over the network. A block is one node, or, where the domain spans nodes
    and holds more than a node, ``nvlink_domain // per_node`` whole nodes (see the module docstring)."""
    per_node = math.ceil(devices / nodes)
    if gpu.domain_spans_nodes and gpu.nvlink_domain > per_node:
        return per_node * (gpu.nvlink_domain // per_node)
    return per_node


# Interconnects, bytes/s per GPU in one direction (see the module docstring).
_NVLINK3 = 300e9  # A100 NVLink 3: 12 links x 25 GB/s each way; NVIDIA quotes "600 GB/s" (both directions)
_NVLINK_800 = 200e9  # A800 / H800: NVLink cut to "400 GB/s" (both directions) for export
_NVLINK4 = 450e9  # H100/H200/GH200/H20 NVLink 4: 18 links x 25 GB/s each way; NVIDIA quotes "900 GB/s"
_NVLINK5 = 900e9  # B200/GB200 NVLink 5: 18 links x 50 GB/s each way; NVIDIA quotes "1.8 TB/s"
_PCIE4_X16 = 32e9  # PCIe 4.0 x16: 16 GT/s x 16 lanes (31.5e9 after 128b/130b coding); quoted "64 GB/s" both ways
_PCIE5_X16 = 64e9  # PCIe 5.0 x16: 32 GT/s x 16 lanes (63e9 after coding); quoted "128 GB/s" both ways
_NET_100G = 12.5e9  # a 100 Gb/s NIC per GPU
_NET_200G = 25e9  # a 200 Gb/s NIC per GPU (InfiniBand HDR / 200 GbE)
_NET_400G = 50e9  # a 400 Gb/s NIC per GPU (InfiniBand NDR / 400 GbE)
_NET_800G = 100e9  # an 800 Gb/s NIC per GPU (ConnectX-8: InfiniBand XDR / 800 GbE)

# mem_bytes: ``nvidia-smi --query-gpu=memory.total`` (MiB) of each card. A100 40/80GB, H100 80GB, L40S:
# the totals listed in modal-labs/modal-client PR #2797 ("nvidia quotes GB on their GPUs not GiB");
# H200 and RTX 4090: nvidia-smi outputs quoted in public issues (e.g. RLinf/RLinf#255 for the 4090);
# RTX PRO 6000 Blackwell (Workstation and Max-Q): 97,887 MiB in several public nvidia-smi logs; GH200
# 144G HBM3e: 146,831 MiB from one public test fixture (the same 1,019.7 MiB per sold "GB" as the H200's
# HBM3e). H20, H800, A800, B200, GB200: the nvidia-smi totals of public logs of those cards (quoted in
# each source); MI300X: rocm-smi's "VRAM Total Memory (B)". CUDA's ``cudaMemGetInfo`` total is ~0.5 GiB
# lower (an H100 here: 85.0e9 B, ``paper_figs/out/gpu_summary.json``); ``gpu_memory_utilization`` leaves
# room for it.
# host_bw: the GPU's host interface (PCIe generation from the datasheet; C2C for Grace Hopper/Blackwell).
# net_bw: one NIC per GPU as in NVIDIA's reference nodes (DGX A100: 8 x ConnectX-6 HDR 200 Gb/s for
# compute; DGX H100 / H200 / B200: 8 x ConnectX-7 NDR 400 Gb/s); where no reference node fixes it, the
# value is an assumption, marked as such.
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
        "one ConnectX-7 400 Gb/s per superchip; NVLink domain: a node of 4 superchips (quad-GH200 nodes)",
        host_bw=450e9, net_bw=_NET_400G, nvlink_domain=4, host_op_scale=GH200_HOST_OP_SCALE,
    ),
    GPUSpec(
        "l40s", "NVIDIA L40S 48GB", 362e12, 864e9, 46_068 * MiB, _PCIE4_X16,
        "NVIDIA L40S datasheet: BF16 tensor 362.05 TFLOPS dense (733 sparse), GDDR6 864 GB/s, "
        "PCIe 4.0 x16 (64 GB/s both directions); nvidia-smi 46,068 MiB; network assumed 200 Gb/s per GPU",
        host_bw=_PCIE4_X16, net_bw=_NET_200G, nvlink_domain=1,
    ),
    GPUSpec(
        "rtx-4090", "NVIDIA GeForce RTX 4090", 165.2e12, 1008e9, 24_564 * MiB, _PCIE4_X16,
        "NVIDIA Ada Lovelace whitepaper: BF16 tensor w/ FP32 accumulate 165.2 TFLOPS dense, GDDR6X 1,008 GB/s, "
        "PCIe 4.0 x16 (64 GB/s both directions), no NVLink; nvidia-smi 24,564 MiB; network assumed 100 Gb/s per GPU",
        host_bw=_PCIE4_X16, net_bw=_NET_100G, nvlink_domain=1,
    ),
    GPUSpec(
        "rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell 96GB", 503.8e12, 1792e9, 97_887 * MiB, _PCIE5_X16,
        "NVIDIA RTX PRO 6000 Blackwell datasheet/whitepaper: BF16 tensor ~503.8 TFLOPS dense (approx.), "
        "GDDR7 1,792 GB/s, PCIe 5.0 x16 (128 GB/s both directions); nvidia-smi 97,887 MiB; "
        "network assumed 400 Gb/s per GPU",
        host_bw=_PCIE5_X16, net_bw=_NET_400G, nvlink_domain=1,
    ),
    GPUSpec(
        "h20", "NVIDIA H20 96GB (HGX)", 148e12, 4000e9, 97_871 * MiB, _NVLINK4,
        "NVIDIA HGX H20 specifications (as published in willitrunai.com/gpus/h20-96gb and trade press, "
        "e.g. smbom.com 2024-01): BF16/FP16 tensor 148 TFLOPS dense (INT8 296 TOPS), HBM3 96 GB at 4.0 TB/s, "
        "NVLink 900 GB/s (both directions) in an 8-way HGX board, PCIe 5.0 host; nvidia-smi 97,871 MiB "
        "(public 'NVIDIA H20' nvidia-smi log); network assumed 400 Gb/s per GPU (as HGX H100)",
        host_bw=_PCIE5_X16, net_bw=_NET_400G,
    ),
    GPUSpec(
        "h800", "NVIDIA H800 SXM5 80GB", 989e12, 3350e9, 81_559 * MiB, _NVLINK_800,
        "NVIDIA H800 SXM5: the H100 SXM5 die with NVLink cut to 400 GB/s (both directions) and FP64 cut "
        "(aiwiki.ai/wiki/nvidia_h800; philisun.com H800 vs H100): BF16 989 TFLOPS dense, HBM3 3.35 TB/s, "
        "PCIe 5.0 host; nvidia-smi 81,559 MiB (public 'NVIDIA H800' logs); one 400 Gb/s InfiniBand NIC per GPU "
        "(DeepSeek-V3 report, arXiv:2412.19437: IB 50 GB/s per GPU on its H800 cluster)",
        host_bw=_PCIE5_X16, net_bw=_NET_400G,
    ),
    GPUSpec(
        "a800-80gb", "NVIDIA A800 80GB SXM4", 312e12, 2039e9, 81_920 * MiB, _NVLINK_800,
        "NVIDIA A800 80GB SXM4: the A100 80GB SXM4 with NVLink cut from 600 to 400 GB/s (both directions) "
        "(techpowerup.com, fudzilla.net news on the A800/H800): BF16 312 TFLOPS dense, HBM2e 2,039 GB/s, "
        "PCIe 4.0 host; nvidia-smi 81,920 MiB (public 'NVIDIA A800-SXM4-80GB' logs); network assumed "
        "200 Gb/s per GPU (as DGX A100)",
        host_bw=_PCIE4_X16, net_bw=_NET_200G,
    ),
    GPUSpec(
        "b200", "NVIDIA B200 (HGX, 1000 W)", 2250e12, 8000e9, 183_359 * MiB, _NVLINK5,
        "NVIDIA HGX B200 figures (glennklockwood.com/garden/processors/B200, from NVIDIA's Blackwell datasheet): "
        "BF16 tensor 2.25 PFLOPS dense (4.5 sparse); DGX B200 datasheet: 1,440 GB HBM3e and 64 TB/s over 8 GPUs "
        "= 180 GB and 8 TB/s per GPU, NVLink 5 1.8 TB/s (both directions), 8 x ConnectX-7 400 Gb/s (one per "
        "GPU), Xeon hosts on PCIe 5.0; nvidia-smi 183,359 MiB (public 'NVIDIA B200' logs)",
        host_bw=_PCIE5_X16, net_bw=_NET_400G,
    ),
    GPUSpec(
        "gb200", "NVIDIA GB200 NVL72 (Blackwell GPU, 1200 W)", 2500e12, 8000e9, 189_471 * MiB, _NVLINK5,
        "NVIDIA GB200 NVL72 datasheet: per GPU BF16 tensor 2.5 PFLOPS dense (5 sparse; glennklockwood.com "
        "GB200 variant), up to 13.4 TB HBM3e and 576 TB/s per 72 GPUs = 186 GB and 8 TB/s each, NVLink 5 "
        "1.8 TB/s (both directions) across one 72-GPU NVLink domain (18 compute trays of 4 GPUs, NVIDIA "
        "multi-node tuning guide); NVLink-C2C 900 GB/s (both directions) from one Grace to its two GPUs, "
        "assumed shared: 225 GB/s each way per GPU; one ConnectX-7 400 Gb/s per GPU (4 a tray); nvidia-smi "
        "189,471 MiB (public 'NVIDIA GB200' logs)",
        host_bw=225e9, net_bw=_NET_400G, nvlink_domain=72, domain_spans_nodes=True, host_op_scale=GRACE_HOST_OP_SCALE,
    ),
    GPUSpec(
        "b300", "NVIDIA B300 (HGX, Blackwell Ultra, 1100 W)", 2250e12, 8000e9, 275_040 * MiB, _NVLINK5,
        "NVIDIA HGX B300 figures (glennklockwood.com/garden/processors/B300, from NVIDIA's Blackwell Ultra "
        "material): BF16 tensor 2.25 PFLOPS dense (4.5 sparse), as B200; 288 GB HBM3e (12-high) at up to 8 TB/s; "
        "NVLink 5 1.8 TB/s (both directions); one ConnectX-8 800 Gb/s SuperNIC per GPU (HGX B300); Xeon hosts "
        "on PCIe 5.0 (the GPU's own PCIe 6.0 link is faster than the host's); nvidia-smi 275,040 MiB and a "
        "1,100 W cap (public 'NVIDIA B300 SXM6 AC' logs)",
        host_bw=_PCIE5_X16, net_bw=_NET_800G,
    ),
    GPUSpec(
        "gb300", "NVIDIA GB300 NVL72 (Blackwell Ultra GPU, 1400 W)", 2500e12, 8000e9, 284_208 * MiB, _NVLINK5,
        "NVIDIA GB300 NVL72 datasheet: 720 PFLOPS FP8 (sparse) and 576 TB/s HBM3e over 72 GPUs = per GPU BF16 "
        "tensor 2.5 PFLOPS dense and 8 TB/s, as GB200 (verda.com 'GB300 NVL72 architecture' per-GPU table); 288 GB "
        "HBM3e; NVLink 5 1.8 TB/s (both directions) across one 72-GPU domain of 18 trays of 4 GPUs; 72 ConnectX-8 "
        "NICs (800 Gb/s, one per GPU; glennklockwood.com/garden/processors/B300); NVLink-C2C to the tray's "
        "Grace CPUs, assumed shared as on GB200: 225 GB/s each way per GPU; nvidia-smi 284,208 MiB and a 1,400 W "
        "cap (public 'NVIDIA GB300' logs)",
        host_bw=225e9, net_bw=_NET_800G, nvlink_domain=72, domain_spans_nodes=True, host_op_scale=GRACE_HOST_OP_SCALE,
    ),
    GPUSpec(
        "mi300x", "AMD Instinct MI300X 192GB", 1307.4e12, 5300e9, 206_158_430_208, 448e9,
        "AMD Instinct MI300X datasheet: BF16 matrix 1,307.4 TFLOPS dense (2,614.9 sparse), HBM3 192 GB at "
        "5.3 TB/s, 7 Infinity Fabric links of 128 GB/s (both directions) = 64 GB/s each way to each of the "
        "other 7 GPUs of the 8-GPU platform (wheelersnetwork.com 2024-01), PCIe 5.0 x16 host; link_bw = "
        "7 x 64 = 448 GB/s each way, what one GPU moves when a collective spans all 8 (RCCL drives every "
        "link at once); a group of 2 or 4 has only 1 or 3 direct links (1/7 or 3/7 of it); rocm-smi VRAM "
        "total 206,158,430,208 B; network assumed 400 Gb/s per GPU",
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


__all__ = ["MiB", "GiB", "GPUSpec", "GPUS", "get_gpu", "domain_gpus", "GRACE_HOST_OP_SCALE", "GH200_HOST_OP_SCALE"]
