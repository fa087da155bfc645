"""Warm a process's generation engine before anything in it is timed.

Measured on an H100 (``paper_figs/out/gpu_order.csv``): with the torch backend, the first ~50 s of a
process ran every decode iteration ~2.4x slower than later (0.5B model: a first run of 15.1 s/step, the
next five 6.1-6.5 s/step, interleaved); the kernels are a small share of an iteration there (the host
launches them), so whatever the process sets up lazily on its first minute of work shows in every
timing taken in it. ``burn_in`` decodes synthetic requests across batch sizes until the process has
spent ``seconds`` doing so — a graph-captured engine (``torch-graph``) first captures the decode graph of
every batch and length bucket — once per process: a second engine in the same process (``validate``'s next
run on local workers) finds it warm and returns at once; a new worker process (Ray) warms again.
"""

from __future__ import annotations

import time
from typing import Callable

_WARM_SINCE: float | None = None  # when this process started warming


def burn_in(gen, seconds: float, vocab: int, max_batch: int = 64, prompt: int = 64,
            log: Callable[[str], None] | None = None) -> float:
    """Decode throw-away requests on ``gen`` (any ``ActorBackend``) until this process has warmed for
    ``seconds`` in all; returns the seconds spent in this call (0 when already warm or ``seconds`` <= 0)."""
    from oppo_real.backends.api import GenRequest

    global _WARM_SINCE
    if seconds <= 0:
        return 0.0
    t0 = time.monotonic()
    if _WARM_SINCE is None:
        _WARM_SINCE = t0
    end = _WARM_SINCE + seconds
    if t0 >= end:
        return 0.0
    if log:
        log(f"warming the engine for {end - t0:.0f} s (left out of every timing)")
    capture = getattr(gen, "capture_graphs", None)  # a graph-captured engine captures every bucket first
    if capture is not None and not gen.has_unfinished():
        n_graphs = capture(max_batch)
        if log and n_graphs:
            log(f"captured {n_graphs} decode graphs in {time.monotonic() - t0:.1f} s")
    top = max(1, max_batch)
    sizes = sorted({min(b, top) for b in (1, 4, 16)} | {top})  # batch sizes up to the engine's largest
    n = 0
    while time.monotonic() < end:
        ids = [f"__warm{n}.{i}" for i in range(sizes[n % len(sizes)])]
        for i, rid in enumerate(ids):
            toks = tuple(3 + (17 * i + 7 * j) % max(1, vocab - 3) for j in range(prompt))
            gen.add(GenRequest(rid, toks, 2 * prompt, ignore_eos=True))
        while gen.has_unfinished() and time.monotonic() < end:
            gen.step()
        for rid in ids:
            gen.abort(rid)
        n += 1
    return time.monotonic() - t0
