"""Typed, frozen configuration of a simulated RLHF pipeline: placement, models, PPO shape, engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from oppo_sim.errors import ConfigError
from oppo_sim.genengine import EngineConfig
from oppo_sim.hardware import Hardware, get_hardware
from oppo_sim.models import ModelSpec, get_model
from oppo_sim.synthetic import RewardCurve
from oppo_sim.trace import DEFAULT_MAX_RESPONSE

SCORING_ROLES: tuple[str, ...] = ("reward", "reference", "critic", "logprob")
"""Forward passes needed before the PPO update: reward score, reference log-probs (KL), critic values,
and the actor's own (old) log-probs."""

FROZEN_ROLES: frozenset[str] = frozenset({"reward", "reference"})
"""Roles whose weights never change: their KV cache stays valid across steps, so they can be streamed to."""

ROLES: tuple[str, ...] = ("generate", *SCORING_ROLES, "train")


@dataclass(frozen=True)
class Pool:
    """A group of identical devices. ``gpu`` overrides the run's GPU for this pool."""

    name: str
    devices: int
    gpu: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a device pool needs a name")
        if self.devices < 1:
            raise ConfigError(f"pool '{self.name}' needs >= 1 device, got {self.devices}")


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

    def describe(self) -> str:
        parts = []
        for p in self.pools:
            roles = [r for r in ROLES if self.pool_of(r) == p.name]
            parts.append(f"{p.name}[{p.devices}]={'+'.join(roles)}")
        return " ".join(parts)


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


def _model(m: str | ModelSpec) -> ModelSpec:
    return m if isinstance(m, ModelSpec) else get_model(m)


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation needs besides the trace and the policy. Defaults: the paper's setup
    (Qwen2.5-7B actor, 7B reward model, batch 112, 8 GPUs: 7 generate+train, 1 scores)."""

    batch: int = 112
    steps: int = 20
    seed: int = 0
    gpu: str | Hardware = "h200"
    actor: str | ModelSpec = "qwen2.5-7b"
    reward: str | ModelSpec = "qwen2.5-7b"
    critic: str | ModelSpec | None = None  # default: same shape as the reward model (TRL initialises it so)
    placement: Placement = field(default_factory=paper_placement)
    engine: EngineConfig = field(default_factory=EngineConfig)
    ppo_epochs: int = 4  # TRL PPOConfig.num_ppo_epochs
    minibatches: int = 1  # TRL PPOConfig.num_mini_batches
    max_response: int | None = DEFAULT_MAX_RESPONSE
    contention: float = 0.0  # extra slowdown when two jobs share a device (0 = ideal time slicing)
    scorer_max_tokens: int = 65536  # tokens per scorer forward batch
    stream_batching: bool = True  # batch streamed chunks of several sequences into one forward (False: one each)
    padded_batches: bool = False  # whole-sequence scoring and training pad every sequence to the batch's longest
    dispatch_s: float = 0.0  # driver round trip per engine call: generation waits it after each event; unbatched streamed chunks pay it per call
    reward_curve: RewardCurve = field(default_factory=RewardCurve)
    trace_offset: int = 0  # first trace row used (rows are then taken in order, cyclically)

    def __post_init__(self) -> None:
        checks = [
            (self.batch >= 1, f"batch must be >= 1, got {self.batch}"),
            (self.steps >= 1, f"steps must be >= 1, got {self.steps}"),
            (self.ppo_epochs >= 1, f"ppo_epochs must be >= 1, got {self.ppo_epochs}"),
            (1 <= self.minibatches <= self.batch, f"minibatches must be in [1, batch], got {self.minibatches}"),
            (self.max_response is None or self.max_response >= 1, f"max_response must be >= 1, got {self.max_response}"),
            (self.contention >= 0, f"contention must be >= 0, got {self.contention}"),
            (self.scorer_max_tokens >= 1, f"scorer_max_tokens must be >= 1, got {self.scorer_max_tokens}"),
            (self.trace_offset >= 0, f"trace_offset must be >= 0, got {self.trace_offset}"),
            (self.dispatch_s >= 0, f"dispatch_s must be >= 0, got {self.dispatch_s}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        gen = self.placement.pool(self.placement.generate)
        if gen.devices % self.engine.tp:
            raise ConfigError(
                f"generation pool '{gen.name}' has {gen.devices} devices, not a multiple of tensor parallelism {self.engine.tp}"
            )
        # resolve names now so a typo fails at construction with a one-line error
        self.models()
        self.hardware_of(gen.name)

    def models(self) -> dict[str, ModelSpec]:
        actor, reward = _model(self.actor), _model(self.reward)
        critic = _model(self.critic) if self.critic is not None else reward
        return {"generate": actor, "reward": reward, "reference": actor, "critic": critic, "logprob": actor, "train": actor}

    def hardware_of(self, pool: str) -> Hardware:
        p = self.placement.pool(pool)
        g = p.gpu if p.gpu is not None else self.gpu
        return g if isinstance(g, Hardware) else get_hardware(g)

    @property
    def gpu_id(self) -> str:
        return self.gpu.id if isinstance(self.gpu, Hardware) else str(self.gpu)
