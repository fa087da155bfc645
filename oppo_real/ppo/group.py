"""The critic-free update of the GRPO family: a sequence-level advantage from the prompt's own group,
broadcast to every response token, the clipped policy loss, and (when the algorithm keeps a reference)
a KL-to-the-reference loss term with the k3 estimator. No value model, no value loss.

Advantages per algorithm (``r`` the rewards of one group, n its members present in the batch):

| algorithm | advantage of member i |
|---|---|
| ``grpo``, ``dapo`` | ``(r_i - mean(r)) / (std(r) + eps)`` (std with Bessel's correction, as verl) |
| ``rloo`` | ``r_i - mean of the other n-1`` (= ``n/(n-1) * (r_i - mean(r))``) |
| ``reinforce++`` | ``r_i - mean(r)``, then whitened over the whole batch |

Groups are given per sample as a group id (``sid // n``), so a batch holding part of a group (a member
without its group, under a step machine that batches samples rather than groups) still gets an advantage
from the members it has: a group of one has advantage 0 (nothing to compare with). DAPO's all-equal
groups would give 0 too; the step machine drops them before they reach the batch.
"""

from __future__ import annotations

from typing import Sequence

import torch

from oppo_real.ppo.algo import (
    PPOBatch,
    PPOConfig,
    masked_mean,
    policy_loss,
    tis_weights,
    token_logprobs,
)
from oppo_sim.core.errors import ConfigError

GROUP_EPS = 1e-6
"""The ``eps`` of GRPO's ``(r - mean) / (std + eps)`` (verl's ``epsilon``)."""


def group_advantages(rewards: Sequence[float], groups: Sequence[int], algorithm: str, eps: float = GROUP_EPS) -> torch.Tensor:
    """One advantage per sample (shape ``[B]``) from its reward and its group's rewards."""
    if len(rewards) != len(groups):
        raise ConfigError(f"group_advantages needs one group id per reward, got {len(groups)} for {len(rewards)}")
    if algorithm not in ("grpo", "dapo", "rloo", "reinforce++"):
        raise ConfigError(f"no group advantage for algorithm '{algorithm}' (ppo uses GAE on its critic)")
    r = torch.tensor([float(x) for x in rewards], dtype=torch.float32)
    adv = torch.zeros_like(r)
    g = torch.tensor([int(x) for x in groups])
    for gid in torch.unique(g):
        idx = (g == gid).nonzero(as_tuple=True)[0]
        n = idx.numel()
        if n < 2:
            continue  # a group of one: no baseline to compare with
        rg = r[idx]
        centred = rg - rg.mean()
        if algorithm in ("grpo", "dapo"):
            adv[idx] = centred / (rg.std(unbiased=True) + eps)
        elif algorithm == "rloo":
            adv[idx] = centred * n / (n - 1)
        else:  # reinforce++: the group-mean baseline; normalised over the batch below
            adv[idx] = centred
    if algorithm == "reinforce++" and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std(unbiased=True) + eps)
    return adv


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0; verl ``low_var_kl``)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def group_update(actor, optimizer: torch.optim.Optimizer, batch: PPOBatch, cfg: PPOConfig, kl: bool) -> dict[str, float]:
    """``cfg.epochs`` x ``cfg.minibatches`` optimizer steps on the actor alone: the clipped policy loss on
    ``batch.advantages`` (already per token) plus ``cfg.kl_coef`` x the k3 KL to the reference when ``kl``."""
    if cfg.minibatches > batch.size:
        raise ConfigError(f"PPOConfig.minibatches ({cfg.minibatches}) exceeds the batch size ({batch.size})")
    gen = torch.Generator().manual_seed(cfg.seed)
    actor.train()
    acc: dict[str, list[float]] = {}
    weights_all = None
    if cfg.tis_cap is not None and batch.behaviour_logp is not None:
        weights_all = tis_weights(batch.behaviour_logp, batch.old_logp, cfg.tis_cap)
    for _ in range(cfg.epochs):
        perm = torch.randperm(batch.size, generator=gen)
        for idx in torch.chunk(perm, cfg.minibatches):
            mb = batch.rows(idx)
            logp = token_logprobs(actor, mb.input_ids, mb.attention_mask, mb.mask)
            w = None if weights_all is None else weights_all[idx]
            p_loss, p_stats = policy_loss(logp, mb.old_logp, mb.advantages, mb.mask, cfg.clip, w)
            loss = p_loss
            if kl:
                kl_loss = masked_mean(k3_kl(logp, mb.ref_logp), mb.mask)
                loss = p_loss + cfg.kl_coef * kl_loss
                p_stats["kl_loss"] = kl_loss.item()
            optimizer.zero_grad()
            loss.backward()
            if cfg.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(actor.parameters(), cfg.max_grad_norm)
            optimizer.step()
            for k, v in {"policy_loss": p_loss.item(), "loss": loss.item(), **p_stats}.items():
                acc.setdefault(k, []).append(v)
    actor.eval()
    stats = {k: sum(v) / len(v) for k, v in acc.items()}
    stats["mean_score"] = float(batch.scores.mean()) if batch.scores.numel() else float("nan")
    stats["mean_kl"] = float(masked_mean(batch.old_logp - batch.ref_logp, batch.mask)) if kl else float("nan")
    if weights_all is not None:
        stats["tis_weight_mean"] = float(masked_mean(weights_all, batch.mask))
    return stats
