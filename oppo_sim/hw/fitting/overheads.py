"""What a real executor spends outside the engines' kernels, as cost terms of their own.

A driver loop is not free: each generation round trip is a remote call plus the worker's and the step
machine's bookkeeping of its report; each step plans, launches requests, forms and ships the batch and
records the step; each trained sample and token is copied into messages. On a GPU with 7B models these
are small next to the kernels; on a CPU with tiny models they are a good part of a step. The terms are
*measured* (``oppo_real.profiling.driver_overheads`` runs the real driver on workers that do no model work) and fitted
here by non-negative least squares; the simulator charges them where the driver spends them
(:mod:`oppo_sim.pipeline.driver`):

    driver seconds of a step = step_s + call_s * generation round trips + sample_s * samples + token_s * tokens
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError

OVERHEAD_COLUMNS = ["calls", "samples", "tokens", "seconds"]
"""A driver-profile table: per measured step, its round trips, samples trained, tokens generated and seconds."""


@dataclass(frozen=True)
class ExecutorOverheads:
    call_s: float = 0.0  # one generation round trip: the remote call and the bookkeeping of its report
    step_s: float = 0.0  # once per step: plan, launch, form the batch, records
    sample_s: float = 0.0  # per sample trained: its request, its place in the batch message
    token_s: float = 0.0  # per generated token: copied into the driver's samples and the batch message

    def __post_init__(self) -> None:
        for k, v in asdict(self).items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"executor overhead {k} must be a finite number >= 0, got {v!r}")

    def step_seconds(self, samples: int, tokens: int) -> float:
        """The per-step part (everything but the round trips)."""
        return self.step_s + self.sample_s * samples + self.token_s * tokens

    def to_meta(self) -> dict:
        return asdict(self)

    @classmethod
    def from_meta(cls, meta: dict | None) -> "ExecutorOverheads":
        return cls(**(meta or {}))


def fit_overheads(table: pd.DataFrame) -> tuple[ExecutorOverheads, dict]:
    """Non-negative least squares of ``seconds`` on (1, calls, samples, tokens); returns the terms and a
    report (rows, mean absolute percentage error, R²)."""
    missing = [c for c in OVERHEAD_COLUMNS if c not in table.columns]
    if missing or len(table) < 4:
        raise ConfigError(f"a driver profile needs >= 4 rows with columns {OVERHEAD_COLUMNS}; missing {missing}")
    from scipy.optimize import nnls

    x = np.column_stack([np.ones(len(table)), table["calls"], table["samples"], table["tokens"]]).astype(float)
    y = table["seconds"].to_numpy(float)
    scale = x.max(axis=0)  # columns of very different sizes: solve on a rescaled problem
    coef, _ = nnls(x / scale, y)
    coef = coef / scale
    fit = ExecutorOverheads(call_s=float(coef[1]), step_s=float(coef[0]), sample_s=float(coef[2]), token_s=float(coef[3]))
    pred = x @ coef
    ss = float(((y - y.mean()) ** 2).sum())
    report = {"rows": int(len(table)), "mape": float(np.mean(np.abs(pred - y) / y)),
              "r2": 1.0 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else float("nan")}
    return fit, report
