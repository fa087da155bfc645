"""`oppo-real validate --backend torch-static` at tiny size: the static torch decoder (calls of the step's C,
KV carried across calls) against the simulator's static engine -- same decisions, finite errors -- and
the pieces that connect them (profile with the per-call overhead, mirror, worker, CLI)."""

from __future__ import annotations

import math

import pytest

from oppo_real.config import RealConfig
from oppo_real.profiling.engine_ops import ProfileGrid
from oppo_real.profiling.static_decoder import (
    STATIC_CALL_OP,
    StaticProfileGrid,
    fit_static,
    load_static_params,
    run_static_profile,
)
from oppo_real.validation.mirror import mirror_config
from oppo_real.validation.validate import VALIDATION_COLUMNS, validate
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import make_policy
from oppo_sim.engine.factory import EngineKind
from oppo_sim.engine.static_params import StaticCostParams
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.traces.trace import Trace

TRACE = Trace.from_arrays([10] * 8, [4, 6, 40, 5, 7, 60, 3, 8], name="tail")
GRID = ProfileGrid(decode_batch=(1,), decode_kv=(16,), prefill_new=(8, 64), prefill_ctx=(0,), train_batch=(2,),
                   train_len=(16, 32), repeats=2, sync_repeats=2)
STATIC_GRID = StaticProfileGrid(batch=(1, 4), prompt=(8, 32), call_tokens=(3, 8), calls=2, repeats=1)


def static_cfg(**kw) -> RealConfig:
    base = dict(batch=4, steps=3, backend="torch-static", workers="local", max_response=32, length_scale=0.5,
                main_cores=None, score_cores=None)
    return RealConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def static_profile(models):
    table = run_static_profile(models, GRID, STATIC_GRID, cores=None, log=lambda _m: None)
    return table, *fit_static(table)


def test_config_knows_the_static_backend():
    assert static_cfg().static_engine and not static_cfg(backend="torch").static_engine
    assert static_cfg(gen_batch=3).gen_batch == 3
    with pytest.raises(ConfigError):
        static_cfg(backend="tensorrt")
    with pytest.raises(ConfigError):
        static_cfg(gen_batch=0)


def test_profile_covers_every_op_and_the_per_call_overhead(static_profile, tmp_path):
    from oppo_real.profiling.static_decoder import save_static_profile

    table, hw, params, report = static_profile
    assert set(table["op"]) == {"decode", "sync", "prefill", "train", STATIC_CALL_OP}
    assert (table["seconds"] > 0).all()
    assert set(report["op"]) == {"decode", "sync", "prefill", "train", STATIC_CALL_OP}
    assert params.call_overhead_s > 0
    save_static_profile(hw, params, tmp_path / "p.json")
    assert load_static_params(tmp_path / "p.json") == params


def test_mirror_runs_the_static_engine_with_the_profiled_overhead(models):
    hw = get_hardware("h100-sxm")
    sim = mirror_config(static_cfg(gen_batch=3), hw, models, static_cost=StaticCostParams(0.004))
    assert sim.engine_kind is EngineKind.STATIC
    assert sim.static.gen_batch == 3 and sim.static.carry_kv and sim.static.call_tokens is None
    assert sim.static_cost.call_overhead_s == 0.004
    assert mirror_config(static_cfg(backend="torch"), hw, models).engine_kind is EngineKind.CONTINUOUS


def test_gen_worker_sets_the_call_size_on_the_static_decoder_only(models):
    from oppo_real.workers.gen import GenWorker, GenWorkerConfig

    w = GenWorker(GenWorkerConfig(actor=str(models.actor), backend="torch-static", gen_batch=2, max_model_len=128))
    w.set_call_tokens(5)
    assert w.gen.call_tokens == 5 and w.gen.cfg.gen_batch == 2
    w.set_call_tokens(None)
    assert w.gen.call_tokens is None
    w.close()
    t = GenWorker(GenWorkerConfig(actor=str(models.actor), backend="torch", max_model_len=128))
    t.set_call_tokens(5)  # no calls in a per-request loop: a no-op
    t.close()


@pytest.mark.parametrize("gen_batch", [None, 3])
def test_validate_static_backend_makes_the_simulators_decisions(models, static_profile, gen_batch):
    _, hw, params, _ = static_profile
    cfg = static_cfg(gen_batch=gen_batch, cache_dir=str(models.root.parent))
    names = ("baseline", "intra", "dynamic-delta", "oppo")
    v = validate(cfg, {n: make_policy(n, chunk=4, delta=2) for n in names}, hw, TRACE, warmup=1, repeat=1,
                 log=lambda _m: None, static_cost=params)
    assert list(v.table.columns) == VALIDATION_COLUMNS and len(v.table) == len(names)
    # forced lengths, the run's own rewards, calls of the step's C: the same decisions, step for step
    assert (v.table["decision_agreement"] == 1.0).all(), v.table[["policy", "decision_agreement", "decision_diff"]]
    assert all(math.isfinite(x) for x in v.headline().values())
    assert (v.table["pred_step_s"] > 0).all() and (v.table["meas_step_s"] > 0).all()
