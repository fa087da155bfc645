"""Scheduling policies: small pure objects that answer the scheduler's questions.

A policy never sleeps, yields or touches an engine. The driver (the simulator's pipeline, or the real
executor) calls it the same way:

    state = policy.initial_state()
    for each step:
        plan = policy.plan(state, StepContext(...))    # admit how many, stream how, end when, budget
        ... run the step as the plan says ...
        state = policy.update(state, StepOutcome(...)) # adapt Δ / C from what happened

What a policy is asked, answers and carries (``StepContext``, ``StepPlan``, ``StepOutcome``,
``PolicyState``) is in :mod:`oppo_sim.core.stepplan`. A policy sizes its admissions by the step's first
generation round (``StepContext.round_size``: B, or dapo's ``gen_batch_size``) and ends generation by B
(``end_after``); the further rounds of dynamic sampling are the step machine's. Where is the chunk-size rule? :class:`ChunkAutotune`. The Δ rule?
:func:`next_delta`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, ClassVar

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.stepplan import PolicyState, StepContext, StepOutcome, StepPlan, Streaming


MAX_STEP_PROMPTS = 1_000_000
"""The most prompts one simulated step may hold (the batch, or the prompts Δ over-commits): two orders of magnitude over
the largest published RL step (a few thousand prompts); a larger value is a slip, refused in one line rather than left
to run for hours."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


class Policy:
    """Base class. Subclasses are frozen dataclasses holding the policy's parameters."""

    name: ClassVar[str] = "policy"

    def initial_state(self) -> PolicyState:
        return PolicyState()

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        raise NotImplementedError

    def rewards_kept(self) -> int:
        """How many of the latest mean rewards :meth:`update` keeps: as many as the policy's Δ rule reads."""
        return 0

    def update(self, state: PolicyState, outcome: StepOutcome) -> PolicyState:
        n = self.rewards_kept()
        return replace(state, rewards=(*state.rewards, outcome.mean_reward)[-n:] if n else ())

    def label(self) -> str:
        return self.name

    def trains_while_generating(self) -> bool:
        """Whether a step may generate while an earlier one is scored and trained (a staleness bound k >= 1):
        then the roles that share generation's GPUs run beside it, never in turns."""
        return False


def _fill_to(ctx: StepContext, target: int) -> int:
    return max(0, target - ctx.carried - ctx.carried_finished)


@dataclass(frozen=True)
class Baseline(Policy):
    """Synchronous TRL-like step: generate B, score all, train, sync (under dapo: verl's rounds of
    ``gen_batch_size`` prompts, each waited for whole, until B groups are kept; the surplus is trimmed)."""

    name: ClassVar[str] = "baseline"

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return StepPlan(admit=_fill_to(ctx, ctx.round_size))


@dataclass(frozen=True)
class Stream(Policy):
    """Each finished response goes to the scorers at once (RLHFuse-like per-sample streaming)."""

    name: ClassVar[str] = "stream"

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return StepPlan(admit=_fill_to(ctx, ctx.round_size), streaming=Streaming.FINISHED)


@dataclass(frozen=True)
class Intra(Policy):
    """OPPO intra-step overlap: stream each response in chunks of C tokens to the scorers."""

    chunk: int = 500
    name: ClassVar[str] = "intra"

    def __post_init__(self) -> None:
        _check(self.chunk >= 1, f"chunk size must be >= 1, got {self.chunk}")

    def initial_state(self) -> PolicyState:
        return PolicyState(chunk=self.chunk)

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return StepPlan(admit=_fill_to(ctx, ctx.round_size), streaming=Streaming.CHUNKED, chunk=state.chunk or self.chunk)

    def label(self) -> str:
        return f"intra(C={self.chunk})"


@dataclass(frozen=True)
class Inter(Policy):
    """OPPO inter-step overlap with a fixed Δ: keep B+Δ in flight, train the first B, defer the rest."""

    delta: int = 8
    name: ClassVar[str] = "inter"

    def __post_init__(self) -> None:
        _check(self.delta >= 0, f"delta must be >= 0, got {self.delta}")
        _check(self.delta <= MAX_STEP_PROMPTS, f"delta must be <= {MAX_STEP_PROMPTS:,} prompts, got {self.delta}")

    def initial_state(self) -> PolicyState:
        return PolicyState(delta=self.delta)

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return _inter_plan(state.delta, ctx)

    def label(self) -> str:
        return f"inter(Δ={self.delta})"


def _inter_plan(delta: int, ctx: StepContext, **extra) -> StepPlan:
    return StepPlan(admit=_fill_to(ctx, ctx.round_size + delta), end_after=max(0, ctx.batch - ctx.carried_finished), delta=delta,
                    **extra)


@dataclass(frozen=True)
class DeltaRule:
    """The reward-slope rule for Δ (OPPO §inter-step): s_t = mean_{window}(R_i - R_{i-1});
    s_t > 0 -> Δ += inc (capped at Δmax), else Δ -= dec (floored at Δmin).
    ``proportional`` uses the paper's pseudocode step max(1, floor(Δ/4)) for both directions."""

    delta0: int = 8
    delta_min: int = 0
    delta_max: int = 32
    window: int = 5
    inc: int = 1
    dec: int = 1
    proportional: bool = False

    def __post_init__(self) -> None:
        _check(0 <= self.delta_min <= self.delta_max <= MAX_STEP_PROMPTS,
               f"need 0 <= delta_min <= delta_max <= {MAX_STEP_PROMPTS:,}, got {self.delta_min}, {self.delta_max}")
        _check(self.delta_min <= self.delta0 <= self.delta_max, f"delta0 {self.delta0} outside [{self.delta_min}, {self.delta_max}]")
        _check(self.window >= 1, f"window must be >= 1, got {self.window}")
        _check(self.inc >= 0 and self.dec >= 0, "inc and dec must be >= 0")

    @property
    def history(self) -> int:  # mean rewards the rule reads: a window of slopes needs window + 1 of them
        return self.window + 1


def next_delta(rule: DeltaRule, delta: int, rewards: tuple[float, ...]) -> int:
    """Δ for the next step given the mean-reward history (oldest first)."""
    if len(rewards) < rule.history:
        return delta
    recent = rewards[-rule.history :]
    slope = sum(b - a for a, b in zip(recent, recent[1:])) / rule.window
    step_up = max(1, delta // 4) if rule.proportional else rule.inc
    step_down = max(1, delta // 4) if rule.proportional else rule.dec
    if slope > 0:
        return min(rule.delta_max, delta + step_up)
    return max(rule.delta_min, delta - step_down)


@dataclass(frozen=True)
class DynamicDelta(Policy):
    """Inter-step overlap with Δ adapted from the reward trend (falls to Δmin near convergence)."""

    rule: DeltaRule = field(default_factory=DeltaRule)
    name: ClassVar[str] = "dynamic-delta"

    def initial_state(self) -> PolicyState:
        return PolicyState(delta=self.rule.delta0)

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return _inter_plan(state.delta, ctx)

    def rewards_kept(self) -> int:
        return self.rule.history

    def update(self, state: PolicyState, outcome: StepOutcome) -> PolicyState:
        s = super().update(state, outcome)
        return replace(s, delta=next_delta(self.rule, s.delta, s.rewards))

    def label(self) -> str:
        return f"dynamic-delta(Δ0={self.rule.delta0})"


@dataclass(frozen=True)
class Oppo(Policy):
    """OPPO: intra-step chunked streaming + inter-step overlap with dynamic Δ."""

    chunk: int = 500
    rule: DeltaRule = field(default_factory=DeltaRule)
    name: ClassVar[str] = "oppo"

    def __post_init__(self) -> None:
        _check(self.chunk >= 1, f"chunk size must be >= 1, got {self.chunk}")

    def initial_state(self) -> PolicyState:
        return PolicyState(delta=self.rule.delta0, chunk=self.chunk)

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return _inter_plan(state.delta, ctx, streaming=Streaming.CHUNKED, chunk=state.chunk or self.chunk)

    def rewards_kept(self) -> int:
        return self.rule.history

    def update(self, state: PolicyState, outcome: StepOutcome) -> PolicyState:
        s = Policy.update(self, state, outcome)
        return replace(s, delta=next_delta(self.rule, s.delta, s.rewards))

    def label(self) -> str:
        return f"oppo(C={self.chunk},Δ0={self.rule.delta0})"


@dataclass(frozen=True)
class ChunkAutotune(Policy):
    """Chunk-size autotuning as the paper does: every ``every`` steps, run one step with each candidate C
    and keep the fastest until the next round. Wraps a chunked policy (default :class:`Oppo`)."""

    inner: Policy = field(default_factory=Oppo)
    candidates: tuple[int, ...] = (128, 256, 512)
    every: int = 50
    name: ClassVar[str] = "chunk-autotune"

    def __post_init__(self) -> None:
        _check(len(self.candidates) >= 1 and all(c >= 1 for c in self.candidates), "chunk candidates must be >= 1")
        _check(self.every > len(self.candidates), f"autotune period {self.every} must exceed the {len(self.candidates)} trial steps")
        _check(isinstance(self.inner, (Intra, Oppo)), "chunk-autotune wraps a chunked policy (intra or oppo)")

    def _trial_index(self, step: int) -> int | None:
        k = step % self.every
        return k if k < len(self.candidates) else None

    def initial_state(self) -> PolicyState:
        return replace(self.inner.initial_state(), chunk=self.candidates[0])

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        k = self._trial_index(ctx.step)
        chunk = self.candidates[k] if k is not None else state.chunk
        return self.inner.plan(replace(state, chunk=chunk), ctx)

    def rewards_kept(self) -> int:
        return self.inner.rewards_kept()

    def update(self, state: PolicyState, outcome: StepOutcome) -> PolicyState:
        s = self.inner.update(state, outcome)
        k = self._trial_index(outcome.step)
        if k is None:
            return s
        trials = (*(() if k == 0 else s.tune_trials), (self.candidates[k], outcome.step_time_s))
        if k == len(self.candidates) - 1:
            best = min(trials, key=lambda t: (t[1], t[0]))[0]
            return replace(s, chunk=best, tune_trials=trials)
        return replace(s, chunk=self.candidates[k + 1], tune_trials=trials)

    def label(self) -> str:
        return f"chunk-autotune({'/'.join(map(str, self.candidates))} every {self.every})"


@dataclass(frozen=True)
class PartialRollout(Policy):
    """Kimi k1.5 / APRIL-style partial rollout: each response generates at most ``budget`` tokens per step,
    then is paused and continued next step (keeping its tokens); fresh prompts refill its slot while B
    cannot finish otherwise. After B refills in one step, the oldest paused response gets another
    budget instead, so a trace whose responses all exceed the budget still fills its batch."""

    budget: int = 1024
    delta: int = 0
    name: ClassVar[str] = "partial-rollout"

    def __post_init__(self) -> None:
        _check(self.budget >= 1, f"token budget must be >= 1, got {self.budget}")
        _check(self.delta >= 0, f"delta must be >= 0, got {self.delta}")
        _check(self.delta <= MAX_STEP_PROMPTS, f"delta must be <= {MAX_STEP_PROMPTS:,} prompts, got {self.delta}")

    def initial_state(self) -> PolicyState:
        return PolicyState(delta=self.delta)

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        return _inter_plan(state.delta, ctx, token_budget=self.budget, refill=True)

    def label(self) -> str:
        return f"partial-rollout(budget={self.budget})"


@dataclass(frozen=True)
class Async(Policy):
    """One-step / bounded-staleness asynchronous RL (OpenRLHF async, AReaL): generation of step t+k
    may run while step t trains; samples are up to k policy versions stale. ``in_flight`` (NeMo RL's
    ``in_flight_weight_updates``): a step's generation starts once the staleness gate opens, beside the
    previous step's still in flight (a refit does not wait for it), and each step trains the groups it
    admitted; without it a step's generation starts once the previous one's ends."""

    staleness: int = 1
    in_flight: bool = False
    name: ClassVar[str] = "async"

    def __post_init__(self) -> None:
        _check(self.staleness >= 1, f"async staleness bound must be >= 1, got {self.staleness}")
        _check(isinstance(self.in_flight, bool), f"async in_flight must be a bool, got {self.in_flight!r}")

    def plan(self, state: PolicyState, ctx: StepContext) -> StepPlan:
        if self.in_flight:  # a whole batch per step, whatever an earlier step still has generating or finished
            return StepPlan(admit=ctx.round_size, max_staleness=self.staleness, overlap=True)
        return StepPlan(admit=_fill_to(ctx, ctx.round_size), max_staleness=self.staleness)

    def trains_while_generating(self) -> bool:
        return True

    def label(self) -> str:
        return f"async(k={self.staleness}{', in-flight' if self.in_flight else ''})"


POLICY_NAMES: tuple[str, ...] = (
    "baseline", "stream", "intra", "inter", "dynamic-delta", "oppo", "chunk-autotune", "partial-rollout", "async",
)


def make_policy(
    name: str, *, chunk: int | None = None, delta: int | None = None, rule: DeltaRule | None = None,
    budget: int | None = None, staleness: int | None = None, candidates: tuple[int, ...] | None = None,
    every: int | None = None, delta_min: int | None = None, delta_max: int | None = None, window: int | None = None,
    inc: int | None = None, dec: int | None = None, proportional: bool | None = None, in_flight: bool | None = None,
) -> Policy:
    """Build a policy by name with the common knobs (CLI and sweeps use this). A knob left None takes the
    policy's default; a given one is used as given (0 included) and checked by the policy. ``delta`` is Δ of
    inter/partial-rollout and Δ0 of the reward-slope rule, whose other fields (``delta_min`` … ``proportional``,
    :class:`DeltaRule`'s names) come one by one or as a whole ``rule``; Δmax, unless given, is raised to Δ0."""
    key = name.strip().lower()
    fields = {k: v for k, v in dict(delta_min=delta_min, delta_max=delta_max, window=window, inc=inc, dec=dec,
                                    proportional=proportional).items() if v is not None}

    def r() -> DeltaRule:
        if rule is not None and (fields or delta not in (None, rule.delta0)):
            raise ConfigError("give the Δ rule either whole (rule) or as delta and its fields, not both")
        d0 = DeltaRule.delta0 if delta is None else delta
        return rule or DeltaRule(**{"delta0": d0, "delta_max": max(DeltaRule.delta_max, d0), **fields})

    def given(**kw):  # the policy's own default for every knob left None
        return {k: tuple(v) if k == "candidates" else v for k, v in kw.items() if v is not None}

    builders: dict[str, Callable[[], Policy]] = {
        "baseline": Baseline,
        "stream": Stream,
        "intra": lambda: Intra(**given(chunk=chunk)),
        "inter": lambda: Inter(**given(delta=delta)),
        "dynamic-delta": lambda: DynamicDelta(rule=r()),
        "oppo": lambda: Oppo(rule=r(), **given(chunk=chunk)),
        "chunk-autotune": lambda: ChunkAutotune(inner=Oppo(rule=r(), **given(chunk=chunk)),
                                                **given(candidates=candidates, every=every)),
        "partial-rollout": lambda: PartialRollout(**given(budget=budget, delta=delta)),
        "async": lambda: Async(**given(staleness=staleness, in_flight=in_flight)),
    }
    if key not in builders:
        raise ConfigError(f"unknown policy '{name}'; known: {', '.join(POLICY_NAMES)}")
    return builders[key]()


def policy_uses_chunks(policy: Policy) -> bool:
    return isinstance(policy, (Intra, Oppo, ChunkAutotune))

