"""``oppo-sim import``: verl rollout dumps (exact and estimated token counts) and metrics exports (wandb,
TensorBoard) into traces that ``oppo-sim run --trace`` replays step by step."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.traces.catalog import load_trace
from oppo_sim.traces.importers import read_verl_dump, sidecar_path, token_counter, write_trace
from oppo_sim.traces.metrics_import import lognormal_sigma, metrics_to_trace

# verl's _dump_generations: one line per response, the n responses of a prompt on consecutive lines
LINES = {
    1: [("what is 2 + 2 ?", "the answer is 4", 1.0), ("what is 2 + 2 ?", "4", 0.0),
        ("what is the answer ?", "the answer is 2 + 2", 1.0), ("what is the answer ?", "", 0.0)],
    2: [("what is 2 + 2 ?", "the answer is 4 4 4 4 4 4", 1.0), ("what is 2 + 2 ?", "4 4 4", 1.0),
        ("what is the answer ?", "2", 0.0), ("what is the answer ?", "the the the the the answer", 1.0)],
}
WORDS = ["[UNK]", "what", "is", "2", "+", "?", "4", "the", "answer"]


def write_dump(root, lines=LINES, with_step=True, gts=True):
    root.mkdir(parents=True, exist_ok=True)
    for step, rows in lines.items():
        with open(root / f"{step}.jsonl", "w") as f:
            for inp, out, score in rows:
                d = {"input": inp, "output": out, "score": score}
                if gts:
                    d["gts"] = "4"
                if with_step:
                    d["step"] = step
                f.write(json.dumps(d) + "\n")
    return root


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A word-level tokenizer built offline and saved as a Hugging Face tokenizer directory."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path_factory.mktemp("tok")
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(str(path))
    return path


# -- verl dumps ---------------------------------------------------------------------------------------


def test_verl_dump_estimated_counts_steps_and_rewards(tmp_path):
    imp = read_verl_dump(write_dump(tmp_path / "dump"), token_counter(chars_per_token=3.0))
    t = imp.trace
    texts = [(i, o) for step in (1, 2) for i, o, _ in LINES[step]]
    assert t.prompt_tokens.tolist() == [max(1, round(len(i) / 3.0)) for i, _ in texts]
    assert t.response_tokens.tolist() == [max(1, round(len(o) / 3.0)) for _, o in texts]
    assert t.response_tokens[3] == 1  # an empty response is the one EOS token
    assert t.step.tolist() == [1] * 4 + [2] * 4
    assert t.reward.tolist() == [s for step in (1, 2) for *_, s in LINES[step]]
    assert any("3 characters per token" in n for n in imp.notes)


def test_verl_dump_default_estimate_is_stated(tmp_path):
    imp = read_verl_dump(write_dump(tmp_path / "dump"))
    assert "4 characters per token" in imp.source and "4 characters per token" in " ".join(imp.notes)
    assert imp.trace.response_tokens[0] == round(len("the answer is 4") / 4.0)


def test_verl_dump_exact_counts_with_a_local_tokenizer(tmp_path, tokenizer_dir):
    imp = read_verl_dump(write_dump(tmp_path / "dump"), token_counter(tokenizer=tokenizer_dir))
    # "what is 2 + 2 ?" is 6 words, "what is the answer ?" 5; "the answer is 4 4 4 4 4 4" 9; "" counts 1 (the EOS)
    assert imp.trace.prompt_tokens.tolist() == [6, 6, 5, 5, 6, 6, 5, 5]
    assert imp.trace.response_tokens.tolist() == [4, 1, 6, 1, 9, 3, 1, 6]
    estimated = read_verl_dump(write_dump(tmp_path / "dump"), token_counter(chars_per_token=4.0)).trace
    assert estimated.response_tokens.tolist() != imp.trace.response_tokens.tolist()
    assert imp.source.startswith("verl rollout dump") and "exact tokens" in imp.source and "exact token counts" in imp.notes[1]


def test_verl_dump_one_file_step_from_file_name_and_no_gts(tmp_path):
    root = write_dump(tmp_path / "dump", with_step=False, gts=False)
    t = read_verl_dump(root / "2.jsonl").trace
    assert len(t) == 4 and t.step.tolist() == [2] * 4


def test_verl_dump_directory_in_numeric_step_order(tmp_path):
    lines = {10: LINES[1], 9: LINES[2]}
    t = read_verl_dump(write_dump(tmp_path / "dump", lines)).trace
    assert t.step.tolist() == [9] * 4 + [10] * 4


@pytest.mark.parametrize("line, message", [
    ("{not json", "line 2: invalid JSON"),
    ('["a list"]', "line 2: expected a JSON object"),
    ('{"output": "x", "score": 1, "step": 1}', "line 2: missing key 'input'"),
    ('{"input": 3, "output": "x", "score": 1, "step": 1}', "line 2: 'input' must be text"),
    ('{"input": "a", "output": "x", "score": "high", "step": 1}', "line 2: 'score' must be a finite number"),
    ('{"input": "a", "output": "x", "score": 1, "step": -1}', "line 2: 'step' must be an integer >= 0"),
])
def test_verl_dump_bad_line_is_one_line_naming_file_and_line(tmp_path, line, message):
    f = tmp_path / "3.jsonl"
    f.write_text(json.dumps({"input": "a", "output": "b", "score": 1.0, "step": 3}) + "\n" + line + "\n")
    with pytest.raises(TraceError) as e:
        read_verl_dump(f)
    assert message in str(e.value) and str(f) in str(e.value) and "\n" not in str(e.value)


def test_verl_dump_refusals(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_verl_dump(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="no \\*.jsonl files"):
        read_verl_dump(tmp_path / "empty")
    with pytest.raises(ConfigError, match="not both"):
        token_counter(tokenizer=tmp_path, chars_per_token=4.0)
    with pytest.raises(ConfigError, match="not a directory"):
        token_counter(tokenizer=tmp_path / "nothing")
    with pytest.raises(ConfigError, match="cannot load a tokenizer"):
        token_counter(tokenizer=tmp_path / "empty")


@pytest.mark.parametrize("ending", [".csv", ".csv.gz", ".jsonl", ".jsonl.gz", ".parquet"])
def test_written_trace_reads_back_with_its_assumptions(tmp_path, ending):
    imp = read_verl_dump(write_dump(tmp_path / "dump"))
    out, side = write_trace(imp, tmp_path / f"t{ending}")
    back = load_trace(out, max_response=None)
    assert back.response_tokens.tolist() == imp.trace.response_tokens.tolist()
    assert back.step.tolist() == imp.trace.step.tolist() and back.reward.tolist() == imp.trace.reward.tolist()
    assert side == sidecar_path(out) and "characters per token" in side.read_text()
    with pytest.raises(ConfigError, match="must end in"):
        write_trace(imp, tmp_path / "t.txt")


# -- metrics exports ----------------------------------------------------------------------------------

STEPS = pd.DataFrame({
    "_step": [1, 2, 3, 4],
    "response_length/mean": [300.0, 420.5, 610.25, 800.0],
    "response_length/max": [1500.0, 2048.0, 2048.0, 1900.0],
    "response_length/min": [12.0, 20.0, 35.0, 40.0],
    "response_length/clip_ratio": [0.0, 0.05, 0.125, 0.0],
    "prompt_length/mean": [150.0, 150.0, 151.5, 149.0],
    "prompt_length/max": [600.0, 610.0, 590.0, 620.0],
    "critic/score/mean": [0.2, 0.35, 0.5, 0.6],
})
N = 64


def check_moments(t, m, n=N, cap=2048):
    frame = t.to_frame()
    assert len(frame) == n * len(m)
    for (_, row), (step, g) in zip(m.iterrows(), frame.groupby("step", sort=True)):
        assert step == row["_step"]
        resp = g["response_tokens"]
        assert abs(resp.mean() - row["response_length/mean"]) <= 1.0 / n  # the mean within 1/N token
        assert resp.max() == row["response_length/max"]  # the max exact
        assert abs((resp == cap).mean() - row["response_length/clip_ratio"]) <= 1.0 / (2 * n)  # clip share
        assert resp.min() >= row["response_length/min"]
        assert abs(g["prompt_tokens"].mean() - row["prompt_length/mean"]) <= 1.0 / n
        assert g["prompt_tokens"].max() == row["prompt_length/max"]


def test_metrics_moments_match_per_step(tmp_path):
    STEPS.to_csv(tmp_path / "m.csv", index=False)
    imp = metrics_to_trace(tmp_path / "m.csv", prompts_per_step=N, max_response=2048, seed=3)
    check_moments(imp.trace, STEPS)
    assert imp.trace.step.tolist() == sorted(imp.trace.step.tolist())
    assert set(imp.trace.reward.tolist()) <= {0.0, 1.0}
    assert any("lognormal" in n for n in imp.notes)


def test_metrics_wandb_names_run_prefix_and_cap_from_the_data(tmp_path):
    wandb = STEPS.rename(columns=lambda c: c if c == "_step" else
                         f"grpo-7b - actor/{c}" if c.startswith("response") else f"grpo-7b - {c}")
    wandb["grpo-7b - actor/response_length/mean__MIN"] = 1.0  # a sampled-history range: ignored
    wandb["Unnamed: 0"] = range(4)
    wandb.to_csv(tmp_path / "w.csv", index=False)
    imp = metrics_to_trace(tmp_path / "w.csv", prompts_per_step=N, seed=3)  # cap: the largest max, 2048
    check_moments(imp.trace, STEPS)
    plain = metrics_to_trace(_plain(tmp_path), prompts_per_step=N, max_response=2048, seed=3).trace
    assert imp.trace.response_tokens.tolist() == plain.response_tokens.tolist()


def _plain(tmp_path):
    STEPS.to_csv(tmp_path / "m.csv", index=False)
    return tmp_path / "m.csv"


def test_metrics_two_runs_need_run(tmp_path):
    two = pd.DataFrame({"Step": [1, 2], "a - response_length/mean": [100, 200], "a - prompt_length/mean": [50, 50],
                        "b - response_length/mean": [900, 990], "b - prompt_length/mean": [60, 60]})
    two.to_csv(tmp_path / "two.csv", index=False)
    with pytest.raises(ConfigError, match="several runs \\(a, b\\).*--run"):
        metrics_to_trace(tmp_path / "two.csv", max_response=4096)
    t = metrics_to_trace(tmp_path / "two.csv", prompts_per_step=8, max_response=4096, run="b").trace
    assert t.to_frame().groupby("step")["response_tokens"].mean().tolist() == [900, 990]


def test_metrics_tensorboard_long_table(tmp_path):
    rows = [(s, tag, v) for s, resp, prompt in [(0, 100.0, 30.0), (1, 140.0, 30.0)]
            for tag, v in [("response_length/mean", resp), ("prompt_length/mean", prompt), ("response_length/max", 400.0)]]
    pd.DataFrame(rows, columns=["step", "tag", "value"]).to_csv(tmp_path / "tb.csv", index=False)
    t = metrics_to_trace(tmp_path / "tb.csv", prompts_per_step=16).trace
    g = t.to_frame().groupby("step")["response_tokens"]
    assert g.mean().tolist() == [100, 140] and g.max().tolist() == [400, 400]
    assert (t.prompt_tokens == 30).all()  # no prompt max logged: every prompt is the mean


def test_metrics_deterministic_with_seed(tmp_path):
    path = _plain(tmp_path)
    a = metrics_to_trace(path, prompts_per_step=N, max_response=2048, seed=7).trace
    b = metrics_to_trace(path, prompts_per_step=N, max_response=2048, seed=7).trace
    c = metrics_to_trace(path, prompts_per_step=N, max_response=2048, seed=8).trace
    assert a.response_tokens.tolist() == b.response_tokens.tolist()
    assert a.prompt_tokens.tolist() == b.prompt_tokens.tolist()
    assert a.response_tokens.tolist() != c.response_tokens.tolist()


def test_metrics_refusals(tmp_path):
    pd.DataFrame({"step": [1], "response_length/mean": [10.0]}).to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(TraceError, match="no column 'prompt_length/mean'"):
        metrics_to_trace(tmp_path / "x.csv", max_response=100)
    pd.DataFrame({"step": [1], "response_length/mean": [10.0], "prompt_length/mean": [5.0]}).to_csv(
        tmp_path / "y.csv", index=False)
    with pytest.raises(ConfigError, match="--max-response"):
        metrics_to_trace(tmp_path / "y.csv")
    with pytest.raises(ConfigError, match="below the longest response"):
        metrics_to_trace(_plain(tmp_path), max_response=1000)


def test_lognormal_fit_hits_mean_and_quantile():
    from scipy.stats import lognorm, norm

    mean, top, r = 400.0, 3000.0, 63
    sigma = lognormal_sigma(mean, top, r)
    mu = np.log(mean) - sigma ** 2 / 2
    assert lognorm(sigma, scale=np.exp(mu)).mean() == pytest.approx(mean)
    assert lognorm(sigma, scale=np.exp(mu)).ppf(1 - 1 / (r + 1)) == pytest.approx(top)
    assert sigma < norm.ppf(1 - 1 / (r + 1))  # the smaller root


# -- the command --------------------------------------------------------------------------------------


def test_cli_import_then_run(tmp_path, capsys):
    out = tmp_path / "verl.csv.gz"
    assert main(["import", str(write_dump(tmp_path / "dump")), "--out", str(out), "--chars-per-token", "2"]) == 0
    printed = capsys.readouterr().out
    assert "2 characters per token" in printed and "8 rows, 2 steps" in printed
    assert gzip.open(out, "rt").readline().startswith("prompt_tokens,response_tokens,reward,step,source")
    assert main(["run", "--trace", str(out), "--steps", "3", "--batch", "4", "--actor", "qwen2.5-0.5b",
                 "--reward", "qwen2.5-0.5b", "--policy", "baseline"]) == 0
    assert "trace verl (8 rows" in capsys.readouterr().out
    csv = tmp_path / "m.csv"
    STEPS.to_csv(csv, index=False)
    assert main(["import", str(csv), "--out", str(tmp_path / "m.parquet"), "--prompts-per-step", "8"]) == 0
    assert "lognormal" in capsys.readouterr().out


def test_cli_import_refuses_options_of_the_other_format(tmp_path, capsys):
    dump = write_dump(tmp_path / "dump")
    assert main(["import", str(dump), "--out", str(tmp_path / "t.csv"), "--prompts-per-step", "8"]) == 2
    err = capsys.readouterr().err
    assert "--prompts-per-step: not used when importing a verl source" in err and len(err.splitlines()) == 1


def test_step_responses_match_mean_max_and_clip_share_on_consistent_random_steps():
    from oppo_sim.traces.metrics_import import step_responses

    rng = np.random.default_rng(0)
    checked = 0
    for case in range(300):
        n, cap = int(rng.integers(2, 300)), int(rng.integers(50, 20000))
        clip = float(rng.choice([0.0, rng.random() * 0.5]))
        k = round(clip * n)
        top = cap if k else int(rng.integers(2, cap))
        low = 1 + int(rng.integers(0, 10))
        lo_mean = (k * cap + (n - k) * low) / n if k else (top + (n - 1) * low) / n
        hi_mean = (k * cap + (n - k) * (cap - 1)) / n if k else top
        if lo_mean >= hi_mean:
            continue
        mean = float(rng.uniform(lo_mean, hi_mean))
        r = step_responses(np.random.default_rng(case), n, mean, top, float(low), clip, cap)
        assert len(r) == n and r.min() >= low and r.max() == top
        assert abs(r.mean() - mean) <= 1.0 / n
        assert abs((r == cap).mean() - clip) <= 1.0 / (2 * n)
        checked += 1
    assert checked > 200
