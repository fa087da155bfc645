"""The planner's search over a space too large to try whole: Optuna's TPE (one objective) or NSGA-II
(the objective and mean staleness), seeded, asked for a batch of configurations at a time.

The space is described to Optuna as it is built (define-by-run): the layout; the placement within that
layout (device counts, tp and sp, and the trainer layouts the pruning kept, ``explore/trainer_rank.py``: one
categorical per layout); the policy; then only the knobs that policy
has (C, Δ, Δ rule, token budget, staleness bound — each knob one parameter shared by the policies that
have it, so what is learnt about Δ for ``inter`` informs ``oppo``). A suggestion is mapped onto the
space's canonical candidate (:meth:`Candidate.canonical`); one already evaluated is answered from the
cache without simulating, so ``trials`` counts *distinct* configurations. The reference (baseline on the
default placement) is enqueued as the first trial.

Determinism: trials are asked in batches of :data:`BATCH` (not of the number of workers) and told in
the order asked once their batch is evaluated, so a seed gives the same table on any number of
processes or on Ray. A configuration that does not fit, or is over-stale, is told the worst value
(0 samples/s, a time of 1e12 s, a staleness of 1e3) so that the sampler learns to avoid it.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from oppo_sim.core.errors import ConfigError
from oppo_sim.explore.space import CHUNKED, DEFERRING, RULED, Candidate, PlacementSpec, PlanSpace, PolicySpec

BATCH = 8
"""Trials asked before the sampler hears back: a batch is evaluated in parallel."""
MAX_ASK_FACTOR = 20
"""Give up after ``trials * MAX_ASK_FACTOR`` suggestions (the sampler keeps proposing what it has seen)."""
WORST_STALENESS = 1e3
WORST_TIME = 1e12


def _import_optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("optuna is not installed: pip install optuna") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _sampler(optuna, name: str, seed: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed, population_size=4 * BATCH)
        if name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=2 * BATCH)
    raise ConfigError(f"unknown Optuna sampler {name!r}; known: tpe, nsga2")


class _Space:
    """The space as Optuna parameters."""

    def __init__(self, space: PlanSpace, candidates: list[Candidate]):
        self.space = space
        self.by_layout: dict[str, dict[str, PlacementSpec]] = {}
        for c in candidates:
            self.by_layout.setdefault(c.placement.layout, {})[self.placement_key(c.placement)] = c.placement
        self.policies = list(dict.fromkeys(c.policy.name for c in candidates))
        self.known = set(candidates)

    @staticmethod
    def placement_key(p: PlacementSpec) -> str:
        return f"{p.label()} tp{p.tp} sp{p.sp}" + (f" {p.trainer.label(p.ep)}" if p.trainer.named else "")

    def suggest(self, trial) -> Candidate:
        s = self.space
        layout = trial.suggest_categorical("layout", list(self.by_layout))
        options = self.by_layout[layout]
        placement = options[trial.suggest_categorical(f"placement[{layout}]", list(options))]
        name = trial.suggest_categorical("policy", self.policies)
        chunk = trial.suggest_categorical("chunk", list(s.chunks)) if name in CHUNKED else None
        delta = trial.suggest_categorical("delta", list(s.deltas)) if name in DEFERRING else None
        rule = trial.suggest_categorical("delta_rule", list(s.rules)) if name in RULED else None
        budget = trial.suggest_categorical("budget", list(s.budgets)) if name == "partial-rollout" else None
        stale = trial.suggest_categorical("staleness", list(s.async_stalenesses())) if name == "async" else None
        return Candidate(placement, PolicySpec(name, chunk, delta, rule, budget, stale, s.in_flight_of(name))).canonical()

    def params(self, c: Candidate) -> dict[str, Any]:
        """The parameters that make :meth:`suggest` return ``c`` (to enqueue the reference)."""
        p, q = c.placement, c.policy
        out: dict[str, Any] = {"layout": p.layout, f"placement[{p.layout}]": self.placement_key(p), "policy": q.name}
        for key, value in (("chunk", q.chunk), ("delta", q.delta), ("delta_rule", q.rule), ("budget", q.budget),
                           ("staleness", q.staleness)):
            if value is not None:
                out[key] = value
        return out


def _values(row: dict[str, Any], column: str, maximize: bool, two: bool) -> tuple[float, ...] | float:
    ok = row.get("status") == "ok"
    value = row[column] if ok else (0.0 if maximize else WORST_TIME)
    if not two:
        return value
    return value, (row["staleness_mean"] if ok else WORST_STALENESS)


def optuna_search(plan_space: PlanSpace, candidates: list[Candidate], reference: Candidate,
                  evaluate_all: Callable[[list[Candidate]], list[dict[str, Any]]], *, column: str, maximize: bool,
                  trials: int, seed: int = 0, sampler: str = "tpe") -> list[dict]:
    """Rows of up to ``trials`` distinct configurations of ``candidates`` (plus the reference), in the
    order evaluated; ``column`` of a row is the objective, maximised or not."""
    optuna = _import_optuna()
    two = sampler == "nsga2"
    directions = ["maximize" if maximize else "minimize"] + (["minimize"] if two else [])
    study = optuna.create_study(directions=directions, sampler=_sampler(optuna, sampler, seed))
    space = _Space(plan_space, candidates)
    if reference in space.known:
        study.enqueue_trial(space.params(reference))
    seen: dict[Candidate, Any] = {}
    rows: list[dict] = []
    if reference not in space.known:  # outside the space (e.g. its layout is not searched): evaluate it aside
        rows += evaluate_all([reference])
    goal, asked = min(trials, len(space.known)), 0
    while len(seen) < goal and asked < trials * MAX_ASK_FACTOR:
        batch: list[Candidate] = []
        pending: list[tuple[Any, Candidate]] = []
        while len(batch) < min(BATCH, goal - len(seen)) and asked < trials * MAX_ASK_FACTOR:
            trial, asked = study.ask(), asked + 1
            c = space.suggest(trial)
            if c in seen:
                study.tell(trial, seen[c])
                continue
            if c not in batch:
                batch.append(c)
            pending.append((trial, c))
        for c, row in zip(batch, evaluate_all(batch)):
            seen[c] = _values(row, column, maximize, two)
            rows.append(row)
        for trial, c in pending:
            study.tell(trial, seen[c])
    return rows


__all__ = ["BATCH", "optuna_search"]
