"""A toy RLHF task on which PPO measurably learns within minutes on a CPU.

- Prompts: random token ids (length in [prompt_len_min, prompt_len_max]) followed by ``SEP_ID``.
- Rule: reward = fraction of response tokens that lie in a fixed "good" subset of the vocabulary
  (``good_fraction`` of the non-special ids, picked by ``seed``). A uniform policy scores about
  ``good_fraction``; a policy that only emits good tokens scores 1.
- Reward model: a transformer (backbone + scalar head) regressed on that rule for a few hundred Adam
  steps over random sequences at build time (`train_reward_model`), so the reward worker does a real
  forward pass whose score tracks the rule; the fit's correlation is reported in `RewardFit`.

Special ids: ``PAD_ID`` = 0, ``SEP_ID`` = 1 (end of prompt), ``EOS_ID`` = 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from oppo_sim.core.errors import ConfigError

PAD_ID = 0
SEP_ID = 1
EOS_ID = 2
NUM_SPECIAL = 3


@dataclass(frozen=True)
class TaskConfig:
    vocab: int = 512
    prompt_len_min: int = 8
    prompt_len_max: int = 16
    good_fraction: float = 0.25
    seed: int = 0
    # reward-model fit (build time)
    reward_train_steps: int = 200
    reward_train_batch: int = 32
    reward_train_lr: float = 3e-3
    reward_resp_len_max: int = 32
    reward_eval_samples: int = 256

    def __post_init__(self) -> None:
        if self.vocab < NUM_SPECIAL + 4:
            raise ConfigError(f"TaskConfig.vocab must be at least {NUM_SPECIAL + 4}, got {self.vocab}")
        if not 1 <= self.prompt_len_min <= self.prompt_len_max:
            raise ConfigError(
                f"TaskConfig needs 1 <= prompt_len_min <= prompt_len_max, got {self.prompt_len_min}, {self.prompt_len_max}"
            )
        if not 0.0 < self.good_fraction < 1.0:
            raise ConfigError(f"TaskConfig.good_fraction must be in (0, 1), got {self.good_fraction}")
        for name in ("reward_train_batch", "reward_resp_len_max", "reward_eval_samples"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"TaskConfig.{name} must be positive, got {getattr(self, name)}")
        if self.reward_train_steps < 0:
            raise ConfigError(f"TaskConfig.reward_train_steps must be >= 0, got {self.reward_train_steps}")
        if self.reward_train_lr <= 0:
            raise ConfigError(f"TaskConfig.reward_train_lr must be positive, got {self.reward_train_lr}")

    def good_tokens(self) -> np.ndarray:
        """Sorted ids of the good subset (deterministic given seed and vocab)."""
        rng = np.random.default_rng([self.seed, 0x600D])
        normal = np.arange(NUM_SPECIAL, self.vocab)
        n_good = max(1, int(round(self.good_fraction * normal.size)))
        return np.sort(rng.choice(normal, size=n_good, replace=False))

    def good_mask(self) -> np.ndarray:
        """Boolean mask over the vocabulary, True for good ids."""
        mask = np.zeros(self.vocab, dtype=bool)
        mask[self.good_tokens()] = True
        return mask


def rule_reward(task: TaskConfig, response_ids: Sequence[int], _mask: np.ndarray | None = None) -> float:
    """Fraction of response tokens in the good subset (0 for an empty response)."""
    if len(response_ids) == 0:
        return 0.0
    mask = task.good_mask() if _mask is None else _mask
    ids = np.asarray(response_ids, dtype=np.int64)
    return float(mask[ids].mean())


class PromptSampler:
    """Deterministic stream of prompts: `sample(n)` returns the next n prompts (each ends with SEP_ID)."""

    def __init__(self, task: TaskConfig, seed: int | None = None) -> None:
        self.task = task
        self._rng = np.random.default_rng([task.seed if seed is None else seed, 0x9803])

    def sample(self, n: int) -> list[tuple[int, ...]]:
        if n < 0:
            raise ConfigError(f"PromptSampler.sample needs n >= 0, got {n}")
        out = []
        for _ in range(n):
            length = int(self._rng.integers(self.task.prompt_len_min, self.task.prompt_len_max + 1))
            body = self._rng.integers(NUM_SPECIAL, self.task.vocab, size=length)
            out.append(tuple(int(t) for t in body) + (SEP_ID,))
        return out


@dataclass(frozen=True)
class RewardFit:
    """How well the trained reward model tracks the rule on held-out random sequences."""

    steps: int
    final_loss: float
    correlation: float
    mae: float


def random_scored_sequences(task: TaskConfig, n: int, rng: np.random.Generator):
    """n random (prompt, response, rule reward) triples with good-fractions spread over [0, 1]."""
    good = task.good_tokens()
    bad = np.setdiff1d(np.arange(NUM_SPECIAL, task.vocab), good)
    mask = task.good_mask()
    sampler = PromptSampler(task, seed=int(rng.integers(1 << 31)))
    out = []
    for prompt in sampler.sample(n):
        length = int(rng.integers(1, task.reward_resp_len_max + 1))
        p = float(rng.uniform())
        is_good = rng.uniform(size=length) < p
        resp = np.where(is_good, rng.choice(good, size=length), rng.choice(bad, size=length))
        if length > 1 and rng.uniform() < 0.3:
            resp[-1] = EOS_ID
        resp_t = tuple(int(t) for t in resp)
        out.append((prompt, resp_t, rule_reward(task, resp_t, mask)))
    return out


def train_reward_model(model, task: TaskConfig) -> RewardFit:
    """Regress `model` (token-classification head, num_labels=1; score at last token) on the rule.

    Deterministic given ``task.seed`` and torch's global seed at call time. Leaves the model in eval mode.
    """
    import torch

    rng = np.random.default_rng([task.seed, 0xBEEF])
    opt = torch.optim.Adam(model.parameters(), lr=task.reward_train_lr)
    model.train()
    loss_val = float("nan")
    for step in range(task.reward_train_steps):
        batch = random_scored_sequences(task, task.reward_train_batch, rng)
        ids, attn, last = _pad_right([p + r for p, r, _ in batch])
        target = torch.tensor([y for _, _, y in batch], dtype=torch.float32)
        for g in opt.param_groups:  # linear warm-down keeps the end of the fit stable
            g["lr"] = task.reward_train_lr * (1.0 - step / max(1, task.reward_train_steps))
        pred = score_last_token(model, ids, attn, last)
        loss = torch.nn.functional.mse_loss(pred, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss_val = float(loss.detach())
    model.eval()
    corr, mae = evaluate_reward_model(model, task, n=task.reward_eval_samples, seed=task.seed + 12345)
    return RewardFit(steps=task.reward_train_steps, final_loss=loss_val, correlation=corr, mae=mae)


def evaluate_reward_model(model, task: TaskConfig, n: int = 256, seed: int = 1) -> tuple[float, float]:
    """(Pearson correlation, mean abs error) of the model's score vs the rule on fresh random sequences."""
    import torch

    rng = np.random.default_rng([seed, 0xE1A1])
    batch = random_scored_sequences(task, n, rng)
    ids, attn, last = _pad_right([p + r for p, r, _ in batch])
    with torch.no_grad():
        pred = score_last_token(model, ids, attn, last).numpy()
    target = np.array([y for _, _, y in batch])
    corr = float(np.corrcoef(pred, target)[0, 1]) if pred.std() > 0 else 0.0
    return corr, float(np.abs(pred - target).mean())


def score_last_token(model, input_ids, attention_mask, last_index):
    """Scalar head output at each row's last real token: shape [B]."""
    import torch

    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[..., 0]
    return logits[torch.arange(logits.shape[0]), last_index]


def _pad_right(seqs: list[tuple[int, ...]]):
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
    last = torch.tensor([len(s) - 1 for s in seqs])
    return ids, attn, last
