"""PPO for RLHF in plain torch: log-probs, KL-penalised rewards, GAE, clipped losses, and the update.

Tensor layout: every per-token tensor is ``[B, T]`` aligned with ``input_ids`` (prompt, then response,
then right padding). ``mask`` (the response mask) is 1 on response tokens only. At a response position
t: ``logp[:, t] = log pi(x_t | x_<t)`` and ``values[:, t] = V(x_<t)`` (the critic's head at t-1), i.e.
the value of the state in which token t was chosen. Masked-out positions hold 0.

Stale samples (OPPO's deferred generations, async RL) were produced by an older policy: pass their
generator ("behaviour") log-probs and set ``PPOConfig.tis_cap`` to weight each token's policy loss by
the truncated importance ratio ``min(pi_old / pi_behaviour, cap)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from oppo_sim.core.errors import ConfigError


@dataclass(frozen=True)
class PPOConfig:
    epochs: int = 2
    minibatches: int = 2
    lr_actor: float = 1e-4
    lr_critic: float = 1e-4
    clip: float = 0.2
    vf_clip: float = 0.2
    kl_coef: float = 0.01
    gamma: float = 1.0
    lam: float = 0.95
    tis_cap: float | None = None
    whiten_advantages: bool = True
    max_grad_norm: float | None = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.minibatches < 1:
            raise ConfigError(f"PPOConfig needs epochs >= 1 and minibatches >= 1, got {self.epochs}, {self.minibatches}")
        for name in ("lr_actor", "lr_critic", "clip", "vf_clip"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"PPOConfig.{name} must be positive, got {getattr(self, name)}")
        if self.kl_coef < 0:
            raise ConfigError(f"PPOConfig.kl_coef must be >= 0, got {self.kl_coef}")
        if not (0.0 <= self.gamma <= 1.0 and 0.0 <= self.lam <= 1.0):
            raise ConfigError(f"PPOConfig gamma and lam must be in [0, 1], got {self.gamma}, {self.lam}")
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ConfigError(f"PPOConfig.tis_cap must be positive or None, got {self.tis_cap}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ConfigError(f"PPOConfig.max_grad_norm must be positive or None, got {self.max_grad_norm}")


# ---------------------------------------------------------------------- model passes


def autocast_for(model):
    """bf16 autocast for a model on a GPU (fp32 master weights, bf16 matmuls: mixed-precision training);
    a disabled context on the CPU."""
    p = next(model.parameters(), None)
    dev = p.device if p is not None else torch.device("cpu")
    return torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` log-probs of each response token under a causal LM (0 elsewhere). Differentiable."""
    with autocast_for(model):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    logits = logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:, None])[..., 0]
    out = torch.zeros_like(input_ids, dtype=logp.dtype)
    out[:, 1:] = logp
    return out * response_mask


def critic_values(critic, input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` values V(x_<t) at response positions (the scalar head at t-1; 0 elsewhere). Differentiable."""
    with autocast_for(critic):
        head = critic(input_ids=input_ids, attention_mask=attention_mask).logits[..., 0].float()
    out = torch.zeros_like(head)
    out[:, 1:] = head[:, :-1]
    return out * response_mask


# ---------------------------------------------------------------------- pure functions


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of each row's last response position (rows must have at least one)."""
    t = torch.arange(mask.shape[1], device=mask.device)
    return (t * (mask > 0)).max(dim=1).values


def kl_penalized_rewards(score: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, kl_coef: float,
                         mask: torch.Tensor) -> torch.Tensor:
    """Per-token rewards: ``-kl_coef * (logp - ref_logp)`` on response tokens, plus `score` at the last one."""
    rewards = -kl_coef * (logp - ref_logp) * mask
    rows = torch.arange(mask.shape[0], device=mask.device)
    rewards[rows, last_token_index(mask)] += score.to(rewards.dtype)
    return rewards


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """Generalised advantage estimation over each row's response segment -> (advantages, returns).

    The value after the last response token is 0 (the episode ends there).
    """
    B, T = rewards.shape
    adv = torch.zeros_like(rewards)
    last = torch.zeros(B, dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(T)):
        if t + 1 < T:
            next_mask = mask[:, t + 1]
            next_v = values[:, t + 1] * next_mask
        else:
            next_mask = torch.zeros_like(last)
            next_v = torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        last = (delta + gamma * lam * next_mask * last) * mask[:, t]
        adv[:, t] = last
    returns = (adv + values) * mask
    return adv, returns


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip: float,
                weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate, token-mean over the mask; optional per-token (e.g. TIS) weights."""
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv
    per_token = -torch.min(unclipped, clipped)
    if weights is not None:
        per_token = per_token * weights
    loss = masked_mean(per_token, mask)
    with torch.no_grad():
        stats = {
            "clipfrac": float(masked_mean(((ratio - 1.0).abs() > clip).float(), mask)),
            "approx_kl": float(masked_mean(old_logp - logp, mask)),
        }
    return loss, stats


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss ``0.5 * max((v - R)^2, (v_clipped - R)^2)``, token-mean over the mask."""
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    per_token = 0.5 * torch.max((values - returns) ** 2, (v_clipped - returns) ** 2)
    loss = masked_mean(per_token, mask)
    with torch.no_grad():
        stats = {"vf_clipfrac": float(masked_mean(((values - old_values).abs() > clip).float(), mask))}
    return loss, stats


def tis_weights(behaviour_logp: torch.Tensor, old_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weights ``min(exp(old_logp - behaviour_logp), cap)`` (no gradient)."""
    return torch.clamp(torch.exp(old_logp - behaviour_logp), max=cap).detach()


# ---------------------------------------------------------------------- batch + update


@dataclass(frozen=True)
class Sample:
    """One finished generation with its scores (lists are per response token)."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    score: float  # reward model score
    ref_logprobs: tuple[float, ...]
    behaviour_logprobs: tuple[float, ...] | None = None  # generator's log-probs (for TIS)
    values: tuple[float, ...] | None = None  # critic values from a scorer; None: computed here
    staleness: int = 0  # policy versions behind (informational)

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        if n == 0:
            raise ConfigError("Sample needs a non-empty response")
        for name in ("ref_logprobs", "behaviour_logprobs", "values"):
            v = getattr(self, name)
            if v is not None and len(v) != n:
                raise ConfigError(f"Sample.{name} has {len(v)} entries for {n} response tokens")


@dataclass
class PPOBatch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor  # response mask, float
    old_logp: torch.Tensor
    ref_logp: torch.Tensor
    old_values: torch.Tensor
    rewards: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    behaviour_logp: torch.Tensor | None = None
    scores: torch.Tensor = field(default_factory=lambda: torch.zeros(0))

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    def rows(self, idx: torch.Tensor) -> "PPOBatch":
        pick = lambda t: None if t is None else t[idx]  # noqa: E731
        return PPOBatch(**{k: pick(getattr(self, k)) for k in self.__dataclass_fields__})


def collate(samples: Sequence[Sample], pad_id: int = 0):
    """(input_ids, attention_mask, response_mask) right-padded; response_mask is float."""
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    B = len(samples)
    ids = torch.full((B, width), pad_id, dtype=torch.long)
    attn = torch.zeros((B, width), dtype=torch.long)
    mask = torch.zeros((B, width), dtype=torch.float32)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        ids[i, : p + r] = torch.tensor(tuple(s.prompt_ids) + tuple(s.response_ids))
        attn[i, : p + r] = 1
        mask[i, p : p + r] = 1.0
    return ids, attn, mask


def per_token(samples: Sequence[Sample], attr: str, like: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(like.shape, dtype=torch.float32)  # filled on the host, moved once
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        out[i, p : p + r] = torch.tensor(getattr(s, attr), dtype=torch.float32)
    return out.to(like.device)


def make_optimizers(actor, critic, cfg: PPOConfig) -> dict[str, torch.optim.Optimizer]:
    return {
        "actor": torch.optim.Adam(actor.parameters(), lr=cfg.lr_actor),
        "critic": torch.optim.Adam(critic.parameters(), lr=cfg.lr_critic),
    }


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0; verl ``low_var_kl``)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def ppo_update(actor, critic, optimizers: dict[str, torch.optim.Optimizer], batch: PPOBatch, cfg: PPOConfig,
               kl_loss: bool = False) -> dict[str, float]:
    """`cfg.epochs` x `cfg.minibatches` optimizer steps on the actor (the clipped policy loss, plus
    `cfg.kl_coef` x the k3 KL to the reference when ``kl_loss``: the GRPO family's KL term) and, where there is
    one (``critic`` not None: PPO), on the critic; returns mean stats."""
    if cfg.minibatches > batch.size:
        raise ConfigError(f"PPOConfig.minibatches ({cfg.minibatches}) exceeds the batch size ({batch.size})")
    gen = torch.Generator().manual_seed(cfg.seed)
    models = [actor] + ([critic] if critic is not None else [])
    for m in models:
        m.train()
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
            p_loss, stats = policy_loss(logp, mb.old_logp, mb.advantages, mb.mask, cfg.clip, w)
            stats["policy_loss"] = p_loss.item()
            loss = p_loss
            if kl_loss:
                kl = masked_mean(k3_kl(logp, mb.ref_logp), mb.mask)
                loss = p_loss + cfg.kl_coef * kl
                stats.update(kl_loss=kl.item(), loss=loss.item())
            _step(optimizers["actor"], actor, loss, cfg)
            if critic is not None:
                values = critic_values(critic, mb.input_ids, mb.attention_mask, mb.mask)
                v_loss, v_stats = value_loss(values, mb.old_values, mb.returns, mb.mask, cfg.vf_clip)
                _step(optimizers["critic"], critic, v_loss, cfg)
                stats.update(value_loss=v_loss.item(), **v_stats)
            for k, v in stats.items():
                acc.setdefault(k, []).append(v)
    for m in models:
        m.eval()
    stats = {k: sum(v) / len(v) for k, v in acc.items()}
    stats["mean_score"] = float(batch.scores.mean()) if batch.scores.numel() else float("nan")
    has_ref = critic is not None or kl_loss  # PPO's reward carries the KL; the GRPO family's loss, when kept
    stats["mean_kl"] = float(masked_mean(batch.old_logp - batch.ref_logp, batch.mask)) if has_ref else float("nan")
    if weights_all is not None:
        stats["tis_weight_mean"] = float(masked_mean(weights_all, batch.mask))
    return stats


def _step(optimizer: torch.optim.Optimizer, model, loss: torch.Tensor, cfg: PPOConfig) -> None:
    optimizer.zero_grad()
    loss.backward()
    if cfg.max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
    optimizer.step()
