"""Defaults and argument types shared by the ``oppo-real`` commands."""

from __future__ import annotations

import argparse

DEFAULT_TRACE = "oppo-longtail-default"
DEFAULT_LENGTH_SCALE = 0.1
DEFAULT_MAX_RESPONSE = 256
BACKENDS = ("vllm", "torch", "torch-static")  # oppo_real.config.BACKENDS (not imported here: keeps --help light)
BACKEND_HELP = ("actor generation engine: vllm (continuous batching), torch (per-request decode loop) or torch-static "
                "(TRL-style static padded batches generated in calls of the step's chunk size C, KV carried across calls)")


def cores(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated core ids, got {text!r}") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"expected core ids >= 0, got {text!r}")
    return vals


def profile_engines(paths, backend: str, quick: bool, cores, log=print):
    """Time this machine's engines for ``backend`` and fit the cost model: ``(table, hw, report, static)``;
    ``static`` (the static decoder's per-call overhead, ``StaticCostParams``) is None unless the backend is
    ``torch-static``, which is profiled with ``oppo_real.profile_static`` (its forwards, calls and sync)."""
    from oppo_real.profile import ProfileGrid, fit, run_profile

    grid = ProfileGrid.quick() if quick else ProfileGrid()
    if backend == "torch-static":
        from oppo_real.profile_static import (
            StaticProfileGrid,
            fit_static,
            run_static_profile,
        )

        table = run_static_profile(paths, grid, StaticProfileGrid.quick() if quick else StaticProfileGrid(), cores, log)
        hw, static, report = fit_static(table, cores=len(cores or (0,)))
        return table, hw, report, static
    table = run_profile(paths, backend, grid, cores=cores, log=log)
    hw, report = fit(table, cores=len(cores or (0,)))
    return table, hw, report, None


def save_engine_profile(hw, static, path, meta: dict | None = None) -> None:
    from oppo_real.profile_static import save_static_profile
    from oppo_sim.hw.profiles import save_profile

    if static is not None:
        save_static_profile(hw, static, path, meta)
    else:
        save_profile(hw, path, meta=meta)
