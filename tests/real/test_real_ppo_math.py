"""PPO building blocks against hand-computed references on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from oppo_real.ppo.algo import (
    PPOConfig,
    Sample,
    critic_values,
    gae,
    kl_penalized_rewards,
    last_token_index,
    policy_loss,
    tis_weights,
    token_logprobs,
    value_loss,
)
from oppo_sim.core.errors import ConfigError

# two rows: row 0 = 2 prompt tokens + 3 response tokens; row 1 = 1 prompt token + 2 response + 2 pad
MASK = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.float32)


def test_last_token_index():
    assert last_token_index(MASK).tolist() == [4, 2]


def test_kl_penalized_rewards_by_hand():
    logp = torch.tensor([[0.0, 0.0, -1.0, -2.0, -0.5], [0.0, -0.3, -0.7, 0.0, 0.0]])
    ref = torch.tensor([[0.0, 0.0, -1.5, -1.0, -0.5], [0.0, -0.1, -0.7, 0.0, 0.0]])
    r = kl_penalized_rewards(torch.tensor([2.0, -1.0]), logp, ref, 0.1, MASK)
    expected = torch.tensor([[0, 0, -0.05, 0.1, 0.0 + 2.0], [0, 0.02, 0.0 - 1.0, 0, 0]])
    torch.testing.assert_close(r, expected, rtol=0, atol=1e-6)


def _gae_by_hand(rewards, values, gamma, lam):
    """Plain-python GAE over one response segment; value after the end is 0."""
    n = len(rewards)
    adv = [0.0] * n
    last = 0.0
    for t in reversed(range(n)):
        nv = values[t + 1] if t + 1 < n else 0.0
        delta = rewards[t] + gamma * nv - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, [a + v for a, v in zip(adv, values)]


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.8), (1.0, 1.0), (0.99, 0.0)])
def test_gae_by_hand(gamma, lam):
    rewards = torch.tensor([[9.0, 9.0, 0.1, -0.2, 1.5], [9.0, 0.3, 2.0, 9.0, 9.0]]) * MASK
    values = torch.tensor([[7.0, 7.0, 0.5, 0.4, 0.9], [7.0, -0.2, 0.1, 7.0, 7.0]]) * MASK
    adv, ret = gae(rewards, values, MASK, gamma, lam)
    a0, r0 = _gae_by_hand([0.1, -0.2, 1.5], [0.5, 0.4, 0.9], gamma, lam)
    a1, r1 = _gae_by_hand([0.3, 2.0], [-0.2, 0.1], gamma, lam)
    torch.testing.assert_close(adv[0, 2:], torch.tensor(a0), rtol=0, atol=1e-6)
    torch.testing.assert_close(adv[1, 1:3], torch.tensor(a1), rtol=0, atol=1e-6)
    torch.testing.assert_close(ret[0, 2:], torch.tensor(r0), rtol=0, atol=1e-6)
    torch.testing.assert_close(ret[1, 1:3], torch.tensor(r1), rtol=0, atol=1e-6)
    assert adv[0, :2].abs().sum() == 0 and adv[1, [0, 3, 4]].abs().sum() == 0
    assert ret[1, 3:].abs().sum() == 0


def test_policy_loss_by_hand():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 2.0]]))  # ratios
    adv = torch.tensor([[1.0, -1.0, 2.0, -0.5]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, stats = policy_loss(logp, old, adv, mask, clip=0.2)
    # per token -min(r*A, clip(r)*A): [-min(1.5,1.2), -min(-0.5,-0.8), -min(2.2,2.2)] = [-1.2, 0.8, -2.2]
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 2.2) / 3, abs=1e-6)
    assert stats["clipfrac"] == pytest.approx(2 / 3)
    w = torch.tensor([[0.5, 1.0, 2.0, 1.0]])
    loss_w, _ = policy_loss(logp, old, adv, mask, clip=0.2, weights=w)
    assert loss_w.item() == pytest.approx((-0.6 + 0.8 - 4.4) / 3, abs=1e-6)


def test_policy_loss_gradient_vanishes_when_clipped():
    logp = torch.log(torch.tensor([[1.5, 0.5]])).requires_grad_()
    loss, _ = policy_loss(logp, torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), clip=0.2)
    loss.backward()
    assert logp.grad.abs().sum() == 0


def test_value_loss_by_hand():
    v = torch.tensor([[1.0, 0.0, 0.5]])
    old = torch.tensor([[0.5, 0.5, 0.5]])
    ret = torch.tensor([[2.0, 0.0, 1.0]])
    mask = torch.ones(1, 3)
    loss, stats = value_loss(v, old, ret, mask, clip=0.2)
    # clipped v: [0.7, 0.3, 0.5]; max sq err: [max(1, 1.69), max(0, 0.09), max(.25,.25)]
    assert loss.item() == pytest.approx(0.5 * (1.69 + 0.09 + 0.25) / 3, abs=1e-6)
    assert stats["vf_clipfrac"] == pytest.approx(2 / 3)


def test_tis_weights():
    beh = torch.log(torch.tensor([0.5, 0.1, 0.4]))
    old = torch.log(torch.tensor([0.25, 0.5, 0.4]))
    torch.testing.assert_close(tis_weights(beh, old, cap=2.0), torch.tensor([0.5, 2.0, 1.0]))


class _Toy(torch.nn.Module):
    """Causal "LM" whose logits at t depend only on token t: easy to check alignment by hand."""

    def __init__(self, vocab=6):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab))

    def forward(self, input_ids, attention_mask=None):
        return type("Out", (), {"logits": self.table[input_ids]})


def test_token_logprobs_alignment():
    torch.manual_seed(0)
    m = _Toy()
    ids = torch.tensor([[1, 2, 3, 4, 5], [2, 1, 0, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]], dtype=torch.float32)
    lp = token_logprobs(m, ids, torch.ones_like(ids), mask)
    ls = torch.log_softmax(m.table, dim=-1)
    assert lp[0, 2].item() == pytest.approx(ls[2, 3].item(), abs=1e-6)
    assert lp[0, 4].item() == pytest.approx(ls[4, 5].item(), abs=1e-6)
    assert lp[1, 1].item() == pytest.approx(ls[2, 1].item(), abs=1e-6)
    assert lp[0, :2].abs().sum() == 0 and lp[1, 2:].abs().sum() == 0


def test_critic_values_alignment():
    class _Head(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            return type("Out", (), {"logits": input_ids.float()[..., None] * 10})

    ids = torch.tensor([[1, 2, 3, 4]])
    mask = torch.tensor([[0, 0, 1, 1]], dtype=torch.float32)
    assert critic_values(_Head(), ids, torch.ones_like(ids), mask).tolist() == [[0, 0, 20, 30]]


def test_configs_validate():
    with pytest.raises(ConfigError):
        PPOConfig(epochs=0)
    with pytest.raises(ConfigError):
        PPOConfig(gamma=1.5)
    with pytest.raises(ConfigError):
        PPOConfig(tis_cap=0.0)
    with pytest.raises(ConfigError):
        Sample((1,), (2, 3), 1.0, (0.0,))
    assert math.isclose(PPOConfig().clip, 0.2)
