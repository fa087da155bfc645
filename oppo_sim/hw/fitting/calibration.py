"""Calibration: fit the cost model's per-op efficiencies and overheads to measured call times.

Input is a measurements table, one row per timed call (``MEASUREMENT_COLUMNS``): the op kind, the
number of devices it ran on, the FLOPs and bytes it had to do (computed by the profiler from the
``ModelSpec`` formulas) and the measured seconds. For each op the fit finds ``OpParams`` such that

    seconds ~= overhead_s + max(flops / (devices * peak_flops * eff_compute),
                                bytes / (devices * bw * eff_memory))

(``bw`` = ``mem_bw``; for ``sync`` and ``collective``, ``bw`` = ``link_bw``, one direction per GPU, and
there is no ``devices`` divisor, as in ``costmodel.CostModel.weight_sync`` and
``hardware.collective_seconds``; a ``collective`` row's ``bytes`` are the bus bytes each GPU moved,
``2(n-1)/n`` of the buffer for an all-reduce over ``n = devices`` GPUs: ``CostModel.allreduce_work``).
The fit minimises *relative* residuals, so short and long calls weigh alike. Efficiencies are relative to the spec's nominal peaks: against a nominal CPU spec
(``cpu_spec``) they can be tiny, and the product ``eff * peak`` is what matters.

Identifiability. A coefficient the data cannot pin down is not left to the optimiser's whim:
- an efficiency whose roofline term never binds (e.g. no compute-bound call) keeps the default value,
  raised just enough that it still never binds on the measured calls (predictions unchanged);
- if all calls did the same work (typical for weight sync), the overhead cannot be separated from
  the bandwidth term: it is held at ``min(default overhead, half the shortest call)`` and the binding
  efficiency absorbs the rest.
Such choices, and efficiencies that hit the upper bound 1 (measured faster than the nominal spec),
are reported in ``FitReport.note``.

A fitted ``Hardware`` is saved and loaded as a JSON profile by :mod:`oppo_sim.hw.fitting.profiles`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.devices.hardware import (
    DEFAULT_COST_PARAMS,
    OP_KINDS,
    CostParams,
    GPUSpec,
    Hardware,
    OpParams,
    collective_latency,
    datasheet_hardware,
)

__all__ = [
    "MEASUREMENT_COLUMNS",
    "FitReport",
    "validate_measurements",
    "predict_seconds",
    "fit_op",
    "fit_profile",
    "with_transfer_seconds",
    "with_sync_seconds",
    "with_collective_seconds",
    "with_collective_busbw",
]

MEASUREMENT_COLUMNS = ["op", "devices", "flops", "bytes", "seconds"]
REPORT_COLUMNS = ["op", "n", "eff_compute", "eff_memory", "overhead_s", "rmse_s", "mape", "r2", "note"]

_EFF_MIN = 1e-12  # lower bound for a fitted efficiency (nominal CPU specs can give very small ones)
_GRID = 32  # points per efficiency axis in the coarse search
# A roofline term "binds" a call (and so identifies its efficiency) only if it exceeds the other term
# by this factor; an optimiser drifting along a flat direction stops at the kink, where they are equal.
_BINDS = 1.01


@dataclass(frozen=True)
class FitReport:
    """Quality of one op's fit. ``mape`` is a fraction (0.05 = 5 %); ``r2`` is on seconds."""

    op: str
    params: OpParams
    n: int
    rmse_s: float
    mape: float
    r2: float
    note: str = ""  # what the data could not identify, or bounds that were hit

    def as_row(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "n": self.n,
            "eff_compute": self.params.eff_compute,
            "eff_memory": self.params.eff_memory,
            "overhead_s": self.params.overhead_s,
            "rmse_s": self.rmse_s,
            "mape": self.mape,
            "r2": self.r2,
            "note": self.note,
        }


# --------------------------------------------------------------------------------------------------
# Measurements


def validate_measurements(df: pd.DataFrame) -> None:
    """Raise a one-line ``ConfigError`` if ``df`` is not a valid measurements table."""
    if not isinstance(df, pd.DataFrame):
        raise ConfigError(f"measurements must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in MEASUREMENT_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(
            f"measurements missing column(s): {', '.join(missing)}; need {', '.join(MEASUREMENT_COLUMNS)}"
        )
    ops = df["op"]
    bad = ~ops.isin(OP_KINDS)
    if bad.any():
        i = bad.idxmax()
        raise ConfigError(f"measurements: unknown op {ops[i]!r} (row {i}); known: {', '.join(OP_KINDS)}")
    for col in ("devices", "flops", "bytes", "seconds"):
        vals = pd.to_numeric(df[col], errors="coerce")
        nan = vals.isna() | ~np.isfinite(vals.to_numpy(dtype=float, na_value=np.nan))
        if nan.any():
            i = nan.idxmax()
            raise ConfigError(f"measurements: column '{col}' has a missing/non-finite value {df[col][i]!r} (row {i})")
        if col == "devices":
            bad = (vals < 1) | (vals != np.round(vals))
            what = "a positive integer"
        elif col == "seconds":
            bad = vals <= 0
            what = "> 0"
        else:
            bad = vals < 0
            what = ">= 0"
        if bad.any():
            i = bad.idxmax()
            raise ConfigError(f"measurements: column '{col}' must be {what}, got {df[col][i]!r} (row {i})")


def _unit_times(df: pd.DataFrame, spec: GPUSpec, op: str) -> tuple[np.ndarray, np.ndarray]:
    """Seconds each call would take at eff 1 on the compute (a) and memory/link (b) roofline."""
    dev = df["devices"].to_numpy(dtype=float)
    flops = df["flops"].to_numpy(dtype=float)
    nbytes = df["bytes"].to_numpy(dtype=float)
    if op in ("sync", "collective"):
        return flops / spec.peak_flops, nbytes / spec.link_bw
    return flops / (dev * spec.peak_flops), nbytes / (dev * spec.mem_bw)


def predict_seconds(df: pd.DataFrame, spec: GPUSpec, params: CostParams | OpParams) -> np.ndarray:
    """Cost-model seconds for each measurement row (``params`` per op, or one ``OpParams`` for all rows)."""
    validate_measurements(df)
    out = np.empty(len(df))
    for op in OP_KINDS:
        mask = (df["op"] == op).to_numpy()
        if not mask.any():
            continue
        p = params if isinstance(params, OpParams) else params.op(op)
        a, b = _unit_times(df[mask], spec, op)
        out[mask] = p.overhead_s + np.maximum(a / p.eff_compute, b / p.eff_memory)
    return out


# --------------------------------------------------------------------------------------------------
# Fitting


def _best_overhead(m: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Overhead minimising sum(((o + m) / t - 1)^2) over the last axis, clipped at 0."""
    w = 1.0 / t**2
    o = np.sum((t - m) * w, axis=-1) / np.sum(w)
    return np.maximum(o, 0.0)


def _fit_effs(a: np.ndarray, b: np.ndarray, t: np.ndarray, fixed_overhead: float | None) -> tuple[float, float, float]:
    """Least-squares (ec, em, o) on relative residuals: coarse log-grid search, then polish."""
    has_c, has_m = bool(np.any(a > 0)), bool(np.any(b > 0))

    def axis(u: np.ndarray, present: bool) -> np.ndarray:
        if not present:
            return np.array([1.0])
        lo = float(np.clip(0.5 * np.max(u / t), _EFF_MIN, 1.0))
        return np.geomspace(lo, 1.0, _GRID) if lo < 1.0 else np.array([1.0])

    ec_grid, em_grid = axis(a, has_c), axis(b, has_m)
    EC, EM = np.meshgrid(ec_grid, em_grid, indexing="ij")
    o = np.empty(EC.shape)
    cost = np.empty(EC.shape)
    for i, ec in enumerate(ec_grid):  # one row of the grid at a time: memory O(grid * n)
        m = np.maximum(a / ec, b / em_grid[:, None])  # (gm, n)
        o[i] = _best_overhead(m, t) if fixed_overhead is None else fixed_overhead
        cost[i] = np.sum(((o[i][:, None] + m) / t - 1.0) ** 2, axis=-1)
    order = np.argsort(cost, axis=None)[:4]

    t_scale = float(np.median(t))
    free_o = fixed_overhead is None

    def unpack(x: np.ndarray) -> tuple[float, float, float]:
        ec = math.exp(x[0]) if has_c else 1.0
        em = math.exp(x[1]) if has_m else 1.0
        o = x[2] * t_scale if free_o else float(fixed_overhead)
        return min(ec, 1.0), min(em, 1.0), max(o, 0.0)

    def resid(x: np.ndarray) -> np.ndarray:
        ec, em, o = unpack(x)
        return (o + np.maximum(a / ec, b / em)) / t - 1.0

    lo = np.array([math.log(_EFF_MIN), math.log(_EFF_MIN), 0.0])
    hi = np.array([0.0, 0.0, np.inf])
    best: tuple[float, np.ndarray] | None = None
    for flat in order:
        i, j = np.unravel_index(flat, EC.shape)
        o0 = float(o[i, j]) / t_scale if free_o else 0.0
        x0 = np.clip(np.array([math.log(EC[i, j]), math.log(EM[i, j]), o0]), lo, hi)
        try:
            res = least_squares(resid, x0, bounds=(lo, hi), method="trf", x_scale=1.0, xtol=1e-12, ftol=1e-12)
            x, c = res.x, float(res.cost)
        except ValueError:  # degenerate start: keep the grid point
            x, c = x0, 0.5 * float(np.sum(resid(x0) ** 2))
        if best is None or c < best[0]:
            best = (c, x)
    assert best is not None
    return unpack(best[1])


def _unidentified(name: str, kind: str, value: float, default: float) -> str:
    how = "default kept" if value == default else f"default raised to {value:.3g} to stay non-binding"
    return f"{name} not identifiable (no {kind}-bound call): {how}"


def fit_op(df: pd.DataFrame, spec: GPUSpec, default: OpParams | None = None) -> tuple[OpParams, FitReport]:
    """Fit ``OpParams`` for the single op kind in ``df`` (see the module docstring for the method).

    ``default`` (from ``DEFAULT_COST_PARAMS`` if omitted) supplies the coefficients the data cannot
    identify."""
    validate_measurements(df)
    ops = sorted(set(df["op"]))
    if len(ops) != 1:
        raise ConfigError(f"fit_op needs measurements of exactly one op, got: {', '.join(ops) or 'none'}")
    op = ops[0]
    default = DEFAULT_COST_PARAMS.op(op) if default is None else default
    t = df["seconds"].to_numpy(dtype=float)
    a, b = _unit_times(df, spec, op)
    notes: list[str] = []

    work = np.unique(np.stack([a, b], axis=1), axis=0)
    fixed_o: float | None = None
    if len(work) == 1 and not (a[0] == 0 and b[0] == 0):
        fixed_o = min(default.overhead_s, 0.5 * float(np.min(t)))
        notes.append("all calls did the same work: overhead held at min(default, half the shortest call)")

    if not np.any(a > 0) and not np.any(b > 0):  # pure-overhead calls
        ec, em, o = default.eff_compute, default.eff_memory, float(np.mean(t))
    else:
        ec, em, o = _fit_effs(a, b, t, fixed_o)
        comp, mem = a / ec, b / em
        fit_c, fit_m = bool(np.any(comp > _BINDS * mem)), bool(np.any(mem > _BINDS * comp))
        if not fit_c:  # compute term never binds: default, raised if needed so it still never binds
            need = float(np.max(np.where(b > 0, a * em / np.where(b > 0, b, 1.0), 0.0)))
            ec = min(1.0, max(default.eff_compute, need * (1 + 1e-9)))
            if np.any(a > 0):
                notes.append(_unidentified("eff_compute", "compute", ec, default.eff_compute))
        elif not fit_m:
            need = float(np.max(np.where(a > 0, b * ec / np.where(a > 0, a, 1.0), 0.0)))
            em = min(1.0, max(default.eff_memory, need * (1 + 1e-9)))
            if np.any(b > 0):
                notes.append(_unidentified("eff_memory", "memory", em, default.eff_memory))
        for name, v, fitted in (("eff_compute", ec, fit_c), ("eff_memory", em, fit_m)):
            if fitted and v >= 1.0:
                notes.append(f"{name} hit the bound 1: calls ran faster than the nominal spec")

    params = OpParams(float(ec), float(em), float(o))
    pred = params.overhead_s + np.maximum(a / params.eff_compute, b / params.eff_memory)
    err = pred - t
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    # r2 is undefined when every call did the same work (only noise to explain)
    r2 = 1.0 - float(np.sum(err**2)) / ss_tot if len(work) > 1 and ss_tot > 0 else float("nan")
    report = FitReport(
        op=op,
        params=params,
        n=len(t),
        rmse_s=float(np.sqrt(np.mean(err**2))),
        mape=float(np.mean(np.abs(err) / t)),
        r2=r2,
        note="; ".join(notes),
    )
    return params, report


def fit_profile(
    df: pd.DataFrame, spec: GPUSpec, defaults: CostParams = DEFAULT_COST_PARAMS
) -> tuple[Hardware, pd.DataFrame]:
    """Fit every op present in ``df`` (absent ops keep ``defaults``; the x86-measured ones, on a slower host CPU, with
    their host overheads stretched as :func:`~oppo_sim.hw.devices.hardware.datasheet_hardware` stretches them, and
    the result's ``host_scale`` the GPU's). Returns the calibrated ``Hardware`` and a per-op report (columns
    ``REPORT_COLUMNS``)."""
    validate_measurements(df)
    if len(df) == 0:
        raise ConfigError("measurements are empty: nothing to fit")
    fitted: dict[str, OpParams] = {}
    rows = []
    for op in OP_KINDS:
        sub = df[df["op"] == op]
        if len(sub) == 0:
            continue
        fitted[op], rep = fit_op(sub, spec, defaults.op(op))
        rows.append(rep.as_row())
    own = tuple(fitted) if defaults == DEFAULT_COST_PARAMS else OP_KINDS  # measured on this host: its own
    hw = datasheet_hardware(spec, replace(defaults, **fitted), f"fitted to measurements ({', '.join(fitted)})", own)
    return hw, pd.DataFrame(rows, columns=REPORT_COLUMNS)


def with_transfer_seconds(hw: Hardware, op: str, transfer_bytes: float, bw: float, seconds: float) -> Hardware:
    """``hw`` whose ``op`` (``sync`` or ``collective``) takes ``seconds`` to move ``transfer_bytes`` over ``bw``
    bytes/s (one direction): the bandwidth efficiency is kept and the fixed part takes the rest; where the
    transfer alone would already take longer, the efficiency is lowered instead (no overhead)."""
    if op not in ("sync", "collective"):
        raise ConfigError(f"with_transfer_seconds: op must be sync or collective, got {op!r}")
    for name, v in (("transfer_bytes", transfer_bytes), ("bw", bw), ("seconds", seconds)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ConfigError(f"with_transfer_seconds: {name} must be a positive finite number, got {v!r}")
    p = hw.params.op(op)
    transfer = transfer_bytes / (bw * p.eff_memory)
    if seconds >= transfer:
        new = replace(p, overhead_s=seconds - transfer)
    else:
        new = replace(p, overhead_s=0.0, eff_memory=min(1.0, transfer_bytes / (bw * seconds)))
    return replace(hw, params=replace(hw.params, **{op: new}),
                   params_source=f"{hw.params_source}; {op} from a measured time")


def with_sync_seconds(hw: Hardware, transfer_bytes: float, link_bw: float, seconds: float, tensors: int = 0,
                      mechanism: str = "nvlink", other_s: float = 0.0) -> Hardware:
    """``hw`` whose weight-sync op takes ``seconds`` to move ``transfer_bytes`` of ``tensors`` parameter tensors
    over ``link_bw`` along ``mechanism`` (a measured end-to-end sync; see :func:`with_transfer_seconds`): the
    per-tensor part ``oppo_sim.hw.costs.sync`` charges on that path and ``other_s`` (the trainer's export, priced
    by its own collectives: ``oppo_sim.pipeline.topology.sync_terms``) come off the measured time first (where
    that leaves less than the transfer at the link's full rate on a device path, the host's per-tensor estimate is
    too high for this machine: what the measured time leaves after that transfer and the NCCL calls' latency, spread
    over the tensors, becomes ``Hardware.sync_tensor_s``; the host path keeps its estimate)."""
    from oppo_sim.hw.costs.sync import SyncMechanism, per_tensor_seconds, tensor_host_seconds  # the sync's own rule

    mech = SyncMechanism(mechanism)
    left = seconds - tensors * per_tensor_seconds(hw, mech) - other_s
    floor = transfer_bytes / link_bw if link_bw > 0 else 0.0
    if tensors > 0 and left < floor and mech is not SyncMechanism.HOST:
        nccl = per_tensor_seconds(hw, mech) - tensor_host_seconds(hw)  # a two-party call's latency (0 on ipc)
        hw = replace(hw, sync_tensor_s=max(seconds - other_s - floor - tensors * nccl, 0.0) / tensors)
        left = seconds - tensors * per_tensor_seconds(hw, mech) - other_s
    return with_transfer_seconds(hw, "sync", transfer_bytes, link_bw, max(left, min(seconds, 1e-6)))


def with_collective_seconds(hw: Hardware, nbytes: float, devices: int, seconds: float) -> Hardware:
    """``hw`` whose ``collective`` op reproduces a measured all-reduce of ``nbytes`` over ``devices`` GPUs of
    one node taking ``seconds`` (see :func:`with_transfer_seconds`; the bus bytes are ``2(n-1)/n * nbytes``)."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 2:
        raise ConfigError(f"with_collective_seconds: devices must be an integer >= 2, got {devices!r}")
    bus = 2.0 * (devices - 1) / devices * nbytes
    # NCCL's per-hop latency (hardware.collective_latency at a zero base) stays; the base takes the rest
    hops = collective_latency(replace(hw.params.collective, overhead_s=0.0), "all-reduce", devices)
    return with_transfer_seconds(hw, "collective", bus, hw.gpu.link_bw, max(seconds - hops, min(seconds, 1e-9)))


def with_collective_busbw(hw: Hardware, busbw: float, latency_s: float | None = None) -> Hardware:
    """``hw`` whose ``collective`` efficiency is ``busbw / link_bw``: ``busbw`` (bytes/s) is what nccl-tests'
    ``all_reduce_perf`` prints at large sizes (``NCCL_ALGO=Ring``) on the node's GPUs; ``latency_s``, if
    given, replaces the per-call overhead (its small-size time)."""
    if not (isinstance(busbw, (int, float)) and 0 < busbw <= hw.gpu.link_bw):
        raise ConfigError(f"with_collective_busbw: busbw must be in (0, link_bw = {hw.gpu.link_bw:.3g}] bytes/s "
                          f"(one direction), got {busbw!r}")
    p = hw.params.collective
    new = replace(p, eff_memory=busbw / hw.gpu.link_bw, overhead_s=p.overhead_s if latency_s is None else latency_s)
    return replace(hw, params=replace(hw.params, collective=new),
                   params_source=f"{hw.params_source}; collective from a measured busbw")
