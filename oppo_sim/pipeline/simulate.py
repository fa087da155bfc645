"""Entry point: ``simulate(trace, policy, config)`` -> :class:`SimResult`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from oppo_sim.core.policies import Policy, make_policy
from oppo_sim.core.results import SIM_STEP_COLUMNS, TIMELINE_COLUMNS, SimResult, summarize
from oppo_sim.hw.costs.op_cost import priced_by
from oppo_sim.hw.memory.pool_memory import MemoryReport
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.pipeline.fit_check import fit_for_policy, sleep_wake_of
from oppo_sim.pipeline.memory_plan import longest
from oppo_sim.pipeline.topology import sync_plan, weight_sync_legs
from oppo_sim.traces.catalog import load_trace
from oppo_sim.traces.trace import Trace


def simulate(
    trace: Trace | str | Path,
    policy: Policy | str = "baseline",
    config: SimConfig | None = None,
    *,
    progress: bool = False,
    **overrides,
) -> SimResult:
    """Run one simulation. ``trace`` may be a loaded :class:`Trace` or a name/path on the trace search
    path; ``policy`` a policy object or name; ``overrides`` replace fields of ``config``; ``progress``
    shows a progress bar over steps."""
    cfg = config or SimConfig()
    if overrides:
        cfg = replace(cfg, **overrides)
    trace = cfg.limit(trace) if isinstance(trace, Trace) else load_trace(trace, seed=cfg.seed, **cfg.trace_limits())
    if isinstance(policy, str):
        policy = make_policy(policy)
    # refuse what cannot fit, before simulating (a policy that generates beside training keeps a shared pool resident)
    cfg, report = fit_for_policy(cfg, policy, *longest(trace, cfg.max_response))
    if progress:
        from tqdm.auto import tqdm

        with tqdm(total=cfg.steps, desc=policy.label(), unit="step", leave=False) as bar:
            p = _run(cfg, trace, policy, report, on_step=lambda _rec: bar.update(1))
    else:
        p = _run(cfg, trace, policy, report)
    res = _result(p)
    sw = sleep_wake_of(cfg, report)
    extra = {**report.summary(), "sync_mechanism": sync_plan(cfg).mechanism.value,
             "sync_legs_s": weight_sync_legs(cfg, p.cost_of),  # the run's own cost models
             "sleep_level": sw.level if sw is not None else None, "sleep_wake_s": sw.step_s if sw is not None else 0.0,
             "sleep_optimizer_s": sw.optimizer_s if sw is not None else 0.0,  # its optimizer copies (pageable moves)
             "reference_swap_s": getattr(p.scorers.get("reference"), "swap_s", 0.0),  # 0 unless held on the host
             "lora_rank": cfg.trainer.lora.rank if cfg.trainer.lora else 0}  # 0: every weight trains
    return replace(res, summary={**res.summary, **extra})


def _run(cfg: SimConfig, trace: Trace, policy: Policy, report: MemoryReport, on_step=None) -> Pipeline:
    p = Pipeline(cfg, trace, policy, on_step=on_step, memory=report)
    p.run()
    return p


def _result(p: Pipeline) -> SimResult:
    rows = []
    for r in p.records:
        if r.end != r.end:  # not finished (cannot happen once run() returned)
            continue
        rows.append({
            "step": r.step, "start": r.start, "end": r.end, "step_time_s": r.step_time_s,
            "generation_s": r.gen_end - r.start, "scoring_s": max(0.0, r.score_end - r.gen_end),
            "training_s": r.train_end - r.train_start, "sync_s": r.end - r.sync_start, "sleep_wake_s": r.sleep_wake_s,
            "samples": len(r.batch), "tokens": r.tokens, "prompt_tokens": r.prompt_tokens,
            "admitted": r.admitted, "deferred": r.deferred, "delta": r.plan.delta,
            "chunk": r.plan.chunk if r.plan.chunk is not None else pd.NA,
            "staleness_mean": r.staleness_mean, "staleness_max": r.staleness_max, "reward": r.reward,
        })
    steps = pd.DataFrame(rows, columns=SIM_STEP_COLUMNS)
    steps["chunk"] = steps["chunk"].astype("Int64")
    timeline = pd.DataFrame(p.timeline.rows, columns=TIMELINE_COLUMNS).sort_values(["start", "pool", "devices"], kind="stable")
    timeline = timeline.reset_index(drop=True)
    wall = float(steps["end"].max()) if len(steps) else 0.0
    busy = {name: pool.utilization(wall) for name, pool in p.pools.items()}
    summary = summarize(
        steps, timeline,
        {n: pool.n for n, pool in p.pools.items()}, {n: pool.peak_flops for n, pool in p.pools.items()}, busy, p.cfg.batch,
    )
    summary.update({
        "policy": p.policy.label(),
        "trace": p.trace.name,
        "gpu": p.cfg.gpu_id,
        "admitted": p.ledger.admitted_total,
        "in_flight_end": p.in_flight(),
        "gen_iterations": sum(r.core.iterations for r in p.replicas),
        "preemptions": sum(r.core.preemptions for r in p.replicas),
        "scorer_evictions": {role: sc.evictions for role, sc in p.scorers.items() if hasattr(sc, "evictions")},
        "algorithm": p.algorithm.label(),
        "responses_per_prompt": p.n,
        "dropped": len(p.ledger.dropped),  # responses in groups dynamic sampling dropped (dapo)
        "trimmed": len(p.ledger.trimmed),  # responses in kept groups a synchronous dapo step discarded beyond B
        "gen_rounds": sum(d.rounds for d in p.ledger.decisions),  # generation rounds (dapo: verl's num_gen_batches)
        "streamed_roles": list(p.streamed_roles),  # [] where a streaming plan has nothing to stream to
    })
    meta = {
        "placement": p.cfg.placement.describe(p.cfg.scoring_roles()),
        "actor": p.models["generate"].id,
        "reward": p.models["reward"].id,
        "streamed_roles": list(p.streamed_roles),
        "max_response": p.cfg.max_response,
        "clipped_rows": p.trace.n_clipped,
        "max_prompt": p.cfg.max_prompt,
        "prompts_filtered": p.trace.n_prompts_filtered,
        "prompts_truncated": p.trace.n_prompts_truncated,
        "priced_by": priced_by(p.cfg.hardware_of(p.cfg.placement.generate)),  # which source priced each stage
    }
    return SimResult(steps, timeline, summary, meta, decisions=p.ledger.decisions_frame(),
                     conservation=p.ledger.conservation_frame())
