"""Prompt limits as RL frameworks apply them, on a ShareGPT-like trace with one 162,307-token prompt
(tests/fixtures/make_long_prompt_trace.py): the default cap lets it run and plan, filtering and
truncation are counted, a cap that leaves nothing is one line, and a refusal names the knob that fits."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.core.placement import paper_placement
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits, smallest_sp
from oppo_sim.pipeline.memory_plan import longest
from oppo_sim.traces.catalog import load_trace
from oppo_sim.traces.trace import DEFAULT_MAX_PROMPT, Trace

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LONG = str(FIXTURES / "long_prompt_sharegpt_like.csv.gz")


def _fixture_module():
    spec = importlib.util.spec_from_file_location("make_long_prompt_trace", FIXTURES / "make_long_prompt_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_fixture_is_its_script_output_and_sharegpt_shaped():
    committed = pd.read_csv(LONG)
    pd.testing.assert_frame_equal(committed, _fixture_module().frame())
    p = committed["prompt_tokens"]
    assert 35 <= p.median() <= 45 and p.max() == 162_307 and (p > 10_000).sum() == 4  # short body, long tail
    assert committed["response_tokens"].max() <= 4096


# -- the cap: filter (default) or truncate, counted, one place -------------------------------------------


def test_default_cap_filters_only_the_overlong_prompts():
    raw = load_trace(LONG, max_prompt=None)
    over = int((raw.prompt_tokens > DEFAULT_MAX_PROMPT).sum())
    assert over == 1 and raw.n_prompts_filtered == 0 and raw.max_prompt is None
    t = load_trace(LONG)  # the default
    assert (len(t), t.n_prompts_filtered, t.n_prompts_truncated, t.max_prompt) == (1000 - over, over, 0, DEFAULT_MAX_PROMPT)
    keep = raw.prompt_tokens <= DEFAULT_MAX_PROMPT
    assert np.array_equal(t.response_tokens, raw.response_tokens[keep])  # the rows dropped whole, order kept
    assert int(t.prompt_tokens.max()) <= DEFAULT_MAX_PROMPT


def test_truncate_keeps_every_row_and_cuts_the_prompt_only():
    raw = load_trace(LONG, max_prompt=None)
    t = load_trace(LONG, max_prompt=4096, truncate_prompt=True)
    over = int((raw.prompt_tokens > 4096).sum())
    assert (len(t), t.n_prompts_truncated, t.n_prompts_filtered) == (1000, over, 0) and over > 2
    assert np.array_equal(t.prompt_tokens, np.minimum(raw.prompt_tokens, 4096))
    assert np.array_equal(t.response_tokens, raw.response_tokens)


def test_limited_is_idempotent_and_carries_the_optional_columns():
    t = Trace.from_arrays([10, 50_000, 20, 40_000], [5, 6, 7, 8], reward=[0.1, 0.2, 0.3, 0.4], step=[0, 0, 1, 1])
    once = t.limited(None, 32_768)
    assert once.limited(None, 32_768) is once and once.n_prompts_filtered == 2
    assert list(once.reward) == [0.1, 0.3] and list(once.step) == [0, 1] and list(once.response_tokens) == [5, 7]
    again = once.limited(None, 15)  # a tighter cap later adds to the count
    assert (len(again), again.n_prompts_filtered, again.max_prompt) == (1, 3, 15)
    assert SimConfig(max_prompt=None, max_response=None).limit(t) is t  # no cap: the trace as it is
    with pytest.raises(ConfigError, match="max_prompt"):
        SimConfig(max_prompt=0)
    with pytest.raises(TraceError, match="exceeds max_prompt"):
        Trace.from_arrays([10, 50], [1, 1], max_prompt=20)


def test_a_cap_that_filters_every_prompt_is_one_line(capsys):
    with pytest.raises(TraceError, match="every prompt .* longer than max_prompt 1"):
        load_trace(LONG, max_prompt=1)
    assert main(["run", "--trace", LONG, "--max-prompt", "1", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--truncate-prompt" in err and "--max-prompt" in err


# -- the fixture with defaults ---------------------------------------------------------------------------


def test_run_with_defaults_filters_the_long_prompt_and_says_so(capsys):
    assert main(["run", "--trace", LONG]) == 0
    out = capsys.readouterr().out
    assert "999 rows" in out and "prompts over 131,072 tokens: 1 filtered" in out


def test_run_truncating_says_so(capsys):
    small = ["--steps", "2", "--batch", "16", "--actor", "qwen2.5-0.5b", "--reward", "qwen2.5-0.5b"]
    assert main(["run", "--trace", LONG, "--max-prompt", "2048", "--truncate-prompt", *small]) == 0
    out = capsys.readouterr().out
    assert "1000 rows" in out and "prompts over 2,048 tokens:" in out and "truncated" in out
    assert "longest sequence" in out and "filtered" not in out


def test_plan_with_defaults_finds_feasible_configurations(capsys):
    rc = main(["plan", "--trace", LONG, "--gpus", "8xh200", "--steps", "2", "--batch", "16", "--layouts", "shared",
               "--policies", "baseline,inter", "--deltas", "8", "--processes", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "best: " in out and "no configuration tried fits" not in out


# -- sequence parallelism where it is needed, and the knob a refusal names --------------------------------


def _uncapped(devices: int, gpu: str = "h100-sxm", model: str = "qwen2.5-7b", **kw) -> SimConfig:
    return SimConfig(gpu=gpu, actor=model, reward=model, placement=paper_placement(devices), max_prompt=None,
                     batch=16, steps=2, **kw)


def test_refusal_names_sequence_parallelism_where_only_it_fits():
    cfg = _uncapped(8)  # 7B + 7B critic on 7 H100s: the 162k-token sequence's activations need sp
    lengths = longest(cfg.limit(load_trace(LONG, max_prompt=None)), cfg.max_response)
    with pytest.raises(ConfigError, match=r"does not fit: train .*; fits with --sp 7$"):
        check_fits(cfg, *lengths)
    assert smallest_sp(cfg, *lengths) == 7
    fits = check_fits(dataclasses.replace(cfg, train_memory=TrainMemoryConfig(sequence_parallel=7)), *lengths)
    assert fits.error() is None


def test_refusal_names_a_prompt_cap_where_only_it_fits(capsys):
    # one training GPU: no sequence parallelism to split over; recomputation is already full
    args = ["run", "--trace", LONG, "--max-prompt", "0", "--gpu", "h100-sxm", "--devices", "2", "--actor",
            "qwen2.5-1.5b", "--reward", "qwen2.5-1.5b", "--steps", "1", "--batch", "8"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith("; fits with --max-prompt 131072")
    assert main([*args[:4], "131072", *args[5:]]) == 0  # the named knob does make it fit
    capsys.readouterr()


def test_refusal_names_recompute_where_it_was_pinned(capsys):
    small = ["--steps", "1", "--batch", "8", "--max-prompt", "32768", "--gpu", "h100-sxm"]
    assert main(["run", "--trace", LONG, "--recompute", "none", *small]) == 2
    assert capsys.readouterr().err.rstrip().endswith("; fits with --recompute full")


def test_full_logits_charges_more_than_chunked_log_probs():
    cfg = _uncapped(8, gpu="h200")
    lengths = longest(cfg.limit(load_trace(LONG, max_prompt=None)), cfg.max_response)
    chunked = check_fits(cfg, *lengths)  # one 512-token chunk of logits: fits on 7 H200s without sp
    assert chunked.train.recompute == "full" and chunked.train.sequence_parallel == 1
    full = dataclasses.replace(cfg, train_memory=TrainMemoryConfig(full_logits=True))
    # every token's logits: 45 GiB more (108.3 GiB of activations; 109.7 until 2026-11-27, when --full-logits also
    # charged a fp32 log-softmax over the response tokens, which verl's flash-attn cross-entropy does not keep)
    with pytest.raises(ConfigError, match=r"full logits\).*activations 108.3\].*; fits without --full-logits$"):
        check_fits(full, *lengths)


def test_the_planner_raises_sp_only_where_needed_and_deterministically():
    from oppo_sim.explore.plan import PlanRequest, run_plan
    from oppo_sim.explore.space import space_for

    base = _uncapped(8)
    space = space_for(base, 8, layouts=("shared",), policies=("baseline", "inter"), deltas=(8,))
    assert space.auto_sp and {p.sp for p in space.placements()} == {1}
    req = PlanRequest(space, base, LONG, search="tpe", trials=6, seed=1)
    one = run_plan(req, processes=1, progress=False).table.drop(columns=["wall_clock_s", "cpu_s"])
    two = run_plan(req, processes=2, progress=False).table.drop(columns=["wall_clock_s", "cpu_s"])
    pd.testing.assert_frame_equal(one, two)
    ok = one[one["status"] == "ok"]
    assert len(ok) > 0 and (ok["sp"] > 1).all()  # nothing fits this trace on H100s without it
    assert all(f" sp{sp} " in label for sp, label in zip(ok["sp"], ok["config"]))
    assert (ok["train_gpus"] % ok["sp"] == 0).all()


def test_the_real_executor_loads_the_trace_through_the_same_cap():
    """``oppo-real run --trace`` takes the same options and says what the cap did on its first line."""
    from oppo_real.cli import build_parser
    from oppo_real.commands.run_cmd import describe_run
    from oppo_real.config import RealConfig
    from oppo_sim.core.policies import make_policy

    a = build_parser().parse_args(["run", "--trace", LONG, "--max-prompt", "100", "--truncate-prompt"])
    assert (a.max_prompt, a.truncate_prompt) == (100, True)
    trace = load_trace(LONG, max_response=None, max_prompt=a.max_prompt, truncate_prompt=a.truncate_prompt)
    line = describe_run(RealConfig(batch=2, steps=1), make_policy("baseline"), trace, Path("out"))
    assert f"prompts over 100 tokens: {trace.n_prompts_truncated} truncated" in line and trace.n_prompts_truncated > 100
