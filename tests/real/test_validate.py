"""The predicted-vs-measured loop at tiny size: profile -> fit -> simulate + run -> table."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from oppo_real.config import RealConfig
from oppo_real.profiling.engine_ops import ProfileGrid, fit, run_profile
from oppo_real.validation.mirror import mirror_config, mirror_trace
from oppo_real.validation.validate import COMPONENT_COLUMNS, VALIDATION_COLUMNS, validate
from oppo_real.validation.validation_plots import plot_parity
from oppo_sim.core.policies import make_policy
from oppo_sim.hw.fitting.profiles import load_profile, save_profile
from oppo_sim.traces.trace import Trace

TRACE = Trace.from_arrays([10] * 8, [4, 6, 40, 5, 7, 60, 3, 8], name="tail")


def test_profile_fit_roundtrip(models, tmp_path):
    grid = ProfileGrid(decode_batch=(1, 4), decode_kv=(16,), prefill_new=(8, 64), prefill_ctx=(0, 32),
                       train_batch=(2,), train_len=(16, 32), repeats=2, sync_repeats=2)
    table = run_profile(models, "torch", grid, cores=None, log=lambda _m: None)
    assert set(table["op"]) == {"decode", "prefill", "train", "sync"}
    assert (table["seconds"] > 0).all() and (table["flops"] >= 0).all()
    hw, report = fit(table)
    assert set(report["op"]) == {"decode", "prefill", "train", "sync"}
    save_profile(hw, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == hw


def test_mirror_matches_the_real_requests(models):
    cfg = RealConfig(batch=4, steps=2, max_response=32, length_scale=0.5)
    t = mirror_trace(cfg, TRACE, 8)
    assert list(t.response_tokens) == [max(1, min(32, round(x * 0.5))) for x in TRACE.response_tokens]
    from oppo_real.models.task import PromptSampler

    assert list(t.prompt_tokens) == [len(p) for p in PromptSampler(cfg.task, seed=cfg.seed).sample(8)]
    sim_cfg = mirror_config(cfg, __import__("oppo_sim.hw.devices.hardware", fromlist=["get_hardware"]).get_hardware("h100-sxm"), models)
    assert sim_cfg.placement.pool_of("reward") == "score" and sim_cfg.placement.pool_of("train") == "main"
    assert sim_cfg.padded_batches and sim_cfg.stream_batching
    # every engine setting comes from the real run's configuration, the KV cache included
    e = cfg.engine
    assert sim_cfg.engine.block_size == e.block_size and sim_cfg.engine.max_num_seqs == e.max_num_seqs
    assert sim_cfg.engine.num_gpu_blocks_override == e.kv_cache_bytes // (e.block_size * sim_cfg.models()["generate"].kv_bytes_per_token())


def test_validate_table_has_every_column(models, tmp_path):
    grid = ProfileGrid(decode_batch=(1, 4), decode_kv=(16,), prefill_new=(8, 64), prefill_ctx=(0,),
                       train_batch=(2,), train_len=(16, 32), repeats=2, sync_repeats=2)
    hw, _ = fit(run_profile(models, "torch", grid, cores=None, log=lambda _m: None))
    cfg = RealConfig(batch=4, steps=3, backend="torch", workers="local", max_response=32, length_scale=0.5,
                     cache_dir=str(models.root.parent), main_cores=None, score_cores=None)
    names = ("baseline", "dynamic-delta", "oppo")
    v = validate(cfg, {n: make_policy(n, chunk=4, delta=2) for n in names}, hw, TRACE, warmup=1, repeat=2, log=lambda _m: None)
    assert list(v.table.columns) == VALIDATION_COLUMNS
    assert len(v.table) == 3 and (v.table["runs"] == 2).all()
    assert v.table[[c for c in VALIDATION_COLUMNS if c != "decision_diff"]].notna().all().all()
    # forced lengths and the run's own rewards: the simulator decides exactly as the real run did
    assert (v.table["decision_agreement"] == 1.0).all(), v.table[["policy", "decision_agreement", "decision_diff"]]
    assert v.table["pred_speedup"].iloc[0] == 1.0 and v.table["meas_speedup"].iloc[0] == 1.0
    assert list(v.components.columns) == COMPONENT_COLUMNS and len(v.components) == 3 * 5
    h = v.headline()
    assert all(math.isfinite(x) for x in h.values())
    assert isinstance(v.table, pd.DataFrame)
    plot_parity(v).savefig(tmp_path / "parity.png")
    steps = v.runs_table("steps")  # what validate writes as steps.csv: every run, both sides
    assert len(steps) == 3 * 2 * 2 * cfg.steps
    assert set(steps["side"]) == {"predicted", "measured"} and set(steps["run"]) == {0, 1}
    per = steps.groupby(["policy", "side", "run"])["step"].apply(list)
    assert all(x == list(range(cfg.steps)) for x in per)
    tl = v.runs_table("timeline")
    assert {"activity", "start", "end", "policy", "run", "side"} <= set(tl.columns) and (tl["end"] >= tl["start"]).all()


def test_decode_profile_times_the_steady_state(models):
    from pathlib import Path

    from oppo_real.profiling.engine_ops import model_spec, profile_decode
    from oppo_real.profiling.gpu_model_error import gpu_grid
    from oppo_sim.hw.costs.costmodel import CostModel

    grid = ProfileGrid(decode_batch=(2,), decode_kv=(16,), repeats=3, decode_warm=4, sync_repeats=1)
    rows = [r for r in profile_decode(Path(models.actor), "torch", grid, None, lambda _m: None) if r["op"] == "decode"]
    assert len(rows) == 3  # the timed iterations only, after the prefill and the 4 warm ones
    flops, nbytes = CostModel.decode_work(model_spec(Path(models.actor)), 2, 2 * (16 + 1 + 4 + 3 // 2))
    assert all(r["flops"] == flops and r["bytes"] == nbytes for r in rows)  # priced at the timed iterations' KV
    assert gpu_grid().decode_warm > gpu_grid().repeats  # on a GPU most of a grid point is spent reaching steady state


def test_components_attribute_the_same_work_on_both_sides(models):
    """One attribution: critic values and the actor's log-probs are scoring in the simulator and in the real
    run (whose train worker computes them before its update), the update is training, the sync is sync; both
    sides report the same components."""
    from oppo_real.executor.runner import run_real
    from oppo_real.validation.run_metrics import (
        COMPONENT_WORK,
        COMPONENTS,
        attribution,
        measure,
    )
    from oppo_sim.hw.devices.hardware import get_hardware
    from oppo_sim.pipeline.simulate import simulate

    cfg = RealConfig(batch=4, steps=2, backend="torch", workers="local", max_response=32, length_scale=0.5,
                     cache_dir=str(models.root.parent), main_cores=None, score_cores=None)
    pol = make_policy("baseline")
    real = run_real(cfg, pol, TRACE)
    sim = simulate(mirror_trace(cfg, TRACE, 8, real.rollouts), pol, mirror_config(cfg, get_hardware("h100-sxm"), models))
    assert set(measure(sim, 0)) == set(measure(real, 0)) >= set(COMPONENTS)
    a, b = attribution(sim), attribution(real)
    work_of = {act: c for c, acts in COMPONENT_WORK.items() for act in acts}  # the activities each component prices
    both = [("generate", "generate"), ("score", "reward"), ("score", "reference"), ("score", "critic"),
            ("score", "logprob"), ("train", "actor"), ("sync", "sync")]
    assert [work_of[act] for act, _ in both].count("scoring_s") == 4
    for work in both:
        comp = work_of[work[0]]
        assert a.get(work) == {comp}, ("simulated", work, a.get(work))
        assert b.get(work) == {comp}, ("measured", work, b.get(work))
    # the real scoring component holds the train worker's critic and log-prob passes: it ends where they end
    tl, st = real.timeline, real.steps
    for r in st.itertuples(index=False):
        passes = tl[(tl["step"] == r.step) & tl["role"].isin(["critic", "logprob"]) & (tl["activity"] == "score")]
        assert len(passes) == 2
        assert passes["end"].max() == pytest.approx(r.start + r.generation_s + r.scoring_s, abs=1e-6)


def test_mirror_of_a_grpo_run_shares_group_prompts_and_carries_the_algorithm(models):
    from oppo_sim.core.algorithms import Algorithm
    from oppo_sim.hw.devices.hardware import get_hardware

    algo = Algorithm("grpo", n=4, reward="rule")
    cfg = RealConfig(batch=2, steps=2, max_response=32, algorithm=algo)
    t = mirror_trace(cfg, TRACE, 8)
    from oppo_real.models.task import PromptSampler

    two = [len(p) for p in PromptSampler(cfg.task, seed=cfg.seed).sample(2)]
    assert list(t.prompt_tokens) == [two[0]] * 4 + [two[1]] * 4  # one prompt per group, drawn in group order
    assert mirror_config(cfg, get_hardware("h100-sxm"), models).algorithm == algo


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_validate_a_group_run(models, name):
    """`validate` under grpo and dapo (one-token responses: 0/1 rule rewards, so dapo drops groups): the
    mirrored simulation decides as the real run did -- dropped groups included (their samples carry reward
    0 in the mirrored trace, all equal, so the simulator drops them too)."""
    from oppo_sim.core.algorithms import Algorithm

    grid = ProfileGrid(decode_batch=(1, 4), decode_kv=(16,), prefill_new=(8, 64), prefill_ctx=(0,),
                       train_batch=(2,), train_len=(16, 32), repeats=2, sync_repeats=2)
    hw, _ = fit(run_profile(models, "torch", grid, cores=None, log=lambda _m: None))
    cfg = RealConfig(batch=2, steps=3, backend="torch", workers="local", max_response=1 if name == "dapo" else 32,
                     length_scale=0.5, cache_dir=str(models.root.parent), main_cores=None, score_cores=None,
                     algorithm=Algorithm(name, n=4, reward="rule"))
    trace = Trace.from_arrays([10] * 64, [4, 6, 40, 5, 7, 60, 3, 8] * 8, name="tail")
    v = validate(cfg, {n: make_policy(n, chunk=4, delta=2) for n in ("baseline", "oppo")}, hw, trace, warmup=1, repeat=1,
                 log=lambda _m: None)
    assert (v.table["decision_agreement"] == 1.0).all(), v.table[["policy", "decision_agreement", "decision_diff"]]
