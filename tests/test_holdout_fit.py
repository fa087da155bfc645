"""The held-out fit report: a deterministic checkerboard split of each op's grid, the cost model fitted on one
half only and its error reported on the other."""

import numpy as np
import pandas as pd
import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.fitting.calibration import MEASUREMENT_COLUMNS, fit_profile, predict_seconds
from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.devices.hardware import CostParams, OpParams, get_gpu
from oppo_sim.hw.fitting.holdout import HOLDOUT_COLUMNS, holdout_mask, holdout_report
from oppo_sim.hw.models.lookup import get_model

SPEC = get_gpu("h100-sxm")
TRUTH = CostParams(decode=OpParams(0.4, 0.6, 3e-3), prefill=OpParams(0.6, 0.5, 2e-3), train=OpParams(0.35, 0.8, 8e-3),
                   sync=OpParams(1.0, 0.45, 0.02), collective=OpParams(1.0, 0.85, 1e-5))


def _table(noise: float = 0.0, repeats: int = 2) -> pd.DataFrame:
    """A profile-shaped table (grid columns as ``oppo_real.profiling.engine_ops`` writes them)."""
    m = get_model("qwen2.5-1.5b")
    rows = []
    for b in (1, 8, 32, 64, 128, 256):
        for kv in (128, 512, 2048, 8192):
            rows += [dict(op="decode", batch=b, kv=kv, work=CostModel.decode_work(m, b, b * kv))] * repeats
    for new in (16, 128, 512, 2048):
        for ctx in (0, 512, 2048):
            rows += [dict(op="prefill", new=new, ctx=ctx, work=CostModel.prefill_work(m, [new], [ctx], scalar_head=True))] * repeats
    for role in ("actor", "critic"):
        for b in (2, 4, 8):
            for n in (256, 512, 1024):
                rows += [dict(op="train", batch=b, length=n, role=role, work=CostModel.train_work(m, [n] * b, scalar_head=role == "critic"))] * repeats
    rows += [dict(op="sync", work=CostModel.sync_work(m))] * 3
    t = pd.DataFrame(rows).drop(columns="work")
    t["devices"] = 1
    t["flops"] = [r["work"][0] for r in rows]
    t["bytes"] = [r["work"][1] for r in rows]
    rng = np.random.default_rng(0)
    t["seconds"] = predict_seconds(t.assign(seconds=1.0)[MEASUREMENT_COLUMNS], SPEC, TRUTH) * np.exp(rng.normal(0, noise, len(t)))
    return t


def test_split_is_a_checkerboard_over_each_grid():
    t = _table()
    held = holdout_mask(t)
    assert (held == holdout_mask(t.copy())).all()  # deterministic
    dec = t.assign(held=held)[t["op"] == "decode"]
    for axis in ("batch", "kv"):  # every batch size and every context length has points on both sides
        assert dec.groupby(axis)["held"].agg(["any", "all"]).pipe(lambda g: (g["any"] & ~g["all"]).all())
    assert not dec[(dec.batch == 1) & (dec.kv == 128)]["held"].any()
    assert dec[(dec.batch == 8) & (dec.kv == 128)]["held"].all() and dec[(dec.batch == 1) & (dec.kv == 512)]["held"].all()
    for _, g in dec.groupby(["batch", "kv"]):  # the calls of a grid point go together
        assert g["held"].nunique() == 1
    assert not held[(t["op"] == "sync").to_numpy()].any()  # one grid point: nothing held out
    tr = t.assign(held=held)[t["op"] == "train"]
    assert tr.groupby("role")["held"].sum().tolist() == [8, 8]  # 4 of 9 points per role, 2 calls each


def test_report_is_fitted_on_the_fit_split_only():
    t = _table(noise=0.02)
    held = holdout_mask(t)
    hw, rep = holdout_report(t, SPEC)
    assert list(rep.columns) == HOLDOUT_COLUMNS
    assert set(zip(rep.op, rep.split)) == {(op, s) for op in ("decode", "prefill", "train", "sync") for s in ("fit", "held-out")}
    ref, _ = fit_profile(t.loc[~held, MEASUREMENT_COLUMNS].reset_index(drop=True), SPEC)
    assert hw.params == ref.params
    dec = rep[rep.op == "decode"].set_index("split")
    assert dec.loc["fit", "n"] + dec.loc["held-out", "n"] == (t.op == "decode").sum()
    assert dec.loc["fit", "points"] == 12 and dec.loc["held-out", "points"] == 12
    assert (rep[rep.op != "sync"]["r2"] > 0.95).all()
    assert rep.set_index(["op", "split"]).loc[("sync", "held-out"), "n"] == 0
    # the held-out points never reach the fit: spoiling them moves their error only
    spoiled = t.copy()
    spoiled.loc[held, "seconds"] *= 3.0
    hw2, rep2 = holdout_report(spoiled, SPEC)
    assert hw2.params == hw.params
    fit1, fit2 = rep[rep.split == "fit"], rep2[rep2.split == "fit"]
    assert fit1["mape"].tolist() == fit2["mape"].tolist()
    h1 = rep[(rep.split == "held-out") & (rep.n > 0)]
    h2 = rep2[(rep2.split == "held-out") & (rep2.n > 0)]
    assert (h2["median_abs_err_pct"].to_numpy() > h1["median_abs_err_pct"].to_numpy() + 40).all()


def test_exact_measurements_predict_the_held_out_points():
    _, rep = holdout_report(_table(noise=0.0), SPEC)
    assert (rep[rep.n > 0]["max_abs_err_pct"] < 0.1).all()


def test_empty_table_is_one_line():
    with pytest.raises(ConfigError, match="empty"):
        holdout_report(_table().iloc[:0], SPEC)
