"""Sweeps: grid expansion, determinism across runners, the speedup column, validation, table output."""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.core.policies import POLICY_NAMES, make_policy
from oppo_sim.explore.sweep import (
    CHUNK_POLICIES,
    DELTA_POLICIES,
    SweepGrid,
    SweepPoint,
    run_point,
    run_sweep,
    save_table,
)
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.catalog import load_trace
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

SMALL = SimConfig(batch=16, steps=3)


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("traces") / "small.csv"
    generate_longtail(LongTailSpec(cap=2048), 200, seed=3, name="small").to_frame().to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def grid(trace_path) -> SweepGrid:
    return SweepGrid(policies=("baseline", "intra", "inter", "oppo"), chunks=(128, 500), deltas=(0, 4),
                     traces=(trace_path,), base=SMALL)


# -- point expansion -------------------------------------------------------------------------------


def _expected_count(policies, n_chunks, n_deltas) -> int:
    return sum((n_chunks if p in CHUNK_POLICIES else 1) * (n_deltas if p in DELTA_POLICIES else 1) for p in policies)


def test_knobs_only_multiply_the_policies_that_have_them(trace_path):
    g = SweepGrid(policies=POLICY_NAMES, chunks=(128, 256, 512), deltas=(0, 8), traces=(trace_path,),
                  gpus=("h200", "a100-80gb"), base=SMALL)
    pts = g.points()
    assert len(pts) == 2 * _expected_count(POLICY_NAMES, 3, 2) == len(g)
    by_policy = pd.DataFrame([(p.policy, p.chunk, p.delta, p.gpu) for p in pts], columns=["policy", "chunk", "delta", "gpu"])
    counts = by_policy.groupby("policy").size()
    assert counts["baseline"] == counts["async"] == counts["stream"] == 2
    assert counts["intra"] == 6 and counts["inter"] == 4 and counts["oppo"] == 12
    for p in pts:
        assert (p.chunk is not None) == (p.policy in CHUNK_POLICIES)
        assert (p.delta is not None) == (p.policy in DELTA_POLICIES)
        assert p.config == replace(SMALL, gpu=p.gpu)
    assert len(set(pts)) == len(pts)


def test_points_are_deterministic_and_deduplicated(trace_path):
    a = SweepGrid(policies=("oppo", "baseline", "oppo"), chunks=(500, 128, 500), deltas=(8, 8), traces=(trace_path,), base=SMALL)
    b = SweepGrid(policies=("oppo", "baseline"), chunks=(500, 128), deltas=(8,), traces=(trace_path,), base=SMALL)
    assert a.points() == b.points() == a.points()
    assert [(p.policy, p.chunk, p.delta) for p in a.points()] == [("oppo", 500, 8), ("oppo", 128, 8), ("baseline", None, None)]


def test_scalars_and_lists_are_accepted(trace_path):
    g = SweepGrid(policies="OPPO", chunks=[256], deltas=4, traces=trace_path, gpus=["h200"], base=SMALL)
    assert g.policies == ("oppo",) and g.chunks == (256,) and g.deltas == (4,) and g.traces == (trace_path,)
    assert [(p.policy, p.chunk, p.delta) for p in g.points()] == [("oppo", 256, 4)]


@pytest.mark.parametrize("kwargs, match", [
    ({"policies": ("baseline", "nope")}, "unknown policy 'nope'"),
    ({"gpus": ("h200", "tpu-v9")}, "unknown GPU"),
    ({"policies": ()}, "policies is empty"),
    ({"chunks": (0,)}, "chunks"),
    ({"deltas": (-1,)}, "deltas"),
    ({"base": "fast"}, "SimConfig"),
])
def test_invalid_grids_raise_config_error(trace_path, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SweepGrid(**{"traces": (trace_path,), "base": SMALL, **kwargs})


def test_missing_trace_raises_trace_error(tmp_path):
    with pytest.raises(TraceError):
        SweepGrid(traces=(str(tmp_path / "missing.csv"),), base=SMALL)


def test_relative_trace_path_is_made_absolute_for_workers(trace_path, monkeypatch):
    from pathlib import Path

    p = Path(trace_path)
    monkeypatch.chdir(p.parent)
    (pt,) = SweepGrid(policies=("baseline",), traces=(p.name,), base=SMALL).points()
    assert pt.trace == p.name
    assert Path(pt.trace_source).is_absolute() and Path(pt.trace_source) == p


# -- running ---------------------------------------------------------------------------------------


def test_run_point_matches_a_direct_simulation(trace_path):
    pt = SweepPoint("oppo", 128, 4, trace_path, "h200", SMALL, trace_path)
    row = run_point(pt)
    ref = simulate(load_trace(trace_path, max_response=SMALL.max_response), make_policy("oppo", chunk=128, delta=4), SMALL)
    assert row["label"] == ref.summary["policy"] == "oppo(C=128,Δ0=4)"
    for key in ("step_time_s", "samples_per_s", "tokens_per_s", "utilization_overall", "flop_utilization", "staleness_mean"):
        assert row[key] == ref.summary[key]
    for pool, frac in ref.summary["utilization"].items():
        assert row[f"utilization_{pool}"] == frac
    assert row["wall_clock_s"] > 0


@pytest.fixture(scope="module")
def table(grid) -> pd.DataFrame:
    return run_sweep(grid, processes=1, progress=False)


def test_table_shape_and_columns(grid, table):
    pts = grid.points()
    assert len(table) == len(pts)
    assert list(table["policy"]) == [p.policy for p in pts]
    assert table["chunk"].dtype == "Int64" and table["delta"].dtype == "Int64"
    for col in ("policy", "label", "chunk", "delta", "trace", "gpu", "step_time_s", "step_time_median_s",
                "samples_per_s", "tokens_per_s", "utilization_main", "utilization_score", "utilization_overall",
                "flop_utilization", "staleness_mean", "wall_clock_s", "speedup"):
        assert col in table.columns, col
    assert table.loc[table.policy == "baseline", "chunk"].isna().all()
    assert (table["samples_per_s"] > 0).all()


def test_process_pool_gives_the_same_table(grid, table):
    pooled = run_sweep(grid, processes=2, progress=False)
    pd.testing.assert_frame_equal(pooled.drop(columns="wall_clock_s"), table.drop(columns="wall_clock_s"))


def test_speedup_is_relative_to_the_baseline_of_the_same_trace_and_gpu(trace_path):
    g = SweepGrid(policies=("baseline", "inter"), deltas=(4,), traces=(trace_path,), gpus=("h200", "a100-80gb"), base=SMALL)
    df = run_sweep(g, processes=1, progress=False)
    assert (df.loc[df.policy == "baseline", "speedup"] == 1.0).all()
    for gpu in ("h200", "a100-80gb"):
        sub = df[df.gpu == gpu].set_index("policy")
        assert sub.loc["inter", "speedup"] == pytest.approx(sub.loc["inter", "samples_per_s"] / sub.loc["baseline", "samples_per_s"])
    assert (df.loc[df.policy == "inter", "speedup"] > 1.0).all()  # Δ > 0 hides the long tail


def test_speedup_is_nan_without_a_baseline(trace_path):
    df = run_sweep(SweepGrid(policies=("inter",), deltas=(0,), traces=(trace_path,), base=SMALL), processes=1, progress=False)
    assert df["speedup"].isna().all()


def test_bad_process_count(grid):
    with pytest.raises(ConfigError, match="processes"):
        run_sweep(grid, processes=0, progress=False)


def test_missing_ray_is_a_config_error(grid, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    with pytest.raises(ConfigError, match="ray is not installed"):
        run_sweep(grid, use_ray=True, progress=False)


def test_ray_gives_the_same_table(grid, table):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_sweep(grid, use_ray=True, progress=False)
        assert ray.is_initialized()  # an already running Ray is left alone
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(remote.drop(columns="wall_clock_s"), table.drop(columns="wall_clock_s"))


# -- saving ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sweep.csv", "sweep.parquet"])
def test_save_table_round_trips(table, tmp_path, name):
    path = save_table(table, tmp_path / name)
    back = pd.read_csv(path) if name.endswith(".csv") else pd.read_parquet(path)
    assert list(back.columns) == list(table.columns) and len(back) == len(table)
    np.testing.assert_allclose(back["samples_per_s"], table["samples_per_s"])
    assert back["speedup"].iloc[0] == 1.0 or math.isnan(back["speedup"].iloc[0])


def test_save_table_rejects_other_suffixes(table, tmp_path):
    with pytest.raises(ConfigError, match=r"\.csv"):
        save_table(table, tmp_path / "sweep.xlsx")
