"""The sleep/wake and weight-sync copies (`oppo_real.profiling.host_moves`): the tensor sets have the sizes
the simulator charges (weights, KV, 16 bytes of trainer state per parameter, a stated shard where that does
not fit), the measurement runs end to end on the CPU at tiny size (rows saying the "device" is host memory),
and the fit recovers a known fixed cost and rate."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from oppo_real.commands.profile_cmd import _moves
from oppo_real.models.shaped import hf_config
from oppo_real.profiling.host_moves import (
    GiB,
    MoveGrid,
    fit_line,
    fit_moves,
    kv_shapes,
    run_moves,
    state_set,
    tensor_sets,
    weight_shapes,
)
from oppo_real.profiling.model_shape import profile_shape
from oppo_sim.core.errors import ConfigError

TINY = profile_shape("qwen3-moe-tiny")
GRID = MoveGrid(fractions=(0.5, 1.0), repeats=2, kv_tokens=64)


def test_sets_have_the_sizes_the_simulator_charges():
    cfg = hf_config(TINY)
    engine, kv, state = tensor_sets("sleepwake", cfg, GRID, None)
    assert engine.bytes_of(len(engine.shapes)) == TINY.params * 2  # bf16 weights
    assert kv.bytes_of(len(kv.shapes)) == 64 * TINY.with_(dtype_bytes=2).kv_bytes_per_token()
    assert state.bytes_of(len(state.shapes)) == 16 * TINY.params and state.note == ""
    shard = state_set(weight_shapes(cfg), device_bytes=16 * TINY.params, share=0.25)
    assert shard.note.startswith("shard f=") and shard.bytes_of(len(shard.shapes)) <= 0.25 * 16 * TINY.params
    assert [s.name for s in tensor_sets("sync", cfg, GRID, None)] == ["weights"]
    assert kv_shapes(cfg, 5)[0] == (5, 2, 16)
    assert engine.prefix(1.0) == len(engine.shapes) and 1 <= engine.prefix(0.01) < engine.prefix(0.5)


def test_moves_run_end_to_end_on_the_cpu():
    table = run_moves(hf_config(TINY), ("sleepwake", "sync"), GRID, "cpu", "qwen3-moe-tiny", log=lambda _m: None)
    assert (table["seconds"] > 0).all() and (table["device"] == "cpu").all()
    assert table["host_memory"].str.startswith("host (no GPU").all()
    sw = table[table["move"] == "sleepwake"]
    reused = sw[sw["host_alloc"] == "reused"]
    assert set(zip(reused["set"], reused["leg"])) == {("engine_weights", "sleep"), ("engine_weights", "wake"),
                                                      ("kv_cache", "sleep"), ("kv_cache", "wake"),
                                                      ("train_state", "offload"), ("train_state", "reload")}
    assert (reused.groupby(["set", "direction", "fraction"]).size() == GRID.repeats).all()
    per = sw[sw["host_alloc"] == "per offload"]
    assert set(per["direction"]) == {"d2h"} and (per["fraction"] == 1.0).all() and len(per) == 3 * GRID.repeats
    paged = sw[sw["host_alloc"] == "pageable"]  # NeMo RL's move_optimizer, verl's FSDP offload: .to() per tensor
    assert set(zip(paged["set"], paged["leg"])) == {("train_state", "offload"), ("train_state", "reload")}
    assert (paged["fraction"] == 1.0).all() and len(paged) == 2 * GRID.repeats
    full = reused[(reused["set"] == "engine_weights") & (reused["fraction"] == 1.0)]
    assert (full["bytes"] == TINY.params * 2).all()
    sy = table[table["move"] == "sync"]
    assert set(sy["direction"]) == {"d2d", "d2h", "h2d"} and len(sy) == 3 * 2 * GRID.repeats
    fit = fit_moves(table, host_bw=64e9)
    assert {("sleepwake", "all", "d2h"), ("sleepwake", "all", "h2d"), ("sync", "weights", "d2d")} <= set(
        zip(fit["move"], fit["set"], fit["direction"]))
    assert "all" not in set(fit.loc[fit["move"] == "sync", "set"])  # one set: nothing to pool
    pageable = fit["set"] == "train_state (pageable)"
    assert set(fit.loc[pageable, "direction"]) == {"d2h", "h2d"} and (fit.loc[pageable, "points"] == 1).all()
    assert fit.loc[pageable, "fixed_s"].isna().all() and (fit.loc[pageable, "gib_s"] > 0).all()  # one size: a rate
    per_set = (fit["set"] != "all") & ~pageable
    assert (fit.loc[per_set, "points"] == 2).all() and (fit.loc[fit["set"] == "all", "points"] == 6).all()  # 2 x 3 sets
    np.testing.assert_allclose(fit["eff_vs_host_bw"], fit["gib_s"] * GiB / 64e9)  # NaN where the rate is


def test_fit_recovers_fixed_cost_and_rate():
    x = np.array([1, 2, 4, 8] * 2, dtype=float) * GiB
    fixed, rate, r2 = fit_line(x, 0.05 + x / (20 * GiB))
    assert fixed == pytest.approx(0.05) and rate == pytest.approx(20) and r2 == pytest.approx(1)
    fixed, rate, _ = fit_line(x, -0.01 + x / (10 * GiB))  # a negative intercept: held at 0, through the origin
    assert fixed == 0 and rate == pytest.approx(10, rel=0.05)
    fixed, rate, r2 = fit_line(np.full(3, GiB), np.full(3, 0.5))
    assert np.isnan(fixed) and rate == pytest.approx(2) and np.isnan(r2)


def test_bad_moves_are_one_line_errors():
    assert _moves("sync, sleepwake,sync") == ("sync", "sleepwake")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown move"):
        _moves("sleep")
    with pytest.raises(ConfigError, match="unknown move"):
        run_moves(hf_config(TINY), ("nap",), GRID)
    with pytest.raises(ConfigError, match="fractions"):
        MoveGrid(fractions=(0.0, 1.0))


def test_collect_gathers_the_move_stages(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    table = run_moves(hf_config(TINY), ("sleepwake", "sync"), GRID, "cpu", "qwen3-moe-tiny", log=lambda _m: None)
    for move in ("sleepwake", "sync"):
        d = tmp_path / "stages" / f"moves-qwen3-moe-tiny--{move}"
        d.mkdir(parents=True)
        part = table[table["move"] == move]
        part.to_csv(d / "moves.csv", index=False)
        fit_moves(part).to_csv(d / "moves_fit.csv", index=False)
    spec = importlib.util.spec_from_file_location("gpu_collect", Path(__file__).resolve().parents[2] / "scripts" / "gpu_collect.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.collect(tmp_path)
    import pandas as pd

    assert len(pd.read_csv(tmp_path / "gpu_moves.csv")) == len(table)
    assert set(pd.read_csv(tmp_path / "gpu_moves_fit.csv")["move"]) == {"sleepwake", "sync"}
    summary = json.loads((tmp_path / "gpu_summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert set(summary["host_moves"]) == {"qwen3-moe-tiny/sleepwake/all/d2h", "qwen3-moe-tiny/sleepwake/all/h2d",
                                          "qwen3-moe-tiny/sync/weights/d2d", "qwen3-moe-tiny/sync/weights/d2h",
                                          "qwen3-moe-tiny/sync/weights/h2d"}
