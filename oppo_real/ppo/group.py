"""The GRPO family's advantage: a sequence-level advantage from the prompt's own group, broadcast to every
response token by ``oppo_real.ppo.step``; the update is ``oppo_real.ppo.algo.ppo_update`` without a critic
(the clipped policy loss, plus a k3 KL-to-the-reference loss term when the algorithm keeps a reference).

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
