"""How a published run becomes a simulation: its trace (the response-length assumption: a lognormal whose
mean, after the cap, is the published one), its ``SimConfig`` (as its framework ran it), the ids the tables
lack, and the baseline policy's steps — timed past the memory check where the simulator refuses what the
framework ran. Used by ``published_runs.py``."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.core.placement import SCORING_ROLES, Placement, Pool, colocated_placement, paper_placement
from oppo_sim.core.policies import Baseline, Policy, make_policy
from oppo_sim.core.results import TIMELINE_COLUMNS, SimResult
from oppo_sim.engine.request import EngineConfig
from oppo_sim.engine.static_params import StaticConfig
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.costs.op_cost import DEFAULT_OP_COSTS, with_op_costs
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.pipeline.memory_plan import longest, memory_report
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.catalog import find_trace, load_trace
from oppo_sim.traces.trace import Trace

try:
    from published_runs_data import PublishedRun
except ImportError:  # imported as paper_figs.published_runs_sim
    from paper_figs.published_runs_data import PublishedRun

PROMPT_SIGMA = 0.3
"""Log-space spread of the synthetic prompt lengths (math/chat prompts vary little)."""

# --------------------------------------------------------------------------------------------------
# The response-length assumption: a lognormal whose mean, after the cap, is the published one


def capped_lognormal_mean(median: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X lognormal with this median and log-space spread."""
    if sigma <= 0:
        return min(median, cap)
    mu, z = math.log(median), math.log(cap)
    phi = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731
    return math.exp(mu + sigma * sigma / 2) * phi((z - mu - sigma * sigma) / sigma) + cap * (1 - phi((z - mu) / sigma))


def median_for_mean(mean: float, sigma: float, cap: float) -> float:
    """The median whose lognormal, capped at ``cap``, has mean ``mean`` (``mean >= cap``: every response at the
    cap, returned as ``inf``)."""
    if mean >= cap:
        return math.inf
    if sigma <= 0:
        return mean
    lo, hi = 1e-3, cap * 1e6
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if capped_lognormal_mean(mid, sigma, cap) < mean else (lo, mid)
    return math.sqrt(lo * hi)


def derived_prompt_mean(run: PublishedRun) -> float:
    """The run's mean prompt length: stated, or (NeMo RL) derived from its tokens/s/GPU column."""
    if run.mean_prompt is not None:
        return run.mean_prompt
    if run.tokens_per_s_per_gpu is None or run.mean_response is None:
        raise ConfigError(f"{run.key}: no prompt length stated and none derivable")
    total = run.tokens_per_s_per_gpu * run.devices * run.published_step_s / (run.batch * run.n)
    return max(1.0, total - run.mean_response)


def response_cap(run: PublishedRun) -> int:
    """The response cap: the run's max response, less the prompt where the cap is on the whole sequence."""
    if run.total_cap:  # NeMo RL: max_total_sequence_length bounds prompt + response
        return int(run.max_response - round(derived_prompt_mean(run)))
    return run.max_response


def trace_name(run: PublishedRun) -> str:
    """The first of the run's named traces found on the trace search path."""
    for name in run.trace or ():
        try:
            find_trace(name)
            return name
        except TraceError:
            continue
    raise ConfigError(f"{run.key}: none of the traces {', '.join(run.trace or ())} is on the trace search path")


def run_trace(run: PublishedRun, rows: int, seed: int = 0) -> Trace:
    """The trace a run is simulated on (see the module docstring)."""
    cap = response_cap(run)
    if run.trace is not None:
        t = load_trace(trace_name(run), max_response=cap)
        return Trace.from_arrays(np.minimum(t.prompt_tokens, run.max_prompt), t.response_tokens, name=t.name,
                                 max_response=cap)
    rng = np.random.default_rng(seed)
    pmean = derived_prompt_mean(run)
    sigma = PROMPT_SIGMA if run.prompt_sigma is None else run.prompt_sigma
    prompts = rng.lognormal(math.log(pmean) - sigma ** 2 / 2, sigma, rows)
    prompts = np.clip(np.rint(prompts), 1, run.max_prompt).astype(np.int64)
    mean = run.mean_response if run.mean_response is not None else run.assumed_mean_response
    if mean is None:
        raise ConfigError(f"{run.key}: neither a published nor an assumed mean response length")
    median = median_for_mean(mean, run.response_sigma, cap)
    if math.isinf(median):
        responses = np.full(rows, cap, dtype=np.int64)
    else:
        raw = rng.lognormal(math.log(median), run.response_sigma, rows) if run.response_sigma > 0 else np.full(rows, median)
        responses = np.clip(np.rint(raw), 1, cap).astype(np.int64)
    return Trace.from_arrays(prompts, responses, name=f"{run.key}-synthetic", max_response=cap)


# --------------------------------------------------------------------------------------------------
# The run as oppo-sim's configuration


def placement(run: PublishedRun) -> Placement:
    spec = run.placement.strip().lower()
    if spec == "colocated":
        return colocated_placement(run.devices)
    if spec == "paper":
        return paper_placement(run.devices)
    if spec.startswith("pools:"):
        sizes = dict(part.split("=") for part in spec.removeprefix("pools:").split(","))
        pools = tuple(Pool(name, int(sizes[name])) for name in ("gen", "train", "score") if name in sizes)
        if sum(p.devices for p in pools) != run.devices:
            raise ConfigError(f"{run.key}: pools {spec} do not add up to {run.devices} devices")
        frozen = "score" if "score" in sizes else "train"  # without a scoring pool the trainer's GPUs score
        return Placement(pools, generate="gen", reward=frozen, reference=frozen, critic="train",
                         logprob="train", train="train")
    raise ConfigError(f"{run.key}: unknown placement '{run.placement}'")


def missing_ids(run: PublishedRun) -> list[str]:
    """The ids the simulator's tables lack for this run (``model X``, ``GPU Y``)."""
    out = []
    for m in dict.fromkeys([run.model] + ([] if run.reward == "rule" else [run.reward])):
        try:
            get_model(m)
        except ConfigError:
            out.append(f"model {m}")
    try:
        get_hardware(run.gpu)
    except ConfigError:
        out.append(f"GPU {run.gpu}")
    return out


def engine_config(run: PublishedRun) -> EngineConfig:
    """The generation engine's settings the run states; the rest are oppo-sim's (vLLM-like) defaults."""
    given = {k: v for k, v in (("max_num_seqs", run.max_num_seqs), ("max_num_batched_tokens", run.max_num_batched_tokens))
             if v is not None}
    return EngineConfig(tp=run.tp, gpu_memory_utilization=run.gpu_memory_utilization, enforce_eager=run.enforce_eager,
                        vllm_version=run.vllm_version, **given)


OP_COSTS = {"mode": DEFAULT_OP_COSTS}
"""What prices the kernels in this table's runs (``--op-costs`` of published_runs.py; ``oppo_sim.hw.costs.op_cost``)."""


def use_op_costs(mode: str) -> None:
    """Price the following runs' kernels by ``mode`` (``op_cost.OP_COST_MODES``)."""
    with_op_costs(get_hardware("h100-sxm"), mode)  # a bad mode -> ConfigError before any run
    OP_COSTS["mode"] = mode


def _gpu(run: PublishedRun):
    mode = OP_COSTS["mode"]
    return run.gpu if mode == "roofline" or missing_ids(run) else with_op_costs(get_hardware(run.gpu), mode)


def sim_config(run: PublishedRun, steps: int) -> SimConfig:
    rule = run.reward == "rule"
    return SimConfig(
        batch=run.batch, steps=steps, gpu=_gpu(run), actor=run.model, reward=run.model if rule else run.reward,
        placement=placement(run), engine=engine_config(run),
        engine_kind=run.engine, static=StaticConfig(gen_batch=run.gen_batch), ppo_epochs=run.ppo_epochs,
        minibatches=run.minibatches, max_response=response_cap(run), nodes=run.nodes, expert_parallel=run.ep,
        colocate=run.colocate, sleep_level=run.sleep_level, max_prompt=run.max_prompt, truncate_prompt=True,
        reference_on_host=run.reference_on_host, optimizer_move=run.optimizer_move, refit_buffers=run.refit_buffers, refit_group=run.refit_group, padded_batches=run.padded_batches,
        padded_micro_batches=run.padded_micro_batches,
        after_update=SCORING_ROLES,  # every framework's trainer runs the passes in its loop, after the last sync
        train_memory=TrainMemoryConfig(zero_stage=run.zero, recompute=run.recompute, sequence_parallel=run.sp,
                                       micro_batch_tokens=run.micro_batch_tokens, micro_batch_size=run.micro_batch_size,
                                       logprob_micro_batch_tokens=run.logprob_micro_batch_tokens,
                                       logprob_micro_batch_size=run.logprob_micro_batch_size),
        trainer=TrainerLayout(run.train_backend, run.train_tp, run.pp, cp=run.cp, etp=run.etp, first_stage_layers=run.stage_layers[0],
                              last_stage_layers=run.stage_layers[1], optimizer_offload=run.optimizer_offload,
                              balance_order=run.balance_order, fsdp_size=run.fsdp_size,
                              moe_dispatcher=run.moe_dispatcher, moe_router_dtype=run.moe_router_dtype),
        algorithm=Algorithm(name=run.algorithm, n=run.n, reward="rule" if rule else "model", kl=run.kl),
    )


def run_policy(run: PublishedRun) -> Policy:
    """The framework's own schedule of ``run``: the synchronous baseline, or async with the run's staleness."""
    return make_policy(run.policy, staleness=run.staleness, in_flight=run.in_flight) if run.policy == "async" else Baseline()


def sim_steps(run: PublishedRun, steps: int) -> int:
    """Steps to simulate for ``steps`` timed ones. An async run's first step has nothing to overlap yet and its last
    nothing left to overlap with (the pipeline drains): neither is timed, and the steps between are an even number
    (the steady state can alternate between a generation-bound and a training-bound step)."""
    return steps + 2 + steps % 2 if run.policy == "async" else steps


def step_seconds(run: PublishedRun, step_times: pd.Series) -> float:
    """The predicted step time of ``run`` from its simulated steps: the median (baseline), or for an async run the mean
    of its steady state, the steps between the first and the last (:func:`sim_steps`; the sources publish a mean
    over steps)."""
    if run.policy == "async" and len(step_times) > 2:
        return float(step_times.iloc[1:-1].mean())
    return float(step_times.median())


def schedule_steps(cfg: SimConfig, trace: Trace, policy: Policy) -> tuple[SimResult, str]:
    """The result of the framework's schedule ``policy`` (:func:`run_policy`: per-step table and timeline) and the
    training setup it ran with. Where the
    memory check refuses the configuration (the framework ran it, so it fit there), the steps are timed past
    the check with the most frugal setup (ZeRO-3, the run's recomputation or full) and the setup says
    ``refused; ...``: the prediction is then of the time, not of the memory."""
    try:
        res = simulate(trace, policy, cfg)
        return res, f"{cfg.trainer.state(res.summary['zero_stage'], cfg.expert_parallel)}, recompute {res.summary['recompute']}"
    except ConfigError as e:
        if "does not fit" not in str(e):
            raise
        refusal = str(e)
    train = replace(cfg.train_memory, zero_stage=3, recompute=cfg.train_memory.recompute or "full")
    p = Pipeline(cfg, trace, policy, memory=memory_report(cfg, *longest(trace, cfg.max_response), train=train))
    p.run()
    rows = [{"step": r.step, "start": r.start, "end": r.end, "step_time_s": r.step_time_s,
             "generation_s": r.gen_end - r.start, "scoring_s": max(0.0, r.score_end - r.gen_end),
             "training_s": r.train_end - r.train_start, "sync_s": r.end - r.train_end, "samples": len(r.batch),
             "tokens": r.tokens, "prompt_tokens": r.prompt_tokens} for r in p.records]
    timeline = pd.DataFrame(p.timeline.rows, columns=TIMELINE_COLUMNS)
    return (SimResult(pd.DataFrame(rows), timeline, {}),
            f"refused; timed with {cfg.trainer.state(3, cfg.expert_parallel)}, recompute {train.recompute} ({refusal})")


def simulate_record(run: PublishedRun, steps: int) -> tuple[SimConfig, Trace, SimResult, str]:
    """``run`` simulated under its framework's schedule for ``steps`` timed steps (:func:`sim_steps` of them in all):
    its configuration, trace, result and training setup (:func:`schedule_steps`)."""
    n = sim_steps(run, steps)
    cfg, trace = sim_config(run, n), run_trace(run, run.batch * run.n * n)
    res, memory = schedule_steps(cfg, trace, run_policy(run))
    return cfg, trace, res, memory
