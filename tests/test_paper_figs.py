"""Paper-figure scripts: each simulator figure's ``main(["--quick", "--out", tmp])`` writes a PNG and a CSV
with the expected columns; ``make_all`` finds the scripts and knows which need the real-engine stack."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

PAPER_FIGS = Path(__file__).resolve().parents[1] / "paper_figs"
REASONING = "servegen_deepseek_r1_sampled"

FIGURES = {
    "fig_speedup": {"trace", "policy", "label", "steps", "step_time_s", "samples_per_s", "speedup"},
    "fig_utilization": {"trace", "scope", "baseline_util", "oppo_util", "ratio"},
    "fig_chunk_ucurve": {"engine", "variant", "policy", "chunk", "best_for_variant", "step_time_s", "samples_per_s", "speedup",
                         "exposed_scoring_s", "utilization_score"},
    "fig_delta_ablation": {"run", "policy", "kind", "samples_per_s", "speedup", "staleness_mean", "staleness_max",
                           "delta_mean"},
    "fig_timelines": {"policy", "kind", "pool", "devices", "activity", "step", "start", "end"},
    "paper_vs_ours": {"group", "quantity", "setting", "paper", "paper_low", "paper_high", "ours", "unit", "difference",
                      "agrees", "assumptions", "why_differs", "trace"},
    "published_runs": {"key", "framework", "model", "gpu", "devices", "nodes", "placement", "batch", "n", "algorithm",
                       "status", "published_step_s", "predicted_step_s", "error_pct", "assumptions", "source",
                       "version"},
}


def _load(name: str, monkeypatch):
    monkeypatch.syspath_prepend(str(PAPER_FIGS))  # the scripts import their sibling `common`
    spec = importlib.util.spec_from_file_location(f"_paper_figs_{name}", PAPER_FIGS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look their module up while executing
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_script_quick(name, tmp_path, monkeypatch, capsys):
    mod = _load(name, monkeypatch)
    assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
    png, csv = tmp_path / f"{name}.png", tmp_path / f"{name}.csv"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size < 300_000
    df = pd.read_csv(csv)
    assert len(df) > 0
    assert FIGURES[name] <= set(df.columns), FIGURES[name] - set(df.columns)
    assert "wrote" in capsys.readouterr().out  # the table and the paths are printed


def test_speedup_numbers_are_sane(tmp_path, monkeypatch):
    mod = _load("fig_speedup", monkeypatch)
    mod.main(["--quick", "--out", str(tmp_path)])
    df = pd.read_csv(tmp_path / "fig_speedup.csv")
    assert set(df["policy"]) == {"baseline", "intra", "inter", "oppo"}
    assert (df.loc[df["policy"] == "baseline", "speedup"] == 1.0).all()
    assert df["trace"].nunique() >= 1 and (df["speedup"] > 0).all()


def test_no_output_folder_on_import(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in FIGURES:
        _load(name, monkeypatch)
    _load("common", monkeypatch)
    assert list(tmp_path.iterdir()) == []


def test_make_all_lists_scripts_and_detects_real_stack(tmp_path, monkeypatch):
    mod = _load("make_all", monkeypatch)
    names = [p.stem for p in mod.scripts()]
    assert set(FIGURES) <= set(names)
    assert not any(mod.needs_real_stack(PAPER_FIGS / f"{n}.py") for n in FIGURES)
    fake = tmp_path / "reward_curves.py"
    fake.write_text("import argparse\nfrom oppo_real import driver\n")
    assert mod.needs_real_stack(fake)
    with pytest.raises(SystemExit):
        mod.scripts(["no_such_figure"])


def test_make_all_skips_real_stack_without_torch(tmp_path, monkeypatch, capsys):
    mod = _load("make_all", monkeypatch)
    real = tmp_path / "reward_curves.py"
    real.write_text("import torch\n")
    monkeypatch.setattr(mod, "scripts", lambda only=(): [real])
    monkeypatch.setattr(mod, "torch_available", lambda: False)
    assert mod.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "skipping reward_curves.py" in out and "torch" in out


def test_make_all_sim_only_skips_reward_curves(tmp_path, monkeypatch, capsys):
    mod = _load("make_all", monkeypatch)
    real = tmp_path / "reward_curves.py"
    real.write_text("raise SystemExit(3)\n")  # known by name even without real-stack imports
    assert mod.needs_real_stack(real)
    monkeypatch.setattr(mod, "scripts", lambda only=(): [real])
    assert mod.main(["--sim-only"]) == 0
    assert "skipping reward_curves.py" in capsys.readouterr().out


def test_paper_vs_ours_has_every_reported_number(tmp_path, monkeypatch):
    mod = _load("paper_vs_ours", monkeypatch)
    readme = (PAPER_FIGS / "README.md").read_text()
    assert mod.main(["--quick", "--out", str(tmp_path)]) == 0
    assert (PAPER_FIGS / "README.md").read_text() == readme  # only a full run into paper_figs/out refreshes it
    df = pd.read_csv(tmp_path / "paper_vs_ours.csv", keep_default_na=False, na_values=[""])
    assert list(df.columns) == list(mod.COLUMNS)
    assert df["group"].value_counts().to_dict() == {"chunk-size curve": 6, "ablation": 3, "utilization": 9, "two nodes": 3}
    q = " | ".join(df["quantity"])
    for c in (100, 500, 3000):
        assert f"C={c}" in q
    for name in ("intra-step only", "inter-step only", "both (OPPO)"):
        assert f"speedup, {name}" in q
    papers = set(df["paper"].astype(str))
    for before, after in ((50.6, 71.0), (38.7, 73.6), (45.7, 67.3), (35.7, 74.1)):
        assert f"{before:g}" in papers and f"{after:g}" in papers
    assert {"498.3", "111.1"} <= papers and {"1.2–1.3x", "1.6–2.06x", "1.8–2.8x"} <= papers
    assert df["trace"].nunique() == 1 and df["trace"].iloc[0] == REASONING  # it ships, so no fallback
    assert (df["steps"] == 4).all() and df["ours"].astype(float).gt(0).all()
    assert df["assumptions"].str.contains("max response 8192").all()
    bad = df[~df["agrees"].astype(bool)]
    assert bad["why_differs"].astype(str).str.len().gt(20).all()  # every disagreement says why
    top = mod.largest_disagreements(pd.read_csv(tmp_path / "paper_vs_ours.csv"))
    assert len(top) <= 3 and top["group"].is_unique
    md = (tmp_path / "paper_vs_ours.md").read_text()
    assert md.count("\n| ") == len(df) + 1 and "Largest disagreements" in md


def test_chunk_curve_has_both_engines_and_marks_their_best_chunk(tmp_path, monkeypatch):
    mod = _load("fig_chunk_ucurve", monkeypatch)
    mod.main(["--quick", "--out", str(tmp_path)])
    df = pd.read_csv(tmp_path / "fig_chunk_ucurve.csv")
    assert set(df["engine"]) == {"static", "continuous"}
    paper = df[df["variant"] == "paper"]
    base = paper[paper["policy"] == "baseline"].set_index("engine")["step_time_s"]
    assert base["static"] > base["continuous"]  # padded static batches are slower than continuous batching
    best = paper[paper["best_for_variant"]]
    assert set(best["engine"]) >= {"static"} and best.groupby(["engine", "policy"]).size().max() == 1
    # static batching: C = ∞ (one unchunked generate) is slower than the best chunked call size for oppo (its
    # right arm: deferral waits for a call to return); intra alone gains little on host-bound generate forwards
    st = paper[(paper["engine"] == "static") & (paper["policy"] == "oppo")]
    assert st["speedup"].max() > float(st.loc[st["chunk"] == float("inf"), "speedup"].iloc[0])


RUNNABLE = ("nemo-v0.5-llama3.1-8b-16xh100", "oppo-paper-trl-2x4xa100")
"""Published runs whose model and GPU ids the tables have had from the start."""


def test_published_runs_subset_has_sources_and_assumptions(tmp_path, monkeypatch):
    mod = _load("published_runs", monkeypatch)
    assert mod.main(["--quick", "--out", str(tmp_path), "--only", ",".join(RUNNABLE)]) == 0
    df = pd.read_csv(tmp_path / "published_runs.csv")
    assert list(df["key"]) == list(RUNNABLE) and list(df.columns)[:len(mod.COLUMNS)] == list(mod.COLUMNS)
    assert (df["status"] == "ok").all() and df["predicted_step_s"].gt(0).all()
    assert (df["error_pct"] - 100 * (df["predicted_step_s"] / df["published_step_s"] - 1)).abs().max() < 0.01
    assert df["source"].str.startswith("https://").all() and df["version"].str.len().gt(5).all()
    assert df["assumptions"].str.contains("responses: ").all() and df["assumptions"].str.contains("prompts").all()
    nemo = df.set_index("key").loc[RUNNABLE[0]]
    assert nemo["mean_response_published"] and abs(nemo["mean_response"] - 1019) < 1e-9
    with pytest.raises(SystemExit):
        mod.select("no-such-run")


def test_every_published_run_states_its_source_and_assumptions(monkeypatch):
    data = _load("published_runs_data", monkeypatch)
    keys = [r.key for r in data.RUNS]
    assert len(keys) == len(set(keys)) >= 8
    for r in data.RUNS:
        assert r.source.startswith("https://") and r.version and r.published_step_s > 0, r.key
        assert r.response_note and r.notes and (r.prompt_note or r.trace), r.key
        assert (r.mean_response is not None) != (r.assumed_mean_response is not None) or r.trace, r.key


def test_synthetic_lengths_match_the_published_mean_after_the_cap(monkeypatch):
    mod = _load("published_runs", monkeypatch)
    run = next(r for r in mod.RUNS if r.key == "nemo-v0.5-qwen3-32b-32xh100")  # mean 3251 against a cap of ~3990
    cap = mod.response_cap(run)
    assert cap == 4096 - round(mod.derived_prompt_mean(run)) and 90 < mod.derived_prompt_mean(run) < 120
    median = mod.median_for_mean(run.mean_response, run.response_sigma, cap)
    assert abs(mod.capped_lognormal_mean(median, run.response_sigma, cap) - run.mean_response) < 0.5
    t = mod.run_trace(run, 20_000)
    assert t.response_tokens.max() == cap and abs(t.response_tokens.mean() / run.mean_response - 1) < 0.02
    assert t.prompt_tokens.max() <= run.max_prompt
    assert mod.median_for_mean(5000, 0.7, 4000) == float("inf")  # a mean at the cap: every response at the cap


def test_a_run_with_unknown_ids_is_kept_and_named(monkeypatch):
    from dataclasses import replace

    mod = _load("published_runs", monkeypatch)
    run = replace(next(r for r in mod.RUNS if r.key == RUNNABLE[0]), gpu="no-such-gpu", model="no-such-model")
    row = mod.simulate_run(run, steps=1)
    assert row["status"] == "needs model no-such-model, GPU no-such-gpu"
    assert pd.isna(row["predicted_step_s"]) and pd.isna(row["error_pct"]) and row["source"] == run.source


def test_calibration_is_fitted_on_one_framework_and_reported_on_the_others(monkeypatch):
    mod = _load("published_runs", monkeypatch)
    df = pd.DataFrame({"framework": ["NeMo RL v0.5", "NeMo RL v0.4", "verl", "OpenRLHF", "verl"],
                       "status": ["ok", "ok", "ok", "ok", "needs GPU h20"],
                       "published_step_s": [100.0, 90.0, 200.0, 50.0, 70.0],
                       "predicted_step_s": [80.0, 60.0, 100.0, 50.0, float("nan")]})
    out = mod.calibrate(df)
    assert list(out["calibration"]) == ["fit", "fit", "held out", "held out", ""]
    assert out["calibration_factor"].iloc[0] == pytest.approx((100 / 80 + 90 / 60) / 2)  # median of the fitted two
    assert out.loc[:1, "calibrated_error_pct"].isna().all() and pd.isna(out.loc[4, "calibrated_error_pct"])
    assert out.loc[2, "calibrated_step_s"] == pytest.approx(100 * 1.375)
    assert out.loc[3, "calibrated_error_pct"] == pytest.approx(37.5)


def test_a_run_the_memory_check_refuses_is_timed_past_it_and_marked(monkeypatch):
    mod = _load("published_runs", monkeypatch)
    run = next(r for r in mod.RUNS if r.key == "openrlhf-ray-vllm-llama2-13b-8xa800")
    assert run.optimizer_offload == 1.0  # --adam_offload, as the repository's scripts: it fits
    row = mod.simulate_run(dataclasses.replace(run, optimizer_offload=0.0), steps=1)  # without it, it does not
    assert row["status"] == "ok, past the memory check" and "does not fit" in row["memory_check"]
    assert row["memory"].startswith("ZeRO-3") and row["predicted_step_s"] > 0
    fits = mod.simulate_run(next(r for r in mod.RUNS if r.key == RUNNABLE[0]), steps=1)
    assert fits["status"] == "ok" and fits["memory_check"] == "fits"


def test_the_openrlhf_record_agrees_with_the_openrlhf_reader(monkeypatch):
    """The 70B benchmark row, written by hand from the repository's 70B script, against ``--from-openrlhf``."""
    from oppo_sim.frameworks.openrlhf import translate_openrlhf

    mod = _load("published_runs", monkeypatch)
    run = next(r for r in mod.RUNS if r.key == "openrlhf-ray-vllm-llama2-70b-16xa800")
    script = ("--ref_num_nodes 1 --ref_num_gpus_per_node 2 --reward_num_nodes 1 --reward_num_gpus_per_node 2 "
              "--critic_num_nodes 1 --critic_num_gpus_per_node 4 --actor_num_nodes 1 --actor_num_gpus_per_node 4 "
              "--vllm_num_engines 2 --vllm_tensor_parallel_size 2 --pretrain meta-llama/Llama-2-70b-hf "
              "--reward_pretrain meta-llama/Llama-2-70b-hf --train_batch_size 128 --micro_rollout_batch_size 4 "
              "--rollout_batch_size 1024 --max_epochs 1 --prompt_max_len 1024 --generate_max_len 1024 "
              "--zero_stage 3 --gradient_checkpointing --adam_offload\n")  # a line break: arguments, not a file name
    got = translate_openrlhf(script).args
    args = dict(zip(*[iter(a for a in got if a not in ("--truncate-prompt", "--padded-micro-batches"))] * 2))
    cfg = mod.sim_config(run, steps=1)
    assert ("--padded-micro-batches" in got) == cfg.padded_micro_batches  # no --packing_samples at that commit
    assert int(args["--batch"]) == cfg.batch and int(args["--n"]) == cfg.algorithm.n
    assert int(args["--minibatches"]) == cfg.minibatches and int(args["--ppo-epochs"]) == cfg.ppo_epochs
    assert int(args["--max-response"]) == cfg.max_response and int(args["--tp"]) == cfg.engine.tp
    assert args["--actor"] == run.model and args["--recompute"] == cfg.train_memory.recompute
    assert args["--placement"] == "split " + "+".join(str(p.devices) for p in cfg.placement.pools)
    assert float(args["--optimizer-offload"]) == cfg.trainer.optimizer_offload == 1.0


def test_a_verl_record_agrees_with_the_verl_reader(monkeypatch):
    """The 128-GPU fully-async page's colocated row, by hand from the recipe script, against ``--from-verl``."""
    from oppo_sim.frameworks.verl import translate_verl

    mod = _load("published_runs", monkeypatch)
    run = next(r for r in mod.RUNS if r.key == "verl-fullyasync-colocate-128xh20")
    overrides = ["data.max_prompt_length=2048", "data.max_response_length=28672", "data.train_batch_size=512",
                 "actor_rollout_ref.rollout.n=16", "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=False",
                 "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
                 "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
                 "actor_rollout_ref.rollout.gpu_memory_utilization=0.80",
                 "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
                 "actor_rollout_ref.model.enable_gradient_checkpointing=True",
                 "actor_rollout_ref.rollout.max_num_batched_tokens=30720",
                 "actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-7B", "trainer.n_gpus_per_node=8", "trainer.nnodes=16"]
    args = list(translate_verl(overrides).args)
    value = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--") and not args[i + 1].startswith("--")}
    cfg = mod.sim_config(run, steps=1)
    assert (int(value["--batch"]), int(value["--n"]), int(value["--minibatches"])) == (cfg.batch, cfg.algorithm.n,
                                                                                         cfg.minibatches)
    assert (int(value["--max-response"]), int(value["--tp"]), int(value["--sp"])) == (
        cfg.max_response, cfg.engine.tp, cfg.train_memory.sequence_parallel)
    assert float(value["--gpu-memory-utilization"]) == cfg.engine.gpu_memory_utilization
    assert int(value["--max-num-seqs"]) == cfg.engine.max_num_seqs
    assert int(value["--max-num-batched-tokens"]) == cfg.engine.max_num_batched_tokens
    assert (int(value["--devices"]), int(value["--nodes"])) == (cfg.placement.total_devices, cfg.nodes)
    assert value["--actor"] == run.model and value["--recompute"] == cfg.train_memory.recompute
    assert "--no-reference" in args and not cfg.algorithm.kl and value["--reward"] == "rule"


def test_an_assumption_the_source_contradicts_is_flagged(monkeypatch):
    """A made-up record: 100 sequences of 1,000 tokens of Llama-2-7B on 8 A800s (312 TFLOP/s each, dense bf16)."""
    from dataclasses import replace

    import numpy as np

    from oppo_sim.hw.models.lookup import get_model

    checks = _load("published_runs_checks", monkeypatch)
    data = _load("published_runs_data", monkeypatch)
    base = replace(next(r for r in data.RUNS if r.key == "openrlhf-deepspeed-llama2-7b-8xa800"), recompute="none")
    seqs = np.full(100, 1000.0)
    forward = 100 * get_model("llama-2-7b").forward_flops(1000)  # the matmuls and causal attention of each sequence
    capacity = 8 * 312e12
    fast = replace(base, stages=replace(base.stages, training_s=3 * forward / capacity / 1.5, scoring_s=forward / capacity))
    pct = checks.implied_peak_pct(fast, seqs, ("reward", "reference", "critic", "logprob"))
    assert pct["training"] == pytest.approx(150.0, rel=1e-9)  # 3 x forward in 2/3 of the time the peak needs
    assert pct["scoring"] == pytest.approx(300.0, rel=1e-9)  # three forwards (the reward model is timed apart)
    slow = replace(base, stages=replace(base.stages, training_s=3 * forward / capacity * 2, scoring_s=None))
    pct = checks.implied_peak_pct(slow, seqs, ("logprob",), steps=1)
    assert pct["training"] == pytest.approx(50.0, rel=1e-9) and np.isnan(pct["scoring"])
    # full recomputation, as the source sets it, runs the decoder layers' forward once more (not the output layer)
    head = 100 * 1000 * 2.0 * get_model("llama-2-7b").head_params()
    pct = checks.implied_peak_pct(replace(slow, recompute="full"), seqs, ("logprob",), steps=1)
    assert pct["training"] == pytest.approx(50.0 * (4 * forward - head) / (3 * forward), rel=1e-9)
    assert checks.PEAK_LIMIT_PCT == 100.0


def test_the_changelog_ends_at_the_committed_table(monkeypatch):
    log = _load("published_changelog", monkeypatch)
    df = pd.read_csv(PAPER_FIGS / "out" / "published_runs.csv")
    ok = df[df["status"].str.startswith("ok")]
    last = log.CHANGES[-1]
    assert round(float(ok["error_pct"].abs().median()), 1) == last.median_after
    assert round(float(ok["error_pct"].abs().max()), 1) == last.worst_after
    assert all(c.kind in ("model", "record", "comparison") and c.date >= "2026-11-25" for c in log.CHANGES)


def test_a_nemo_rl_one_step_off_record_agrees_with_the_nemo_rl_reader(monkeypatch):
    """NeMo RL's one-step-off Llama-3.1-8B row against ``--from-nemo-rl`` on the test recipe modelled on the same
    recipe (its trainer's global batch set to the table's T-GBS, 512): the async schedule, its staleness, the pools,
    the engine's memory fraction and the host-held reference."""
    from framework_helpers import config_of

    from oppo_sim.frameworks.nemo_rl import translate_nemo_rl

    mod = _load("published_runs", monkeypatch)
    run = next(r for r in mod.RUNS if r.key == "nemo-v0.5-llama3.1-8b-16xh100-1off")
    recipe = (Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl" / "recipes" / "llm" / "performance"
              / "grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml")
    read = config_of("--from-nemo-rl", str(recipe), "--from-nemo-rl", "policy.train_global_batch_size=512")
    cfg = mod.sim_config(run, steps=1)
    assert (run.policy, run.staleness) == ("async", 1) and mod.run_policy(run).label() == "async(k=1, in-flight)"
    assert "--in-flight-weight-updates" in translate_nemo_rl([str(recipe)]).args  # as the reader reads the recipe
    assert [(p.name, p.devices) for p in cfg.placement.pools] == [("gen", 8), ("train", 8)]
    assert [p.devices for p in read.placement.pools] == [8, 8]
    assert cfg.placement.pool_of("reference") == cfg.placement.train == "train"
    for field in ("batch", "minibatches", "reference_on_host", "nodes"):
        assert getattr(cfg, field) == getattr(read, field), field
    assert (cfg.algorithm.n, cfg.engine.tp, cfg.engine.gpu_memory_utilization) == (
        read.algorithm.n, read.engine.tp, read.engine.gpu_memory_utilization)
    assert (cfg.trainer.backend, cfg.trainer.tp, cfg.trainer.pp) == (read.trainer.backend, read.trainer.tp, read.trainer.pp)


def test_an_async_run_is_timed_at_its_steady_state(monkeypatch):
    """A baseline run's step is the median of its steps; an async run's, the mean of its steady state: an even number
    of steps between the first (nothing to overlap yet) and the last (the pipeline drains)."""
    mod = _load("published_runs", monkeypatch)
    sync = next(r for r in mod.RUNS if r.key == "nemo-v0.5-llama3.1-8b-16xh100")
    off = next(r for r in mod.RUNS if r.key == "nemo-v0.5-llama3.1-8b-16xh100-1off")
    steps = pd.Series([150.0, 50.0, 90.0, 52.0, 88.0, 40.0])
    assert mod.step_seconds(sync, steps) == pytest.approx(70.0)
    assert mod.step_seconds(off, steps) == pytest.approx(70.0)  # (50 + 90 + 52 + 88) / 4: not the first, not the last
    assert (mod.sim_steps(sync, 3), mod.sim_steps(off, 3), mod.sim_steps(off, 4), mod.sim_steps(off, 1)) == (3, 6, 6, 4)
    row = mod.simulate_run(off, steps=1)
    assert row["status"] == "ok" and row["policy"] == "async" and row["predicted_step_s"] > 0


def test_the_pretraining_check_prices_every_row_and_names_its_line(monkeypatch):
    mod = _load("pretrain_check", monkeypatch)
    rows = _load("pretrain_rows", monkeypatch)
    df = mod.check()
    assert len(df) == len(rows.ROWS) and (df["predicted_step_s"] > 0).all()
    assert df["source"].str.contains(rows.COMMIT).all() and df["source"].str.contains("#L").all()
    assert set(df["gpu"]) == {"h100-sxm", "b200", "gb200"}
    # more GPUs of the same kind and layout for one model: the step is shorter (the trainer scales, never stalls)
    one = rows.ROWS[2]
    assert mod.step_seconds(dataclasses.replace(one, gpus=128)) < mod.step_seconds(one)


def test_the_length_a_scoring_stage_implies(monkeypatch):
    """The fixed point of published_implied: a stand-in simulation whose scoring stage is linear in a sequence's
    tokens (20 ms a token a sequence) and whose training is three times it; the implied mean makes the scoring stage
    the published one, and the other stages are reported against their own published times."""
    from dataclasses import replace

    mod = _load("published_implied", monkeypatch)
    keys = [r.key for r in mod.candidates()]
    assert keys and all(k.startswith("verl-") for k in keys)  # assumed means, published old_log_prob
    run = next(r for r in mod.candidates() if r.key == "verl-fullyasync-colocate-32xh20")
    prompt = mod.derived_prompt_mean(run)
    calls = []

    def fake(r, steps):
        calls.append(r.assumed_mean_response)
        score = 2e-2 * (prompt + r.assumed_mean_response)
        return 10 * score, {"generation": score, "scoring": score, "training": 3 * score}

    monkeypatch.setattr(mod, "_simulate", fake)
    row = mod.implied(run)
    want = run.stages.scoring_s / 2e-2 - prompt  # 5,235 tokens, under the 28,672 cap
    assert row["implied_mean_response"] == pytest.approx(want) and calls[0] == run.assumed_mean_response
    assert len(calls) == mod.ROUNDS + 1
    assert row["scoring_error_pct"] == pytest.approx(0.0, abs=1e-9)
    assert row["training_error_pct"] == pytest.approx(100 * (3 * run.stages.scoring_s / run.stages.training_s - 1))
    capped = mod.implied(replace(run, stages=replace(run.stages, scoring_s=1e9)))  # beyond the response cap
    assert capped["implied_mean_response"] == pytest.approx(0.999 * mod.response_cap(run))
