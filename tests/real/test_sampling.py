"""Batched counter-based sampling (``oppo_real.backends.sampling``): the right distribution, and a row's
draw depends only on its own (seed, position, logits)."""

from __future__ import annotations

import torch

from oppo_real.backends.sampling import sample, uniforms


def test_draws_follow_softmax_at_the_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    n = 40_000
    for temp in (1.0, 0.5):
        tok, _ = sample(logits.expand(n, -1), temp, torch.full((n,), 11), torch.arange(n))
        freq = torch.bincount(tok, minlength=5).float() / n
        expect = torch.softmax(logits / temp, dim=-1)
        assert torch.allclose(freq, expect, atol=0.01), (temp, freq, expect)


def test_a_rows_draw_does_not_depend_on_the_batch():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    seeds, pos = torch.tensor([1, 2, 3, 1, 5, 9]), torch.tensor([10, 10, 4, 11, 0, 7])
    whole, lp = sample(logits, 1.0, seeds, pos)
    perm = torch.tensor([4, 0, 5, 2, 1, 3])
    shuffled, lp2 = sample(logits[perm], 1.0, seeds[perm], pos[perm])
    assert torch.equal(shuffled, whole[perm]) and torch.allclose(lp2, lp[perm])
    for i in range(6):  # alone
        alone, _ = sample(logits[i:i + 1], 1.0, seeds[i:i + 1], pos[i:i + 1])
        assert int(alone) == int(whole[i])


def test_noise_differs_by_seed_position_and_index():
    u = uniforms(torch.tensor([1, 2, 1]), torch.tensor([5, 5, 6]), 1000)
    assert ((u > 0) & (u < 1)).all() and abs(float(u.mean()) - 0.5) < 0.02
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2])
    assert len(torch.unique(u[0])) > 990  # (almost) no repeats along the vocabulary
    assert torch.equal(u, uniforms(torch.tensor([1, 2, 1]), torch.tensor([5, 5, 6]), 1000))  # a pure function


def test_greedy_and_logprobs():
    torch.manual_seed(1)
    logits = torch.randn(4, 30)
    tok, lp = sample(logits, 0.0, torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    assert torch.equal(tok, logits.argmax(-1))
    tok, lp = sample(logits, 0.7, torch.arange(4), torch.arange(4))
    assert torch.allclose(lp, torch.log_softmax(logits, -1).gather(1, tok[:, None]).squeeze(1))
