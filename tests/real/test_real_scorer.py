"""Incremental (chunked) prefill scores equal a one-shot prefill, also after KV eviction."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oppo_real.backends.scorer import IncrementalScorer, ScorerConfig
from oppo_sim.core.errors import ConfigError

KINDS = ("reward", "critic", "reference")


@pytest.fixture(scope="module")
def scorers(models):
    paths = {"reward": models.reward, "critic": models.critic, "reference": models.reference}
    return {k: IncrementalScorer(ScorerConfig(k, str(paths[k]))) for k in KINDS}


def _vec(res):
    if res.reward is not None:
        return np.array([res.reward])
    return np.array(res.values if res.values is not None else res.logprobs)


def _close(a, b):
    np.testing.assert_allclose(_vec(a), _vec(b), rtol=1e-5, atol=1e-7)


def _seq(seed, n_prompt=12, n_resp=37):
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(3, 512, n_prompt)] + [1], [int(t) for t in rng.integers(3, 512, n_resp)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("chunk", [1, 8, 64])
def test_incremental_equals_one_shot(scorers, kind, chunk):
    s = scorers[kind]
    prompt, resp = _seq(chunk)
    s.open("a", prompt)
    for i in range(0, len(resp), chunk):
        s.feed("a", resp[i : i + chunk])
    inc = s.finish("a")
    one = s.one_shot(prompt, resp)
    assert inc.n_prompt == len(prompt) and inc.n_response == len(resp)
    if kind != "reward":
        assert len(_vec(inc)) == len(resp)
    _close(inc, one)
    assert inc.prefill_tokens == len(prompt) + len(resp)


@pytest.mark.parametrize("kind", KINDS)
def test_evict_reprefills_and_result_is_unchanged(scorers, kind):
    s = scorers[kind]
    prompt, resp = _seq(3)
    s.open("b", prompt)
    s.feed("b", resp[:10])
    s.evict("b")
    assert s.cached_tokens("b") == 0
    s.feed("b", resp[10:20])  # re-prefills prompt + first 20 tokens
    assert s.cached_tokens("b") == len(prompt) + 20
    s.feed("b", resp[20:30])
    s.evict("b")
    s.feed("b", resp[30:], compute=False)
    assert s.pending_tokens("b") == len(prompt) + len(resp)
    res = s.finish("b")
    _close(res, s.one_shot(prompt, resp))
    assert res.prefill_tokens == (len(prompt) + 10) + (len(prompt) + 20) + 10 + (len(prompt) + len(resp))


@pytest.mark.parametrize("kind", KINDS)
def test_score_batch_equals_one_shot(scorers, kind):
    s = scorers[kind]
    items = [(f"x{i}", *_seq(i, n_prompt=5 + 3 * i, n_resp=4 + 5 * i)) for i in range(4)]
    for res, (_, p, r) in zip(s.score_batch(items), items):
        _close(res, s.one_shot(p, r))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, 23), min_size=1, max_size=4, unique=True), evict_at=st.integers(0, 5))
def test_any_chunking_equals_one_shot(scorers, cuts, evict_at):
    s = scorers["critic"]
    prompt, resp = _seq(11, n_resp=24)
    bounds = [0, *sorted(cuts), len(resp)]
    s.open("h", prompt)
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        if k == evict_at:
            s.evict("h")
        s.feed("h", resp[a:b])
    _close(s.finish("h"), s.one_shot(prompt, resp))


def test_sequences_are_independent(scorers):
    s = scorers["reward"]
    (p1, r1), (p2, r2) = _seq(21), _seq(22)
    s.open("u", p1)
    s.open("v", p2)
    for i in range(0, 37, 10):
        s.feed_many({"u": r1[i : i + 10], "v": r2[i : i + 10]})
    _close(s.finish("u"), s.one_shot(p1, r1))
    _close(s.finish("v"), s.one_shot(p2, r2))


def test_errors_and_drop(scorers):
    s = scorers["reward"]
    with pytest.raises(ConfigError):
        s.feed("nope", [1, 2])
    s.open("e", [5, 6, 1])
    with pytest.raises(ConfigError):
        s.open("e", [5, 6, 1])
    with pytest.raises(ConfigError):
        s.finish("e")  # no response yet
    s.drop("e")
    assert "e" not in s.open_ids()
    with pytest.raises(ConfigError):
        ScorerConfig("judge", "x")


@pytest.mark.parametrize("kind", KINDS)
def test_batched_chunks_of_ragged_sequences_equal_one_shot(scorers, kind):
    """feed_many runs one forward over sequences whose caches and chunks have different lengths (one with no
    cache yet, one fed nothing this round): every result still equals its one-shot prefill."""
    s = scorers[kind]
    seqs = {f"b{i}": _seq(40 + i, n_prompt=5 + 7 * i, n_resp=30 + 5 * i) for i in range(4)}
    for sid, (p, _) in seqs.items():
        s.open(sid, p)
    fed = {sid: 0 for sid in seqs}
    rounds = [{"b0": 3, "b1": 11, "b2": 1}, {"b0": 9, "b2": 13, "b3": 6}, {"b1": 2, "b3": 17}, {"b0": 40, "b1": 40, "b2": 40, "b3": 40}]
    for r in rounds:
        chunks = {}
        for sid, n in r.items():
            resp = seqs[sid][1]
            chunks[sid] = resp[fed[sid]: fed[sid] + n]
            fed[sid] = min(len(resp), fed[sid] + n)
        s.feed_many({k: v for k, v in chunks.items() if v})
    for sid, (p, resp) in seqs.items():
        _close(s.finish(sid), s.one_shot(p, resp))
