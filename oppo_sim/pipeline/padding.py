"""Padded passes: which of a step's whole-sequence forwards and updates run on padding, and how wide.

A framework that does not remove padding runs a pass on the rectangular batch it holds, so every sequence
costs the batch's width, not its own length. Three settings say where (``SimConfig``):

- ``padded_batches``: every scoring forward and update pads its sequences to the longest of its batch
  (NeMo RL without sequence packing, whose batch is padded to its longest sequence; TRL's padded batches);
- ``padded_micro_batches``: each micro-batch of a count of sequences (``micro_batch_size``, and
  ``logprob_micro_batch_size`` for the forwards) padded to its own longest, as OpenRLHF ran before sample packing
  (``--packing_samples``, 2024-09): its experience forwards on the micro rollout batch's prompts left-padded to
  their longest and responses right-padded to theirs (``experience_maker.py`` at dbdd43b0), its updates on the micro
  train batch padded to its longest sequence (``zero_pad_sequences``); micro-batches are cut in the samples'
  admission order (the rollout's prompt order);
- ``padded_roles``: the named roles' passes run at the run's caps, ``max_prompt + max_response`` — verl
  without ``use_remove_padding``: its dataset left-pads each prompt to ``data.max_prompt_length`` and its
  rollout pads each response to ``max_response_length``, so ``input_ids`` are that wide for every sequence
  (``dp_critic`` / ``dp_actor`` ``_forward_micro_batch`` run the module on them as they are). verl's defaults
  at b178a3cd (``_generated_ppo_trainer.yaml``): the actor's model (its update, the old log-probs and the
  reference, which share ``actor_rollout_ref.model``) removes padding; the critic's and the reward model's
  do not.

A role is one of :data:`PADDED_ROLES`; the log-prob pass belongs to ``actor``. Streamed chunks (OPPO's
intra-step overlap) are not padded; a padded role's final forward computes the rest of its padded row.
The memory plan takes the padded width as the longest sequence (``memory_plan.lengths``).
"""

from __future__ import annotations

import numpy as np

from oppo_sim.core.placement import check_roles

__all__ = ["PADDED_ROLES", "check_padded_roles", "pads", "padded_width", "pass_tokens", "micro_widths"]

PADDED_ROLES: tuple[str, ...] = ("actor", "reference", "critic", "reward")
"""Roles whose passes can run padded: the actor (its update and its old log-probs), the reference, the critic
(its values and its update), the reward model."""

_OWNER = {"logprob": "actor", "train": "actor"}


def check_padded_roles(roles: object) -> tuple[str, ...]:
    """``SimConfig.padded_roles``: role names in :data:`PADDED_ROLES` order (``core.placement.check_roles``)."""
    return check_roles(roles, PADDED_ROLES, "padded_roles")


def pads(cfg, role: str) -> bool:
    """Whether ``role``'s passes (a scorer role, or a trained one) run at the padded width (``padded_roles``)."""
    return _OWNER.get(role, role) in cfg.padded_roles


def padded_width(cfg, longest_prompt: int, longest_response: int) -> int:
    """Tokens of a padded row: ``max_prompt + max_response``, each part the longest given where the run has no
    cap for it."""
    prompt = cfg.max_prompt if cfg.max_prompt is not None else longest_prompt
    response = cfg.max_response if cfg.max_response is not None else longest_response
    return int(prompt + response)


def micro_widths(lengths: np.ndarray, k: int, ids: np.ndarray | None = None) -> np.ndarray:
    """Each of ``lengths`` replaced by the largest of its micro-batch: groups of ``k`` consecutive in the order of
    ``ids`` (the samples' admission order, as a framework batches its rollout; None: as given), the last one
    shorter."""
    lengths = np.asarray(lengths, dtype=np.float64)
    if k <= 1 or len(lengths) <= 1:
        return lengths
    order = np.argsort(ids, kind="stable") if ids is not None else np.arange(len(lengths))
    groups = np.arange(len(lengths)) // k
    out = np.empty_like(lengths)
    out[order] = np.maximum.reduceat(lengths[order], np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]]))[groups]
    return out


def pass_tokens(cfg, role: str, prompts: np.ndarray, responses: np.ndarray, ids: np.ndarray | None = None,
                micro: int = 0) -> np.ndarray:
    """Tokens each sequence of an update of ``role`` computes: the run's padded width for a padded role, the
    batch's longest with ``padded_batches``, its micro-batch's longest with ``padded_micro_batches`` (``micro``
    sequences a micro-batch, ``CostModel.micro_batch``'s; 0 where they are by tokens), else its own prompt +
    response (``ids``: the samples' admission order, in which micro-batches are cut)."""
    seqs = np.asarray(prompts, dtype=np.float64) + np.asarray(responses, dtype=np.float64)
    if not len(seqs):
        return seqs
    if pads(cfg, role):
        return np.full_like(seqs, padded_width(cfg, int(np.max(prompts)), int(np.max(responses))))
    if cfg.padded_batches:
        return np.full_like(seqs, seqs.max())
    if cfg.padded_micro_batches:
        return micro_widths(seqs, micro, ids)
    return seqs
