"""What every role worker shares: pinning to its pool's cores and recording the start/end of each engine
call in the simulator's timeline schema (``oppo_sim.core.results.TIMELINE_COLUMNS``)."""

from __future__ import annotations

import os
from typing import Sequence

Row = list  # [pool, devices, activity, role, step, start, end, tokens, flops, recompute_flops]


def pin_to_cores(cores: Sequence[int] | None) -> None:
    """Pin the calling thread (a Ray actor's process, or an in-process worker's own thread) and the intra-op threads
    torch starts from it to ``cores``; no-op if None or unsupported. torch's thread count is process-wide and a
    thread takes it at its first parallel op, so one runs here, before another role sets its own."""
    if not cores:
        return
    import torch

    try:
        os.sched_setaffinity(0, set(cores))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        pass
    torch.set_num_threads(len(cores))
    torch.ones(1 << 16).sum()  # this thread's intra-op pool takes its size now


class Recorder:
    pool = "worker"
    devices = "all"  # the pool's cores this worker runs on

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def _place(self, pool: str, cores: Sequence[int] | None) -> None:
        self.pool = pool
        self.devices = ",".join(map(str, cores)) if cores else "all"
        pin_to_cores(cores)

    def _rec(self, activity: str, role: str, step: int, t0: float, t1: float, tokens: int = 0) -> None:
        self.rows.append([self.pool, self.devices, activity, role, step, t0, t1, int(tokens), 0.0, 0.0])

    def take_timeline(self) -> list[Row]:
        rows, self.rows = self.rows, []
        return rows

    def ping(self) -> str:
        return f"{self.pool} pid {os.getpid()}"


