"""The profile's GPU-facing parts as the CPU sees them: the torch-graph engine profiled, the kernel-share
columns present but NaN with the reason, the held-out fit report computed on grid points the fit never saw,
the optimizer-shard rule, and the arithmetic of the kernel total."""

from __future__ import annotations

import argparse
import math
from types import SimpleNamespace

import pandas as pd
import pytest

from oppo_real.commands.profile_cmd import _ops
from oppo_real.profiling.engine_ops import ProfileGrid, fittable, run_profile
from oppo_real.profiling.gpu_model_error import heldout_fit
from oppo_real.profiling.kernel_share import NO_CUDA, device_seconds, measure_kernel_share
from oppo_real.profiling.train_ops import optimizer_fraction
from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.fitting.holdout import holdout_mask

GRID = ProfileGrid(decode_batch=(1, 2, 4), decode_kv=(8, 16, 32), prefill_new=(8, 32), prefill_ctx=(0, 16),
                   train_batch=(2,), train_len=(16,), repeats=2, sync_repeats=2)


@pytest.fixture(scope="module")
def table(models):
    return run_profile(models, "torch-graph", GRID, cores=None, log=lambda _m: None, ops=("decode", "sync"))


def test_decode_rows_carry_an_unmeasured_kernel_share_on_the_cpu(table):
    assert set(table["op"]) == {"decode", "sync"}
    dec = table[table["op"] == "decode"]
    assert len(dec) == 9 * GRID.repeats and (dec["seconds"] > 0).all()
    assert dec["kernel_share"].isna().all() and dec["kernel_s"].isna().all()
    assert (dec["kernel_note"] == NO_CUDA).all()
    assert set(table.loc[table["op"] == "sync", "path"]) == {"device"}  # the host path is timed on a GPU only


def test_heldout_report_of_a_cpu_profile_uses_points_outside_the_fit(table):
    rep = heldout_fit(table, None)
    dec = rep[rep["op"] == "decode"].set_index("split")
    assert dec.loc["fit", "points"] == 5 and dec.loc["held-out", "points"] == 4  # 3 x 3 checkerboard
    assert math.isfinite(dec.loc["held-out", "median_abs_err_pct"])
    held = holdout_mask(table)
    d = table.assign(held=held)[table["op"] == "decode"]
    fit_pts = set(map(tuple, d.loc[~d.held, ["batch", "kv"]].to_numpy()))
    out_pts = set(map(tuple, d.loc[d.held, ["batch", "kv"]].to_numpy()))
    assert fit_pts and out_pts and not fit_pts & out_pts


def test_host_syncs_are_reported_not_fitted():
    t = pd.DataFrame({"op": ["sync"] * 4, "path": ["device", "device", "host", "host"], "seconds": [1, 1, 2, 2]})
    assert fittable(t)["path"].tolist() == ["device", "device"]
    assert len(fittable(t.drop(columns="path"))) == 4


def test_kernel_total_sums_the_gpu_events_only():
    ev = [SimpleNamespace(device_type="DeviceType.CUDA", self_device_time_total=250.0),
          SimpleNamespace(device_type="DeviceType.CPU", self_device_time_total=900.0),
          SimpleNamespace(device_type="DeviceType.CUDA", self_device_time_total=750.0)]
    assert device_seconds(ev) == pytest.approx(1e-3)
    share = measure_kernel_share(lambda: None, 3, "cpu")
    assert math.isnan(share.share) and share.note == NO_CUDA


def test_optimizer_is_sharded_only_where_full_adam_does_not_fit():
    gb = 80 * 2**30  # an 80 GB H100 reports 79.2 GiB; the rule has margin either way
    assert optimizer_fraction(int(1.5e9), gb) == 1.0 and optimizer_fraction(int(3.1e9), gb) == 1.0
    f = optimizer_fraction(int(7.6e9), gb)
    assert 0.1 < f < 0.2 and f * 7.6e9 * 16 == pytest.approx(0.2 * gb)
    assert optimizer_fraction(int(7.6e9), None) == 1.0  # the CPU: always full


def test_ops_option_and_unknown_ops():
    assert _ops("decode, sync,decode") == ("decode", "sync")
    with pytest.raises(argparse.ArgumentTypeError, match="known: decode"):
        _ops("decode,adam")
    with pytest.raises(ConfigError, match="unknown profile op"):
        run_profile(SimpleNamespace(), "torch", GRID, cores=None, ops=("nope",))


def test_training_rows_time_the_optimizer_on_a_shard_when_adam_does_not_fit(models, monkeypatch):
    """Forced on the CPU by stating a small device: bf16 weights, forward and backward over the whole model,
    Adam on a fraction f of the parameters charged as its time / f; the rows say so."""
    from pathlib import Path

    import oppo_real.profiling.train_ops as train_ops

    grid = ProfileGrid(train_batch=(2,), train_len=(16,), repeats=2)
    full = train_ops.profile_train(Path(models.actor), Path(models.critic), grid, lambda _m: None)
    assert {r["optimizer"] for r in full} == {"full"} and {r["role"] for r in full} == {"actor", "critic"}
    monkeypatch.setattr(train_ops, "_device_bytes", lambda _device: 4e6)
    rows = train_ops.profile_train(Path(models.actor), Path(models.critic), grid, lambda _m: None)
    assert len(rows) == 2 * grid.repeats
    for r in rows:
        f = float(r["optimizer"].split("f=")[1])
        assert 0 < f < 0.5 and r["seconds"] == pytest.approx(r["fwd_bwd_s"] + r["optim_s"])
        assert r["op"] == "train" and r["flops"] > 0
