"""oppo_sim — a trace-driven discrete-event simulator of the PPO-RLHF pipeline under scheduling policies.

Layers, lowest first (each imports only the ones above it in this list; see ARCHITECTURE.md):

- ``core``     errors, policies, the step machine (events in, actions out), placements, result schema;
- ``hw``       GPU and model tables, memory model, roofline cost model, calibration and profiles;
- ``traces``   trace readers, validation, the search path, synthetic generators;
- ``engine``   generation engines (vLLM-style continuous batching, TRL-style static batching);
- ``pipeline`` device pools, scorers, trainer, the simpy driver of the step machine, ``simulate()``;
- ``explore``  sweeps, the planner, plots.

The names most sessions need are importable from here, lazily (importing ``oppo_sim`` itself loads
nothing): ``simulate``, ``SimConfig``, ``make_policy``, ``load_trace``, ``plots``.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "simulate": ("oppo_sim.pipeline.simulate", "simulate"),
    "SimConfig": ("oppo_sim.pipeline.config", "SimConfig"),
    "make_policy": ("oppo_sim.core.policies", "make_policy"),
    "load_trace": ("oppo_sim.traces.catalog", "load_trace"),
    "plots": ("oppo_sim.explore.plots", None),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'oppo_sim' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)
