"""The scoring options of ``oppo-sim run/compare/sweep/plan``: how the scorers batch their forwards and which
passes run on padding (``oppo_sim.pipeline.padding``).

- ``--stream-batching`` / ``--scorer-max-tokens``: streamed chunks of several sequences in one forward, and the
  tokens a forward takes per data-parallel rank;
- ``--padded-batches``: every whole-sequence forward and update padded to its batch's longest (NeMo RL without
  sequence packing, TRL);
- ``--padded-micro-batches``: each counted micro-batch padded to its longest (OpenRLHF before sample packing);
- ``--padded-roles``: the named roles' passes at the caps' width, ``--max-prompt`` + ``--max-response`` (verl
  without ``use_remove_padding``: by default its critic and its reward model);
- ``--after-update``: the passes of a step that wait for the previous step's update and weight sync (the trainer's
  own; a framework's training loop runs every pass so).
"""

from __future__ import annotations

import argparse

from oppo_sim.cliargs import on_off, positive
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import SCORING_ROLES, check_after_update
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.padding import PADDED_ROLES, check_padded_roles

__all__ = ["add_scoring_args", "SCORING_FIELDS", "padded_roles", "after_update"]

SCORING_FIELDS: tuple[str, ...] = ("stream_batching", "scorer_max_tokens", "padded_batches", "padded_micro_batches",
                                   "padded_roles", "after_update")
"""``SimConfig`` fields the scoring options set (where given)."""


def _roles(text: str, check, every: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """A roles option's value: comma-separated names, ``none`` (and, given ``every``, ``all``) -> a tuple by ``check``;
    an unknown name -> ``argparse.ArgumentTypeError`` naming the known ones."""
    key = text.strip().lower()
    if key == "none" or (every is not None and key == "all"):
        return () if key == "none" else every
    try:
        return check(key)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def padded_roles(text: str) -> tuple[str, ...]:
    """``--padded-roles`` value: comma-separated roles or ``none``."""
    return _roles(text, check_padded_roles)


def after_update(text: str) -> tuple[str, ...]:
    """``--after-update`` value: comma-separated scoring roles, ``all`` or ``none``."""
    return _roles(text, check_after_update, SCORING_ROLES)


def add_scoring_args(p: argparse.ArgumentParser) -> None:
    """Add the "scoring" option group to ``p``."""
    bool_action = argparse.BooleanOptionalAction
    s = p.add_argument_group("scoring")
    s.add_argument("--stream-batching", action=bool_action, default=None,
                   help=f"streamed chunks of several sequences share one scorer forward; --no-stream-batching: one "
                        f"forward each (default {on_off(SimConfig.stream_batching)}; streaming policies only)")
    s.add_argument("--scorer-max-tokens", type=positive(), default=None,
                   help=f"tokens per scorer forward batch (default {SimConfig.scorer_max_tokens})")
    s.add_argument("--padded-batches", action=bool_action, default=None,
                   help=f"whole-sequence scoring and training pad every sequence to the batch's longest "
                        f"(default {on_off(SimConfig.padded_batches)})")
    s.add_argument("--padded-micro-batches", action=bool_action, default=None,
                   help=f"each micro-batch of --micro-batch-size (forwards: --logprob-micro-batch-size) sequences padded "
                        f"to its longest, as OpenRLHF ran before --packing_samples (default "
                        f"{on_off(SimConfig.padded_micro_batches)})")
    s.add_argument("--padded-roles", type=padded_roles, default=None, metavar="ROLES",
                   help=f"roles whose passes run on sequences padded to --max-prompt + --max-response, as verl runs a "
                        f"model without use_remove_padding (its critic and reward model by default): comma-separated "
                        f"of {', '.join(PADDED_ROLES)} (actor: its update and old log-probs), or none (default none)")
    s.add_argument("--after-update", type=after_update, default=None, metavar="ROLES",
                   help=f"scoring passes that start only once the previous step's update and weight sync are done, "
                        f"whatever the policy overlaps, and on one pool one after the other: comma-separated of {', '.join(SCORING_ROLES)}, all (a "
                        f"framework's training loop, which runs every pass in turn: the verl, OpenRLHF and NeMo RL "
                        f"readers set it) or none; default {','.join(SimConfig.after_update)}, the passes oppo's train "
                        f"worker runs itself")
