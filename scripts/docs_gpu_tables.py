"""The GPU measurements' tables in the docs (``docs/gpu.md``), each rendered from committed outputs:
the H100 run of 2026-11-22 (``paper_figs/out/gpu_*``) and the H200 run of 2026-11-26
(``paper_figs/out/gpu_h200/``). ``scripts/make_docs.py`` merges them with ``docs_tables.TABLES``."""

from __future__ import annotations

from typing import Callable

import pandas as pd

from docs_tables import OUT, _md, _pct, _signed

H200 = OUT / "gpu_h200"


def gpu_validation(folder=OUT) -> str:
    """The validation per policy: the H100's (``paper_figs/out/gpu_validation.csv``) or another card's folder's."""
    v = pd.read_csv(folder / "gpu_validation.csv")
    rows = [{**({"session": r.session} if "session" in v else {}), "model": r.model, "policy": r.policy, "runs": r.runs,
             "predicted s/step": f"{r.pred_step_s:.2f}", "measured s/step": f"{r.meas_step_s:.2f}",
             "error": _signed(r.step_err_pct), "speedup pred / meas": f"{r.pred_speedup:.2f} / {r.meas_speedup:.2f}",
             "decisions": f"{r.decision_agreement:.2f}"} for r in v.itertuples()]
    if "meas_step_min_s" in v:  # runs repeated: the measured spread (min - max over the runs)
        for row, r in zip(rows, v.itertuples()):
            row["measured s/step"] += f" ({r.meas_step_min_s:.2f}–{r.meas_step_max_s:.2f})"
    return _md(pd.DataFrame(rows))


def h200_validation_components() -> str:
    """Each component of a step, predicted and measured (each the median over the session's runs, as validate
    writes them), per session, model and policy (``gpu_validation_components.csv``)."""
    c = pd.read_csv(H200 / "gpu_validation_components.csv")
    rows = []
    for (session, model, pol), g in c.groupby(["session", "model", "policy"], sort=False):
        row = {"session": session, "model": model, "policy": pol}
        for comp in ("generation", "scoring", "training", "sync"):
            r = g[g.component == comp].iloc[0]
            row[f"{comp}, s (pred / meas)"] = f"{r.pred_s:.3f} / {r.meas_s:.3f}"
        rows.append(row)
    return _md(pd.DataFrame(rows))


def gpu_fit() -> str:
    """The cost model fitted to the H100 profile (``paper_figs/out/gpu_fit.csv``)."""
    f = pd.read_csv(OUT / "gpu_fit.csv")
    rows = [{"model": r.model, "op": r.op, "calls": r.n, "MAPE": _pct(r.mape),
             "r²": "" if pd.isna(r.r2) else f"{r.r2:.2f}", "fitted overhead": f"{r.overhead_s * 1e3:.1f} ms",
             "note": "" if pd.isna(r.note) else r.note} for r in f.itertuples()]
    return _md(pd.DataFrame(rows))


CUT_ENGINES = {"decode-eager": "torch-graph, eager (no graphs)", "decode-torch": "torch (per request, eager)"}
"""The engine of a cut decode stage (``gpu_decode_cut.csv``'s ``stage``), as the decode table names it."""


def _ms(v: float) -> str:
    """Seconds as milliseconds, one decimal."""
    return f"{v * 1e3:.1f}"


def h200_decode() -> str:
    """Decode iterations on the H200 (``gpu_profile.csv``, ``gpu_decode_cut.csv``): ms per iteration over the
    KV grid and the kernel share, replayed as CUDA graphs beside the same engine run eagerly."""
    t = pd.read_csv(H200 / "gpu_profile.csv")
    dec = t[t.op == "decode"]
    rows = []
    for (model, batch), g in dec.groupby(["model", "batch"], sort=False):
        med = g.groupby("kv")["seconds"].median()
        rows.append({"model": model, "engine": "torch-graph (CUDA graphs)", "batch": int(batch),
                     **{f"ms, kv {int(kv)}": _ms(s) for kv, s in med.items()},
                     "uncalibrated roofline, kv 512": _ms(g[g.kv == 512]["pred_default_s"].median()),
                     "kernel share": _pct(g["kernel_share"].median())})
    cut = pd.read_csv(H200 / "gpu_decode_cut.csv")
    for (model, stage, batch), g in cut.groupby(["model", "stage", "batch"], sort=False):
        med = g.groupby("kv")["median_ms"].median()
        rows.append({"model": model, "engine": CUT_ENGINES.get(stage, stage), "batch": int(batch),
                     **{f"ms, kv {int(kv)}": f"{ms:.1f}" for kv, ms in med.items()},
                     "uncalibrated roofline, kv 512": "", "kernel share": _pct(g["kernel_share"].median())})
    return _md(pd.DataFrame(rows).fillna(""))


def h200_fit() -> str:
    """The cost model fitted per model and op on the H200 (``gpu_fit.csv``) and checked on held-out grid points
    (``gpu_fit_heldout.csv``), beside the uncalibrated prediction's median error (``gpu_profile.csv``)."""
    f = pd.read_csv(H200 / "gpu_fit.csv")
    f = f[f.op != "sync"].sort_values("model", key=lambda m: m.str.startswith("qwen3"), kind="stable")  # h200_sync
    h = pd.read_csv(H200 / "gpu_fit_heldout.csv")
    h = h[h.split == "held-out"].set_index(["model", "op"])
    err = pd.read_csv(H200 / "gpu_profile.csv").groupby(["model", "op"])["err_pct"].median()
    rows = [{"model": r.model, "op": r.op, "calls": r.n, "uncalibrated median error": _signed(err[(r.model, r.op)]),
             "eff_compute": f"{r.eff_compute:.3f}", "eff_memory": f"{r.eff_memory:.3f}",
             "overhead": f"{r.overhead_s * 1e3:.1f} ms", "r²": f"{r.r2:.2f}",
             "held-out median / max error": f"{h.loc[(r.model, r.op), 'median_abs_err_pct']:.0f}% / "
                                            f"{h.loc[(r.model, r.op), 'max_abs_err_pct']:.0f}%",
             "held-out r²": f"{h.loc[(r.model, r.op), 'r2']:.2f}"} for r in f.itertuples()]
    return _md(pd.DataFrame(rows))


def h200_sync() -> str:
    """The engine's own weight load (``load_weights``) per path, from ``gpu_profile.csv``'s sync rows: one size per
    model, so no fit (the fit table leaves sync out)."""
    t = pd.read_csv(H200 / "gpu_profile.csv")
    t = t[t.op == "sync"]
    rows = [{"model": m, "path": path, "calls": len(g), "GB": f"{g.bytes.iloc[0] / 1e9:.1f}",
             "measured ms, median (min – max)": f"{_ms(g.seconds.median())} ({_ms(g.seconds.min())} – {_ms(g.seconds.max())})",
             "GB/s": f"{g.bytes.iloc[0] / g.seconds.median() / 1e9:.0f}",
             "uncalibrated prediction, ms": _ms(g.pred_default_s.median())}
            for (m, path), g in t.groupby(["model", "path"], sort=True)]
    return _md(pd.DataFrame(rows))


def h200_moves() -> str:
    """Copies between the H200 and pinned host memory, and on the device (``gpu_moves_fit.csv``)."""
    f = pd.read_csv(H200 / "gpu_moves_fit.csv")
    rows = [{"model": r.model, "move": r.move, "set": r.set, "direction": r.direction, "copies": r.n,
             "GiB/s": f"{r.gib_s:.1f}", "fixed": "" if pd.isna(r.fixed_s) else f"{r.fixed_s * 1e3:.2f} ms",
             "r²": "" if pd.isna(r.r2) else f"{r.r2:.3f}",
             "of the table's host link": "" if r.direction == "d2d" else _pct(r.eff_vs_host_bw)} for r in f.itertuples()]
    return _md(pd.DataFrame(rows))


def h200_op_costs() -> str:
    """The H200 decode grid priced by the roofline and by the H200's table (``op_costs_check_summary.csv``)."""
    s = pd.read_csv(H200 / "op_costs_check_summary.csv")
    rows = [{"model": r.model, "pricing": r.pricing, "points": r.points, "median error": f"{r.median_abs_err_pct:.0f}%",
             "r² of a linear map": f"{r.linear_r2:.2f}",
             "batch 1 → 128, predicted / measured": f"{r.growth_pred:.2f}× / {r.growth_measured:.2f}×"} for r in s.itertuples()]
    return _md(pd.DataFrame(rows))


def h200_eager_host() -> str:
    """The host's seconds per eager op from the eager decode grid (``eager_host_op_summary.csv``)."""
    s = pd.read_csv(H200 / "eager_host_op_summary.csv").iloc[0]
    row = {"points": int(s.points), "ops an iteration": f"{int(s.ops_per_iteration):,}",
           "host per op, median": f"{s.median_us:.1f} µs", "min – max": f"{s.min_us:.1f} – {s.max_us:.1f} µs",
           "kernels' share of the wall time, at most": _pct(s.kernel_share_max)}
    return _md(pd.DataFrame([row]))


GPU_TABLES: dict[str, Callable[[], str]] = {
    "gpu-validation": gpu_validation, "gpu-fit": gpu_fit,
    "gpu-h200-decode": h200_decode, "gpu-h200-fit": h200_fit, "gpu-h200-moves": h200_moves,
    "gpu-h200-op-costs": h200_op_costs, "gpu-h200-eager-host": h200_eager_host,
    "gpu-h200-sync": h200_sync, "gpu-h200-validation": lambda: gpu_validation(H200), "gpu-h200-validation-components": h200_validation_components,
}

