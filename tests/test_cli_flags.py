"""oppo-sim's options: every one states its default, each reaches the config or policy it names, a knob
that no chosen policy (or the chosen engine) uses is an error, and make_policy keeps explicit values."""

from __future__ import annotations

import argparse
import json

import pytest

from oppo_sim.cli import build_parser, main, subcommand_parsers
from oppo_sim.cli_policy import policy_options
from oppo_sim.cli_setup import sim_config
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import (
    Async,
    ChunkAutotune,
    DeltaRule,
    Inter,
    Intra,
    PartialRollout,
    make_policy,
)
from oppo_sim.engine.factory import EngineKind
from oppo_sim.engine.static_params import DEFAULT_CALL_OVERHEAD_S

SMALL = ["--steps", "3", "--batch", "16", "--actor", "qwen2.5-0.5b", "--reward", "qwen2.5-0.5b"]


def subparsers() -> dict[str, argparse.ArgumentParser]:
    return subcommand_parsers(build_parser())


def parse(*args: str) -> argparse.Namespace:
    return build_parser().parse_args(list(args))


def _shown(default) -> str:
    return ",".join(map(str, default)) if isinstance(default, (tuple, list)) else str(default)


# -- help: every option states its default -------------------------------------------------------------


def test_every_option_of_every_sub_command_has_help_that_states_its_default():
    subs = subparsers()
    assert {"run", "compare", "sweep", "plan", "replay", "traces"} <= set(subs)
    checked = 0
    for name, sp in subs.items():
        sp.format_help()  # every help string formats (no stray %)
        for act in sp._actions:
            if isinstance(act, argparse._HelpAction):
                continue
            where = f"{name} {'/'.join(act.option_strings)}"
            assert act.help and act.help.strip(), f"{where}: no help"
            if act.required:
                assert "required" in act.help, where
                continue
            assert "default" in act.help.lower(), f"{where}: help does not state the default: {act.help!r}"
            if act.default is not None and not isinstance(act.default, bool):
                assert "%(default)" in act.help or _shown(act.default) in act.help, f"{where}: {act.default!r} not in help"
            checked += 1
    assert checked > 100


def test_help_of_none_defaults_names_the_class_default():
    """Knobs default to None (not given) and their help names the default the policy / config takes."""
    run = subparsers()["run"]
    helps = {a.dest: a.help for a in run._actions}
    assert f"default {Intra.chunk}" in helps["chunk"]
    assert f"default {DeltaRule.window}" in helps["delta_window"]
    assert f"default {ChunkAutotune.every}" in helps["autotune_every"]
    assert str(DEFAULT_CALL_OVERHEAD_S) in helps["call_overhead"]
    assert "default 16384" in helps["max_num_batched_tokens"]


# -- each flag reaches the config / the policy ----------------------------------------------------------


@pytest.mark.parametrize("args, get, want", [
    (["--engine", "static"], lambda c: c.engine_kind, EngineKind.STATIC),
    ([], lambda c: c.engine_kind, EngineKind.CONTINUOUS),
    (["--max-num-seqs", "64"], lambda c: c.engine.max_num_seqs, 64),
    (["--max-num-batched-tokens", "4096"], lambda c: c.engine.max_num_batched_tokens, 4096),
    (["--gpu-memory-utilization", "0.8"], lambda c: c.engine.gpu_memory_utilization, 0.8),
    (["--gpu-mem-util", "0.7"], lambda c: c.engine.gpu_memory_utilization, 0.7),
    (["--no-enable-chunked-prefill"], lambda c: c.engine.enable_chunked_prefill, False),
    (["--no-enable-prefix-caching"], lambda c: c.engine.enable_prefix_caching, False),
    (["--long-prefill-token-threshold", "512"], lambda c: c.engine.long_prefill_token_threshold, 512),
    (["--block-size", "32"], lambda c: c.engine.block_size, 32),
    (["--num-gpu-blocks-override", "5000"], lambda c: c.engine.num_gpu_blocks_override, 5000),
    (["--tp", "1"], lambda c: c.engine.tp, 1),
    (["--engine", "static", "--gen-batch", "8"], lambda c: c.static.gen_batch, 8),
    (["--engine", "static", "--call-tokens", "128", "--policy", "inter"], lambda c: c.static.call_tokens, 128),
    (["--engine", "static", "--no-carry-kv"], lambda c: c.static.carry_kv, False),
    (["--engine", "static", "--call-overhead", "0.5"], lambda c: c.static_cost.call_overhead_s, 0.5),
    (["--engine", "static", "--call-overhead", "0"], lambda c: c.static_cost.call_overhead_s, 0.0),
    (["--no-stream-batching"], lambda c: c.stream_batching, False),
    (["--scorer-max-tokens", "1024"], lambda c: c.scorer_max_tokens, 1024),
    (["--padded-batches"], lambda c: c.padded_batches, True),
])
def test_engine_and_scoring_flags_reach_the_config(args, get, want):
    assert get(sim_config(parse("run", *args))) == want


def test_static_call_overhead_comes_from_the_profile_unless_given(tmp_path):
    from oppo_sim.hw.fitting.profiles import resolve_hardware, save_profile

    path = tmp_path / "p.json"
    save_profile(resolve_hardware("h200"), path, meta={"static": {"call_overhead_s": 0.125}})
    assert sim_config(parse("run", "--engine", "static", "--profile", str(path))).static_cost.call_overhead_s == 0.125
    assert sim_config(parse("run", "--engine", "static", "--gpu", str(path))).static_cost.call_overhead_s == 0.125
    given = parse("run", "--engine", "static", "--profile", str(path), "--call-overhead", "0.5")
    assert sim_config(given).static_cost.call_overhead_s == 0.5
    assert sim_config(parse("run", "--engine", "static")).static_cost.call_overhead_s == DEFAULT_CALL_OVERHEAD_S


def test_engine_settings_left_out_keep_the_config_defaults():
    from oppo_sim.pipeline.config import SimConfig

    cfg, ref = sim_config(parse("run")), SimConfig()
    assert (cfg.engine, cfg.static, cfg.static_cost) == (ref.engine, ref.static, ref.static_cost)
    assert (cfg.stream_batching, cfg.scorer_max_tokens, cfg.padded_batches) == (
        ref.stream_batching, ref.scorer_max_tokens, ref.padded_batches)


def _policy(*args: str):
    a = parse("run", *args)
    return make_policy(a.policy, **policy_options(a))


@pytest.mark.parametrize("args, get, want", [
    (["--policy", "intra", "--chunk", "256"], lambda p: p.chunk, 256),
    (["--policy", "inter", "--delta", "0"], lambda p: p.delta, 0),
    (["--policy", "oppo", "--delta", "12"], lambda p: p.rule.delta0, 12),
    (["--policy", "oppo", "--delta-min", "2"], lambda p: p.rule.delta_min, 2),
    (["--policy", "oppo", "--delta-max", "20"], lambda p: p.rule.delta_max, 20),
    (["--policy", "dynamic-delta", "--delta-window", "3"], lambda p: p.rule.window, 3),
    (["--policy", "dynamic-delta", "--delta-inc", "2"], lambda p: p.rule.inc, 2),
    (["--policy", "dynamic-delta", "--delta-dec", "0"], lambda p: p.rule.dec, 0),
    (["--policy", "dynamic-delta", "--delta-proportional"], lambda p: p.rule.proportional, True),
    (["--policy", "partial-rollout", "--budget", "64"], lambda p: p.budget, 64),
    (["--policy", "partial-rollout", "--delta", "3"], lambda p: p.delta, 3),
    (["--policy", "async", "--staleness", "3"], lambda p: p.staleness, 3),
    (["--policy", "chunk-autotune", "--chunk-candidates", "64,1024"], lambda p: p.candidates, (64, 1024)),
    (["--policy", "chunk-autotune", "--autotune-every", "7"], lambda p: p.every, 7),
    (["--policy", "chunk-autotune", "--delta-window", "2"], lambda p: p.inner.rule.window, 2),
])
def test_policy_flags_reach_the_policy(args, get, want):
    assert get(_policy(*args)) == want


def test_sweep_points_carry_the_knobs_and_the_engine(monkeypatch, capsys):
    import oppo_sim.explore.sweep as sweep

    seen = {}

    def fake_run_sweep(grid, **kw):
        seen["grid"] = grid
        return sweep._table([{"policy": p.policy, "chunk": p.chunk, "delta": p.delta, "trace": p.trace, "gpu": p.gpu,
                              "samples_per_s": 1.0} for p in grid.points()])

    monkeypatch.setattr(sweep, "run_sweep", fake_run_sweep)
    code = main(["sweep", *SMALL, "--policies", "baseline,oppo", "--chunks", "256", "--deltas", "4,40",
                 "--delta-window", "3", "--engine", "static", "--call-tokens", "64", "--processes", "1"])
    assert code == 0
    grid = seen["grid"]
    assert grid.base.engine_kind is EngineKind.STATIC and grid.base.static.call_tokens == 64
    rules = {p.delta: p.make_policy().rule for p in grid.points() if p.policy == "oppo"}
    assert rules[4] == DeltaRule(delta0=4, window=3) and rules[40] == DeltaRule(delta0=40, delta_max=40, window=3)


def test_plan_takes_the_engine_settings():
    from oppo_sim.plan_cli import _request

    a = parse("plan", "--gpus", "4xh200", "--actor", "qwen2.5-0.5b", "--reward", "qwen2.5-0.5b", "--engine", "static",
              "--gen-batch", "4", "--no-stream-batching")
    req = _request(a)
    assert req.base.engine_kind is EngineKind.STATIC and req.base.static.gen_batch == 4
    assert not req.base.stream_batching
    cand = req.space.candidates()[-1]
    assert cand.config(req.base).engine_kind is EngineKind.STATIC  # every configuration runs that engine


def test_replay_takes_vllm_names_and_the_old_ones():
    for flag in ("--max-num-batched-tokens", "--max-batched-tokens"):
        assert parse("replay", "--trace", "x", flag, "2048").max_batched_tokens == 2048
    assert parse("replay", "--trace", "x", "--gpu-memory-utilization", "0.5").gpu_mem_util == 0.5


def test_replay_engine_settings_reach_the_engine(monkeypatch, capsys, tmp_path):
    import oppo_sim.pipeline.replay as replay_mod

    seen = {}

    def fake_replay(trace, cfg):
        seen["cfg"] = cfg
        raise ConfigError("stop here")

    monkeypatch.setattr(replay_mod, "replay", fake_replay)
    csv = tmp_path / "t.csv"
    csv.write_text("prompt_tokens,response_tokens,timestamp\n10,5,0\n12,6,0.1\n")
    code = main(["replay", "--trace", str(csv), "--model", "qwen2.5-0.5b", "--no-enable-chunked-prefill",
                 "--no-enable-prefix-caching", "--long-prefill-token-threshold", "64", "--num-gpu-blocks-override", "99",
                 "--max-num-batched-tokens", "1024", "--max-num-seqs", "8"])
    assert code == 2 and "stop here" in capsys.readouterr().err
    e = seen["cfg"].engine
    assert (e.enable_chunked_prefill, e.enable_prefix_caching, e.long_prefill_token_threshold) == (False, False, 64)
    assert (e.num_gpu_blocks_override, e.max_num_batched_tokens, e.max_num_seqs) == (99, 1024, 8)


# -- end to end: the static engine from the command line -----------------------------------------------


def test_run_on_the_static_engine_differs_from_continuous(capsys, tmp_path):
    times = {}
    for engine in ("continuous", "static"):
        path = tmp_path / f"{engine}.json"
        code = main(["run", *SMALL, "--engine", engine, "--json", str(path)])
        out = capsys.readouterr().out
        assert code == 0 and f"{engine} engine" in out
        times[engine] = json.loads(path.read_text())["step_time_s"]
    assert times["static"] > 0 and times["continuous"] > 0
    assert times["static"] != pytest.approx(times["continuous"], rel=0.01)


# -- flags the chosen policy or engine does not use ---------------------------------------------------


@pytest.mark.parametrize("args, msg", [
    (["run", "--policy", "inter", "--chunk", "256"], "--chunk is not used by policy 'inter'"),
    (["run", "--policy", "intra", "--delta", "8"], "--delta is not used by policy 'intra'"),
    (["run", "--policy", "chunk-autotune", "--chunk", "256"], "--chunk is not used by policy 'chunk-autotune'"),
    (["run", "--policy", "inter", "--delta-window", "3"], "--delta-window is not used by policy 'inter'"),
    (["run", "--policy", "oppo", "--budget", "64"], "--budget is not used by policy 'oppo'"),
    (["run", "--policy", "oppo", "--staleness", "2"], "--staleness is not used by policy 'oppo'"),
    (["run", "--policy", "oppo", "--chunk-candidates", "64"], "--chunk-candidates is not used by policy 'oppo'"),
    (["run", "--policy", "oppo", "--autotune-every", "9"], "--autotune-every is not used by policy 'oppo'"),
    (["run", "--policy", "baseline", "--no-stream-batching"], "--no-stream-batching is not used by policy 'baseline'"),
    (["compare", "--policies", "inter,async", "--chunk", "4"], "--chunk is not used by policies 'inter', 'async'"),
    (["sweep", "--policies", "baseline,intra", "--staleness", "2"], "--staleness is not used by policies"),
    (["run", "--engine", "static", "--max-num-seqs", "4"], "--max-num-seqs is not used by engine 'static'"),
    (["run", "--engine", "static", "--no-enable-prefix-caching"], "--no-enable-prefix-caching is not used by engine"),
    (["run", "--gen-batch", "4"], "--gen-batch is not used by engine 'continuous'"),
    (["run", "--engine", "static", "--policy", "oppo", "--call-tokens", "64"], "--call-tokens is not used by policy 'oppo'"),
    (["run", "--call-overhead", "0.1"], "--call-overhead is not used by engine 'continuous'"),
    (["plan", "--policies", "baseline,inter", "--stream-batching"], "--stream-batching is not used by policies"),
    (["plan", "--engine", "static", "--max-num-batched-tokens", "4096"], "is not used by engine 'static'"),
])
def test_a_flag_no_chosen_policy_or_engine_uses_is_a_one_line_error(capsys, args, msg):
    code = main([*args, *(SMALL if args[0] != "plan" else [])])
    err = capsys.readouterr().err
    assert code == 2 and msg in err and "drop it or choose" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_compare_accepts_a_flag_one_chosen_policy_uses():
    from oppo_sim.cli_policy import check_policy_flags

    a = parse("compare", "--policies", "inter,intra", "--chunk", "256", "--delta", "4")
    check_policy_flags(a, a.policies)  # intra uses --chunk, inter --delta: no error
    with pytest.raises(ConfigError, match="--budget"):
        check_policy_flags(parse("compare", "--policies", "inter,intra", "--budget", "9"), ("inter", "intra"))


@pytest.mark.parametrize("args, msg", [
    (["--policy", "intra", "--chunk", "0"], "chunk size must be >= 1, got 0"),
    (["--policy", "oppo", "--chunk", "0"], "chunk size must be >= 1, got 0"),
    (["--policy", "chunk-autotune", "--autotune-every", "0"], "autotune period 0"),
    (["--policy", "chunk-autotune", "--chunk-candidates", "0,64"], "chunk candidates must be >= 1"),
    (["--policy", "partial-rollout", "--budget", "0"], "token budget must be >= 1, got 0"),
    (["--policy", "async", "--staleness", "0"], "staleness bound must be >= 1, got 0"),
    (["--policy", "inter", "--delta", "-1"], "delta must be >= 0, got -1"),
    (["--policy", "oppo", "--delta", "20", "--delta-max", "16"], "delta0 20 outside [0, 16]"),
])
def test_an_explicit_invalid_knob_is_the_policys_one_line_error(capsys, args, msg):
    code = main(["run", *SMALL, *args])
    err = capsys.readouterr().err
    assert code == 2 and msg in err and err.count("\n") == 1


# -- make_policy: explicit values are kept, None takes the class default ------------------------------


@pytest.mark.parametrize("build, exc", [
    (lambda: make_policy("intra", chunk=0), "chunk size must be >= 1"),
    (lambda: make_policy("oppo", chunk=0), "chunk size must be >= 1"),
    (lambda: make_policy("chunk-autotune", candidates=()), "chunk candidates must be >= 1"),
    (lambda: make_policy("chunk-autotune", every=0), "autotune period 0"),
    (lambda: make_policy("partial-rollout", budget=0), "token budget must be >= 1"),
    (lambda: make_policy("async", staleness=0), "staleness bound must be >= 1"),
    (lambda: make_policy("dynamic-delta", window=0), "window must be >= 1"),
    (lambda: make_policy("oppo", delta=4, rule=DeltaRule(delta0=8)), "either whole"),
    (lambda: make_policy("oppo", window=3, rule=DeltaRule()), "either whole"),
])
def test_make_policy_refuses_explicit_invalid_values(build, exc):
    with pytest.raises(ConfigError, match=exc):
        build()


def test_make_policy_keeps_explicit_values_and_defaults_the_rest():
    assert make_policy("inter", delta=0).delta == 0 and make_policy("inter").delta == Inter.delta
    assert make_policy("partial-rollout", delta=0).delta == 0
    assert make_policy("partial-rollout").budget == PartialRollout.budget
    assert make_policy("intra").chunk == Intra.chunk and make_policy("async").staleness == Async.staleness
    auto = make_policy("chunk-autotune", candidates=[64], every=2)
    assert auto.candidates == (64,) and auto.every == 2
    default = make_policy("chunk-autotune")
    assert (default.candidates, default.every) == (ChunkAutotune.candidates, ChunkAutotune.every)
    assert make_policy("dynamic-delta", delta=0).rule == DeltaRule(delta0=0)
    assert make_policy("oppo", delta=40).rule == DeltaRule(delta0=40, delta_max=40)
    assert make_policy("oppo", delta=4, delta_max=4, dec=0, proportional=True).rule == DeltaRule(
        delta0=4, delta_max=4, dec=0, proportional=True)
    assert make_policy("oppo").rule == DeltaRule()
    assert make_policy("oppo", delta=8, rule=DeltaRule(window=2)).rule.window == 2  # same Δ0: no conflict


def test_the_parser_builds_without_side_effects(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    code = "import oppo_sim.cli as c; p = c.build_parser(); assert set(c.subcommand_parsers(p)) >= {'run', 'plan'}"
    root = Path(__file__).resolve().parents[1]
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("args, get, want", [
    ([], lambda c: (c.max_prompt, c.truncate_prompt, c.train_memory.full_logits), (131072, False, False)),
    (["--max-prompt", "4096"], lambda c: c.max_prompt, 4096),
    (["--max-prompt", "0"], lambda c: c.max_prompt, None),
    (["--truncate-prompt"], lambda c: c.truncate_prompt, True),
    (["--full-logits"], lambda c: c.train_memory.full_logits, True),
])
def test_prompt_and_logits_flags_reach_the_config(args, get, want):
    assert get(sim_config(parse("run", *args))) == want


def test_plan_takes_the_prompt_flags_and_searches_sp_where_needed_by_default():
    a = parse("plan", "--max-prompt", "2048", "--truncate-prompt", "--full-logits")
    assert (a.max_prompt, a.truncate_prompt, a.full_logits, a.sps) == (2048, True, True, None)
    assert parse("plan", "--sps", "1,2").sps == (1, 2)
