"""The critic-free GRPO-family update: advantages per algorithm against hand-computed values (a group of 4
with known rewards), the k3 KL term, and the update lowering the loss on a fixed batch with no critic."""

from __future__ import annotations

import math

import pytest
import torch

from oppo_real.executor.messages import TrainBatch
from oppo_real.ppo.algo import PPOConfig, k3_kl, policy_loss, token_logprobs
from oppo_real.ppo.group import group_advantages
from oppo_real.ppo.step import prepare_group_batch, run_group_step, samples_of
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError

G1 = [1.0, 0.0, 0.0, 0.0]  # mean 0.25, unbiased std sqrt(0.75 / 3) = 0.5
G2 = [0.2, 0.2, 0.6, 0.2]  # mean 0.3


def _close(got, want):
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float32), rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["grpo", "dapo"])
def test_grpo_advantage_by_hand(name):
    _close(group_advantages(G1, [0] * 4, name), [1.5, -0.5, -0.5, -0.5])


def test_rloo_advantage_by_hand():
    # r_i - mean of the other three: 1 - 0 = 1; 0 - 1/3
    _close(group_advantages(G1, [0] * 4, "rloo"), [1.0, -1 / 3, -1 / 3, -1 / 3])


def test_reinforce_pp_advantage_by_hand():
    centred = [0.75, -0.25, -0.25, -0.25, -0.1, -0.1, 0.3, -0.1]  # r - its group's mean; mean over the batch 0
    std = math.sqrt(sum(c * c for c in centred) / 7)
    _close(group_advantages(G1 + G2, [0] * 4 + [1] * 4, "reinforce++"), [c / std for c in centred])


def test_groups_are_independent_and_unordered():
    together = group_advantages(G2 + G1, [5, 5, 5, 5, 3, 3, 3, 3], "grpo")
    _close(together[4:], [1.5, -0.5, -0.5, -0.5])
    interleaved = group_advantages([G1[0], G2[0], G1[1], G2[1]], [0, 1, 0, 1], "rloo")
    _close(interleaved, [1.0, 0.0, -1.0, 0.0])


def test_degenerate_groups_have_zero_advantage():
    _close(group_advantages([0.7, 0.7, 0.7, 0.7], [0] * 4, "grpo"), [0.0] * 4)  # dapo drops these
    _close(group_advantages([0.7], [0], "rloo"), [0.0])  # a group of one: nothing to compare with


def test_group_advantages_bad_input():
    with pytest.raises(ConfigError, match="ppo"):
        group_advantages(G1, [0] * 4, "ppo")
    with pytest.raises(ConfigError, match="one group id per reward"):
        group_advantages(G1, [0] * 3, "grpo")


def test_k3_kl_by_hand():
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.0, -1.0, -1.5])
    d = ref - logp  # [0, 1, -1]
    _close(k3_kl(logp, ref), [0.0, math.exp(1) - 2.0, math.exp(-1)])
    assert (k3_kl(logp, ref) >= 0).all() and d[0] == 0


def _with_reference(batch: TrainBatch, model) -> TrainBatch:
    """``batch`` with the reference log-probs of ``model`` (the initial actor, as a real reference)."""
    from dataclasses import replace

    from oppo_real.ppo.algo import collate

    samples = samples_of(batch)
    ids, attn, mask = collate(samples)
    with torch.no_grad():
        logp = token_logprobs(model, ids, attn, mask)
    ref = tuple(tuple(logp[i, len(p): len(p) + len(r)].tolist()) for i, (p, r) in enumerate(zip(batch.prompts, batch.responses)))
    return replace(batch, ref_logprobs=ref)


def _fixed_batch(task_cfg, groups=2, n=4, seed=0):
    """``groups`` prompts x ``n`` responses with rule rewards (a real function of the tokens)."""
    from oppo_real.models.task import PromptSampler, rule_reward

    rng = torch.Generator().manual_seed(seed)
    prompts, responses, scores = [], [], []
    for p in PromptSampler(task_cfg, seed=seed).sample(groups):
        for _ in range(n):
            length = int(torch.randint(4, 12, (1,), generator=rng))
            r = tuple(int(t) for t in torch.randint(3, task_cfg.vocab, (length,), generator=rng))
            prompts.append(p)
            responses.append(r)
            scores.append(rule_reward(task_cfg, r))
    ref = tuple(tuple(-1.0 for _ in r) for r in responses)
    return TrainBatch(0, tuple(prompts), tuple(responses), tuple(scores), ref, ref,
                      groups=tuple(i // n for i in range(len(prompts))))


@pytest.mark.parametrize("name,kl", [("grpo", True), ("rloo", False), ("reinforce++", True)])
def test_group_update_lowers_the_loss_on_a_fixed_batch(models, task_cfg, name, kl):
    from oppo_real.models.tiny import load_causal_lm

    torch.manual_seed(0)
    actor = load_causal_lm(models.actor)
    algo = Algorithm(name, n=4, reward="rule", kl=kl)
    batch = _with_reference(_fixed_batch(task_cfg), actor)
    cfg = PPOConfig(epochs=4, minibatches=2, lr_actor=1e-3)
    data = prepare_group_batch(actor, samples_of(batch), batch.groups, algo)
    assert data.advantages.abs().sum() > 0

    def loss_now():
        with torch.no_grad():
            logp = token_logprobs(actor, data.input_ids, data.attention_mask, data.mask)
            return policy_loss(logp, data.old_logp, data.advantages, data.mask, cfg.clip)[0].item()

    before = loss_now()
    opt = torch.optim.Adam(actor.parameters(), lr=cfg.lr_actor)
    stats = run_group_step(actor, opt, batch, cfg, algo)
    assert loss_now() < before - 1e-3
    assert ("kl_loss" in stats) == kl and "value_loss" not in stats
    assert math.isnan(stats["mean_kl"]) != kl


def test_without_kl_the_reference_is_not_read(models, task_cfg):
    """KL off: the update is the same whatever reference log-probs the batch carries."""
    from dataclasses import replace

    from oppo_real.models.tiny import load_causal_lm

    algo = Algorithm("grpo", n=4, reward="rule", kl=False)
    batch = _fixed_batch(task_cfg)
    other = replace(batch, ref_logprobs=tuple(tuple(-7.0 for _ in r) for r in batch.responses))
    out = []
    for b in (batch, other):
        torch.manual_seed(0)
        actor = load_causal_lm(models.actor)
        run_group_step(actor, torch.optim.Adam(actor.parameters(), lr=1e-3), b, PPOConfig(epochs=1, minibatches=1), algo)
        out.append(torch.cat([p.detach().flatten() for p in actor.parameters()]))
    torch.testing.assert_close(out[0], out[1], rtol=0, atol=0)


def test_ppo_cannot_take_the_group_step(models, task_cfg):
    from oppo_real.models.tiny import load_causal_lm

    actor = load_causal_lm(models.actor)
    with pytest.raises(ConfigError, match="critic-free"):
        run_group_step(actor, torch.optim.Adam(actor.parameters()), _fixed_batch(task_cfg), PPOConfig(), Algorithm())


def test_train_worker_builds_no_critic_under_grpo(models, task_cfg):
    """The critic is never loaded (its directory is not even given), has no optimizer, and the worker trains."""
    from oppo_real.workers.train import TrainWorker, TrainWorkerConfig

    w = TrainWorker(TrainWorkerConfig(actor=str(models.actor), critic=None, algorithm=Algorithm("grpo", n=4, reward="rule"),
                                      ppo=PPOConfig(epochs=1, minibatches=2)))
    assert w.critic is None and set(w.opt) == {"actor"}
    stats = w.train(_fixed_batch(task_cfg))
    assert math.isfinite(stats["policy_loss"]) and w.version == 1
    roles = {row[3] for row in w.take_timeline()}
    assert roles == {"logprob", "actor"}  # no critic pass


def test_train_worker_ppo_needs_its_critic(models):
    from oppo_real.workers.train import TrainWorker, TrainWorkerConfig

    with pytest.raises(ConfigError, match="critic"):
        TrainWorker(TrainWorkerConfig(actor=str(models.actor), critic=None))
