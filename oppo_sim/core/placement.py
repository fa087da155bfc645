"""Roles and placements: which device pool each role of the PPO pipeline runs on, and the rule that
follows from it — which scorers may be streamed to while the actor still decodes."""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError

SCORING_ROLES: tuple[str, ...] = ("reward", "reference", "critic", "logprob")
"""Forward passes needed before the PPO update: reward score, reference log-probs (KL), critic values,
and the actor's own (old) log-probs."""

TRAINER_PASSES: tuple[str, ...] = ("critic", "logprob")
"""The scoring passes the training workers run themselves, as the first phase of their update: the actor's old
log-probs and the critic's values (oppo's train worker; every framework's trainer). The default of
``SimConfig.after_update``: whatever a step's generation overlaps, its passes of step t start only after step t-1's
update and weight sync, and on one pool one after the other over a step's whole sequences."""

FROZEN_ROLES: frozenset[str] = frozenset({"reward", "reference"})
"""Roles whose weights never change: their KV cache stays valid across steps, so they can be streamed to."""

ROLES: tuple[str, ...] = ("generate", *SCORING_ROLES, "train")


MAX_DEVICES = 131_072
"""The most GPUs a pool may have: beyond the largest clusters built (a larger count is a slip, refused in one line
rather than left to allocate for hours)."""


@dataclass(frozen=True)
class Pool:
    """A group of identical devices. ``gpu`` overrides the run's GPU for this pool."""

    name: str
    devices: int
    gpu: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a device pool needs a name")
        if not 1 <= self.devices <= MAX_DEVICES:
            raise ConfigError(f"pool '{self.name}' needs 1 to {MAX_DEVICES:,} devices, got {self.devices}")


@dataclass(frozen=True)
class Placement:
    """Which pool each role runs on. Roles on the same pool share (time-slice) its devices."""

    pools: tuple[Pool, ...]
    generate: str = "main"
    reward: str = "score"
    reference: str = "score"
    critic: str = "main"
    logprob: str = "main"
    train: str = "main"

    def __post_init__(self) -> None:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ConfigError(f"duplicate pool names in placement: {names}")
        for role in ROLES:
            if self.pool_of(role) not in names:
                raise ConfigError(f"role '{role}' is placed on unknown pool '{self.pool_of(role)}'; pools: {', '.join(names)}")

    def pool_of(self, role: str) -> str:
        return getattr(self, role)

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)

    def shared(self, pool: str) -> bool:
        return sum(1 for r in ROLES if self.pool_of(r) == pool) > 1

    @property
    def total_devices(self) -> int:
        return sum(p.devices for p in self.pools)

    def describe(self, running: tuple[str, ...] | None = None) -> str:
        """``main[7]=generate+critic+logprob+train score[1]=reward+reference``; ``running``: only the scoring
        roles that run (an algorithm without a critic, a reward model or a reference leaves them out)."""
        parts = []
        for p in self.pools:
            roles = [r for r in ROLES if self.pool_of(r) == p.name and (running is None or r not in SCORING_ROLES
                                                                          or r in running)]
            parts.append(f"{p.name}[{p.devices}]={'+'.join(roles) or 'idle'}")
        return " ".join(parts)


def check_roles(roles: object, known: tuple[str, ...], what: str, kind: str = "role") -> tuple[str, ...]:
    """``roles`` (a sequence of role names, or one comma-separated string) as a tuple in ``known``'s order; not names,
    or an unknown one -> ``ConfigError`` naming ``what`` and the known ones (one line)."""
    if isinstance(roles, str):
        roles = [r.strip() for r in roles.split(",") if r.strip()]
    if not isinstance(roles, (tuple, list)) or not all(isinstance(r, str) for r in roles):
        raise ConfigError(f"{what} must be role names, got {roles!r}")
    unknown = [r for r in roles if r not in known]
    if unknown:
        raise ConfigError(f"{what}: unknown {kind} {unknown[0]!r}; known: {', '.join(known)}")
    return tuple(r for r in known if r in roles)


def check_after_update(roles: object) -> tuple[str, ...]:
    """``SimConfig.after_update``: scoring roles in ``SCORING_ROLES`` order (:func:`check_roles`)."""
    return check_roles(roles, SCORING_ROLES, "after_update", "scoring role")


def paper_placement(devices: int = 8) -> Placement:
    """OPPO's setup: all GPUs but one generate and train (with the critic and the actor's log-probs); one
    GPU scores with the frozen models (reward, and the reference for the KL term)."""
    return Placement((Pool("main", devices - 1), Pool("score", 1)), reference="score")


def colocated_placement(devices: int = 8) -> Placement:
    return Placement((Pool("main", devices),), reward="main", reference="main")


def disaggregated_placement(gen: int = 4, train: int = 3, score: int = 1) -> Placement:
    """Generation on its own pool (as OpenRLHF/verl async do), training + critic/ref on another."""
    return Placement(
        (Pool("gen", gen), Pool("train", train), Pool("score", score)),
        generate="gen", reference="score", critic="train", logprob="train", train="train",
    )


PLACEMENTS = {"paper": paper_placement, "colocated": colocated_placement, "disaggregated": disaggregated_placement}


def get_placement(name: str) -> Placement:
    try:
        return PLACEMENTS[name.strip().lower()]()
    except KeyError:
        raise ConfigError(f"unknown placement '{name}'; known: {', '.join(PLACEMENTS)}") from None


def streamed_roles(placement: Placement) -> tuple[str, ...]:
    """The roles a streaming plan may hand chunks to while the actor still decodes: the frozen scorers
    placed on a pool other than generation's (their KV cache stays valid while the actor decodes and
    across steps; a scorer sharing the generators' devices would only steal their time)."""
    return tuple(r for r in SCORING_ROLES if r in FROZEN_ROLES and placement.pool_of(r) != placement.generate)
