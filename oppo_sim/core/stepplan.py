"""What a policy is told, what it answers and what it carries: the vocabulary between a scheduling policy
(:mod:`oppo_sim.core.policies`) and the step machine that carries its plan out.

:class:`StepContext` is what the scheduler knows when a step starts, :class:`StepPlan` the policy's answer
(admit how many, stream how, end when, which budget), :class:`StepOutcome` what the scheduler reports
after the step, and :class:`PolicyState` the controller state carried from step to step — a frozen,
JSON-friendly record (``dataclasses.asdict``), so a controller can be checkpointed and resumed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


class Streaming(str, enum.Enum):
    """How generated tokens reach the (frozen, separately placed) scorers during generation."""

    NONE = "none"  # whole batch scored after generation ends (TRL-like)
    FINISHED = "finished"  # each response scored as soon as it finishes (RLHFuse-like)
    CHUNKED = "chunked"  # every C new tokens of a response are prefilled incrementally (OPPO intra-step)


@dataclass(frozen=True)
class StepContext:
    """What the scheduler knows when a step starts."""

    step: int
    batch: int  # B: prompts (groups of n responses; n = 1 without groups) trained per step
    carried: int = 0  # unfinished requests (groups) carried over from earlier steps (deferred with partial work)
    carried_finished: int = 0  # finished samples (complete groups) not yet trained (beyond B in an earlier step)
    gen_batch: int | None = None  # prompts a generation round samples (dapo's rounds, verl data.gen_batch_size); None: B

    @property
    def round_size(self) -> int:
        """Prompts the step's first generation round is sized by: ``gen_batch``, else B."""
        return self.batch if self.gen_batch is None else self.gen_batch


@dataclass(frozen=True)
class StepPlan:
    """The policy's answer for one step."""

    admit: int  # new prompts to admit at the start of the step (each a group of n responses)
    streaming: Streaming = Streaming.NONE
    chunk: int | None = None  # C, when streaming is CHUNKED
    end_after: int | None = None  # generation ends once this many (groups) are complete; None: when all are finished
    token_budget: int | None = None  # max tokens a response may generate in this step (then it is paused)
    refill: bool = False  # admit a fresh prompt for each paused one while fewer than end_after can finish
    max_staleness: int = 0  # k: generation of step t may start once policy version >= t - k
    delta: int = 0  # Δ in force (reported)
    overlap: bool = False  # the next step may generate before this one ends (weights refit in flight); own batch

    def __post_init__(self) -> None:
        _check(self.admit >= 0, f"plan admits {self.admit} prompts; must be >= 0")
        _check(self.streaming is not Streaming.CHUNKED or (self.chunk or 0) >= 1, "chunked streaming needs a chunk size C >= 1")
        _check(self.token_budget is None or self.token_budget >= 1, f"token budget must be >= 1, got {self.token_budget}")
        _check(self.max_staleness >= 0, f"staleness bound must be >= 0, got {self.max_staleness}")


@dataclass(frozen=True)
class StepOutcome:
    """What the scheduler reports after a step."""

    step: int
    step_time_s: float
    mean_reward: float
    trained: int
    deferred: int


@dataclass(frozen=True)
class PolicyState:
    """Controller state carried between steps (Δ, C, reward history, chunk-autotune progress)."""

    delta: int = 0
    chunk: int | None = None
    rewards: tuple[float, ...] = ()
    tune_trials: tuple[tuple[int, float], ...] = ()  # (C, step time) measured in the current tuning round
