"""One PPO step as the trainer worker runs it, with each phase timed for the timeline:
actor log-probs (``score:logprob``), critic values (``score:critic``), then the update of actor and
critic (``train:actor``), built from the functions in :mod:`oppo_real.ppo.algo`."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from oppo_real.ppo.algo import (
    PPOBatch,
    PPOConfig,
    Sample,
    _per_token,
    collate,
    critic_values,
    gae,
    kl_penalized_rewards,
    masked_whiten,
    ppo_update,
    token_logprobs,
)

Phase = Callable[[str, str, float, float], None]


def run_ppo_step(actor, critic, opt_actor, opt_critic, batch: dict[str, Any], cfg: PPOConfig, on_phase: Phase | None = None) -> dict[str, float]:
    """``batch`` holds lists: prompts, responses, scores, ref_logprobs, behaviour_logprobs."""
    note = on_phase or (lambda *_: None)
    samples = [
        Sample(tuple(p), tuple(r), float(s), tuple(ref), tuple(beh))
        for p, r, s, ref, beh in zip(batch["prompts"], batch["responses"], batch["scores"], batch["ref_logprobs"],
                                     batch["behaviour_logprobs"])
    ]
    ids, attn, mask = collate(samples)
    actor.eval()
    critic.eval()
    t0 = time.time()
    with torch.no_grad():
        old_logp = token_logprobs(actor, ids, attn, mask)
    t1 = time.time()
    note("score", "logprob", t0, t1)
    with torch.no_grad():
        old_values = critic_values(critic, ids, attn, mask)
    t2 = time.time()
    note("score", "critic", t1, t2)
    ref_logp = _per_token(samples, "ref_logprobs", mask)
    behaviour = _per_token(samples, "behaviour_logprobs", mask)
    scores = torch.tensor([s.score for s in samples], dtype=torch.float32)
    rewards = kl_penalized_rewards(scores, old_logp, ref_logp, cfg.kl_coef, mask)
    adv, ret = gae(rewards, old_values, mask, cfg.gamma, cfg.lam)
    if cfg.whiten_advantages:
        adv = masked_whiten(adv, mask)
    data = PPOBatch(ids, attn, mask, old_logp, ref_logp, old_values, rewards, adv, ret, behaviour, scores)
    t3 = time.time()
    stats = ppo_update(actor, critic, {"actor": opt_actor, "critic": opt_critic}, data, cfg)
    t4 = time.time()
    note("train", "actor", t3, t4)
    stats["behaviour_gap"] = float(((old_logp - behaviour) * mask).sum() / mask.sum().clamp(min=1))
    return stats
