"""The mixture-of-experts profile shape: the random-weight model built from it has exactly the shape's
parameters (the 2.8B one counted on the meta device), and at tiny size the profile's decode and prefill
code path runs end to end on the CPU on the graph engine, rows priced with the experts they touch."""

from __future__ import annotations

import argparse

import pytest

from oppo_real.models.shaped import build_shaped_models, family, meta_param_counts
from oppo_real.profiling.engine_ops import ProfileGrid, fit, run_profile
from oppo_real.profiling.model_shape import PROFILE_SHAPES, model_spec, profile_shape
from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.models.lookup import get_model

GRID = ProfileGrid(decode_batch=(1, 4, 16), decode_kv=(8, 24), prefill_new=(4, 32), prefill_ctx=(0, 8), repeats=2)


def test_profile_shapes_resolve_and_build_with_their_parameter_count():
    moe = profile_shape("qwen3-moe-2.8b-a0.5b")
    assert moe.moe and moe.experts == 128 and moe.experts_per_token == 8 and family(moe) == "qwen3_moe"
    assert 1e9 < moe.params < 3e9 and moe.active_params < moe.params / 4
    assert meta_param_counts(moe)[0] == moe.params  # the built architecture is the shape the cost model prices
    assert profile_shape("qwen2.5-1.5b") == get_model("qwen2.5-1.5b")  # dense shapes: the model table's
    with pytest.raises(ConfigError, match="unknown model"):
        profile_shape("no-such-shape")
    with pytest.raises(ConfigError, match="only Qwen3-MoE-like"):
        family(get_model("deepseek-v3"))


@pytest.fixture(scope="module")
def moe_paths(tmp_path_factory):
    return build_shaped_models(tmp_path_factory.mktemp("moe"), profile_shape("qwen3-moe-tiny"))


def test_tiny_moe_profile_runs_decode_and_prefill_end_to_end(moe_paths):
    spec = model_spec(moe_paths.actor)
    assert spec.moe and spec.experts == 16 and spec.params == profile_shape("qwen3-moe-tiny").params
    table = run_profile(moe_paths, "torch-graph", GRID, cores=None, log=lambda _m: None, ops=("decode", "prefill"))
    dec = table[table["op"] == "decode"]
    assert len(dec) == 6 * GRID.repeats and (dec["seconds"] > 0).all()
    assert sorted(set(dec["tokens_per_expert"])) == [b * 4 / 16 for b in GRID.decode_batch]
    assert (dec["experts_impl"] != "").all()
    # one token touches top-k experts, sixteen nearly all of them: the priced weight reads grow with the batch
    by_b = dec[dec["kv"] == 8].groupby("batch")["experts_touched"].first()
    assert by_b[1] == pytest.approx(4.0) and by_b[1] < by_b[4] < by_b[16] < 16
    assert (table.loc[table["op"] == "prefill", "experts_touched"] > 0).all()
    hw, report = fit(table)
    assert set(report["op"]) == {"decode", "prefill"}


def test_profile_command_takes_the_moe_shape(moe_paths, tmp_path, monkeypatch):
    from oppo_real.commands import profile_cmd

    built = []
    monkeypatch.setattr("oppo_real.models.shaped.build_shaped_models",
                        lambda cache, spec, device="cpu": built.append(spec) or moe_paths)
    a = argparse.Namespace(cache=str(tmp_path), shape="qwen3-moe-2.8b-a0.5b")
    assert profile_cmd._models(a, "cpu") is moe_paths
    assert built == [profile_shape("qwen3-moe-2.8b-a0.5b")] and "qwen3-moe-tiny" in PROFILE_SHAPES
