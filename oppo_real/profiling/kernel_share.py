"""How much of a decode iteration the GPU spends running kernels: the *kernel share*, the measure of whether
an engine is GPU-bound (the cost model prices kernels: where they are a small share, a fit of its
efficiencies measures the host, not the GPU).

:func:`measure_kernel_share` runs a step function twice as many times as asked: first timed on the wall
clock (synchronised before and after), then under ``torch.profiler`` with CUDA activity, summing the
device time of every GPU activity it records (kernels, including those replayed from a CUDA graph, and
memory copies / sets; one stream, so they do not overlap). The share is GPU seconds per iteration over
wall seconds per iteration, the wall time taken without the profiler (which slows the host). On the H100
measured for issue 19 the per-request torch loop had a share of 3-15%; the goal of the graph-captured
engine (``--backend torch-graph``) is >= 80% at batch >= 16 for a 1.5B shape.

On the CPU there are no kernel timings to take: the share is NaN and :data:`NO_CUDA` says why; the
profile rows carry both (``kernel_share``, ``kernel_note``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

NO_CUDA = "not measured: no CUDA device (kernel times need torch.profiler's CUDA activity)"
NOT_DECODE = "measured for decode iterations only"


@dataclass(frozen=True)
class KernelShare:
    """Per iteration: wall seconds, GPU seconds (kernels and copies), their ratio; ``note`` when not measured."""

    wall_s: float
    kernel_s: float
    share: float
    note: str = ""

    def columns(self) -> dict:
        """The profile-row columns: ``kernel_s``, ``kernel_share``, ``kernel_note``."""
        return {"kernel_s": self.kernel_s, "kernel_share": self.share, "kernel_note": self.note}


UNMEASURED = KernelShare(math.nan, math.nan, math.nan, NO_CUDA)


def device_seconds(events: Iterable) -> float:
    """Seconds of GPU activity in profiler events (``prof.events()``): the device time of every event that
    ran on the GPU (``device_type`` CUDA; their own time, so nested events are not counted twice)."""
    total_us = 0.0
    for e in events:
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            total_us += float(getattr(e, "self_device_time_total", 0.0) or 0.0)
    return total_us * 1e-6


def measure_kernel_share(step: Callable[[], object], iters: int, device) -> KernelShare:
    """Wall and GPU time per call of ``step`` (each call one decode iteration) on ``device``, over
    ``iters`` calls each way. Not measured (NaN, with the reason) unless ``device`` is a CUDA device."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return UNMEASURED
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize(dev)
    wall = (time.perf_counter() - t0) / iters
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize(dev)
    gpu = device_seconds(prof.events()) / iters
    return KernelShare(wall, gpu, gpu / wall if wall > 0 else math.nan)
