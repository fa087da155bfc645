"""``oppo-sim``'s workload, hardware, memory, generation-engine and scoring options, and the ``SimConfig``
they build (``run``, ``compare``, ``sweep``; ``plan`` takes the engine and scoring ones).

An option whose default belongs to a config class has ``default=None`` (a sentinel: "not given") and names
the class's default in its help; only given values reach the config, so the class stays the one place of
each default, and an engine setting given for the engine that does not have it is an error
(:func:`check_engine_flags`)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from oppo_sim.cli_scoring import SCORING_FIELDS, add_scoring_args
from oppo_sim.cli_trainer import add_trainer_layout_args, trainer_layout
from oppo_sim.cli_limits import add_limit_args, add_logits_arg, add_micro_batch_args, limit_fields, micro_batch_fields
from oppo_sim.cliargs import flag_name, nonneg_float, nonneg_int, on_off, positive
from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.factory import EngineKind
from oppo_sim.engine.request import EngineConfig
from oppo_sim.engine.static_params import DEFAULT_CALL_OVERHEAD_S
from oppo_sim.hw.costs.eager import DEFAULT_VLLM_RELEASE, EAGER_HOST_OP_S, VLLM_RELEASES
from oppo_sim.hw.costs.op_cost import add_op_costs_arg, hardware_for
from oppo_sim.hw.costs.sleepwake import DEFAULT_SLEEP_LEVEL, OPTIMIZER_MOVES, PAGEABLE_COPY, SLEEP_LEVELS
from oppo_sim.hw.devices.gpu_table import GiB
from oppo_sim.hw.costs.sync import REFIT_GROUPS, SYNC_MECHANISMS
from oppo_sim.pipeline.config import SimConfig

ENGINES: tuple[str, ...] = tuple(k.value for k in EngineKind)
BOOL = argparse.BooleanOptionalAction

CONTINUOUS_ONLY: tuple[str, ...] = ("max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
                                    "enable_prefix_caching", "long_prefill_token_threshold", "enforce_eager", "vllm_version")
"""``EngineConfig`` settings only the continuous (vLLM-style) engine uses; the static engine runs padded batches."""
STATIC_ONLY: tuple[str, ...] = ("gen_batch", "call_tokens", "carry_kv", "call_overhead")
"""Settings of the static (TRL-style) engine only."""


def add_setup_args(p: argparse.ArgumentParser) -> None:
    """Workload, hardware, memory and weight-sync options (the OPPO paper's setup by default), and the RL
    algorithm's (:func:`add_algorithm_args`)."""
    from oppo_sim.traces.trace import DEFAULT_MAX_RESPONSE, DEFAULT_TRACE

    g = p.add_argument_group("workload and hardware (defaults: the OPPO paper's setup)")
    g.add_argument("--trace", default=DEFAULT_TRACE, help="trace name on the search path or a file (default %(default)s)")
    g.add_argument("--steps", type=positive(), default=20, help="training steps to simulate (default %(default)s)")
    g.add_argument("--batch", type=positive(), default=112,
                   help="prompts per step, B; a step trains B x --n responses (default %(default)s)")
    g.add_argument("--gpu", default="h200",
                   help="GPU id (h200, h100-sxm, b200, mi300x, ...), a calibrated .json profile or a datasheet "
                        ".yaml spec (examples/gpus/h20.yaml) (default %(default)s)")
    g.add_argument("--profile", default=None, help="calibrated hardware profile (.json); overrides --gpu (default: none)")
    add_op_costs_arg(g)
    g.add_argument("--actor", default="qwen2.5-7b",
                   help="actor model: a table id, or a Hugging Face config.json or its directory (default %(default)s)")
    g.add_argument("--critic", default=None,
                   help="critic model (ppo): a table id, or a Hugging Face config.json or its directory; verl "
                        "critic.model.path, OpenRLHF --critic_pretrain (default: the reward model's shape)")
    g.add_argument("--placement", default="paper",
                   help="paper (N-1 generate+train, 1 scores), colocated, disaggregated, or a planner label with its "
                        "own device counts: colocated N, shared M+S, split G+T+S, gen-apart G+T (default %(default)s)")
    g.add_argument("--devices", type=positive(), default=8,
                   help="GPUs in total for the paper/colocated placements (default %(default)s)")
    g.add_argument("--max-response", type=nonneg_int, default=DEFAULT_MAX_RESPONSE,
                   help="generation cap, max new tokens (default %(default)s; 0 = no cap)")
    add_limit_args(g)
    g.add_argument("--ppo-epochs", type=positive(), default=4, help="PPO epochs per step (default %(default)s, as TRL)")
    g.add_argument("--minibatches", type=positive(), default=1, help="mini-batches per epoch (default %(default)s, as TRL)")
    g.add_argument("--contention", type=nonneg_float, default=0.0, help="slowdown factor when jobs share a device (default %(default)s)")
    g.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of every random choice: synthetic rewards, synthetic traces (default %(default)s)")
    add_algorithm_args(p)
    m = p.add_argument_group("memory and weight sync (a configuration that does not fit is refused)")
    m.add_argument("--zero", choices=("auto", "0", "1", "2", "3"), default="auto",
                   help="ZeRO stage of the trainer (default %(default)s: 2, else 3, whichever fits first)")
    m.add_argument("--recompute", choices=("auto", "none", "selective", "full"), default="auto",
                   help="activation recomputation (default %(default)s: none, else selective/full, whichever fits first)")
    m.add_argument("--eager-attention", action="store_true",
                   help="attention stores its s x s scores, no FlashAttention (default off)")
    add_micro_batch_args(m)
    m.add_argument("--sp", type=positive(), default=1, help="sequence parallelism of the trainer (default %(default)s)")
    add_logits_arg(m)
    m.add_argument("--colocate", choices=("sleep", "resident"), default="sleep",
                   help="generation sharing GPUs: engine and trainer take turns (sleep) or both stay resident "
                        "(default %(default)s; async on a shared pool is always resident)")
    add_sleep_level_arg(m)
    add_offload_arg(m)
    add_weight_moves_args(m)
    m.add_argument("--nodes", type=positive(), default=1, help="nodes the devices are spread over (default %(default)s)")
    m.add_argument("--sync", choices=("auto", *SYNC_MECHANISMS), default="auto",
                   help="weight sync path after the trainer's export (default %(default)s: ipc when generation runs on "
                        "the training pool, nvlink in a scale-up domain - a node, a GB200 NVL72 rack - network across)")
    m.add_argument("--ep", type=positive(), default=1,
                   help="expert parallelism of a MoE actor: the trainer shards the experts over N ranks (Megatron/verl "
                        "expert_model_parallel_size) and N > 1 shards them over each generation replica's tp GPUs (vLLM "
                        "enable_expert_parallel) (default %(default)s: off)")
    add_trainer_layout_args(m)


def critic_field(a: argparse.Namespace) -> str | None:
    """``SimConfig.critic`` from ``--critic`` (None: the reward model's shape); given for an algorithm without a
    critic -> one-line ConfigError."""
    from oppo_sim.core.algorithms import ALIASES

    critic = getattr(a, "critic", None)
    name = a.algorithm.strip().lower()
    if critic is not None and ALIASES.get(name, name) != "ppo":
        raise ConfigError(f"--critic {critic}: algorithm '{a.algorithm}' has no critic (only ppo trains one); drop it")
    return critic


def add_sleep_level_arg(p) -> None:
    """``--sleep-level`` (``SimConfig.sleep_level``, see ``oppo_sim.hw.costs.sleepwake``)."""
    p.add_argument("--sleep-level", type=int, choices=SLEEP_LEVELS, default=DEFAULT_SLEEP_LEVEL,
                   help="vLLM sleep level of an engine taking turns with the roles beside it: 1 offloads its weights "
                        "to host memory and frees the KV cache (the weights come back over the host link), 2 frees "
                        "both (the weight sync refills them); the trainer's state goes to host either way unless "
                        "--no-offload-train-state "
                        "(default %(default)s, verl's)")


def add_offload_arg(p) -> None:
    """``--offload-train-state/--no-offload-train-state`` (``SimConfig.offload_train_state``) and ``--optimizer-move``
    (``SimConfig.optimizer_move``)."""
    p.add_argument("--offload-train-state", action=argparse.BooleanOptionalAction, default=True,
                   help="where the engine sleeps (--colocate sleep): the trainer's weights, gradients and Adam state "
                        "(and frozen models' weights on its GPUs) go to host memory while the engine generates, as "
                        "verl's actor.fsdp_config.param_offload/optimizer_offload=True and OpenRLHF's "
                        "--deepspeed_enable_sleep; --no-offload-train-state keeps them on the GPUs (verl's default: "
                        "offload off; the KV cache gets what they leave, only the engine sleeps) (default on)")
    p.add_argument("--optimizer-move", choices=tuple(OPTIMIZER_MOVES), default="pinned",
                   help="how that offload moves the optimizer state: pinned (a copy into pinned host memory: verl's FSDP "
                        "offload, DeepSpeed offload_states) or pageable (NeMo RL's move_optimizer, a blocking "
                        f".to('cpu') per tensor into fresh pageable memory: {PAGEABLE_COPY.to_host_bps / GiB:.1f} GiB/s "
                        f"to the host, {PAGEABLE_COPY.from_host_bps / GiB:.1f} back, measured on an H200) (default pinned)")


def add_weight_moves_args(p) -> None:
    """How the framework moves weights besides the trainer's state: ``--reference-on-host`` / ``--reference-in-actor``
    (``SimConfig.reference_on_host`` / ``reference_in_actor``), ``--refit-buffers`` and ``--refit-group`` (``SimConfig.refit_*``)."""
    p.add_argument("--reference-on-host", action="store_true",
                   help="the reference model's weights stay in pinned host memory and are swapped with the policy's "
                        "on the training GPUs for each reference pass, as NeMo RL's policy workers do "
                        "(use_reference_model): no GPU memory of its own, three weight copies over the host link a "
                        "step (default off: the reference holds its weights on its pool)")
    p.add_argument("--reference-in-actor", action="store_true",
                   help="with --lora-rank: the reference is the actor with its adapters off, as verl runs it under LoRA "
                        "(ref_in_actor): no weights of its own (default off)")
    p.add_argument("--refit-buffers", type=int, choices=(1, 2), default=1,
                   help="weight sync: 1 exports and hands over tensor by tensor (verl, OpenRLHF); 2 packs tensors into "
                        "two buffers in flight so each one's export overlaps the previous one's hand-off, one NCCL call "
                        "a buffer (NeMo RL's refit, NRL_REFIT_NUM_BUFFERS=2) (default %(default)s)")
    p.add_argument("--refit-group", choices=REFIT_GROUPS, default="rank0",
                   help="who joins a weight sync's broadcast between pools: rank0 = the trainer's rank 0 and the engines "
                        "(OpenRLHF; one NIC out of its node), all = every trainer and engine rank (NeMo RL, verl; every "
                        "NIC of a node) (default %(default)s)")


def add_algorithm_args(p: argparse.ArgumentParser, reward: bool = True) -> None:
    """The RL algorithm (``core.algorithms.Algorithm``): what a step computes, orthogonal to the policy.
    ``reward``: also add ``--reward`` (``plan`` has its own group for it)."""
    from oppo_sim.core.algorithms import ALGORITHM_NAMES, ALIASES, DEFAULT_RULE_COST_MS

    alias = ", ".join(f"{k}={v}" for k, v in ALIASES.items())
    g = p.add_argument_group("RL algorithm (orthogonal to the scheduling policy)")
    g.add_argument("--algorithm", default="ppo", metavar="{" + ",".join(ALGORITHM_NAMES) + "}",
                   help=f"ppo: critic + GAE; grpo, rloo, reinforce++, dapo: advantage from the prompt's group of n, no "
                        f"critic (verl adv_estimator aliases: {alias}) (default %(default)s)")
    g.add_argument("--n", type=positive(), default=1,
                   help="responses per prompt: verl rollout.n, OpenRLHF n_samples_per_prompt (default %(default)s)")
    if reward:
        g.add_argument("--reward", default="qwen2.5-7b", metavar="{MODEL_ID,PATH,rule}",
                       help="reward model id or Hugging Face config.json (the critic has its shape unless --critic), or rule: a verifier on the CPU, no reward "
                            "model (default %(default)s)")
    g.add_argument("--reward-cost-ms", type=nonneg_float, default=None,
                   help=f"CPU milliseconds per rule-reward call; only with --reward rule (default {DEFAULT_RULE_COST_MS}: "
                        f"a math answer checker; a sandboxed code verifier costs 100s of ms)")
    g.add_argument("--no-reference", action="store_true",
                   help="no reference model, no KL term (default off: a frozen reference for the KL)")
    g.add_argument("--informative", type=positive(float), default=None,
                   help="dapo only: fraction of groups whose n rewards differ, in (0, 1] (default: from the trace's "
                        "reward column)")
    g.add_argument("--gen-batch-size", type=positive(), default=None,
                   help="dapo only: prompts per generation round, verl data.gen_batch_size: a step generates rounds of "
                        "this many prompts, keeps the groups whose rewards differ and generates another round until "
                        "--batch groups are kept (default: --batch)")
    g.add_argument("--max-gen-batches", "--max-num-gen-batches", dest="max_gen_batches", type=nonneg_int, default=None,
                   help="dapo only: most generation rounds per step, verl algorithm.filter_groups.max_num_gen_batches; "
                        "a step that needs more is a one-line error (default 0: no limit)")


def algorithm_fields(a: argparse.Namespace) -> dict:
    """``SimConfig`` keywords of the algorithm options: ``algorithm`` and, for a reward model, ``reward``;
    a setting the chosen algorithm does not use -> one-line ConfigError."""
    from oppo_sim.core.algorithms import Algorithm, round_settings

    rule = a.reward.strip().lower() == "rule"
    if a.reward_cost_ms is not None and not rule:
        raise ConfigError(f"{flag_name('reward_cost_ms', a.reward_cost_ms)} is the CPU cost of a rule reward; it is not "
                          f"used with a reward model ('{a.reward}'); drop it or give --reward rule")
    extra = {} if a.reward_cost_ms is None else {"reward_cost_ms": a.reward_cost_ms}
    extra.update(round_settings(a.algorithm, {"gen_batch_size": a.gen_batch_size, "max_gen_batches": a.max_gen_batches}))
    algorithm = Algorithm(a.algorithm, n=a.n, reward="rule" if rule else "model", kl=not a.no_reference,
                          informative=a.informative, **extra)
    return {"algorithm": algorithm} if rule else {"algorithm": algorithm, "reward": a.reward}


def add_engine_args(p: argparse.ArgumentParser, tp: bool = True) -> None:
    """The generation engine, its settings (vLLM's names), and how the scorers batch."""
    e = EngineConfig
    g = p.add_argument_group("generation engine (settings named as vLLM's engine arguments)")
    g.add_argument("--engine", choices=ENGINES, default=EngineKind.CONTINUOUS.value,
                   help="continuous: vLLM-style continuous batching; static: TRL-style padded batches generated in "
                        "calls of C tokens (default %(default)s)")
    if tp:
        g.add_argument("--tp", type=positive(), default=e.tp,
                       help="tensor parallelism of each generation replica (default %(default)s)")
    g.add_argument("--gpu-memory-utilization", "--gpu-mem-util", dest="gpu_mem_util", type=positive(float),
                   default=e.gpu_memory_utilization, metavar="FRACTION",
                   help="vLLM gpu_memory_utilization: the share of each GPU the generation engine takes, weights + KV cache (default %(default)s)")
    g.add_argument("--block-size", type=positive(), default=None, help=f"KV block size in tokens (default {e.block_size})")
    g.add_argument("--num-gpu-blocks-override", type=positive(), default=None,
                   help="KV blocks per replica instead of sizing the KV cache from memory (default: from memory)")
    g.add_argument("--max-num-seqs", type=positive(), default=None,
                   help=f"continuous engine: sequences per iteration (default {e.max_num_seqs})")
    g.add_argument("--max-num-batched-tokens", type=positive(), default=None,
                   help=f"continuous engine: token budget per iteration (default {e.max_num_batched_tokens})")
    g.add_argument("--enable-chunked-prefill", action=BOOL, default=None,
                   help=f"continuous engine: split long prefills over iterations (default {on_off(e.enable_chunked_prefill)})")
    g.add_argument("--enable-prefix-caching", action=BOOL, default=None,
                   help=f"continuous engine: reuse cached full KV blocks (default {on_off(e.enable_prefix_caching)})")
    g.add_argument("--enforce-eager", action=BOOL, default=None,
                   help=f"continuous engine: vLLM enforce_eager, no CUDA graphs: the host issues every kernel of a "
                        f"step (default {on_off(e.enforce_eager)})")
    g.add_argument("--vllm-version", choices=tuple(VLLM_RELEASES), default=None,
                   help=f"continuous engine: the vLLM release whose ops an --enforce-eager step issues, counted from "
                        f"its source (default {DEFAULT_VLLM_RELEASE})")
    g.add_argument("--host-op-us", dest="host_op_us", type=nonneg_float, default=None, metavar="US",
                   help=f"host microseconds per eagerly issued op: a --enforce-eager step's kernels and Hugging Face "
                        f"generate's ops in the static engine (each step or forward costs the larger of the host's time and the GPU's); it depends on the host CPU (default "
                        f"{EAGER_HOST_OP_S * 1e6:g}, measured on an x86 H200 machine, times a Grace GPU id's host_op_scale, also for "
                        f"Megatron's layers; a profile's own where it has one; a value given is your host's own)")
    g.add_argument("--long-prefill-token-threshold", type=nonneg_int, default=None,
                   help=f"continuous engine: most prefill tokens of one request per iteration "
                        f"(default {e.long_prefill_token_threshold} = off)")
    g.add_argument("--gen-batch", type=positive(), default=None,
                   help="static engine: rows per generation mini-batch, TRL's local_rollout_forward_batch_size "
                        "(default: one batch)")
    g.add_argument("--call-tokens", type=positive(), default=None,
                   help="static engine: tokens per generate call of a policy without a chunk size C (a chunked "
                        "policy's C sets it) (default: one call to the longest response)")
    g.add_argument("--carry-kv", action=BOOL, default=None,
                   help="static engine: keep the KV cache across calls; --no-carry-kv re-prefills every call (default on)")
    g.add_argument("--call-overhead", type=nonneg_float, default=None,
                   help=f"static engine: seconds per generate call beyond its forwards (default: the profile's fitted "
                        f"value, else {DEFAULT_CALL_OVERHEAD_S})")
    add_scoring_args(p)


def _given(a: argparse.Namespace, names) -> dict:
    return {n: getattr(a, n) for n in names if getattr(a, n, None) is not None}


def check_engine_flags(a: argparse.Namespace) -> None:
    """An engine setting given for the engine that does not have it -> one-line ConfigError."""
    wrong = CONTINUOUS_ONLY if a.engine == EngineKind.STATIC.value else STATIC_ONLY
    for dest in wrong:
        if getattr(a, dest, None) is not None:
            other = next(k for k in ENGINES if k != a.engine)
            raise ConfigError(f"{flag_name(dest, getattr(a, dest))} is not used by engine '{a.engine}' (it is a setting of the {other} "
                              f"engine); drop it or choose --engine {other}")


def profile_eager_host_op_s(meta: dict | None) -> float:
    """An eager engine's host seconds per op on a profile's hardware: what its fit assumed (``check --calibrate``
    writes ``meta.eager_host_op_s`` when it fitted an eager run with the host's floor), else 0 — a measured
    profile's decode already holds its engine's host time."""
    from oppo_sim.hw.costs.eager import check_host_op_s

    return check_host_op_s((meta or {}).get("eager_host_op_s", 0.0), "profile meta eager_host_op_s")


def engine_fields(a: argparse.Namespace, hardware: str) -> dict:
    """``SimConfig`` keywords of the engine and scoring options: only what was given, defaults otherwise.
    ``hardware``: the GPU id or profile the run uses (a profile's fitted static per-call overhead applies)."""
    from oppo_sim.engine.static_params import StaticConfig, StaticCostParams

    check_engine_flags(a)
    engine = EngineConfig(gpu_memory_utilization=a.gpu_mem_util, enable_expert_parallel=getattr(a, "ep", 1) > 1, **_given(a, (
        "tp", "block_size", "num_gpu_blocks_override", *CONTINUOUS_ONLY)))
    static = _given(a, ("gen_batch", "call_tokens", "carry_kv"))
    out = {"engine": engine, "engine_kind": a.engine, "static": StaticConfig(**static),
           **_given(a, SCORING_FIELDS)}
    from oppo_sim.hw.fitting.profiles import profile_meta

    meta = profile_meta(hardware)
    if meta is not None:  # a profile: its fitted per-call overhead, per-step costs and eager host time
        out["eager_host_op_s"] = profile_eager_host_op_s(meta)
        if (meta or {}).get("overheads"):  # e.g. the per-step fixed cost `oppo-sim check --calibrate` fits
            from oppo_sim.hw.fitting.overheads import ExecutorOverheads

            out["overheads"] = ExecutorOverheads.from_meta(meta["overheads"])
    if a.engine == EngineKind.STATIC.value:
        if meta is not None:
            out["static_cost"] = StaticCostParams.from_meta(meta)
        if a.call_overhead is not None:
            out["static_cost"] = StaticCostParams(call_overhead_s=a.call_overhead)
    if getattr(a, "host_op_us", None) is not None:  # the host's cost per eager op, both engines
        out["eager_host_op_s"] = a.host_op_us * 1e-6
        if a.engine == EngineKind.STATIC.value:
            out["static_cost"] = replace(out.get("static_cost", StaticCostParams()), host_op_s=a.host_op_us * 1e-6)
    return out


def sim_config(a: argparse.Namespace) -> SimConfig:
    """The ``SimConfig`` of ``run``/``compare``/``sweep``'s options."""
    from oppo_sim.core.placement import (
        colocated_placement,
        disaggregated_placement,
        paper_placement,
    )
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig

    place = a.placement.strip().lower()
    if place == "paper":
        placement = paper_placement(a.devices)
    elif place == "colocated":
        placement = colocated_placement(a.devices)
    elif place == "disaggregated":
        placement = disaggregated_placement()
    else:  # a planner label, e.g. "split 4+3+1" (what --from-openrlhf and plan --export write)
        from oppo_sim.explore.space import placement_of_label

        placement = placement_of_label(a.placement)
    if place == "paper" and a.devices < 2:
        raise ConfigError("the paper placement needs at least 2 devices (one scores)")
    return SimConfig(
        batch=a.batch, steps=a.steps, seed=a.seed, gpu=hardware_for(a.profile or a.gpu, a.op_costs), actor=a.actor,
        placement=placement, ppo_epochs=a.ppo_epochs, minibatches=a.minibatches,
        max_response=a.max_response or None, contention=a.contention,
        train_memory=TrainMemoryConfig(
            zero_stage=None if a.zero == "auto" else int(a.zero), recompute=None if a.recompute == "auto" else a.recompute,
            flash_attention=not a.eager_attention, sequence_parallel=a.sp, **micro_batch_fields(a),
            full_logits=a.full_logits,
        ), **limit_fields(a),
        critic=critic_field(a), colocate=a.colocate, train_memory_fraction=getattr(a, "train_memory_fraction", 0.9), sleep_level=a.sleep_level, offload_train_state=a.offload_train_state, optimizer_move=getattr(a, "optimizer_move", "pinned"), reference_on_host=getattr(a, "reference_on_host", False), reference_in_actor=getattr(a, "reference_in_actor", False), refit_buffers=getattr(a, "refit_buffers", 1), refit_group=getattr(a, "refit_group", "rank0"), nodes=a.nodes, sync=a.sync, expert_parallel=a.ep, trainer=trainer_layout(a), **engine_fields(a, a.profile or a.gpu), **algorithm_fields(a),
    )


__all__ = ["ENGINES", "add_algorithm_args", "add_engine_args", "add_offload_arg", "add_sleep_level_arg", "algorithm_fields", "add_setup_args", "critic_field", "check_engine_flags", "engine_fields", "sim_config"]
