"""The H200 decode check of the kernel tables (paper_figs/gpu_op_costs_check.py): its committed numbers are what the
simulator computes today, so docs/op_costs.md's table cannot drift from the cost model silently; and the profile
command's default engine on a GPU is the graph-captured one that check measured."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "paper_figs" / "out" / "gpu_h200"


def _check_module():
    spec = importlib.util.spec_from_file_location("gpu_op_costs_check", ROOT / "paper_figs" / "gpu_op_costs_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_check_is_what_the_cost_model_prices_now():
    mod = _check_module()
    points = mod.priced(pd.read_csv(H200 / "gpu_profile.csv"))
    committed = pd.read_csv(H200 / "op_costs_check.csv")
    assert len(points) == len(committed) == 60  # 15 decode points each: 1.5B, 3B, 7B, the MoE shape
    for col in ("measured_s", "roofline_s", "tables_s"):
        assert points[col].to_numpy() == pytest.approx(committed[col].to_numpy(), rel=1e-9), col
    summary = mod.summary(points)
    assert summary[["model", "pricing"]].values.tolist() == pd.read_csv(H200 / "op_costs_check_summary.csv")[["model", "pricing"]].values.tolist()
    # the roofline column is the profile's own uncalibrated prediction (the same formula, two callers)
    prof = pd.read_csv(H200 / "gpu_profile.csv")
    pred = prof[prof.op == "decode"].groupby(["model", "batch", "kv"], as_index=False)["pred_default_s"].median()
    both = committed.merge(pred, on=["model", "batch", "kv"])
    assert both["roofline_s"].to_numpy() == pytest.approx(both["pred_default_s"].to_numpy(), rel=1e-9)


def test_linear_r2_is_one_for_an_affine_prediction_and_lower_otherwise():
    import numpy as np

    mod = _check_module()
    meas = np.array([1.0, 2.0, 3.0, 5.0])
    assert mod._linear_r2(2.0 * meas + 1.0, meas) == pytest.approx(1.0)
    assert mod._linear_r2(np.array([1.0, 3.0, 2.0, 5.0]), meas) < 1.0


def test_profile_times_the_graph_engine_on_a_gpu_by_default():
    from oppo_real.commands.profile_cmd import default_backend

    assert default_backend("cuda") == default_backend("cuda:1") == "torch-graph"
    assert default_backend("cpu") == "vllm"
