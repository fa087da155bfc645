"""Synthetic traces: long-tail response lengths, length drift during training, a reward curve.

Everything here is deterministic given its seed (``numpy.random.default_rng``).

* :func:`generate_longtail` -- prompts are lognormal; responses are a mixture of a lognormal body and a
  Pareto tail (fraction ``tail_fraction``, scale ``tail_scale``, shape ``tail_alpha``), rounded and
  clipped to ``[min_response, cap]``. RLHF rollouts look like this: most responses are short, a few
  run to the generation cap.
* :func:`apply_drift` -- RL responses grow as training proceeds: row ``i`` belongs to step
  ``i // batch`` and its response is scaled by ``(1 + growth_per_step) ** step`` (then capped).
* :class:`RewardCurve` -- the reward model used when a trace has no ``reward`` column: a saturating
  exponential ``r_max - (r_max - r0) * exp(-step / tau_steps)`` plus small seeded noise.
* :func:`heavier_tail` -- scale up the longest responses (for property tests: a heavier tail must
  never make an overlap policy look better than it should).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from oppo_sim.core.errors import ConfigError
from oppo_sim.traces.trace import Trace


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class LongTailSpec:
    """Shape of a long-tail trace. Lengths are in tokens; medians of the lognormal parts."""

    prompt_median: int = 256
    prompt_sigma: float = 0.5
    body_median: int = 300
    body_sigma: float = 0.6
    tail_fraction: float = 0.08
    tail_scale: int = 1200
    tail_alpha: float = 1.3
    cap: int = 8192
    min_response: int = 1

    def __post_init__(self) -> None:
        _require(self.prompt_median >= 1, f"LongTailSpec.prompt_median must be >= 1, got {self.prompt_median}")
        _require(self.prompt_sigma >= 0, f"LongTailSpec.prompt_sigma must be >= 0, got {self.prompt_sigma}")
        _require(self.body_median >= 1, f"LongTailSpec.body_median must be >= 1, got {self.body_median}")
        _require(self.body_sigma >= 0, f"LongTailSpec.body_sigma must be >= 0, got {self.body_sigma}")
        _require(0.0 <= self.tail_fraction <= 1.0,
                 f"LongTailSpec.tail_fraction must be in [0, 1], got {self.tail_fraction}")
        _require(self.tail_scale >= 1, f"LongTailSpec.tail_scale must be >= 1, got {self.tail_scale}")
        _require(self.tail_alpha > 0, f"LongTailSpec.tail_alpha must be > 0, got {self.tail_alpha}")
        _require(self.min_response >= 1, f"LongTailSpec.min_response must be >= 1, got {self.min_response}")
        _require(self.cap >= self.min_response,
                 f"LongTailSpec.cap must be >= min_response ({self.min_response}), got {self.cap}")


def _round_int(x: np.ndarray) -> np.ndarray:
    return np.rint(x).astype(np.int64)


def generate_longtail(spec: LongTailSpec, n: int, seed: int = 0, name: str | None = None) -> Trace:
    """A trace of ``n`` requests with lognormal prompts and lognormal-body + Pareto-tail responses.

    All random draws are made for every row in a fixed order, so changing one shape parameter does
    not reshuffle the others. ``n_clipped`` counts responses cut by ``spec.cap``.
    """
    _require(isinstance(n, (int, np.integer)) and n >= 1, f"generate_longtail: n must be >= 1, got {n!r}")
    _require(isinstance(seed, (int, np.integer)) and seed >= 0, f"generate_longtail: seed must be >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    prompt_raw = rng.lognormal(math.log(spec.prompt_median), spec.prompt_sigma, n)
    body = rng.lognormal(math.log(spec.body_median), spec.body_sigma, n)
    tail = spec.tail_scale * (1.0 + rng.pareto(spec.tail_alpha, n))  # Pareto with x_min = tail_scale
    in_tail = rng.random(n) < spec.tail_fraction
    raw = _round_int(np.minimum(np.where(in_tail, tail, body), 2.0**62))
    clipped = raw > spec.cap
    response = np.clip(raw, spec.min_response, spec.cap)
    prompt = np.maximum(_round_int(prompt_raw), 1)
    return Trace(
        name=name or f"longtail-n{n}-s{seed}",
        source=f"synthetic:{spec}(n={n}, seed={seed})",
        prompt_tokens=prompt,
        response_tokens=response,
        max_response=spec.cap,
        clipped=clipped,
    )


@dataclass(frozen=True)
class DriftSpec:
    """Response-length growth during RL training (row ``i`` belongs to step ``i // batch``)."""

    growth_per_step: float = 0.003
    batch: int = 112
    cap: int = 8192

    def __post_init__(self) -> None:
        _require(math.isfinite(self.growth_per_step) and self.growth_per_step > -1.0,
                 f"DriftSpec.growth_per_step must be finite and > -1, got {self.growth_per_step}")
        _require(self.batch >= 1, f"DriftSpec.batch must be >= 1, got {self.batch}")
        _require(self.cap >= 1, f"DriftSpec.cap must be >= 1, got {self.cap}")

    def factor(self, step: np.ndarray | int) -> np.ndarray:
        """Multiplicative length factor at training ``step``: ``(1 + growth_per_step) ** step``."""
        return np.power(1.0 + self.growth_per_step, np.asarray(step, dtype=np.float64))


def apply_drift(trace: Trace, drift: DriftSpec) -> Trace:
    """Scale response ``i`` by ``drift.factor(i // batch)``, fill ``step``, cap at ``drift.cap``.

    Prompts are unchanged. An existing ``step`` column is replaced. ``max_response`` becomes
    ``drift.cap`` and ``n_clipped``/``clipped`` count the rows this cap cut.
    """
    step = np.arange(len(trace), dtype=np.int64) // drift.batch
    scaled = _round_int(np.minimum(trace.response_tokens * drift.factor(step), 2.0**62))
    clipped = scaled > drift.cap
    response = np.clip(scaled, 1, drift.cap)
    return replace(
        trace,
        name=f"{trace.name}+drift",
        source=f"{trace.source} | {drift}",
        response_tokens=response,
        step=step,
        max_response=drift.cap,
        clipped=clipped,
        n_clipped=int(clipped.sum()),
    )


@dataclass(frozen=True)
class RewardCurve:
    """Synthetic mean reward per training step, for traces without a ``reward`` column.

    ``mean_reward(step) = r_max - (r_max - r0) * exp(-step / tau_steps) + noise * z``, where ``z`` is a
    standard normal drawn from ``default_rng([seed, step])`` -- the same (seed, step) always gives the
    same value, independent of call order.
    """

    r0: float = 0.0
    r_max: float = 1.0
    tau_steps: float = 150.0
    noise: float = 0.02
    seed: int | None = None  # None: the run's seed (SimConfig.seed)

    def __post_init__(self) -> None:
        _require(math.isfinite(self.r0) and math.isfinite(self.r_max),
                 f"RewardCurve: r0 and r_max must be finite, got {self.r0}, {self.r_max}")
        _require(self.tau_steps > 0, f"RewardCurve.tau_steps must be > 0, got {self.tau_steps}")
        _require(self.noise >= 0, f"RewardCurve.noise must be >= 0, got {self.noise}")
        _require(self.seed is None or (isinstance(self.seed, (int, np.integer)) and self.seed >= 0),
                 f"RewardCurve.seed must be an integer >= 0, got {self.seed!r}")

    def mean_reward(self, step: int) -> float:
        """Mean reward at training ``step`` (>= 0)."""
        _require(isinstance(step, (int, np.integer)) and step >= 0,
                 f"RewardCurve.mean_reward: step must be an integer >= 0, got {step!r}")
        trend = self.r_max - (self.r_max - self.r0) * math.exp(-step / self.tau_steps)
        if self.noise == 0:
            return float(trend)
        z = np.random.default_rng([int(self.seed or 0), int(step)]).standard_normal()
        return float(trend + self.noise * z)


def heavier_tail(trace: Trace, factor: float, top_fraction: float = 0.05) -> Trace:
    """Multiply the ``ceil(top_fraction * len)`` longest responses by ``factor`` (>= 1), same prompts.

    Ties are broken by row order (earlier rows first), so the result is deterministic. No length
    decreases. The result keeps the trace's cap if every response still fits under it; otherwise it is
    uncapped (``max_response=None``; ``clipped``/``n_clipped`` still describe the original cap).
    """
    _require(math.isfinite(factor) and factor >= 1.0, f"heavier_tail: factor must be >= 1, got {factor}")
    _require(0.0 < top_fraction <= 1.0, f"heavier_tail: top_fraction must be in (0, 1], got {top_fraction}")
    resp = trace.response_tokens
    k = min(len(resp), math.ceil(top_fraction * len(resp)))
    top = np.argsort(-resp, kind="stable")[:k]
    new = np.array(resp)
    new[top] = np.maximum(_round_int(np.minimum(resp[top] * factor, 2.0**62)), resp[top])
    cap = trace.max_response
    if cap is not None and int(new.max()) > cap:
        cap = None
    return replace(trace, name=f"{trace.name}+heavier", source=f"{trace.source} | heavier_tail(x{factor}, "
                   f"top {top_fraction})", response_tokens=new, max_response=cap)


SYNTHETIC_KINDS: tuple[str, ...] = ("longtail", "longtail-drift")
"""Synthetic traces by name: ``longtail`` (:class:`LongTailSpec` defaults, 4,000 rows) and
``longtail-drift`` (the same with :class:`DriftSpec` defaults: responses grow over training)."""


def synthetic_trace(kind: str, seed: int = 0, n: int | None = None) -> Trace:
    """A synthetic trace by name (see :data:`SYNTHETIC_KINDS`), drawn from ``seed``."""
    kind = kind.strip().lower()
    if kind not in SYNTHETIC_KINDS:
        raise ConfigError(f"unknown synthetic trace 'synthetic:{kind}'; known: {', '.join('synthetic:' + k for k in SYNTHETIC_KINDS)}")
    trace = generate_longtail(LongTailSpec(), n or 4000, seed=seed, name=f"synthetic:{kind}-s{seed}")
    return apply_drift(trace, DriftSpec()) if kind == "longtail-drift" else trace
