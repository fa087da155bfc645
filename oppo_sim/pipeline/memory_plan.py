"""What each role of a simulated configuration holds on each pool (bytes per device, by phase), as a
:class:`~oppo_sim.hw.memory.pool_memory.MemoryReport`: the arithmetic is :mod:`oppo_sim.hw.memory.train_memory`'s (training),
:mod:`oppo_sim.hw.memory.engine_memory`'s (the engine, as vLLM profiles it) and :mod:`oppo_sim.hw.memory.pool_memory`'s
(phases and shares); this module maps a :class:`~oppo_sim.pipeline.config.SimConfig` onto it. Whether it fits
and what to change when not: :mod:`oppo_sim.pipeline.fit_check`; where pools sit and what their operations
cost: :mod:`oppo_sim.pipeline.topology`.

Who holds what (bytes per device):

- ``generate``: the actor's weights over ``tp`` devices and what vLLM's memory profiling takes besides them
  (the profile run's peak, CUDA graphs, non-torch allocations); its KV cache fills the rest of its share
  (``gpu_memory_utilization``). A static engine (HF ``generate``: TRL, DeepSpeed-Chat's hybrid engine) profiles
  nothing and sizes nothing: its weights, and its KV cache is what the generate phase leaves of the device's
  ``gpu_memory_utilization``, every role counted;
- ``train``: actor and critic training state (weights, gradients, Adam less the share on the CPU,
  ``TrainerLayout.optimizer_offload``; ZeRO over the pool's devices, or Megatron's layout) plus the larger of their activations (the trainer runs them one after the other) — the
  critic only for an algorithm that has one (``ppo``; ``SimConfig.trained()``);
- ``reward`` / ``reference``: frozen weights (their KV budget is what the pool has left) — only the roles
  in ``SimConfig.scoring_roles()``. Under a ZeRO-3 trainer they are sharded over their pool's devices, the
  training pool or one of their own (:func:`frozen_shards`), and each forward all-gathers them; under a Megatron
  trainer, on its pool, each holds its ``tp · pp`` shard; otherwise every device holds a full copy;
- ``critic`` / ``logprob`` forwards: nothing extra on the training pool (the training weights serve);
  a copy of the weights on any other pool.

Where generation shares a pool with other roles, ``colocate`` says what happens to the rest while the
engine generates: ``sleep`` (default) — the engine sleeps (weights to host, KV freed) while the others
run and they are offloaded while it generates, as OpenRLHF (``--colocate_all_models`` with vLLM and
DeepSpeed sleep) and verl's hybrid engine with ``param_offload`` do. ``resident`` — everything stays: the
engine's share and everything else must fit the device together. ``offload_train_state=False``
(``--no-offload-train-state``; verl's default, ``actor.fsdp_config.param_offload/optimizer_offload=False``;
OpenRLHF without ``--deepspeed_enable_sleep``) with ``sleep``: the engine still sleeps while the others run,
but the trainer's weights, gradients and Adam state and the frozen weights stay on the GPUs in both phases,
beside the engine's share while it generates; only the trainer's activations take turns with the engine.
"""

from __future__ import annotations

import math
from dataclasses import replace

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import ROLES, Pool
from oppo_sim.engine.factory import EngineKind
from oppo_sim.hw.memory.engine_memory import engine_memory, kv_blocks
from oppo_sim.hw.costs.expert_parallel import expert_split
from oppo_sim.hw.devices.hardware import GiB
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig, activation_bytes, forward_activation_bytes, state_bytes
from oppo_sim.hw.models.lookup import ModelSpec
from oppo_sim.hw.memory.pool_memory import ALWAYS, GENERATE, OTHER, MemoryReport, PoolMemory, RoleMemory
from oppo_sim.hw.memory.trainer_memory import megatron_activation_bytes, megatron_state_bytes, micro_batches_bound
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.padding import padded_width
from oppo_sim.traces.trace import DEFAULT_MAX_RESPONSE, Trace

DEFAULT_PROMPT_TOKENS = 1024
"""Prompt length assumed when no trace is given (OpenRLHF's ``--prompt_max_len`` default)."""


def longest(trace: Trace, max_response: int | None) -> tuple[int, int]:
    """(tokens of the longest prompt + capped response, tokens of the longest capped response) in ``trace``."""
    resp = trace.response_tokens if max_response is None else trace.response_tokens.clip(max=max_response)
    return int((trace.prompt_tokens + resp).max()), int(resp.max())


def lengths(cfg: SimConfig, seq_tokens: int | None, response_tokens: int | None) -> tuple[int, int]:
    resp_cap = cfg.max_response or DEFAULT_MAX_RESPONSE
    seq = seq_tokens if seq_tokens is not None else resp_cap + DEFAULT_PROMPT_TOKENS
    resp = response_tokens if response_tokens is not None else min(seq, resp_cap)
    if seq < 1 or not 0 <= resp <= seq:
        raise ConfigError(f"need seq_tokens >= 1 and 0 <= response_tokens <= seq_tokens, got {seq} and {resp}")
    if cfg.padded_roles:  # a padded pass is as wide as the caps (pipeline.padding)
        width = padded_width(cfg, seq - resp, resp)
        seq, resp = max(seq, width), max(resp, cfg.max_response or resp)
    return seq, resp


def _train_role(cfg: SimConfig, devices: int, train: TrainMemoryConfig, seq: int, resp: int, phase: str) -> RoleMemory:
    """Training state of every model the algorithm trains (``cfg.trained()``: the actor, and the critic only
    where there is one), plus the largest of their activations per micro-batch (per sequence packed, so
    independent of B x n)."""
    z, rc, flash, sp = train.zero_stage, train.recompute, train.flash_attention, train.sequence_parallel
    if devices % sp:
        raise ConfigError(f"sequence parallelism {sp} does not divide the {devices} training devices")
    tokens = train.micro.worst_tokens(seq)  # packed or counted sequences; a sequence is never split
    resp_in = min(tokens, resp * math.ceil(tokens / seq))
    ep, on_gpu = cfg.expert_parallel, 1.0 - cfg.trainer.optimizer_offload  # the rest of the Adam state is on the host
    if cfg.trainer.megatron:
        role = _megatron_train_role(cfg, devices, train, seq, tokens, resp_in, phase)
        return replace(role, activations=max(role.activations, _forward_peak(cfg, train, seq, resp) / (cfg.trainer.tp * cfg.trainer.cp)))
    weights = grads = optimizer = act = 0.0
    for _, model, scalar in cfg.trained():
        shared, experts = expert_split(model, model.params_scalar_head if scalar else model.params, ep if model.moe else 1)
        parts = (state_bytes(shared, cfg.trainer.shard_ranks(devices), z), state_bytes(experts, devices // ep, z))
        for s, trains in zip(parts, cfg.trainer.trainable_split(model, scalar)):  # LoRA: the adapters' state only
            # DeepSpeed's offload_optimizer (ZeRO-Offload) and FSDP2's CPUOffloadPolicy move the gradient shards to the
            # host with the Adam state (only the reduce buckets stay on the GPU); Megatron's hybrid optimizer does not
            weights, grads, optimizer = (weights + s.weights * cfg.trainer.weight_scale, grads + s.grads * trains * on_gpu,
                                         optimizer + s.optimizer * trains * on_gpu)
        act = max(act, activation_bytes(model, tokens, seq, rc, flash, scalar, resp_in, train.full_logits) / sp,
                  _forward_peak(cfg, train, seq, resp) / sp)
    label = " + ".join(f"{role} {model.id}" for role, model, _ in cfg.trained())
    return RoleMemory(
        "train", label, phase, weights=weights, grads=grads, optimizer=optimizer, activations=act,
        note=f"ZeRO-{z} over {_shard_words(cfg, devices)}, recompute {rc}"
        + (f", sequence parallel {sp}" if sp > 1 else "") + (f", expert parallel {ep}" if ep > 1 else "")
        + (", full logits" if train.full_logits else "") + _offload_note(cfg),
    )


def _offload_note(cfg: SimConfig) -> str:
    """Where the Adam state is, and LoRA's adapters, for a role's note."""
    f = cfg.trainer.optimizer_offload
    cpu = "" if f == 0 else ", Adam on the CPU" + ("" if f == 1 else f" for {f:.0%} of the state")
    return cpu + (f", {cfg.trainer.lora.label()}" if cfg.trainer.lora else "")


def _forward_peak(cfg: SimConfig, train: TrainMemoryConfig, seq: int, resp: int) -> float:
    """The forward-only passes' activation peak on the training pool, where their micro-batch is their own (a larger
    one than training's can hold more at once: its logits)."""
    if not train.forward_micro.given:
        return 0.0
    tokens = train.forward_micro.worst_tokens(seq)
    resp_in = min(tokens, resp * math.ceil(tokens / seq))
    return max(forward_activation_bytes(m, tokens, seq, train.flash_attention, scalar, resp_in, train.full_logits)
               for _, m, scalar in cfg.trained())


def _shard_words(cfg: SimConfig, devices: int) -> str:
    """``8 devices``, or under hybrid sharding ``groups of 8 of 32 devices``."""
    s = cfg.trainer.shard_ranks(devices)
    return f"{devices} device{'s' if devices > 1 else ''}" if s == devices else f"groups of {s} of {devices} devices"


def _megatron_train_role(cfg: SimConfig, devices: int, train: TrainMemoryConfig, seq: int, tokens: int, resp_in: int,
                         phase: str) -> RoleMemory:
    """The trainer's role under Megatron (:mod:`oppo_sim.hw.memory.trainer_memory`): the largest stage's state per
    rank, and its in-flight micro-batches' activations (at most one sequence per micro-batch per step's share)."""
    lay, ep, rc = cfg.trainer, cfg.expert_parallel, train.recompute
    m = micro_batches_bound(cfg.sequences, cfg.minibatches, lay.data_parallel(devices))
    weights = grads = optimizer = act = 0.0
    for _, model, scalar in cfg.trained():
        st = megatron_state_bytes(model, lay, ep, devices, scalar, lay.trainable_split(model, scalar))  # LoRA: adapters'
        weights, grads = weights + st.weights * lay.weight_scale, grads + st.grads
        optimizer = optimizer + st.optimizer * (1.0 - lay.optimizer_offload)
        act = max(act, megatron_activation_bytes(model, lay, tokens, seq, rc, m, train.flash_attention, scalar, resp_in,
                                                 train.full_logits))
    label = " + ".join(f"{role} {model.id}" for role, model, _ in cfg.trained())
    return RoleMemory(
        "train", label, phase, weights=weights, grads=grads, optimizer=optimizer, activations=act,
        note=f"{lay.label()}" + (f" ep{ep}" if ep > 1 else "") + f" over {devices} devices (dp {lay.data_parallel(devices)}"
        + (", distributed optimizer" if lay.distributed_optimizer else "") + f"), recompute {rc}"
        + (", full logits" if train.full_logits else "") + _offload_note(cfg),
    )


FROZEN_ROLES: tuple[str, ...] = ("reward", "reference")


def frozen_shards(cfg: SimConfig, role: str, zero_stage: int) -> int:
    """Devices the weights of scoring ``role`` are sharded over: for a frozen model (:data:`FROZEN_ROLES`),
    all of its pool's where the trainer runs ZeRO-3 — verl's reference and reward workers are FSDP-wrapped
    over their worker group (the colocated one, or the reward model's own pool), OpenRLHF's run as DeepSpeed
    ZeRO-3 inference engines on their own GPUs under ``--zero_stage 3`` — else 1: a full copy on every device
    (data parallel). Sharded weights are all-gathered for each forward (``CostModel.param_gather``). Under a Megatron
    trainer a frozen model on its pool holds its ``tp · pp`` shard (NeMo RL's and verl's Megatron reference
    runs with the policy's parallelism) and moves activations, never weights (:func:`frozen_gathers`)."""
    pl = cfg.placement
    pool = pl.pool_of(role)
    if cfg.trainer.megatron:
        return cfg.trainer.tp * cfg.trainer.pp if role in FROZEN_ROLES and pool == pl.train else 1
    return cfg.trainer.shard_ranks(pl.pool(pool).devices) if role in FROZEN_ROLES and zero_stage == 3 else 1


def scorer_weights(cfg: SimConfig, role: str, devices: int, zero_stage: int) -> tuple[float, str]:
    """(bytes per device, note) of scoring ``role``'s weights on its pool of ``devices``: under a Megatron
    trainer a frozen model on the training pool holds its shard (the largest stage's tp slice, the routed
    experts over ep), else the weights over :func:`frozen_shards`."""
    m, scalar = cfg.models()[role], role in ("reward", "critic")
    if cfg.trainer.megatron and role in FROZEN_ROLES and cfg.placement.pool_of(role) == cfg.placement.train:
        w = megatron_state_bytes(m, cfg.trainer, cfg.expert_parallel, devices, scalar).weights
        return w, cfg.trainer.label(cfg.expert_parallel if m.moe else 1)
    shards = frozen_shards(cfg, role, zero_stage)
    return m.weight_bytes(scalar_head=scalar) / shards, f"sharded over {shards}" if shards > 1 else ""


def reference_swapped(cfg: SimConfig, role: str) -> bool:
    """Whether ``role``'s weights live on the host and are swapped with the policy's for its pass: the reference
    under ``SimConfig.reference_on_host`` (NeMo RL's policy workers keep it in pinned host memory and, in
    ``use_reference_model``, copy the policy's weights out, load the reference's, and copy the policy's back —
    :func:`oppo_sim.hw.costs.sleepwake.swap_seconds`). It takes no GPU memory of its own."""
    return cfg.reference_on_host and role == "reference"


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
    vllm = generates and cfg.engine_kind == EngineKind.CONTINUOUS  # a static engine (HF generate) takes what is left
    if vllm:
        e = engine_memory(actor, tp, cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens, cfg.engine.enforce_eager)
        roles.append(RoleMemory("generate", f"actor {actor.id}, tp {tp}", GENERATE if swap else ALWAYS,
                                weights=e.weights, activations=e.overhead + e.seq_state, note=e.describe()))
    elif generates:
        roles.append(RoleMemory("generate", f"actor {actor.id}, tp {tp}", GENERATE if swap else ALWAYS,
                                weights=actor.weight_bytes() / tp))
    if pl.train == pool.name:
        t = _train_role(cfg, pool.devices, train, seq, resp, rest)
        # the state stays; the activations live only while training: where the engine sleeps, or where it is Hugging
        # Face generate in the trainer's own process (a static engine: generating and training never overlap there)
        if (swap or (generates and not vllm)) and rest == ALWAYS:
            g = t.grads if cfg.trainer.free_grads else 0.0  # freed after each update (verl's FSDP actor): they take turns
            roles += [replace(t, activations=0.0, grads=t.grads - g),
                      RoleMemory("train", t.label, OTHER, grads=g, activations=t.activations,
                                 note="activations" + (" and gradients" if g else "") + ", freed while generating")]
        else:
            roles.append(t)
    for role in cfg.scoring_roles():  # only the forwards the algorithm runs hold weights
        if pl.pool_of(role) != pool.name or (role in ("critic", "logprob") and pl.train == pool.name):
            continue
        w, note = scorer_weights(cfg, role, pool.devices, train.zero_stage)
        if reference_swapped(cfg, role):
            w, note = 0.0, f"on the host, swapped in place of the policy's weights for its pass ({w / GiB:.1f} GiB a device)"
        elif cfg.reference_in_actor and role == "reference":
            w, note = 0.0, "the actor's own weights with its LoRA adapters off (verl's ref_in_actor)"
        roles.append(RoleMemory(role, models[role].id, rest, weights=w, note=note))
    gpu = cfg.hardware_of(pool.name).gpu
    return PoolMemory(
        pool.name, gpu.id, pool.devices, gpu.mem_bytes, cfg.engine.gpu_memory_utilization, tuple(roles),
        generates=generates, seq_tokens=seq, train_utilization=cfg.train_memory_fraction,
        engine_sized=vllm and cfg.engine.num_gpu_blocks_override is None,  # blocks given: not sized from the share
        # a KV budget given explicitly (blocks override) is the engine's to check
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
    seq, resp = lengths(cfg, seq_tokens, response_tokens)
    pools = tuple(_pool_memory(cfg, p, t, seq, resp) for p in cfg.placement.pools)
    return MemoryReport(pools, t, seq, cfg.colocate)


def generation_kv_blocks(cfg: SimConfig, report: MemoryReport) -> int:
    """KV-cache blocks per generation replica (vLLM's ``num_gpu_blocks``) in the share the report leaves the
    engine after its weights and profiled memory (the engine's ``num_gpu_blocks_override`` when set)."""
    if cfg.engine.num_gpu_blocks_override is not None:
        return cfg.engine.num_gpu_blocks_override
    kv = report.pool(cfg.placement.generate).kv_cache or 0.0
    return kv_blocks(kv, cfg.models()["generate"], cfg.engine.tp, cfg.engine.block_size)
