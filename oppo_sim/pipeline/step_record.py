"""What the simulated pipeline records of one step (:class:`StepRecord`): its plan, when each phase ended, what
it admitted, deferred and trained."""

from __future__ import annotations

from dataclasses import dataclass, field

from oppo_sim.core.stepplan import StepPlan


@dataclass
class StepRecord:
    step: int
    start: float
    plan: StepPlan
    admitted: int = 0
    gen_end: float = float("nan")
    score_end: float = float("nan")
    train_start: float = float("nan")
    train_end: float = float("nan")
    sync_start: float = float("nan")  # after the engine woke, where it sleeps (else train_end)
    end: float = float("nan")
    step_time_s: float = float("nan")
    deferred: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    staleness_mean: float = 0.0
    staleness_max: int = 0
    reward: float = float("nan")
    sleep_wake_s: float = 0.0  # the engine's sleep and wake charged on its pool this step
    batch: tuple[int, ...] = field(default_factory=tuple)
