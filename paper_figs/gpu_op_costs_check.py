"""Does pricing a generation iteration from measured kernel tables (``--op-costs tables``) describe a GPU's decode
better than the roofline? Checked on the H200's measured decode grid (``paper_figs/out/gpu_h200/gpu_profile.csv``):
every grid point priced, uncalibrated, by the simulator's own ``DecodeCost`` both ways, on the H200's GPU-table entry.

    python paper_figs/gpu_op_costs_check.py            # -> paper_figs/out/gpu_h200/op_costs_check.csv (+ summary)

The measured engine is the project's graph-captured torch decoder, not vLLM, whose kernels the tables hold: its
dense GEMMs are the same cuBLAS calls (``torch.nn.functional.linear``), its attention (SDPA over padded slots) and
expert GEMMs (transformers' ``grouped_mm``) are not. So the summary reads how each pricing follows the *shape* of
the measurements — a linear map of the prediction onto the measurement (its r²: what the pricing explains once one
scale and one offset are allowed for the engine), the growth from batch 1 to 128 — as well as the error as it stands.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oppo_real.models.shaped import resolve_spec  # noqa: E402
from oppo_real.profiling.engine_ops import decode_kv_tokens  # noqa: E402
from oppo_real.profiling.gpu_model_error import gpu_grid  # noqa: E402
from oppo_real.profiling.model_shape import profile_shape  # noqa: E402
from oppo_sim.hw.costs.costmodel import DecodeCost  # noqa: E402
from oppo_sim.hw.costs.op_cost import with_op_costs  # noqa: E402
from oppo_sim.hw.devices.hardware import get_hardware  # noqa: E402

H200 = ROOT / "paper_figs" / "out" / "gpu_h200"
MODES = ("roofline", "tables")


def priced(profile: pd.DataFrame, gpu: str = "h200") -> pd.DataFrame:
    """Median measured seconds per (model, batch, kv) decode point beside each pricing's prediction, at the cached
    tokens the profile priced (``engine_ops.decode_kv_tokens``)."""
    grid = gpu_grid()
    pts = profile[profile.op == "decode"].groupby(["model", "batch", "kv"], as_index=False)["seconds"].median()
    hws = {m: with_op_costs(get_hardware(gpu), m) for m in MODES}
    rows = []
    for model, g in pts.groupby("model", sort=False):
        spec = resolve_spec(profile_shape(model))
        cost = {m: DecodeCost(spec, hws[m]) for m in MODES}
        for r in g.itertuples():
            b = int(r.batch)
            kv = decode_kv_tokens(grid, b, int(r.kv))
            rows.append({"model": model, "batch": b, "kv": int(r.kv), "measured_s": r.seconds,
                         **{f"{m}_s": cost[m].iteration(b, kv) for m in MODES}})
    return pd.DataFrame(rows)


def _linear_r2(pred: np.ndarray, meas: np.ndarray) -> float:
    """r² of the least-squares line ``meas ≈ a + b · pred``: how much of the measurements a prediction explains."""
    a = np.vstack([np.ones_like(pred), pred]).T
    fit = a @ np.linalg.lstsq(a, meas, rcond=None)[0]
    return float(1.0 - ((meas - fit) ** 2).sum() / ((meas - meas.mean()) ** 2).sum())


def summary(points: pd.DataFrame) -> pd.DataFrame:
    """Per model and pricing: median |error|, r² of the best linear map onto the measurements, and the growth of an
    iteration from batch 1 to the largest batch (median over the KV sizes), measured and predicted."""
    rows = []
    for model, g in points.groupby("model", sort=False):
        lo, hi = g[g.batch == g.batch.min()].set_index("kv"), g[g.batch == g.batch.max()].set_index("kv")
        for m in MODES:
            p, t = g[f"{m}_s"].to_numpy(), g["measured_s"].to_numpy()
            rows.append({"model": model, "pricing": m, "points": len(g), "median_abs_err_pct": float(np.median(np.abs(p / t - 1)) * 100),
                         "linear_r2": _linear_r2(p, t), "growth_pred": float((hi[f"{m}_s"] / lo[f"{m}_s"]).median()),
                         "growth_measured": float((hi["measured_s"] / lo["measured_s"]).median())})
    return pd.DataFrame(rows)


def main() -> int:
    points = priced(pd.read_csv(H200 / "gpu_profile.csv"))
    points.to_csv(H200 / "op_costs_check.csv", index=False)
    s = summary(points)
    s.to_csv(H200 / "op_costs_check_summary.csv", index=False)
    with pd.option_context("display.width", 160, "display.float_format", "{:.3g}".format):
        print(s.to_string(index=False))
    print(f"wrote {H200}/op_costs_check.csv, op_costs_check_summary.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
