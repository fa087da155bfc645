"""The cost model's fit checked on grid points it did not see: fit the per-op efficiencies
(:func:`oppo_sim.hw.fitting.calibration.fit_profile`) on part of a profile's grid and report the error on the rest.

**The split** (:func:`holdout_mask`, deterministic): each op's grid points are placed on its axes —
decode ``batch x kv``, prefill ``new x ctx``, train ``batch x length`` (per ``role``) — and a point is
*held out* when the sum of its indices along the axes (in sorted order of each axis's values) is odd: a
checkerboard. Every batch size and every context length keeps points on both sides, so the fit spans each
axis's whole range and the held-out points lie between fitted ones (every other batch size at a given
context, every other context at a given batch size). An op with a single grid point (weight sync, whose
work is fixed) holds nothing out. Every timed call of a grid point goes with its point.

**The report** (:func:`holdout_report`): one row per op and split (``fit`` / ``held-out``): how many
calls and grid points, the fitted coefficients (the same on both rows: fitted on ``fit`` only), r² on
seconds (over that split's own mean), MAPE, median and max |error| in percent. The held-out rows are the
honest error of the fitted cost model on sizes it was not fitted to.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.fitting.calibration import MEASUREMENT_COLUMNS, fit_profile, predict_seconds
from oppo_sim.hw.devices.hardware import DEFAULT_COST_PARAMS, OP_KINDS, CostParams, GPUSpec, Hardware

GRID_AXES: dict[str, tuple[str, ...]] = {"decode": ("batch", "kv"), "prefill": ("new", "ctx"), "train": ("batch", "length")}
"""The grid axes of each op's profile rows (``oppo_real.profiling.engine_ops``); other ops hold nothing out."""
GROUP_BY: dict[str, tuple[str, ...]] = {"train": ("role",)}
"""Columns that split an op's rows into separate grids (the actor's and the critic's training passes)."""
HOLDOUT_COLUMNS = ["op", "split", "n", "points", "eff_compute", "eff_memory", "overhead_s", "r2", "mape",
                   "median_abs_err_pct", "max_abs_err_pct"]
SPLIT_RULE = ("checkerboard: a grid point is held out when the sum of its ranks along the op's axes is odd "
              "(decode batch x kv, prefill new x ctx, train batch x length per role)")


def _axis_ranks(col: pd.Series) -> np.ndarray:
    values = sorted(set(col.tolist()))
    index = {v: i for i, v in enumerate(values)}
    return col.map(index).to_numpy(dtype=int)


def holdout_mask(table: pd.DataFrame) -> np.ndarray:
    """True for the rows of held-out grid points (see the module docstring), False for the fitted ones."""
    out = np.zeros(len(table), dtype=bool)
    t = table.reset_index(drop=True)
    for op, axes in GRID_AXES.items():
        rows = t["op"] == op
        if not rows.any() or any(a not in t.columns for a in axes):
            continue
        keys = [c for c in GROUP_BY.get(op, ()) if c in t.columns]
        groups = t[rows].groupby(keys, sort=True) if keys else [(None, t[rows])]
        for _, g in groups:
            parity = sum(_axis_ranks(g[a]) for a in axes) % 2
            out[g.index.to_numpy()] = parity == 1
    return out


def _scores(t: np.ndarray, pred: np.ndarray, points: int) -> dict:
    """Errors of ``pred`` against ``t``; r² only where the calls span more than one grid point (else there is
    only noise to explain, as ``calibration.fit_op`` reports)."""
    if len(t) == 0:
        return {"r2": np.nan, "mape": np.nan, "median_abs_err_pct": np.nan, "max_abs_err_pct": np.nan}
    err = pred - t
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    pct = 100.0 * np.abs(err) / t
    return {"r2": 1.0 - float(np.sum(err ** 2)) / ss_tot if points > 1 and ss_tot > 0 else np.nan,
            "mape": float(np.mean(np.abs(err) / t)), "median_abs_err_pct": float(np.median(pct)),
            "max_abs_err_pct": float(np.max(pct))}


def _points(g: pd.DataFrame, op: str) -> int:
    axes = [a for a in GRID_AXES.get(op, ()) + GROUP_BY.get(op, ()) if a in g.columns]
    return int(len(g.drop_duplicates(axes))) if axes and len(g) else int(len(g) > 0)


def holdout_report(table: pd.DataFrame, spec: GPUSpec, defaults: CostParams = DEFAULT_COST_PARAMS) -> tuple[Hardware, pd.DataFrame]:
    """Fit on the fitted split of ``table`` (a measurements table with its grid columns) against ``spec``;
    return the fitted hardware and the per-op, per-split report (``HOLDOUT_COLUMNS``)."""
    if table.empty:
        raise ConfigError("the measurements table is empty: nothing to fit")
    t = table.reset_index(drop=True)
    held = holdout_mask(t)
    hw, _ = fit_profile(t.loc[~held, MEASUREMENT_COLUMNS].reset_index(drop=True), spec, defaults)
    pred = predict_seconds(t[MEASUREMENT_COLUMNS], spec, hw.params)
    rows = []
    for op in OP_KINDS:
        on = (t["op"] == op).to_numpy()
        if not on.any():
            continue
        p = hw.params.op(op)
        for split, mask in (("fit", on & ~held), ("held-out", on & held)):
            g = t[mask]
            points = _points(g, op)
            rows.append({"op": op, "split": split, "n": int(mask.sum()), "points": points,
                         "eff_compute": p.eff_compute, "eff_memory": p.eff_memory, "overhead_s": p.overhead_s,
                         **_scores(g["seconds"].to_numpy(dtype=float), pred[mask], points)})
    return hw, pd.DataFrame(rows, columns=HOLDOUT_COLUMNS)
