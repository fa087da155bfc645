"""The planner: which placement, tensor parallelism, policy and knobs train fastest on these GPUs?

    space = space_for(base, devices=8)                       # oppo_sim.explore.space
    res = run_plan(PlanRequest(space, base, "servegen_deepseek_r1_sampled"), processes=2)
    res.ranked(10)                                           # the best configurations, ranked
    res.table                                                # every configuration tried (refused ones with why)

Before the search, each placement's trainer layouts (FSDP, Megatron TP/PP/EP: ``PlanSpace.backends``) are
pruned: a layout that does not fit memory is dropped, and of those that fit only the ``trainer_keep``
cheapest by trainer-phase cost on a representative step are searched (:mod:`oppo_sim.explore.trainer_rank`;
the counts are :attr:`PlanResult.trainers`, the estimate is the table's ``train_phase_s``).

Each configuration is first checked against memory (``memory_plan.fit_for_policy``: the cheapest ZeRO
stage / recomputation that fits; a refusal keeps its one-line reason, which names the knob that would make
it fit), then simulated for ``base.steps`` steps. By default (``PlanSpace.sps`` auto) a configuration that
fits only with sequence parallelism — a trace with prompts of tens of thousands of tokens — gets the
smallest that fits (``fit_check.smallest_sp``): its row's ``sp`` and ``config`` say which, and the
reference is still the one asked for. The trace is loaded with the base configuration's prompt and
response caps (``SimConfig.trace_limits``). Where generation shares its GPUs, the engine's sleep and wake
are charged every step (``sleep_wake_s``); a policy that generates beside training (``async``) keeps such
a pool resident (``colocate``), with the smaller KV cache that leaves, or is refused where that does not
fit. A deferring or asynchronous policy whose samples come out more than ``space.max_staleness``
policy versions stale (``staleness_max``, the bound a trainer would have to accept) is kept in the table
as ``over-stale`` and not ranked.

Objectives: ``samples-per-s`` (maximise samples trained per second over the run) or ``time-to-steps``
(minimise the time the ``base.steps`` steps take, warm-up included). Every policy trains the same batch
B each step, so over one run the two agree on the order; they differ in the number shown and in what a
reader asks (a throughput, or "when is my run of N steps done"). The reference is the synchronous
``baseline`` on the default placement (the paper's ``shared (N-1)+1``, ``default_candidate``); it is
always evaluated and gives the ``speedup`` column (samples/s over its samples/s).

Search (``search``): ``exhaustive`` evaluates every candidate of the space; ``tpe`` / ``nsga2`` ask
Optuna's seeded TPE sampler (the objective) or NSGA-II (the objective and mean staleness, two
objectives) for ``trials`` distinct configurations (``oppo_sim.explore.plan_search``); ``auto`` is
exhaustive when the space has at most ``trials`` candidates, else TPE. Candidates run in parallel on
local processes or as Ray tasks (:class:`~oppo_sim.explore.parallel.Runner`); the table does not depend
on where they ran (apart from ``wall_clock_s`` and ``cpu_s``, the simulation's own run time).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.userfiles import user_path
from oppo_sim.explore.parallel import Runner
from oppo_sim.explore.space import Candidate, PlanSpace, default_candidate
from oppo_sim.explore.trainer_rank import KEEP, TrainerPruning, prune_trainers
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import colocation, fit_for_policy, smallest_sp
from oppo_sim.pipeline.memory_plan import longest
from oppo_sim.traces.catalog import SYNTHETIC_PREFIX, find_trace, load_trace
from oppo_sim.traces.trace import SUFFIXES, Trace

OBJECTIVES: dict[str, tuple[str, bool]] = {"samples-per-s": ("samples_per_s", True), "time-to-steps": ("time_to_steps_s", False)}
"""Objective name -> (column, maximise?)."""
SEARCHES: tuple[str, ...] = ("auto", "exhaustive", "tpe", "nsga2")
OK, REFUSED, OVER_STALE = "ok", "refused", "over-stale"


@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the space, the base configuration (batch, steps, GPU, models, max response...; its
    placement and tp are the planner's to choose), the trace (name on the search path, or path), the
    objective, the search, its budget of ``trials`` distinct configurations and its ``seed``."""

    space: PlanSpace
    base: SimConfig
    trace: str
    objective: str = "samples-per-s"
    search: str = "auto"
    trials: int = 200
    seed: int = 0
    trainer_keep: int = KEEP  # trainer layouts searched per placement, the cheapest by trainer-phase cost

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"unknown objective {self.objective!r}; known: {', '.join(OBJECTIVES)}")
        if self.search not in SEARCHES:
            raise ConfigError(f"unknown search {self.search!r}; known: {', '.join(SEARCHES)}")
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise ConfigError(f"trials must be an integer >= 1, got {self.trials!r}")
        if isinstance(self.trainer_keep, bool) or not isinstance(self.trainer_keep, int) or self.trainer_keep < 1:
            raise ConfigError(f"trainer layouts kept per placement must be an integer >= 1, got {self.trainer_keep!r}")
        if self.base.nodes != self.space.nodes:
            raise ConfigError(f"the base config spreads its GPUs over {self.base.nodes} nodes, the space over {self.space.nodes}")
        object.__setattr__(self, "trace", trace_source(str(self.trace)))

    def resolved_search(self, size: int) -> str:
        if self.search != "auto":
            return self.search
        return "exhaustive" if size <= self.trials else "tpe"


def trace_source(name: str) -> str:
    """What a worker loads: a file path becomes absolute (a worker may run elsewhere); a name on the
    trace search path, or a synthetic one, stays a name. ``TraceError`` when nothing is found."""
    if name.startswith(SYNTHETIC_PREFIX):
        return name
    find_trace(name)
    direct = user_path(name)
    if any(Path(str(direct) + s).is_file() for s in SUFFIXES):
        return str(direct.absolute())
    return name


@functools.lru_cache(maxsize=8)
def _trace(source: str, limits: tuple, seed: int) -> Trace:
    """Each (worker) process reads a trace once (``limits``: ``SimConfig.trace_limits()`` as items)."""
    return load_trace(source, seed=seed, **dict(limits))


@dataclass(frozen=True)
class EvalTask:
    """One evaluation, self-contained so that a worker process or a Ray task can run it."""

    candidate: Candidate
    base: SimConfig
    trace: str
    max_staleness: int | None = None
    auto_sp: bool = False  # raise sequence parallelism where the configuration needs it (PlanSpace.sps None)
    train_phase_s: float = float("nan")  # the trainer pruning's estimate for this placement (NaN: none ranked)


def identity(c: Candidate) -> dict[str, Any]:
    p, q, t = c.placement, c.policy, c.placement.trainer
    return {
        "config": c.label(), "placement": p.label(), "layout": p.layout, "gen_gpus": p.gen, "train_gpus": p.train,
        "score_gpus": p.score, "tp": p.tp, "sp": p.sp, "replicas": p.replicas, "trainer": t.label(p.ep),
        "train_backend": t.backend, "train_tp": t.tp, "pp": t.pp, "vpp": t.vpp, "cp": t.cp, "ep": p.ep,
        "distributed_optimizer": t.distributed_optimizer, "fsdp_size": t.fsdp_size, "policy": q.name,
        "policy_label": q.label(), "chunk": q.chunk, "delta": q.delta, "delta_rule": q.rule, "budget": q.budget, "staleness_bound": q.staleness,
    }


def _metrics(res, cfg: SimConfig) -> dict[str, Any]:
    s, pl = res.summary, cfg.placement
    util = s["utilization"]
    return {
        "samples_per_s": s["samples_per_s"], "time_to_steps_s": s["wall_s"], "step_time_s": s["step_time_s"],
        "step_time_median_s": s["step_time_median_s"], "tokens_per_s": s["tokens_per_s"],
        "util_gen": util[pl.generate], "util_train": util[pl.train], "util_score": util[pl.reward],
        "util_overall": s["utilization_overall"], "flop_util": s["flop_utilization"],
        "staleness_mean": s["staleness_mean"], "staleness_max": s["staleness_max"],
        "headroom_gib": min(s["memory_headroom_gib"].values()), "kv_cache_gib": s["kv_cache_gib"].get(pl.generate, np.nan),
        "zero_stage": s["zero_stage"], "recompute": s["recompute"], "sync": s["sync_mechanism"],
        "colocate": s["colocate"] if pl.shared(pl.generate) else "", "sleep_wake_s": s["sleep_wake_s"],
    }


def evaluate(task: EvalTask) -> dict[str, Any]:
    """Fit check, then simulation: one table row (``status`` ok / refused / over-stale, ``reason``)."""
    from oppo_sim.pipeline.simulate import simulate  # local: keeps worker start-up light

    c = task.candidate
    row = {**identity(c), "searched": c.label(), "train_phase_s": task.train_phase_s}
    try:
        policy = c.policy.make()
        cfg = c.config(task.base)
        trace = _trace(task.trace, tuple(cfg.trace_limits().items()), cfg.seed)
        lengths = longest(trace, cfg.max_response)
        sp = smallest_sp(colocation(cfg, policy), *lengths) if task.auto_sp else None
        if sp is not None and sp != c.placement.sp:  # the smallest sequence parallelism that lets it fit
            c = replace(c, placement=replace(c.placement, sp=sp))
            cfg, row = c.config(task.base), {**row, **identity(c)}
        fit_for_policy(cfg, policy, *lengths)
    except ConfigError as e:
        return {**row, "status": REFUSED, "reason": str(e)}
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(trace, policy, cfg)
    row.update(_metrics(res, cfg), wall_clock_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0, status=OK,
               reason="")
    k = task.max_staleness
    if k is not None and row["staleness_max"] > k:
        row.update(status=OVER_STALE, reason=f"samples up to {row['staleness_max']} versions stale > --max-staleness {k}")
    return row


def pareto_front(df: pd.DataFrame, maximize: str = "samples_per_s", minimize: str = "staleness_mean") -> pd.Series:
    """True for the rows no other row beats on both (at least as many samples/s at no more staleness,
    one of them strictly); rows with a missing value are never on the front."""
    out = pd.Series(False, index=df.index, name="pareto")
    ok = df[[maximize, minimize]].dropna()
    best = -np.inf
    for _, g in ok.groupby(minimize, sort=True):
        top = g[maximize].max()
        if top > best:
            out.loc[g.index[g[maximize] == top]] = True
            best = top
    return out


COLUMN_ORDER = (
    "rank", "config", "status", "reason", "placement", "layout", "gen_gpus", "train_gpus", "score_gpus", "tp",
    "sp", "replicas", "trainer", "train_backend", "train_tp", "pp", "vpp", "cp", "ep", "distributed_optimizer", "fsdp_size",
    "train_phase_s", "policy", "policy_label", "chunk", "delta", "delta_rule", "budget", "staleness_bound",
    "samples_per_s", "speedup", "time_to_steps_s", "step_time_s", "step_time_median_s", "tokens_per_s",
    "util_gen", "util_train", "util_score", "util_overall", "flop_util", "staleness_mean", "staleness_max",
    "headroom_gib", "kv_cache_gib", "zero_stage", "recompute", "sync", "colocate", "sleep_wake_s", "pareto", "is_reference", "wall_clock_s", "cpu_s",
)


def plan_table(rows: list[dict[str, Any]], objective: str, reference: Candidate) -> pd.DataFrame:
    """One row per configuration, ranked: feasible rows by the objective (ties by label), then the
    over-stale, then the refused ones. Adds ``rank``, ``speedup``, ``pareto``, ``is_reference`` (the
    row ``speedup`` is relative to: ``reference``, or where it does not fit, the fastest ``baseline``
    that does)."""
    column, maximize = OBJECTIVES[objective]
    df = pd.DataFrame(rows)
    for col in COLUMN_ORDER:
        if col not in df.columns:
            df[col] = np.nan
    searched = df["searched"].fillna(df["config"]) if "searched" in df.columns else df["config"]
    df["is_reference"] = searched == reference.label()  # the configuration asked for, whatever sp it needed
    ref = df.loc[df["is_reference"] & (df["status"] == OK), "samples_per_s"]
    sync = df[(df["policy"] == "baseline") & (df["status"] == OK)]
    if ref.empty and len(sync):
        df["is_reference"] = df.index == sync["samples_per_s"].idxmax()
        ref = df.loc[df["is_reference"], "samples_per_s"]
    df["speedup"] = df["samples_per_s"] / (float(ref.iloc[0]) if len(ref) else np.nan)
    ok = df["status"] == OK
    df["pareto"] = pareto_front(df[ok]).reindex(df.index, fill_value=False)
    order = {OK: 0, OVER_STALE: 1, REFUSED: 2}
    key = df[column].fillna(-np.inf if maximize else np.inf) * (-1 if maximize else 1)
    df = df.assign(_s=df["status"].map(order), _k=key).sort_values(["_s", "_k", "config"], kind="stable")
    df = df.drop(columns=["_s", "_k"]).reset_index(drop=True)
    df["rank"] = pd.Series(np.arange(1, len(df) + 1), dtype="Int64").where(df["status"] == OK)
    for col in ("chunk", "delta", "budget", "staleness_bound", "zero_stage", "staleness_max", "train_tp", "pp", "vpp", "cp", "ep"):
        df[col] = pd.to_numeric(df[col]).astype("Int64")
    return df[list(COLUMN_ORDER)]


@dataclass(frozen=True)
class PlanResult:
    """The table (every configuration tried), how it was searched, how big the space was (``space_size``:
    every trainer layout; ``searched_size``: what the trainer pruning left) and the pruning's counts."""

    table: pd.DataFrame
    request: PlanRequest
    search: str
    space_size: int
    searched_size: int | None = None
    trainers: TrainerPruning | None = None

    @property
    def simulated_layouts(self) -> int:
        """Distinct (placement, trainer layout) pairs the table simulated."""
        t = self.table[self.table["status"] != REFUSED]
        return len(t.drop_duplicates(["placement", "tp", "sp", "trainer"]))

    def ranked(self, top: int | None = None) -> pd.DataFrame:
        ok = self.table[self.table["status"] == OK]
        return ok if top is None else ok.head(top)

    @property
    def best(self) -> pd.Series:
        ok = self.ranked()
        if ok.empty:
            raise ConfigError("no configuration fits: see the table's reasons")
        return ok.iloc[0]

    @property
    def reference(self) -> pd.Series | None:
        ref = self.table[self.table["is_reference"]]
        return None if ref.empty else ref.iloc[0]

    @property
    def refused(self) -> pd.DataFrame:
        return self.table[self.table["status"] != OK]


def run_plan(req: PlanRequest, *, processes: int | None = None, progress: bool = True, use_ray: bool = False,
             ray_address: str | None = None) -> PlanResult:
    """Search ``req.space``; see the module notes."""
    from oppo_sim.explore.plan_search import optuna_search

    space, base = req.space, req.base
    pruning = prune_trainers(space, base, _trace(req.trace, tuple(base.trace_limits().items()), base.seed), req.trainer_keep)
    candidates = space.candidates(list(pruning.placements))
    if not candidates:
        raise ConfigError(_empty_space(space))
    reference = default_candidate(space.devices, base)
    search = req.resolved_search(len(candidates))
    k = space.max_staleness
    total = len(candidates) + 1 if search == "exhaustive" else min(req.trials, len(candidates)) + 1
    with Runner(processes, use_ray, ray_address) as runner, \
            tqdm(total=total, disable=not progress, desc="plan", unit="cfg") as bar:
        def evaluate_all(cands: list[Candidate]) -> list[dict[str, Any]]:
            tasks = [EvalTask(c, base, req.trace, k, space.auto_sp, pruning.estimates.get(c.placement, np.nan)) for c in cands]
            return runner.map(evaluate, tasks, bar)

        if search == "exhaustive":
            todo = [reference, *(c for c in candidates if c != reference)]
            rows = evaluate_all(todo)
        else:
            column, maximize = OBJECTIVES[req.objective]
            rows = optuna_search(req.space, candidates, reference, evaluate_all, column=column, maximize=maximize,
                                 trials=req.trials, seed=req.seed, sampler=search)
        bar.total = bar.n
        bar.refresh()
    return PlanResult(plan_table(rows, req.objective, reference), req, search, _size(space), len(candidates), pruning)


def _empty_space(space: PlanSpace) -> str:
    """Why nothing is left to try: the options themselves leave no configuration, or none of them fits."""
    if not _size(space):
        heads, kv = space.heads
        return (f"the search space is empty: no configuration meets the options together (generation --tps must divide "
                f"the {heads} attention heads and fit a node, --pps the {space.layers} layers, --placements must be of "
                f"the --layouts, a policy of --policies must allow --max-staleness)")
    return "no configuration of the search space fits the GPUs' memory: more GPUs, a smaller model or shorter responses"


def _size(space: PlanSpace) -> int:
    """Candidates of the whole space, every trainer layout included (counted, not built)."""
    with_stream, without = len(space.policy_specs(True)), len(space.policy_specs(False))
    return sum(with_stream if p.streams else without for p in space.placements())


__all__ = ["OBJECTIVES", "SEARCHES", "PlanRequest", "PlanResult", "EvalTask", "evaluate", "pareto_front",
           "plan_table", "run_plan", "trace_source"]
