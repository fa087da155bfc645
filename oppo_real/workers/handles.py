"""Where the role workers run: Ray actors (default; ``ray.init`` locally or an existing cluster by
address), or in this process (``local``): each role on its own thread, built and called there, so its calls
overlap the other roles' as a Ray actor's do (torch and CUDA release the GIL in their kernels; the Python
between them takes turns) and pinning to the role's cores applies to that thread. A :class:`LocalHandle`
made without a thread runs every call in the caller's, in turn (the decision-parity tests' lockstep).

Both give a :class:`Handle` with ``call`` (blocking) and ``submit`` (returns a reference; ``wait`` it
later), so the driver is the same code either way. A dead worker becomes a one-line ``WorkerError``.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

from oppo_sim.core.errors import OppoError

WORKER_TIMEOUT_S = 3600.0
"""A remote call that takes longer than this is treated as a hung worker."""

START_TIMEOUT_S = 600.0
"""A worker that is not up after this long (not placeable, or stuck loading) is an error."""


class WorkerError(OppoError):
    """A role worker died or failed."""


class _Done:
    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value = value
        self.error = error


class Handle:
    name: str

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.wait([self.submit(method, *args, **kwargs)])[0]

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def wait(self, refs: Sequence[Any]) -> list[Any]:  # pragma: no cover - interface
        raise NotImplementedError

    def ready(self, ref: Any) -> bool:
        """Whether ``ref`` has completed (never blocks)."""
        return True

    def kill(self) -> None:
        pass


class LocalHandle(Handle):
    """``cls(*args)`` in this process; with ``threaded``, on a thread of its own (module notes)."""

    def __init__(self, name: str, cls: type, *args: Any, threaded: bool = False) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"oppo-{name}") if threaded else None
        try:
            self.obj = self._pool.submit(cls, *args).result() if self._pool else cls(*args)
        except OppoError:
            self._shutdown()
            raise
        except Exception as e:
            self._shutdown()
            raise WorkerError(f"worker '{name}' failed to start: {type(e).__name__}: {e}".splitlines()[0]) from e

    def _run(self, method: str, args: tuple, kwargs: dict) -> _Done:
        try:
            args = tuple(_resolved(a) for a in args)  # a result passed on, as Ray does (its failure is this call's)
            return _Done(getattr(self.obj, method)(*args, **kwargs))
        except Exception as e:  # reported at wait(), like a remote call
            return _Done(error=e)

    def submit(self, method: str, *args: Any, **kwargs: Any) -> _Done | Future:
        if self.obj is None:
            raise WorkerError(f"worker '{self.name}' was stopped")
        if self._pool is None:
            return self._run(method, args, kwargs)
        return self._pool.submit(self._run, method, args, kwargs)

    def ready(self, ref: Any) -> bool:
        return ref.done() if isinstance(ref, Future) else True

    def wait(self, refs: Sequence[Any]) -> list[Any]:
        out = []
        for r in refs:
            if isinstance(r, Future):
                try:
                    r = r.result(timeout=WORKER_TIMEOUT_S)
                except TimeoutError:
                    raise WorkerError(f"worker '{self.name}' did not answer within {WORKER_TIMEOUT_S:.0f} s") from None
            if r.error is not None:
                if isinstance(r.error, OppoError):
                    raise r.error
                raise WorkerError(f"worker '{self.name}' failed: {type(r.error).__name__}: {r.error}".splitlines()[0]) from r.error
            out.append(r.value)
        return out

    def kill(self) -> None:
        close = getattr(self.obj, "close", None)
        try:
            if callable(close) and self._pool is not None:
                self._pool.submit(close).result(timeout=60)
            elif callable(close):
                close()
        except Exception:  # pragma: no cover - best effort, as a Ray actor's close
            pass
        finally:
            self.obj = None  # the worker's models are freed with it (a later call is a WorkerError)
            self._shutdown()

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _resolved(a: Any) -> Any:
    """An argument as the worker sees it: another call's result in place of its reference (its error raised)."""
    if isinstance(a, Future):
        a = a.result(timeout=WORKER_TIMEOUT_S)
    if isinstance(a, _Done) and a.error is not None:
        raise a.error
    return a.value if isinstance(a, _Done) else a


class RayHandle(Handle):
    def __init__(self, name: str, cls: type, *args: Any, num_cpus: float = 1, num_gpus: float = 0, strategy: Any = None) -> None:
        import ray

        self.name = name
        self._ray = ray
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": str(max(1, int(num_cpus)))}
        remote = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(cls)
        opts: dict[str, Any] = {"scheduling_strategy": strategy} if strategy is not None else {}
        self.actor = remote.options(name=None, runtime_env={"env_vars": env}, **opts).remote(*args)
        try:  # surface construction errors now, as one line
            ray.get(self.actor.ping.remote(), timeout=START_TIMEOUT_S)
        except Exception as e:
            if "Timeout" in type(e).__name__:
                raise WorkerError(
                    f"worker '{name}' did not start within {START_TIMEOUT_S:.0f} s (needs {num_cpus} CPU, {num_gpus} GPU: "
                    f"does the Ray cluster have them free?)"
                ) from None
            raise _worker_error(name, e) from None

    def submit(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.actor, method).remote(*args, **kwargs)

    def ready(self, ref: Any) -> bool:
        done, _ = self._ray.wait([ref], timeout=0)
        return bool(done)

    def wait(self, refs: Sequence[Any]) -> list[Any]:
        try:
            return self._ray.get(list(refs), timeout=WORKER_TIMEOUT_S)
        except Exception as e:
            raise _worker_error(self.name, e) from None

    def kill(self) -> None:
        try:
            self._ray.get(self.actor.close.remote(), timeout=60) if hasattr(self.actor, "close") else None
        except Exception:
            pass
        self._ray.kill(self.actor)


def _worker_error(name: str, e: BaseException) -> OppoError:
    cause = getattr(e, "cause", None)
    if isinstance(cause, OppoError):
        return cause
    text = str(cause or e).strip().splitlines()
    last = next((ln for ln in reversed(text) if ln.strip()), type(e).__name__)
    kind = type(e).__name__
    if "ActorDied" in kind or "ActorError" in kind or "died" in last.lower():
        return WorkerError(f"worker '{name}' died: {last.strip()}")
    if "Timeout" in kind:
        return WorkerError(f"worker '{name}' did not answer within {WORKER_TIMEOUT_S:.0f} s")
    return WorkerError(f"worker '{name}' failed: {last.strip()}")


def start_ray(address: str | None, num_cpus: int | None = None) -> None:
    """Connect to ``address`` (an existing cluster) or start a local Ray instance (idempotent)."""
    try:
        import ray
    except ImportError:
        raise OppoError("ray is not installed: pip install 'oppo[ray]' (or use --workers local)") from None
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address:
        from oppo_sim.explore.parallel import check_ray_address

        check_ray_address(address)  # Ray itself retries an address nobody answers for minutes
        ray.init(address=address, **kwargs)
    else:
        ray.init(num_cpus=num_cpus or os.cpu_count() or 2, **kwargs)
        from oppo_real.workers.reaper import start_reaper

        start_reaper()  # the local cluster (and its agents) must not outlive this process, even if it is killed


def stop_ray() -> None:
    try:
        import ray
    except ImportError:  # pragma: no cover
        return
    if ray.is_initialized():
        ray.shutdown()
    _GROUPS.clear()


def spawn(kind: str, name: str, cls: type, *args: Any, num_cpus: float = 1, num_gpus: float = 0,
          bundle: int | None = None, bundles: tuple[dict, ...] = ()) -> Handle:
    """A worker ``name`` running ``cls(*args)``. Under Ray it asks for ``num_cpus`` and ``num_gpus`` (a
    fraction where roles share a GPU) and, with ``bundle``, runs in that bundle of the run's GPU placement
    group (one bundle per GPU, ``bundles``), so the roles mapped to one GPU land on the same one."""
    if kind in ("local", "inline"):
        return LocalHandle(name, cls, *args, threaded=kind == "local")
    if kind == "ray":
        strategy = None
        if bundle is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            strategy = PlacementGroupSchedulingStrategy(placement_group=gpu_placement_group(bundles),
                                                        placement_group_bundle_index=bundle)
        return RayHandle(name, cls, *args, num_cpus=num_cpus, num_gpus=num_gpus, strategy=strategy)
    raise OppoError(f"unknown worker placement '{kind}'; known: ray, local, inline")


_GROUPS: dict[tuple, Any] = {}


def gpu_placement_group(bundles: tuple[dict, ...]):
    """The placement group with one bundle per GPU (created once per bundle layout, packed on one node
    where it fits), as OpenRLHF and verl reserve GPUs for colocated actors."""
    import ray
    from ray.util import placement_group

    key = tuple(tuple(sorted(b.items())) for b in bundles)
    if key not in _GROUPS:
        pg = placement_group([dict(b) for b in bundles], strategy="PACK")
        try:
            ray.get(pg.ready(), timeout=START_TIMEOUT_S)
        except Exception:
            raise WorkerError(f"the Ray cluster cannot reserve {len(bundles)} GPU bundle(s) {list(bundles)} within "
                              f"{START_TIMEOUT_S:.0f} s: does it have the GPUs free?") from None
        _GROUPS[key] = pg
    return _GROUPS[key]


class Echo:
    """A worker that does nothing: its round trip is the dispatch cost of one remote call."""

    def ping(self, payload: object = None) -> object:
        return payload


def measure_dispatch(kind: str, calls: int = 50) -> float:
    """Median seconds of a no-op remote call with a small payload (the driver's per-call overhead)."""
    import statistics
    import time

    h = spawn(kind, "echo", Echo, num_cpus=0.01)
    try:
        payload = {"tokens": list(range(64))}
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            h.call("ping", payload)
            times.append(time.perf_counter() - t0)
        return statistics.median(times[5:])
    finally:
        h.kill()
