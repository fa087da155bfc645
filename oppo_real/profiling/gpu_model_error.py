"""The modelled GPU against the measured one.

``oppo-real profile --device cuda`` times each operation the cost model prices (``oppo_real.profiling.engine_ops``:
decode iterations over a batch x KV grid, prefill, training passes, weight sync) and this module sets
every measured call beside the *uncalibrated* prediction of the matching entry of the GPU table
(``oppo_sim.hw.devices.hardware.GPUS``, found from the device's name) with the default cost parameters
(``hardware.default_params``: ``DEFAULT_COST_PARAMS`` until a measurement sets the GPU family's): the
error of the model as shipped, before any fitting. The fit that follows
(:func:`fit_gpu`) is against that same datasheet spec, so its efficiencies replace the defaults one for
one (``suggested_defaults``).

Columns added to the measurements table: ``device`` (the GPU's name, every row), ``gpu`` (the table
entry), ``model``, ``pred_default_s`` and ``err_pct`` (100 x (predicted - measured) / measured).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.fitting.calibration import MEASUREMENT_COLUMNS, fit_profile, predict_seconds
from oppo_sim.hw.devices.hardware import GPUS, OP_KINDS, GPUSpec, Hardware, default_params

_NAMES = (("gh200", "gh200"), ("gb300", "gb300"), ("b300", "b300"), ("gb200", "gb200"), ("b200", "b200"), ("h200", "h200"),
          ("h20", "h20"),
          ("h100", "h100-sxm"), ("h800", "h800"), ("a800", "a800-80gb"), ("mi300x", "mi300x"), ("l40s", "l40s"),
          ("4090", "rtx-4090"), ("rtx pro 6000", "rtx-pro-6000"))
"""Device-name fragment -> table id, the longer name first where one contains another (gh200 / gb300 / b300 /
gb200 / b200, h200 / h20)."""


def gpu_table_id(name: str, total_bytes: float | None = None) -> str | None:
    """The GPU-table entry a device name belongs to (``NVIDIA H100 80GB HBM3`` -> ``h100-sxm``; an A100 by its
    memory), or None for a device the table does not have."""
    n = name.lower()
    if "a100" in n:
        big = ("80gb" in n) or (total_bytes is not None and total_bytes > 50e9)
        return "a100-80gb" if big else "a100-40gb"
    return next((gid for key, gid in _NAMES if key in n), None)


def table_spec(device_name: str, total_bytes: float | None = None, gpu: str | None = None) -> GPUSpec:
    """The datasheet spec to predict with: ``gpu`` if given (a table id), else the one matching the name."""
    gid = gpu or gpu_table_id(device_name, total_bytes)
    if gid is None:
        raise ConfigError(f"the GPU table has no entry for {device_name!r}: pass --gpu with one of {', '.join(GPUS)}")
    if gid not in GPUS:
        raise ConfigError(f"unknown GPU {gid!r}; known: {', '.join(GPUS)}")
    return GPUS[gid]


def gpu_grid(params: float = 0.0):
    """The profile grid at GPU scale: batches to 128 over KV to 2k tokens per sequence, chunks to 2k over
    contexts to 2k, training passes to 8 x 1k tokens (8 x 512 from 1B parameters: the vocabulary's logits
    and the optimizer state must fit one GPU beside each other). Each decode grid point runs 16 iterations
    before its 8 timed ones: on an H100 the iterations right after a prefill were the slow, noisy ones
    (``paper_figs/out/gpu_profile_warm.csv``), and a run spends almost all its iterations in steady state."""
    from oppo_real.profiling.engine_ops import ProfileGrid

    train_len = (256, 512, 1024) if params < 1e9 else (256, 512)
    return ProfileGrid(decode_batch=(1, 8, 32, 64, 128), decode_kv=(128, 512, 2048), prefill_new=(16, 128, 512, 2048),
                       prefill_ctx=(0, 512, 2048), train_batch=(2, 4, 8), train_len=train_len, repeats=8, sync_repeats=5,
                       decode_warm=16)


def with_predictions(table: pd.DataFrame, spec: GPUSpec | None, device_name: str, model: str) -> pd.DataFrame:
    """``table`` with ``device``, ``gpu``, ``model`` on every row and, where ``spec`` is given, the
    uncalibrated prediction (``DEFAULT_COST_PARAMS``) and its error per measured call."""
    out = table.copy()
    out.insert(0, "device", device_name)
    out.insert(1, "gpu", spec.id if spec is not None else "")
    out.insert(2, "model", model)
    if spec is None:
        out["pred_default_s"] = np.nan
        out["err_pct"] = np.nan
        return out
    pred = predict_seconds(table[MEASUREMENT_COLUMNS], spec, default_params(spec.id))
    out["pred_default_s"] = pred
    out["err_pct"] = 100.0 * (pred - out["seconds"].to_numpy()) / out["seconds"].to_numpy()
    return out


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model and op: calls, median measured and predicted seconds, median error and mean |error| (%)."""
    rows = []
    for (model, op), g in table.groupby(["model", "op"], sort=False):
        rows.append({"model": model, "op": op, "n": len(g), "meas_median_s": float(g["seconds"].median()),
                     "pred_default_median_s": float(g["pred_default_s"].median()),
                     "median_err_pct": float(g["err_pct"].median()), "mean_abs_err_pct": float(g["err_pct"].abs().mean())})
    return pd.DataFrame(rows)


def fit_gpu(table: pd.DataFrame, spec: GPUSpec) -> tuple[Hardware, pd.DataFrame]:
    """Fit the cost model to the measurements against the datasheet ``spec`` (efficiencies comparable
    with the defaults)."""
    from oppo_real.profiling.engine_ops import fittable

    return fit_profile(fittable(table)[MEASUREMENT_COLUMNS].reset_index(drop=True), spec, default_params(spec.id))


def heldout_fit(table: pd.DataFrame, spec: GPUSpec | None, cores: int = 1) -> pd.DataFrame:
    """The fit on half of each op's grid with its error on the other half (``oppo_sim.hw.fitting.holdout``): against
    the datasheet ``spec`` on a GPU (default parameters for what the data leaves open), against the nominal
    CPU spec on the CPU; ``model`` and ``device`` columns as the measurements have them."""
    from oppo_real.profiling.engine_ops import fittable
    from oppo_sim.hw.fitting.holdout import holdout_report
    from oppo_sim.hw.fitting.profiles import cpu_spec

    rows = fittable(table)
    if spec is None:
        _, rep = holdout_report(rows, cpu_spec(name="cpu", cores=cores))
    else:
        _, rep = holdout_report(rows, spec, default_params(spec.id))
    for col in ("model", "device"):
        if col in table.columns:
            rep.insert(0, col, table[col].iloc[0])
    return rep


def suggested_defaults(hw: Hardware) -> dict:
    """The fitted parameters as the ``DEFAULT_COST_PARAMS`` literal they would replace (per op)."""
    return {op: {"eff_compute": round(hw.params.op(op).eff_compute, 4), "eff_memory": round(hw.params.op(op).eff_memory, 4),
                 "overhead_s": float(f"{hw.params.op(op).overhead_s:.3g}")} for op in OP_KINDS}


def plot_profile(table: pd.DataFrame):
    """Measured against the uncalibrated prediction, one panel per op (log-log, the diagonal is exact)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    ops = [op for op in OP_KINDS if op in set(table["op"])]
    fig = Figure(figsize=(4 * max(1, len(ops)), 4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, max(1, len(ops))))
    for ax, op in zip(axes, ops):
        g = table[table["op"] == op]
        for model, gm in g.groupby("model"):
            ax.scatter(1e3 * gm["seconds"], 1e3 * gm["pred_default_s"], s=12, label=model)
        lo = 1e3 * min(g["seconds"].min(), g["pred_default_s"].min()) * 0.7
        hi = 1e3 * max(g["seconds"].max(), g["pred_default_s"].max()) * 1.4
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), title=f"{op}: median err {g['err_pct'].median():+.0f}%",
               xlabel="measured (ms)", ylabel="predicted, default params (ms)")
        ax.legend(fontsize=7)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(NullFormatter())  # decade labels only: minor ones overlap on short ranges
    fig.suptitle(f"{table['device'].iloc[0]} vs GPU table '{table['gpu'].iloc[0]}' (uncalibrated)")
    return fig
