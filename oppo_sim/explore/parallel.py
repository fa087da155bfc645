"""Run a function over many items on local processes or as Ray tasks, with a progress bar, keeping the
items' order — as :mod:`oppo_sim.explore.sweep` does for its grid, but as a context that stays open
across several batches (the planner's Optuna search asks for a batch of trials at a time and must not
start a process pool or a Ray connection per batch).

    with Runner(processes=2) as run:          # or Runner(use_ray=True, ray_address="ray://head:10001")
        rows = run.map(evaluate, tasks, bar)  # results in the order of ``tasks``

``processes=1`` runs in this process. Ray: connects to ``ray_address`` or starts a local Ray, and shuts
down on exit only what it started (an already initialised Ray is left alone).
"""

from __future__ import annotations

import os
import socket
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Sequence

from oppo_sim.core.errors import ConfigError


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("ray is not installed: pip install 'oppo[ray]'") from None
    return ray


def check_ray_address(address: str, timeout_s: float = 10.0) -> None:
    """A ``host:port`` (or ``ray://host:port``) Ray address must accept a connection: Ray itself retries an address
    nobody listens on for minutes, printing warnings. ``auto`` and ``local`` are Ray's own to resolve."""
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"Ray address {address!r}: expected host:port, ray://host:port, auto or local")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(f"Ray address {address!r}: cannot connect ({e.strerror or e})") from None


def connect_ray(address: str | None):
    """``(ray, started)``: Ray connected to ``address`` (checked to answer first) or started locally, unless it is
    already initialised (``started`` False: the caller leaves it running)."""
    ray = _import_ray()
    if ray.is_initialized():
        return ray, False
    kwargs: dict[str, Any] = {"address": address or None, "log_to_driver": False}
    if address:
        check_ray_address(address)
    else:
        kwargs["include_dashboard"] = False
    ray.init(**kwargs)
    return ray, True


class Runner:
    """A process pool (``processes`` workers, default every core) or a Ray connection."""

    def __init__(self, processes: int | None = None, use_ray: bool = False, ray_address: str | None = None):
        if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int) or processes < 1):
            raise ConfigError(f"processes must be an integer >= 1, got {processes!r}")
        self.processes = processes or os.cpu_count() or 1
        self.use_ray = bool(use_ray or ray_address)
        self.ray_address = ray_address or None
        self._pool: ProcessPoolExecutor | None = None
        self._ray = None
        self._started_ray = False
        self._remote: dict[Callable, Any] = {}

    def __enter__(self) -> "Runner":
        if self.use_ray:
            self._ray, self._started_ray = connect_ray(self.ray_address)
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False

    def map(self, fn: Callable, items: Sequence, bar=None) -> list:
        """``[fn(x) for x in items]``, run in parallel; ``bar`` (a tqdm) advances as each one finishes."""
        if not items:
            return []
        if self.use_ray:
            return self._map_ray(fn, items, bar)
        if self.processes <= 1 or len(items) == 1:
            out = []
            for x in items:
                out.append(fn(x))
                if bar is not None:
                    bar.update(1)
            return out
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.processes)
        out: list = [None] * len(items)
        futures = {self._pool.submit(fn, x): i for i, x in enumerate(items)}
        for fut in as_completed(futures):
            out[futures[fut]] = fut.result()
            if bar is not None:
                bar.update(1)
        return out

    def _map_ray(self, fn: Callable, items: Sequence, bar) -> list:
        ray = self._ray
        task = self._remote.get(fn)
        if task is None:
            task = self._remote[fn] = ray.remote(fn)
        refs = [task.remote(x) for x in items]
        index = {ref: i for i, ref in enumerate(refs)}
        out: list = [None] * len(items)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                out[index[ref]] = ray.get(ref)
                if bar is not None:
                    bar.update(1)
        return out


__all__ = ["Runner"]
