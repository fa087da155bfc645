"""The planner's trainer pruning: of the trainer layouts a placement may take
(:mod:`oppo_sim.explore.trainer_space`), keep for the search only those that fit and are among the
cheapest by trainer-phase cost — the cheap step before the simulations.

For each placement (device split, generation tp, and sp where the space lists it) every layout is
checked against memory with the synchronous schedule (the engine taking turns, which is what every policy
but ``async`` on a shared pool runs; the rest is checked again per policy before simulating): FSDP with
the cheapest ZeRO stage / recomputation and, under ``sps`` auto, the smallest Ulysses sequence
parallelism that fits (``fit_check.smallest_sp``); Megatron with its context parallelism raised, where
it does not fit as it is, to the smallest power-of-two multiple that fits (CP for long sequences, and
nowhere else: in the cost model it splits the work data parallelism would and adds the ring's traffic). A layout that fits nowhere is never simulated; a
placement none of whose layouts fits keeps its first one, so that the table still shows it refused with
its reason. The layouts that fit are ranked by the seconds the training pool spends on one representative
step (:func:`phase_seconds`: the update's epochs, and the forwards that run on that pool — log-probs,
reference, critic values — under the same layout, a ZeRO-3-sharded frozen model gathering its weights
per forward) and the best ``keep`` are kept. Ties keep the space's order (FSDP first). Policies do not
enter: the trainer's work per step is the same under every one.

The representative step: ``B`` prompts and ``B · n`` responses drawn from the trace (seeded by the
base configuration's seed), each response after its group's prompt. It is an estimate for ranking only;
the simulation times the kept layouts as it times everything else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from oppo_sim.core.errors import ConfigError
from oppo_sim.explore.space import Candidate, PlacementSpec, PlanSpace, PolicySpec
from oppo_sim.hw.costs.costmodel import train_jobs
from oppo_sim.hw.memory.pool_memory import MemoryReport
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits, smallest_sp
from oppo_sim.pipeline.memory_plan import FROZEN_ROLES, frozen_gathers, frozen_shards, longest
from oppo_sim.pipeline.topology import cost_models
from oppo_sim.traces.trace import Trace

KEEP = 2
"""Trainer layouts kept per placement by default (``oppo-sim plan --trainer-keep``)."""

__all__ = ["KEEP", "TrainerPruning", "representative_batch", "phase_seconds", "fitted", "prune_trainers"]


@dataclass(frozen=True)
class TrainerPruning:
    """What the pruning kept (``placements``, in the space's order, with the sp / cp each needs;
    ``estimates``: each kept placement's trainer-phase seconds, NaN where nothing was ranked) and the
    counts: ``groups`` placements without their trainer, ``considered`` (placement, layout) pairs,
    ``refused`` that fit nowhere (never simulated), ``unfit`` placements none of whose layouts fits (each
    keeps one, refused in the table), ``ranked_out`` that fit but were not among the best ``keep`` of
    their placement."""

    placements: tuple[PlacementSpec, ...]
    estimates: dict
    groups: int
    considered: int
    refused: int
    unfit: int
    ranked_out: int
    keep: int

    @property
    def kept(self) -> int:
        return len(self.placements)

    def line(self) -> str:
        unfit = f"; {self.unfit} placements where none fits keep one, refused in the table" if self.unfit else ""
        return (f"trainer layouts: {self.considered} considered on {self.groups} placements, {self.refused} do not fit "
                f"memory (never simulated{unfit}), {self.ranked_out} ranked out by trainer-phase cost (best {self.keep} "
                f"per placement kept), {self.kept} searched")


def representative_batch(base: SimConfig, trace: Trace) -> np.ndarray:
    """Tokens of each of one step's ``B · n`` sequences, drawn from ``trace`` (module notes)."""
    rng = np.random.default_rng(base.seed)
    n, b = base.algorithm.n, base.batch
    prompts = np.asarray(trace.prompt_tokens)[rng.integers(0, len(trace.prompt_tokens), b)]
    resp = np.asarray(trace.response_tokens)[rng.integers(0, len(trace.response_tokens), b * n)]
    if base.max_response is not None:
        resp = np.minimum(resp, base.max_response)
    return (np.repeat(prompts, n) + resp).astype(np.float64)


def _forward_seconds(cfg: SimConfig, report: MemoryReport, cost, role: str, devices: int, seqs: np.ndarray) -> float:
    """One role's forwards over the step on the training pool, in the scorer's batches (``scoring.Scorer``)."""
    model = cfg.models()[role]
    scalar = role in ("reward", "critic")
    gather = 0.0
    shards = frozen_shards(cfg, role, report.train.zero_stage) if role in FROZEN_ROLES else 1
    if shards > 1 and frozen_gathers(cfg):
        gather = cost.param_gather(model.weight_bytes(scalar_head=scalar), shards, devices)
    budget = cfg.scorer_max_tokens * (devices if gather > 0 else cost.scorer_batch_scale(devices))
    batch = np.floor(np.cumsum(seqs) / budget)  # contiguous batches of about `budget` tokens
    total = 0.0
    for k in np.unique(batch):
        part = seqs[batch == k]
        total += max(cost.prefill_cost(model, devices, part, np.zeros_like(part), scalar)[0], gather)
    return total


def phase_seconds(cfg: SimConfig, report: MemoryReport, seqs: np.ndarray) -> float:
    """Seconds the training pool spends on one step of ``seqs``: the update (every trained model's
    ``ppo_epochs`` passes) and the forwards of the scoring roles that sit on that pool."""
    pl = cfg.placement
    devices = pl.pool(pl.train).devices
    cost = cost_models(cfg, report)[pl.train]
    t = sum(j.seconds for j in train_jobs(cost, cfg.trained(), devices, seqs, cfg.ppo_epochs, cfg.minibatches))
    for role in cfg.scoring_roles():
        if role in cfg.models() and pl.pool_of(role) == pl.train:
            t += _forward_seconds(cfg, report, cost, role, devices, seqs)
    return float(t)


def _cps(p: PlacementSpec) -> list[int]:
    t = p.trainer
    out, cp = [], t.cp
    while p.train % (t.tp * t.pp * cp) == 0:
        out.append(cp)
        cp *= 2
    return out


def fitted(p: PlacementSpec, base: SimConfig, lengths: tuple[int, int], auto_sp: bool) -> tuple[PlacementSpec, SimConfig] | None:
    """``p`` as it fits memory (context parallelism raised where it needs it) and its configuration (with
    sequence parallelism raised where the space allows it: the placement keeps its own, as the planner raises
    it per policy before simulating, ``plan.evaluate``), or None where it fits nowhere (module notes)."""
    options = [replace(p, trainer=replace(p.trainer, cp=cp)) for cp in _cps(p)] if p.trainer.megatron else [p]
    for q in options:
        try:
            cfg = Candidate(q, PolicySpec("baseline")).config(base)
            sp = smallest_sp(cfg, *lengths)
        except ConfigError:
            continue
        if sp is None or (sp != q.sp and not auto_sp):
            continue
        return q, Candidate(replace(q, sp=sp), PolicySpec("baseline")).config(base)
    return None


def _key(p: PlacementSpec) -> PlacementSpec:
    """The placement without its trainer: what the layouts of one placement share."""
    return replace(p, trainer=TrainerLayout(), ep=1)


def _rank(members: list[PlacementSpec], base: SimConfig, lengths, auto_sp: bool, seqs, keep: int, cache: dict):
    """(kept placements with their estimates, refused count, ranked-out count) of one placement's layouts."""
    fits = [f for f in (fitted(p, base, lengths, auto_sp) for p in members) if f is not None]
    refused = len(members) - len(fits)
    fits = list({q: cfg for q, cfg in fits}.items())  # one placement a layout raised onto another's: once
    if len(fits) <= 1:
        return [(fits[0][0] if fits else members[0], math.nan)], refused, 0
    scored = []
    for i, (q, cfg) in enumerate(fits):
        report = check_fits(cfg, *lengths)
        key = (q.layout, q.gen, q.train, q.score, report.train.sequence_parallel, q.trainer, q.ep, report.train.zero_stage,
               report.train.recompute)
        if key not in cache:
            cache[key] = phase_seconds(cfg, report, seqs)
        scored.append((cache[key], i, q))
    scored.sort(key=lambda x: (x[0], x[1]))
    kept = sorted(scored[:keep], key=lambda x: x[1])
    return [(q, s) for s, _, q in kept], refused, max(0, len(fits) - keep)


def prune_trainers(space: PlanSpace, base: SimConfig, trace: Trace, keep: int = KEEP) -> TrainerPruning:
    """Every placement of ``space`` with its trainer layouts pruned by memory and ranked by trainer-phase
    cost (module notes); ``trace`` limited as the plan loads it."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"trainer layouts kept per placement must be an integer >= 1, got {keep!r}")
    placements = space.placements()
    groups: dict[PlacementSpec, list[PlacementSpec]] = {}
    for p in placements:
        groups.setdefault(_key(p), []).append(p)
    lengths, seqs = longest(trace, base.max_response), representative_batch(base, trace)
    kept, estimates, refused, unfit, ranked_out, cache = [], {}, 0, 0, 0, {}
    for members in groups.values():
        chosen, r, o = _rank(members, base, lengths, space.auto_sp, seqs, keep, cache)
        refused, unfit, ranked_out = refused + r, unfit + (r == len(members)), ranked_out + o
        for q, s in chosen:
            if q not in estimates:
                kept.append(q)
                estimates[q] = s
    return TrainerPruning(tuple(kept), estimates, len(groups), len(placements), refused, unfit, ranked_out, keep)
