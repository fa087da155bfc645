"""``oppo-sim``'s policy knobs: the options, which policies use each one, and the policy they build.

Every knob has ``default=None`` ("not given"): :func:`~oppo_sim.core.policies.make_policy` then takes the
policy class's own default (named in the help), and a knob given for policies none of which use it is
an error naming the knob and the policy (:func:`check_policy_flags`), never silently ignored."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Iterable

from oppo_sim.cliargs import flag_name, int_list, integer, on_off
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import (
    POLICY_NAMES,
    Async,
    ChunkAutotune,
    DeltaRule,
    Inter,
    Intra,
    PartialRollout,
    make_policy,
    policy_uses_chunks,
)
from oppo_sim.explore.space import RULED, STREAMING
from oppo_sim.explore.sweep import CHUNK_POLICIES, DELTA_POLICIES


@dataclass(frozen=True)
class Knob:
    """An option (``dest``), the ``make_policy`` keyword it sets (None: a config setting), the policies
    that use it, and what a policy without it lacks."""

    dest: str
    keyword: str | None
    users: frozenset[str]
    why: str


_RULE = "no reward-slope Δ rule"
KNOBS: tuple[Knob, ...] = (
    Knob("chunk", "chunk", CHUNK_POLICIES, "no fixed chunk size C"),
    Knob("delta", "delta", DELTA_POLICIES, "no over-admission Δ"),
    Knob("delta_min", "delta_min", RULED, _RULE),
    Knob("delta_max", "delta_max", RULED, _RULE),
    Knob("delta_window", "window", RULED, _RULE),
    Knob("delta_inc", "inc", RULED, _RULE),
    Knob("delta_dec", "dec", RULED, _RULE),
    Knob("delta_proportional", "proportional", RULED, _RULE),
    Knob("budget", "budget", frozenset({"partial-rollout"}), "no per-step token budget"),
    Knob("staleness", "staleness", frozenset({"async"}), "no staleness bound"),
    Knob("in_flight_weight_updates", "in_flight", frozenset({"async"}), "no weight refit beside generation"),
    Knob("chunk_candidates", "candidates", frozenset({"chunk-autotune"}), "no chunk autotuning"),
    Knob("autotune_every", "every", frozenset({"chunk-autotune"}), "no chunk autotuning"),
    Knob("stream_batching", None, frozenset(STREAMING), "nothing streamed to the scorers"),
    Knob("call_tokens", None, frozenset(n for n in POLICY_NAMES if not policy_uses_chunks(make_policy(n))),
         "its chunk size C is the static engine's call length"),
)
"""Every policy-dependent option of ``run``/``compare``/``sweep``/``plan``. ``--[no-]stream-batching`` and
``--call-tokens`` are config settings (``cli_setup``) that only some policies use: the streaming ones, and
those without a chunk size C (a chunked policy's C sets each static ``generate`` call)."""


def add_policy_args(p: argparse.ArgumentParser, grid: bool = False) -> None:
    """The knobs; ``grid`` (``sweep``) leaves out ``--chunk``/``--delta``, which its ``--chunks``/``--deltas`` replace."""
    r = DeltaRule
    k = p.add_argument_group("policy knobs (an error if no chosen policy uses one)")
    if not grid:
        k.add_argument("--chunk", type=integer, default=None,
                       help=f"chunk size C of intra/oppo (default {Intra.chunk})")
        k.add_argument("--delta", type=integer, default=None,
                       help=f"over-admission Δ of inter (default {Inter.delta}) and partial-rollout (default "
                            f"{PartialRollout.delta}); initial Δ0 of the Δ rule (default {r.delta0})")
    k.add_argument("--delta-min", type=integer, default=None, help=f"Δ rule: floor Δmin (default {r.delta_min})")
    k.add_argument("--delta-max", type=integer, default=None,
                   help=f"Δ rule: cap Δmax (default {r.delta_max}, or Δ0 if larger)")
    k.add_argument("--delta-window", type=integer, default=None,
                   help=f"Δ rule: steps of reward slope averaged (default {r.window})")
    k.add_argument("--delta-inc", type=integer, default=None,
                   help=f"Δ rule: Δ step up while the reward rises (default {r.inc})")
    k.add_argument("--delta-dec", type=integer, default=None,
                   help=f"Δ rule: Δ step down otherwise (default {r.dec})")
    k.add_argument("--delta-proportional", action=argparse.BooleanOptionalAction, default=None,
                   help="Δ rule: step by max(1, Δ/4) both ways, as the paper's pseudocode, instead of --delta-inc/"
                        f"--delta-dec (default {on_off(r.proportional)})")
    k.add_argument("--budget", type=integer, default=None,
                   help=f"partial-rollout: tokens a response generates per step (default {PartialRollout.budget})")
    k.add_argument("--staleness", type=integer, default=None,
                   help=f"async: staleness bound k in policy versions (default {Async.staleness})")
    k.add_argument("--in-flight-weight-updates", action="store_const", const=True, default=None,
                   help="async: a step's generation starts once the staleness gate opens, beside the previous step's "
                        "still in flight, and the refit does not wait for it; each step trains the groups it admitted "
                        "(NeMo RL's grpo.async_grpo.in_flight_weight_updates with vLLM's async engine) (default "
                        f"{on_off(Async.in_flight)}: a step generates once the previous one's generation ends)")
    k.add_argument("--chunk-candidates", type=int_list, default=None,
                   help="chunk-autotune: comma list of C tried each round (default "
                        f"{','.join(map(str, ChunkAutotune.candidates))})")
    k.add_argument("--autotune-every", type=integer, default=None,
                   help=f"chunk-autotune: steps between tuning rounds (default {ChunkAutotune.every})")


def check_policy_flags(a: argparse.Namespace, policies: Iterable[str]) -> None:
    """A knob given while none of ``policies`` uses it -> one-line ConfigError."""
    names = [p.strip().lower() for p in policies]
    for knob in KNOBS:
        if getattr(a, knob.dest, None) is None or any(n in knob.users for n in names):
            continue
        which = (f"policy '{names[0]}'" if len(names) == 1
                 else "policies " + ", ".join(f"'{n}'" for n in names))
        users = "/".join(sorted(knob.users))
        raise ConfigError(f"{flag_name(knob.dest, getattr(a, knob.dest))} is not used by {which} ({knob.why}); drop it or choose {users}")


def policy_options(a: argparse.Namespace) -> dict:
    """``make_policy`` keywords of the given knobs (``chunk``/``delta`` included where the command has them)."""
    return {k.keyword: getattr(a, k.dest) for k in KNOBS if k.keyword and getattr(a, k.dest, None) is not None}


__all__ = ["KNOBS", "Knob", "add_policy_args", "check_policy_flags", "policy_options"]
