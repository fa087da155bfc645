"""Whether a simulated configuration fits its devices, and what to change when not: the cheapest training
setup that fits (auto ZeRO stage and recomputation), the knob a refusal names, the smallest sequence
parallelism that fits, the colocation a policy runs (a policy that generates beside training keeps a shared
pool resident: :func:`oppo_sim.hw.memory.pool_memory.colocate_for`) and what taking turns costs. What each role
holds is :mod:`oppo_sim.pipeline.memory_plan`'s."""

from __future__ import annotations

import math
from dataclasses import replace

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import Policy
from oppo_sim.engine.factory import EngineKind
from oppo_sim.hw.memory.pool_memory import MemoryReport, colocate_for, resident_refusal
from oppo_sim.hw.costs.sleepwake import OPTIMIZER_MOVES, SleepWake, sleep_wake
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.memory_plan import lengths, memory_report


def _first_fit(cfg: SimConfig, seq: int | None, resp: int | None) -> tuple[MemoryReport | None, MemoryReport]:
    """(the report of the cheapest training setup that fits, or None; the last report tried)."""
    report = None
    for t in cfg.train_memory.candidates():
        report = memory_report(cfg, seq, resp, t)
        if report.error() is None:
            return report, report
    return None, report


def check_fits(cfg: SimConfig, seq_tokens: int | None = None, response_tokens: int | None = None) -> MemoryReport:
    """The report of the cheapest training setup (auto ZeRO stage / recomputation, see
    ``TrainMemoryConfig.candidates``) under which every pool fits; ``ConfigError`` (one line naming the
    role, the GPU and the numbers) when none does — the numbers are those of the most frugal setup, and
    the line ends with the knob that would make it fit (:func:`fit_hint`)."""
    fit, last = _first_fit(cfg, seq_tokens, response_tokens)
    if fit is not None:
        return fit
    raise ConfigError(f"{last.error()}{fit_hint(cfg, seq_tokens, response_tokens)}")


def with_sp(cfg: SimConfig, sp: int) -> SimConfig:
    """``cfg`` with the trainer's sequence parallelism set to ``sp``."""
    return replace(cfg, train_memory=replace(cfg.train_memory, sequence_parallel=sp))


def smallest_sp(cfg: SimConfig, seq_tokens: int | None = None, response_tokens: int | None = None) -> int | None:
    """The smallest sequence parallelism under which ``cfg`` fits: its own, else the next divisors of the
    training pool's devices in increasing order; None if none does (and under Megatron, which has no
    Ulysses, its own if it fits). The smallest: it costs all-to-alls (``hw.trainer_cost``) and splits
    fewer sequences' work over more ranks."""
    own, n = cfg.train_memory.sequence_parallel, cfg.placement.pool(cfg.placement.train).devices
    if cfg.trainer.megatron:  # Ulysses is FSDP's; Megatron splits sequences with --cp
        return own if _first_fit(cfg, seq_tokens, response_tokens)[0] is not None else None
    for sp in (own, *(d for d in range(own + 1, n + 1) if n % d == 0)):
        if _first_fit(with_sp(cfg, sp), seq_tokens, response_tokens)[0] is not None:
            return sp
    return None


def fit_hint(cfg: SimConfig, seq_tokens: int | None = None, response_tokens: int | None = None) -> str:
    """``"; fits with --KNOB VALUE"`` (or ``"; fits without --full-logits"``) for a configuration that does
    not fit: the first single change that makes it fit, tried in this order — the trainer's own settings
    where they were pinned (without ``--full-logits``, ``--recompute full``, ``--zero 3``, then
    ``--offload-train-state`` where the engine sleeps: they keep the job as it is), a smaller engine share
    where the engine generates beside resident roles (``--gpu-memory-utilization``, :func:`engine_share_hint`),
    sequence parallelism (``--sp N``, the smallest that fits; it keeps every token), then a
    prompt cap (``--max-prompt N``, the largest power of two from 256 that fits; it drops or cuts data) —
    or says that none does."""
    seq, resp = lengths(cfg, seq_tokens, response_tokens)
    t = cfg.train_memory
    pinned = [("without --full-logits", replace(t, full_logits=False), t.full_logits),
              ("with --recompute full", replace(t, recompute="full"), t.recompute not in (None, "full")),
              ("with --zero 3", replace(t, zero_stage=3), t.zero_stage not in (None, 3))]
    for knob, train, applies in pinned:
        if applies and _first_fit(replace(cfg, train_memory=train), seq, resp)[0] is not None:
            return f"; fits {knob}"
    if (cfg.colocate == "sleep" and not cfg.offload_train_state
            and _first_fit(replace(cfg, offload_train_state=True), seq, resp)[0] is not None):
        return "; fits with --offload-train-state"
    util = engine_share_hint(cfg, seq, resp)
    if util is not None:
        return f"; fits with --gpu-memory-utilization {util:g}"
    sp = smallest_sp(cfg, seq, resp)
    if sp is not None and sp != t.sequence_parallel:
        return f"; fits with --sp {sp}"
    cap = 1 << max(seq - resp - 1, 1).bit_length() - 1  # the largest power of two below the longest prompt
    while cap >= 256:
        if _first_fit(cfg, cap + resp, resp)[0] is not None:
            return f"; fits with --max-prompt {cap}"
        cap //= 2
    return "; no single --recompute, --zero, --gpu-memory-utilization, --sp or --max-prompt setting makes it fit"


UTILIZATION_STEP = 0.05
"""The engine shares :func:`engine_share_hint` tries, downwards from the configured one."""


def engine_share_hint(cfg: SimConfig, seq: int, resp: int) -> float | None:
    """The largest ``gpu_memory_utilization`` (a multiple of :data:`UTILIZATION_STEP` below the configured one)
    under which ``cfg`` fits, where its engine generates beside roles that stay resident (``resident``, or the
    trainer's state kept: ``offload_train_state`` off) on a shared pool; None where that does not apply or no
    share fits."""
    beside = cfg.colocate == "resident" or not cfg.offload_train_state
    if (not (beside and cfg.placement.shared(cfg.placement.generate)) or cfg.engine.num_gpu_blocks_override is not None
            or cfg.engine_kind != EngineKind.CONTINUOUS):
        return None
    util = math.floor(cfg.engine.gpu_memory_utilization / UTILIZATION_STEP - 1e-9) * UTILIZATION_STEP
    while util >= UTILIZATION_STEP - 1e-9:
        share = round(util, 2)
        if _first_fit(replace(cfg, engine=replace(cfg.engine, gpu_memory_utilization=share)), seq, resp)[0] is not None:
            return share
        util -= UTILIZATION_STEP
    return None


def colocation(cfg: SimConfig, policy: Policy) -> SimConfig:
    """``cfg`` as ``policy`` can run it: ``colocate="resident"`` where the policy generates while an earlier
    step trains and generation shares its pool with other roles (:func:`~oppo_sim.hw.memory.pool_memory.colocate_for`),
    else ``cfg``."""
    shared = cfg.placement.shared(cfg.placement.generate)
    mode = colocate_for(cfg.colocate, shared, policy.trains_while_generating())
    return cfg if mode == cfg.colocate else replace(cfg, colocate=mode)


def fit_for_policy(cfg: SimConfig, policy: Policy, seq_tokens: int | None = None,
                   response_tokens: int | None = None) -> tuple[SimConfig, MemoryReport]:
    """The configuration ``policy`` runs (:func:`colocation`) and its :func:`check_fits` report. Where the policy
    keeps a shared pool resident and the engine's share leaves the other roles too little, the share is lowered
    to the largest that fits (:func:`engine_share_hint`; the returned configuration carries it), as a user
    running vLLM beside a live trainer would; ``ConfigError`` in one line, naming the way out, when no share
    fits (the plain refusal where it would not fit taking turns either)."""
    run = colocation(cfg, policy)
    if run is cfg:
        return cfg, check_fits(cfg, seq_tokens, response_tokens)
    try:
        return run, check_fits(run, seq_tokens, response_tokens)
    except ConfigError as e:
        share = engine_share_hint(run, *lengths(cfg, seq_tokens, response_tokens))
        if share is not None:  # the engine's share lowered beside the resident trainer, as a user would
            run = replace(run, engine=replace(run.engine, gpu_memory_utilization=share))
            return run, check_fits(run, seq_tokens, response_tokens)
        check_fits(cfg, seq_tokens, response_tokens)  # what does not fit even taking turns says so plainly
        raise ConfigError(resident_refusal(policy.label(), cfg.placement.generate, str(e),
                                           "or use --placement disaggregated (generation on GPUs of its own) or a "
                                           "policy that takes turns (e.g. oppo)")) from None


def sleep_wake_of(cfg: SimConfig, report: MemoryReport) -> SleepWake | None:
    """What the generation engine's sleep and wake cost each step on its pool (``cfg.sleep_level``), or
    None where nothing takes turns there (a pool that only generates, ``resident``): see
    :mod:`oppo_sim.hw.costs.sleepwake`. Only the generation pool has phases."""
    g = cfg.placement.generate
    return sleep_wake(report.pool(g), cfg.hardware_of(g), cfg.sleep_level, optimizer_copy=OPTIMIZER_MOVES[cfg.optimizer_move])


