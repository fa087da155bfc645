"""Keeping the published table honest (used by ``published_runs.py``): a check of each run's assumption against
the source's own stage times, and the range of a prediction over what the source does not publish.

**The source contradicts the assumption** when a published stage time would need more than 100% of the GPUs'
dense peak to do the work the assumed lengths imply: for the training stage ``3 x`` the forward FLOPs of every
sequence of a step (``ModelSpec.forward_flops``: the matmuls of the active parameters and causal attention;
no padding — a lower bound), and where the record states full recomputation (the source's own setting) the
recomputed forward of the decoder layers as well (since 2026-11-27; the output layer is not recomputed), times the
epochs; for the scoring stage one forward per scoring
role the framework times there (``SimConfig.scoring_roles()`` less a reward model, which verl times apart).
``implied_peak_pct`` is the larger of the two over ``published stage seconds x devices x peak FLOP/s``; a run
above 100 is ``contradicted`` and the summary gives the median without it.

**A range over what is not published**: a run whose mean response length is assumed is simulated again at
:data:`RANGE_FACTORS` of that mean (capped at its response cap), and every run on synthetic lengths at
:data:`RANGE_FACTORS` of their log-space spread (which no source publishes) — the prediction's low and high
ends for each.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from oppo_sim.core.errors import OppoError
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.models.lookup import get_model

try:
    from published_runs_data import PublishedRun
    from published_runs_sim import response_cap, simulate_record, step_seconds
except ImportError:  # imported as paper_figs.published_runs_checks
    from paper_figs.published_runs_data import PublishedRun
    from paper_figs.published_runs_sim import response_cap, simulate_record, step_seconds

__all__ = ["RANGE_FACTORS", "PEAK_LIMIT_PCT", "implied_peak_pct", "assumed_range", "spread_range"]

RANGE_FACTORS = (0.5, 1.5)
"""The low and high assumed mean response length, as multiples of the record's assumption."""

PEAK_LIMIT_PCT = 100.0
"""A published stage time that would need more than this share of the GPUs' dense peak contradicts the assumption."""


def implied_peak_pct(run: PublishedRun, seq_tokens: np.ndarray, scoring_roles: tuple[str, ...],
                     steps: int = 1) -> dict[str, float]:
    """Percent of the run's GPUs' dense peak the published training and scoring stages would need for the
    sequences of ``steps`` steps, ``seq_tokens`` (prompt + response per sequence), per step; NaN where a stage
    is not published."""
    model, gpu = get_model(run.model), get_hardware(run.gpu).gpu
    tokens = np.asarray(seq_tokens, dtype=np.float64)
    forward = float(np.sum(model.forward_flops(tokens))) / steps
    recomputed = forward - 2.0 * model.head_params() * float(np.sum(tokens)) / steps if run.recompute == "full" else 0.0
    capacity = run.devices * gpu.peak_flops
    passes = sum(1 for r in scoring_roles if r != "reward")
    out = {}
    for stage, flops, seconds in (("training", (3.0 * forward + recomputed) * run.ppo_epochs, run.stages.training_s),
                                  ("scoring", passes * forward, run.stages.scoring_s)):
        out[stage] = 100.0 * flops / (seconds * capacity) if seconds and flops > 0 else math.nan
    return out


def _step_time(run: PublishedRun, steps: int) -> float:
    """The predicted step time of ``run`` under its framework's schedule (NaN where the simulator refuses it)."""
    try:
        res = simulate_record(run, steps)[2]
    except OppoError:
        return math.nan
    return step_seconds(run, res.steps["step_time_s"])


def assumed_range(run: PublishedRun, steps: int) -> tuple[float, float]:
    """(low, high) predicted step time with the assumed mean response at :data:`RANGE_FACTORS` of the record's;
    (NaN, NaN) for a run with a published mean or a trace."""
    if run.mean_response is not None or run.trace is not None or run.assumed_mean_response is None:
        return math.nan, math.nan
    lo, hi = (_step_time(replace(run, assumed_mean_response=min(run.assumed_mean_response * f,
                                                                0.999 * response_cap(run))), steps)
              for f in RANGE_FACTORS)
    return lo, hi


def spread_range(run: PublishedRun, steps: int) -> tuple[float, float]:
    """(low, high) predicted step time with the response lengths' log-space spread at :data:`RANGE_FACTORS` of
    the record's (no source publishes it); (NaN, NaN) for a run on a trace or with fixed lengths."""
    if run.trace is not None or run.response_sigma <= 0:
        return math.nan, math.nan
    lo, hi = (_step_time(replace(run, response_sigma=run.response_sigma * f), steps) for f in RANGE_FACTORS)
    return lo, hi
