"""One training step — the only code path that trains, used by the train worker and by the tests.

PPO (:func:`run_ppo_step`): actor log-probs (timed as ``score:logprob``), critic values (``score:critic``),
KL-penalised rewards, GAE, then the clipped update of actor and critic (``train:actor``), built from
:mod:`oppo_real.ppo.algo`. The GRPO family (:func:`run_group_step`): actor log-probs, the group
advantage of :mod:`oppo_real.ppo.group` on every response token, and the actor-only update — no critic."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from oppo_real.devices.device_map import synchronize
from oppo_real.executor.messages import TrainBatch
from oppo_real.ppo.algo import (
    PPOBatch,
    PPOConfig,
    Sample,
    collate,
    critic_values,
    gae,
    kl_penalized_rewards,
    masked_whiten,
    per_token,
    ppo_update,
    token_logprobs,
)
from oppo_real.ppo.group import group_advantages
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError

Phase = Callable[[str, str, float, float], None]


def samples_of(batch: TrainBatch) -> list[Sample]:
    return [
        Sample(tuple(p), tuple(r), float(s), tuple(ref), tuple(beh))
        for p, r, s, ref, beh in zip(batch.prompts, batch.responses, batch.scores, batch.ref_logprobs,
                                     batch.behaviour_logprobs)
    ]


@torch.no_grad()
def _inputs(actor, samples: Sequence[Sample], note: Phase):
    """What both families compute first: the padded batch on the actor's device and the old log-probs
    (the actor's current weights, timed as ``score:logprob``), the reference's and the behaviour policy's
    per-token log-probs, and the scores."""
    if not samples:
        raise ConfigError("a training step needs at least one sample")
    dev = next(actor.parameters()).device
    ids, attn, mask = (t.to(dev) for t in collate(samples))
    actor.eval()
    t0 = time.time()
    old_logp = token_logprobs(actor, ids, attn, mask)
    synchronize(str(dev))  # a phase ends when the GPU is done with it
    note("score", "logprob", t0, time.time())
    ref_logp = per_token(samples, "ref_logprobs", mask)
    behaviour = per_token(samples, "behaviour_logprobs", mask) if all(s.behaviour_logprobs is not None for s in samples) else None
    scores = torch.tensor([s.score for s in samples], dtype=torch.float32, device=dev)
    return ids, attn, mask, old_logp, ref_logp, behaviour, scores


@torch.no_grad()
def prepare_batch(actor, critic, samples: Sequence[Sample], cfg: PPOConfig, on_phase: Phase | None = None) -> PPOBatch:
    """Old log-probs (the actor's current weights), values, KL-penalised rewards and GAE advantages."""
    note = on_phase or (lambda *_: None)
    ids, attn, mask, old_logp, ref_logp, behaviour, scores = _inputs(actor, samples, note)
    critic.eval()
    t1 = time.time()
    old_values = critic_values(critic, ids, attn, mask)
    synchronize(str(ids.device))
    note("score", "critic", t1, time.time())
    rewards = kl_penalized_rewards(scores, old_logp, ref_logp, cfg.kl_coef, mask)
    adv, ret = gae(rewards, old_values, mask, cfg.gamma, cfg.lam)
    if cfg.whiten_advantages:
        adv = masked_whiten(adv, mask)
    return PPOBatch(ids, attn, mask, old_logp, ref_logp, old_values, rewards, adv, ret, behaviour, scores)


def _timed_update(actor, critic, optimizers: dict[str, torch.optim.Optimizer], data: PPOBatch, cfg: PPOConfig,
                  on_phase: Phase | None, kl_loss: bool = False) -> dict[str, float]:
    """The update, timed as ``train:actor``, and how far the behaviour policy was from the trained one."""
    t0 = time.time()
    stats = ppo_update(actor, critic, optimizers, data, cfg, kl_loss=kl_loss)
    synchronize(str(data.input_ids.device))
    if on_phase is not None:
        on_phase("train", "actor", t0, time.time())
    if data.behaviour_logp is not None:
        stats["behaviour_gap"] = float(((data.old_logp - data.behaviour_logp) * data.mask).sum() / data.mask.sum().clamp(min=1))
    return stats


def run_ppo_step(actor, critic, optimizers: dict[str, torch.optim.Optimizer], batch: TrainBatch, cfg: PPOConfig,
                 on_phase: Phase | None = None) -> dict[str, float]:
    """Score the batch with the current actor and critic, then ``cfg.epochs`` x ``cfg.minibatches`` updates."""
    return _timed_update(actor, critic, optimizers, prepare_batch(actor, critic, samples_of(batch), cfg, on_phase), cfg,
                         on_phase)


@torch.no_grad()
def prepare_group_batch(actor, samples: Sequence[Sample], groups: Sequence[int], algorithm: Algorithm,
                        on_phase: Phase | None = None) -> PPOBatch:
    """Old log-probs (the actor's current weights) and the group advantage of each sample on every one of
    its response tokens; no values, no returns (zeros: there is no critic)."""
    ids, attn, mask, old_logp, ref_logp, behaviour, scores = _inputs(actor, samples, on_phase or (lambda *_: None))
    adv = group_advantages([s.score for s in samples], groups, algorithm.name).to(ids.device)[:, None] * mask
    zeros = torch.zeros_like(mask)
    return PPOBatch(ids, attn, mask, old_logp, ref_logp, zeros, zeros, adv, zeros, behaviour, scores)


def run_group_step(actor, optimizer: torch.optim.Optimizer, batch: TrainBatch, cfg: PPOConfig, algorithm: Algorithm,
                   on_phase: Phase | None = None) -> dict[str, float]:
    """A critic-free step of ``algorithm`` (grpo, rloo, reinforce++, dapo) on ``batch``: group advantages,
    then ``cfg.epochs`` x ``cfg.minibatches`` actor updates (KL to the reference when ``algorithm.kl``)."""
    if algorithm.critic:
        raise ConfigError(f"run_group_step is for the critic-free algorithms, not {algorithm.name}")
    groups = batch.groups or tuple(range(len(batch.prompts)))
    data = prepare_group_batch(actor, samples_of(batch), groups, algorithm, on_phase)
    return _timed_update(actor, None, {"actor": optimizer}, data, cfg, on_phase, kl_loss=algorithm.kl)
