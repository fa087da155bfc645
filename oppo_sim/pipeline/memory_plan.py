"""Memory of a simulated configuration: what each role holds on each pool, the training setup that
fits (auto ZeRO stage and recomputation), the sync mechanism the placement implies, and the cost models
that follow from them. The arithmetic is :mod:`oppo_sim.hw.memory`'s; this module maps a
:class:`~oppo_sim.pipeline.config.SimConfig` onto it.

Who holds what (bytes per device):

- ``generate``: the actor's weights over ``tp`` devices, then the KV cache in what is left;
- ``train``: actor and critic training state (weights, gradients, Adam; ZeRO over the pool's devices)
  plus the larger of their activations (the trainer runs them one after the other) — the critic only for
  an algorithm that has one (``ppo``; ``SimConfig.trained()``);
- ``reward`` / ``reference``: frozen weights (their KV budget is what the pool has left) — only the roles
  in ``SimConfig.scoring_roles()``: no reward model with a rule reward, no reference without KL. On the
  pool that trains, under a ZeRO-3 trainer, they are sharded with it (:func:`frozen_shards`: verl's FSDP
  reference/reward workers, OpenRLHF's ZeRO-3 inference engines) and each forward all-gathers them; on a
  pool of their own (the paper placement's score GPU) every device holds a full copy;
- ``critic`` / ``logprob`` forwards: nothing extra on the training pool (the training weights serve);
  a copy of the weights on any other pool.

Where generation shares a pool with other roles, ``colocate`` says what happens to the rest while the
engine generates: ``sleep`` (default) — the engine sleeps (weights to host, KV freed) while the others
run and they are offloaded while it generates, as OpenRLHF (``--colocate_all_models`` with vLLM and
DeepSpeed sleep) and verl's hybrid engine do; it is what the simulator's engine assumes when it sizes
its KV cache from the whole device, as the paper's 7 shared GPUs need for rollouts of 8k tokens.
``resident`` — everything stays, and the KV cache gets what training leaves (``vllm`` with a lowered
``gpu_memory_utilization`` next to a live trainer). ``offload_train_state=False`` (``--no-offload-train-state``;
verl's default, ``actor.fsdp_config.param_offload/optimizer_offload=False``; OpenRLHF without
``--deepspeed_enable_sleep``) with ``sleep``: the engine still sleeps while the others run, but the trainer's
weights, gradients and Adam state and the frozen weights stay on the GPUs in both phases; only its
activations take turns with the engine, whose KV cache gets what the state leaves.

Taking turns is not free: each step the engine goes to sleep when generation ends and wakes before the
next one, and the other roles' state leaves for host memory and comes back. :func:`sleep_wake_of` says
what that costs on the generation pool (the arithmetic, and vLLM's sleep levels — ``sleep_level`` — are
:mod:`oppo_sim.hw.sleepwake`'s); the simulator charges it there every step (``sleep_wake_s``).

A policy that generates while an earlier step is scored and trained (``async``:
``Policy.trains_while_generating``) cannot take turns: on a shared generation pool :func:`colocation`
plans it ``resident`` whatever ``colocate`` says, and :func:`fit_for_policy` refuses it in one line,
naming the way out, where everything does not fit at once.
"""

from __future__ import annotations

import math
from dataclasses import replace

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import ROLES, Pool
from oppo_sim.core.policies import Policy
from oppo_sim.hw.costmodel import CostModel
from oppo_sim.hw.expert_parallel import expert_split
from oppo_sim.hw.gpu_table import domain_gpus
from oppo_sim.hw.memory import (
    ALWAYS,
    GENERATE,
    OTHER,
    MemoryReport,
    PoolMemory,
    RoleMemory,
    TrainMemoryConfig,
    activation_bytes,
    state_bytes,
)
from oppo_sim.hw.models import ModelSpec
from oppo_sim.hw.sleepwake import SleepWake, sleep_wake
from oppo_sim.hw.sync import SyncMechanism, SyncPlan
from oppo_sim.hw.trainer_layout import TrainerLayout
from oppo_sim.hw.trainer_memory import megatron_activation_bytes, megatron_state_bytes, micro_batches_bound
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.traces.trace import DEFAULT_MAX_RESPONSE, Trace

DEFAULT_PROMPT_TOKENS = 1024
"""Prompt length assumed when no trace is given (OpenRLHF's ``--prompt_max_len`` default)."""


def longest(trace: Trace, max_response: int | None) -> tuple[int, int]:
    """(tokens of the longest prompt + capped response, tokens of the longest capped response) in ``trace``."""
    resp = trace.response_tokens if max_response is None else trace.response_tokens.clip(max=max_response)
    return int((trace.prompt_tokens + resp).max()), int(resp.max())


def _lengths(cfg: SimConfig, seq_tokens: int | None, response_tokens: int | None) -> tuple[int, int]:
    resp_cap = cfg.max_response or DEFAULT_MAX_RESPONSE
    seq = seq_tokens if seq_tokens is not None else resp_cap + DEFAULT_PROMPT_TOKENS
    resp = response_tokens if response_tokens is not None else min(seq, resp_cap)
    if seq < 1 or not 0 <= resp <= seq:
        raise ConfigError(f"need seq_tokens >= 1 and 0 <= response_tokens <= seq_tokens, got {seq} and {resp}")
    return seq, resp


def _train_role(cfg: SimConfig, devices: int, train: TrainMemoryConfig, seq: int, resp: int, phase: str) -> RoleMemory:
    """Training state of every model the algorithm trains (``cfg.trained()``: the actor, and the critic only
    where there is one), plus the largest of their activations per micro-batch (per sequence packed, so
    independent of B x n)."""
    z, rc, flash, sp = train.zero_stage, train.recompute, train.flash_attention, train.sequence_parallel
    if devices % sp:
        raise ConfigError(f"sequence parallelism {sp} does not divide the {devices} training devices")
    tokens = max(train.micro_batch_tokens or seq, seq)  # packed sequences; a sequence is never split
    resp_in = min(tokens, resp * math.ceil(tokens / seq))
    ep = cfg.expert_parallel
    if cfg.trainer.megatron:
        return _megatron_train_role(cfg, devices, train, seq, tokens, resp_in, phase)
    weights = grads = optimizer = act = 0.0
    for _, model, scalar in cfg.trained():
        shared, experts = expert_split(model, model.params_scalar_head if scalar else model.params, ep if model.moe else 1)
        for s in (state_bytes(shared, devices, z), state_bytes(experts, devices // ep, z)):
            weights, grads, optimizer = weights + s.weights, grads + s.grads, optimizer + s.optimizer
        act = max(act, activation_bytes(model, tokens, seq, rc, flash, scalar, resp_in, train.full_logits) / sp)
    label = " + ".join(f"{role} {model.id}" for role, model, _ in cfg.trained())
    return RoleMemory(
        "train", label, phase, weights=weights, grads=grads, optimizer=optimizer, activations=act,
        note=f"ZeRO-{z} over {devices} device{'s' if devices > 1 else ''}, recompute {rc}"
        + (f", sequence parallel {sp}" if sp > 1 else "") + (f", expert parallel {ep}" if ep > 1 else "")
        + (", full logits" if train.full_logits else ""),
    )


def _megatron_train_role(cfg: SimConfig, devices: int, train: TrainMemoryConfig, seq: int, tokens: int, resp_in: int,
                         phase: str) -> RoleMemory:
    """The trainer's role under Megatron (:mod:`oppo_sim.hw.trainer_memory`): the largest stage's state per
    rank, and its in-flight micro-batches' activations (at most one sequence per micro-batch per step's share)."""
    lay, ep, rc = cfg.trainer, cfg.expert_parallel, train.recompute
    m = micro_batches_bound(cfg.sequences, cfg.minibatches, lay.data_parallel(devices))
    weights = grads = optimizer = act = 0.0
    for _, model, scalar in cfg.trained():
        st = megatron_state_bytes(model, lay, ep, devices, scalar)
        weights, grads, optimizer = weights + st.weights, grads + st.grads, optimizer + st.optimizer
        act = max(act, megatron_activation_bytes(model, lay, tokens, seq, rc, m, train.flash_attention, scalar, resp_in,
                                                 train.full_logits))
    label = " + ".join(f"{role} {model.id}" for role, model, _ in cfg.trained())
    return RoleMemory(
        "train", label, phase, weights=weights, grads=grads, optimizer=optimizer, activations=act,
        note=f"{lay.label()}" + (f" ep{ep}" if ep > 1 else "") + f" over {devices} devices (dp {lay.data_parallel(devices)}"
        + (", distributed optimizer" if lay.distributed_optimizer else "") + f"), recompute {rc}"
        + (", full logits" if train.full_logits else ""),
    )


FROZEN_ROLES: tuple[str, ...] = ("reward", "reference")


def frozen_shards(cfg: SimConfig, role: str, zero_stage: int) -> int:
    """Devices the weights of scoring ``role`` are sharded over: for a frozen model (:data:`FROZEN_ROLES`),
    all of its pool's where that pool trains and the trainer runs ZeRO-3 — verl's reference and reward workers are FSDP-wrapped
    over the colocated worker group, OpenRLHF's run as DeepSpeed ZeRO-3 inference engines under
    ``--zero_stage 3`` — else 1: a full copy on every device (data parallel; the paper placement's score
    GPU). Sharded weights are all-gathered for each forward (``CostModel.param_gather``). Under a Megatron
    trainer a frozen model on its pool holds its ``tp · pp`` shard (NeMo RL's and verl's Megatron reference
    runs with the policy's parallelism) and moves activations, never weights (:func:`frozen_gathers`)."""
    pl = cfg.placement
    pool = pl.pool_of(role)
    if cfg.trainer.megatron:
        return cfg.trainer.tp * cfg.trainer.pp if role in FROZEN_ROLES and pool == pl.train else 1
    return pl.pool(pool).devices if role in FROZEN_ROLES and pool == pl.train and zero_stage == 3 else 1


def frozen_gathers(cfg: SimConfig) -> bool:
    """Whether a sharded frozen model (:func:`frozen_shards` > 1) all-gathers its weights for each forward:
    under FSDP / ZeRO-3, yes; under Megatron, never (its shard computes, activations move)."""
    return not cfg.trainer.megatron


def _pool_memory(cfg: SimConfig, pool: Pool, train: TrainMemoryConfig, seq: int, resp: int) -> PoolMemory:
    pl, models = cfg.placement, cfg.models()
    here = [r for r in ROLES if pl.pool_of(r) == pool.name]
    generates = pl.generate == pool.name
    swap = generates and len(here) > 1 and cfg.colocate == "sleep"
    # what is not the engine's: offloaded while it generates (OTHER), or held throughout (ALWAYS) when the
    # trainer's state stays on the GPUs (offload_train_state off) — then only its activations take turns
    rest = OTHER if swap and cfg.offload_train_state else ALWAYS

    roles: list[RoleMemory] = []
    actor: ModelSpec = models["generate"]
    tp = cfg.engine.tp if generates else 1
    if generates:
        roles.append(RoleMemory("generate", f"actor {actor.id}, tp {tp}", GENERATE if swap else ALWAYS,
                                weights=actor.weight_bytes() / tp))
    if pl.train == pool.name:
        t = _train_role(cfg, pool.devices, train, seq, resp, rest)
        if swap and rest == ALWAYS:  # the state stays; the activations live only while training
            roles += [replace(t, activations=0.0),
                      RoleMemory("train", t.label, OTHER, activations=t.activations, note="activations, freed while generating")]
        else:
            roles.append(t)
    for role in cfg.scoring_roles():  # only the forwards the algorithm runs hold weights
        if pl.pool_of(role) != pool.name or (role in ("critic", "logprob") and pl.train == pool.name):
            continue
        m, shards, scalar = models[role], frozen_shards(cfg, role, train.zero_stage), role in ("reward", "critic")
        if cfg.trainer.megatron and role in FROZEN_ROLES and pool.name == pl.train:
            # its Megatron shard: the largest stage's tp slice, the routed experts over ep
            w = megatron_state_bytes(m, cfg.trainer, cfg.expert_parallel, pool.devices, scalar).weights
            note = cfg.trainer.label(cfg.expert_parallel if m.moe else 1)
        else:
            w, note = m.weight_bytes(scalar_head=scalar) / shards, f"sharded over {shards}" if shards > 1 else ""
        roles.append(RoleMemory(role, m.id, rest, weights=w, note=note))
    gpu = cfg.hardware_of(pool.name).gpu
    return PoolMemory(
        pool.name, gpu.id, pool.devices, gpu.mem_bytes, cfg.engine.gpu_memory_utilization, tuple(roles),
        generates=generates, seq_tokens=seq, train_utilization=cfg.train_memory_fraction,  # a KV budget given explicitly (blocks override) is the engine's to check
        kv_min=seq * actor.replica_kv_bytes_per_token(tp) / tp if generates and cfg.engine.num_gpu_blocks_override is None else 0.0,
    )


def memory_report(cfg: SimConfig, seq_tokens: int | None = None, response_tokens: int | None = None,
                  train: TrainMemoryConfig | None = None) -> MemoryReport:
    """Memory per pool for a *resolved* training setup (default: ``cfg.train_memory``, which must then be
    resolved). ``seq_tokens``: the longest prompt + response (default ``max_response`` + 1,024);
    ``response_tokens``: the longest response (default ``max_response``). Reports, never raises for lack
    of memory: see :meth:`MemoryReport.error`."""
    t = train if train is not None else cfg.train_memory
    if not t.resolved:
        raise ConfigError(f"memory_report needs a resolved training setup, got {t.describe()}; use check_fits")
    seq, resp = _lengths(cfg, seq_tokens, response_tokens)
    pools = tuple(_pool_memory(cfg, p, t, seq, resp) for p in cfg.placement.pools)
    return MemoryReport(pools, t, seq, cfg.colocate)


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
    ``--offload-train-state`` where the engine sleeps: they keep the job as it is), sequence parallelism (``--sp N``, the smallest that fits; it keeps every token), then a
    prompt cap (``--max-prompt N``, the largest power of two from 256 that fits; it drops or cuts data) —
    or says that none does."""
    seq, resp = _lengths(cfg, seq_tokens, response_tokens)
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
    sp = smallest_sp(cfg, seq, resp)
    if sp is not None and sp != t.sequence_parallel:
        return f"; fits with --sp {sp}"
    cap = 1 << max(seq - resp - 1, 1).bit_length() - 1  # the largest power of two below the longest prompt
    while cap >= 256:
        if _first_fit(cfg, cap + resp, resp)[0] is not None:
            return f"; fits with --max-prompt {cap}"
        cap //= 2
    return "; no single --recompute, --zero, --sp or --max-prompt setting makes it fit"


def colocation(cfg: SimConfig, policy: Policy) -> SimConfig:
    """``cfg`` as ``policy`` can run it: ``colocate="resident"`` where the policy generates while an earlier
    step trains and generation shares its pool with other roles (they cannot take turns), else ``cfg``."""
    shared = cfg.placement.shared(cfg.placement.generate)
    if cfg.colocate == "sleep" and shared and policy.trains_while_generating():
        return replace(cfg, colocate="resident")
    return cfg


def fit_for_policy(cfg: SimConfig, policy: Policy, seq_tokens: int | None = None,
                   response_tokens: int | None = None) -> tuple[SimConfig, MemoryReport]:
    """The configuration ``policy`` runs (:func:`colocation`) and its :func:`check_fits` report;
    ``ConfigError`` in one line, naming the way out, when a policy that generates beside training does not
    fit with everything resident on the shared pool (the plain refusal where it would not fit taking turns either)."""
    run = colocation(cfg, policy)
    if run is cfg:
        return cfg, check_fits(cfg, seq_tokens, response_tokens)
    try:
        return run, check_fits(run, seq_tokens, response_tokens)
    except ConfigError as e:
        check_fits(cfg, seq_tokens, response_tokens)  # what does not fit even taking turns says so plainly
        raise ConfigError(
            f"{policy.label()} generates while the previous step trains, so pool '{cfg.placement.generate}' must hold "
            f"the engine and every other role at once (no sleep), and it {e}; use --placement disaggregated (generation "
            f"on GPUs of its own) or a policy that takes turns (e.g. oppo)"
        ) from None


def sleep_wake_of(cfg: SimConfig, report: MemoryReport) -> SleepWake | None:
    """What the generation engine's sleep and wake cost each step on its pool (``cfg.sleep_level``), or
    None where nothing takes turns there (a pool that only generates, ``resident``): see
    :mod:`oppo_sim.hw.sleepwake`. Only the generation pool has phases."""
    g = cfg.placement.generate
    return sleep_wake(report.pool(g), cfg.hardware_of(g), cfg.sleep_level)


def domain_block(cfg: SimConfig) -> int:
    """GPUs per scale-up domain block of the configuration (``gpu_table.domain_gpus``); where pools run on
    different GPUs, the smallest block of theirs holds for all (two kinds of GPU share no NVLink)."""
    total = cfg.placement.total_devices
    return min(domain_gpus(cfg.hardware_of(p.name).gpu, total, cfg.nodes) for p in cfg.placement.pools)


def pool_domains(cfg: SimConfig) -> dict[str, frozenset[int]]:
    """The scale-up domains each pool's devices sit in (``gpu_table.domain_gpus``: blocks of whole nodes
    that share ``link_bw``; ``nodes`` nodes of equal size, pools laid out in order). Where pools run on
    different GPUs, the smallest block of theirs holds for all (two kinds of GPU share no NVLink)."""
    block = domain_block(cfg)
    out, start = {}, 0
    for p in cfg.placement.pools:
        out[p.name] = frozenset(d // block for d in range(start, start + p.devices))
        start += p.devices
    return out


def sync_plan(cfg: SimConfig) -> SyncPlan:
    """``cfg.sync``, or for ``auto``: NVLink when the generation and training pools sit in one scale-up
    domain (one node, or one rack-scale NVLink domain such as GB200 NVL72's), the network otherwise (a
    pool spanning domains gathers its weights across them)."""
    if cfg.sync != "auto":
        return SyncPlan(SyncMechanism(cfg.sync), cfg.engine.tp)
    domains = pool_domains(cfg)
    one = len(domains[cfg.placement.generate] | domains[cfg.placement.train]) == 1
    return SyncPlan(SyncMechanism.NVLINK if one else SyncMechanism.NETWORK, cfg.engine.tp)


def generation_kv_blocks(cfg: SimConfig, report: MemoryReport) -> int:
    """KV-cache blocks per generation replica (``tp`` devices) in the memory the report leaves it (the
    engine's ``num_gpu_blocks_override`` when set)."""
    if cfg.engine.num_gpu_blocks_override is not None:
        return cfg.engine.num_gpu_blocks_override
    kv = report.pool(cfg.placement.generate).kv_cache or 0.0
    model = cfg.models()["generate"]
    kv = max(kv * cfg.engine.tp - cfg.engine.max_num_seqs * model.mixer_state_bytes, 0.0)  # a hybrid's state first
    per_block = model.replica_kv_bytes_per_token(cfg.engine.tp) * cfg.engine.block_size
    return int(kv // per_block)


def cost_models(cfg: SimConfig, report: MemoryReport) -> dict[str, CostModel]:
    """One cost model per pool, with the report's training setup, the configuration's sync plan, its
    scale-up domain (a tensor-parallel group larger than a domain runs its all-reduces over the network) and
    the trainer's layout on the pool that trains."""
    t, plan, domains, block = report.train, sync_plan(cfg), pool_domains(cfg), domain_block(cfg)
    return {
        p.name: CostModel(cfg.hardware_of(p.name), t.zero_stage, t.recompute, t.flash_attention, plan,
                          cross_node=len(domains[p.name]) > 1, expert_parallel=cfg.expert_parallel, domain=block,
                          **_trainer_fields(cfg, t, p.name == cfg.placement.train))
        for p in cfg.placement.pools
    }


def _trainer_fields(cfg: SimConfig, t: TrainMemoryConfig, trains: bool) -> dict:
    """The cost model's trainer layout: the configuration's on the pool that trains (its training and the
    forwards beside it run under it), plain data parallel elsewhere (a full copy per device), with the same
    ``balance_batch``."""
    if trains:
        return {"layout": cfg.trainer, "micro_batch_tokens": t.micro_batch_tokens, "sequence_parallel": t.sequence_parallel}
    return {"layout": TrainerLayout(balance_batch=cfg.trainer.balance_batch), "micro_batch_tokens": t.micro_batch_tokens}
