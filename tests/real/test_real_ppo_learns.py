"""Behaviour check: a short PPO run with the torch actor raises the mean reward on the toy task — through
`run_ppo_step`, the one PPO code path the train worker runs — and so does a short GRPO run (groups of n
responses to one prompt, the rule reward, no critic) through `run_group_step`."""

from __future__ import annotations

import numpy as np
import torch

from oppo_real.backends.api import GenRequest, SamplingConfig, run_to_completion
from oppo_real.backends.scorer import IncrementalScorer, ScorerConfig
from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig
from oppo_real.executor.messages import TrainBatch
from oppo_real.models.task import PromptSampler, rule_reward
from oppo_real.models.tiny import load_causal_lm, load_value_model
from oppo_real.ppo.algo import PPOConfig, make_optimizers
from oppo_real.ppo.step import run_group_step, run_ppo_step
from oppo_sim.core.algorithms import Algorithm

STEPS, BATCH, RESP_LEN = 30, 16, 16


def test_ppo_increases_mean_reward(models, task_cfg):
    torch.manual_seed(0)
    actor, critic = load_causal_lm(models.actor), load_value_model(models.critic)
    reward = IncrementalScorer(ScorerConfig("reward", str(models.reward)))
    reference = IncrementalScorer(ScorerConfig("reference", str(models.reference)))
    cfg = PPOConfig(epochs=2, minibatches=2, lr_actor=1e-3, lr_critic=1e-3, kl_coef=0.01, tis_cap=2.0)
    opts = make_optimizers(actor, critic, cfg)
    # The generator has its own copy of the weights, synced after each update like a real executor.
    gen = TorchActor(TorchActorConfig(model=str(models.actor), sampling=SamplingConfig(temperature=1.0, seed=0)))
    sampler, good = PromptSampler(task_cfg), task_cfg.good_mask()
    rule_means, rm_means, kls = [], [], []
    for step in range(STEPS):
        reqs = [GenRequest(f"{step}-{i}", p, RESP_LEN, ignore_eos=True) for i, p in enumerate(sampler.sample(BATCH))]
        out = run_to_completion(gen, reqs)
        items = [(r.req_id, r.prompt_ids, tuple(out[r.req_id][0])) for r in reqs]
        scores, refs = reward.score_batch(items), reference.score_batch(items)
        batch = TrainBatch(
            step, tuple(p for _, p, _ in items), tuple(resp for _, _, resp in items), tuple(s.reward for s in scores),
            tuple(tuple(rf.logprobs) for rf in refs), tuple(tuple(out[rid][1]) for rid, _, _ in items),
        )
        stats = run_ppo_step(actor, critic, opts, batch, cfg)
        gen.load_weights(actor.state_dict())
        rule_means.append(np.mean([rule_reward(task_cfg, resp, good) for _, _, resp in items]))
        rm_means.append(stats["mean_score"])
        kls.append(stats["mean_kl"])
        assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["value_loss"])
    first, last = np.mean(rule_means[:5]), np.mean(rule_means[-5:])
    assert last > first + 0.1, (rule_means, rm_means)
    assert np.mean(rm_means[-5:]) > np.mean(rm_means[:5]) + 0.1
    assert kls[-1] > 0  # the policy moved away from the reference


def test_grpo_increases_mean_reward(models, task_cfg):
    torch.manual_seed(0)
    actor = load_causal_lm(models.actor)
    reference = IncrementalScorer(ScorerConfig("reference", str(models.reference)))
    algo, prompts = Algorithm("grpo", n=4, reward="rule"), BATCH // 4
    cfg = PPOConfig(epochs=2, minibatches=2, lr_actor=1e-3, kl_coef=0.01)
    opt = torch.optim.Adam(actor.parameters(), lr=cfg.lr_actor)
    gen = TorchActor(TorchActorConfig(model=str(models.actor), sampling=SamplingConfig(temperature=1.0, seed=0)))
    sampler, good = PromptSampler(task_cfg), task_cfg.good_mask()
    rule_means, kls = [], []
    for step in range(STEPS):
        group_prompts = sampler.sample(prompts)  # each prompt n times: one group
        reqs = [GenRequest(f"{step}-{i}", group_prompts[i // algo.n], RESP_LEN, ignore_eos=True)
                for i in range(prompts * algo.n)]
        out = run_to_completion(gen, reqs)
        items = [(r.req_id, r.prompt_ids, tuple(out[r.req_id][0])) for r in reqs]
        refs = reference.score_batch(items)
        rewards = tuple(rule_reward(task_cfg, resp, good) for _, _, resp in items)
        batch = TrainBatch(
            step, tuple(p for _, p, _ in items), tuple(resp for _, _, resp in items), rewards,
            tuple(tuple(rf.logprobs) for rf in refs), tuple(tuple(out[rid][1]) for rid, _, _ in items),
            groups=tuple(i // algo.n for i in range(len(items))),
        )
        stats = run_group_step(actor, opt, batch, cfg, algo)
        gen.load_weights(actor.state_dict())
        rule_means.append(np.mean(rewards))
        kls.append(stats["mean_kl"])
        assert np.isfinite(stats["policy_loss"]) and "value_loss" not in stats
    assert np.mean(rule_means[-5:]) > np.mean(rule_means[:5]) + 0.1, rule_means
    assert kls[-1] > 0  # the policy moved away from the reference
