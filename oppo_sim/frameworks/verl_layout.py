"""Where a verl job runs and how: the entry point and ``--config-name`` (which trainer, which schedule), the
Megatron trainer's layout, and the placement and policy of the synchronous, one-step-off and fully-async
schedules. Used by :mod:`oppo_sim.frameworks.verl`, which documents the keys.

Schedules (verl ``verl/experimental/one_step_off_policy`` and ``fully_async_policy``, README and
``main_ppo.py``/``fully_async_main.py`` at the commit of :data:`oppo_sim.frameworks.verl_keys.KEYS_SOURCE`):

- ``verl.trainer.main_ppo`` (hybrid engine): every role on every GPU -> ``--placement colocated``, verl's
  synchronous loop = oppo-sim's ``baseline``;
- one-step-off (``...one_step_off_policy.main_ppo``, ``actor_rollout_ref.hybrid_engine=False``): rollout on
  ``rollout.n_gpus_per_node x rollout.nnodes`` GPUs, the trainer (and reference, reward) on
  ``trainer.n_gpus_per_node x trainer.nnodes`` -> ``--placement "gen-apart G+T"``; step t+1 generates while
  step t trains -> ``--policy async --staleness 1``;
- fully-async (``...fully_async_policy.fully_async_main``): the same two pools; the trainer updates on
  ``require_batches x ppo_mini_batch_size`` prompts and syncs the rollout's weights every
  ``trigger_parameter_sync_step`` updates: a *parameter version* of ``require_batches x ppo_mini_batch_size x
  trigger_parameter_sync_step`` prompts is oppo-sim's step (``--batch``), each update a mini-batch;
  ``staleness_threshold`` > 0 lets the rollout run ahead with stale samples -> ``async`` with the bound
  ``ceil(staleness_threshold)`` (at least 1); 0 is synchronous between versions -> ``baseline``.
"""

from __future__ import annotations

import math
from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import Async
from oppo_sim.frameworks.translation import Builder, as_bool, as_float, as_int
from oppo_sim.hw.costs.trainer_layout import MOE_DISPATCHERS, ROUTER_DTYPES, SPLIT_ACCOUNTING, STAGE_SPLIT

A = "actor_rollout_ref.actor."
M = A + "megatron."
NODE_GPUS = 8
"""GPUs per node assumed where two pools might share nodes (an HGX node)."""

MEGATRON_DEFAULTS: dict[str, Any] = {
    M + "tensor_model_parallel_size": 1, M + "pipeline_model_parallel_size": 1,
    M + "virtual_pipeline_model_parallel_size": None, M + "context_parallel_size": 1,
    M + "expert_model_parallel_size": 1, M + "use_distributed_optimizer": True, M + "param_offload": False,
    M + "grad_offload": False, M + "optimizer_offload": False,
}
"""verl's ``ppo_megatron_trainer`` defaults of the Megatron keys read."""
O = A + "optim.override_optimizer_config."
CPU_OPTIMIZER = (O + "optimizer_cpu_offload", O + "optimizer_offload_fraction")
"""Megatron's hybrid CPU optimizer as verl passes it (``+...override_optimizer_config.*``; Megatron-Core's
``OptimizerConfig`` defaults: off, fraction 0 — on alone leaves Adam on the GPUs)."""
ASYNC_DEFAULTS: dict[str, Any] = {
    "rollout.nnodes": 1, "rollout.n_gpus_per_node": 8, "async_training.staleness_threshold": 0.1,
    "async_training.trigger_parameter_sync_step": 4, "async_training.require_batches": 1,
    "async_training.partial_rollout": True,
}
"""verl's one-step-off / fully-async config defaults of the keys read."""
RM_POOL = ("reward_model.enable_resource_pool", "reward_model.n_gpus_per_node", "reward_model.nnodes")
"""verl's reward model on GPUs of its own (``main_ppo``'s ``reward_pool``); defaults False, 8, 0."""
R, REF = "actor_rollout_ref.rollout.", "actor_rollout_ref.ref."
BUDGET_KEYS = tuple(role + k for role, pre in ((A, "ppo_"), (R, "log_prob_"), (REF, "log_prob_"))
                    for k in ("use_dynamic_bsz" if role == A else "log_prob_use_dynamic_bsz", pre + "max_token_len_per_gpu",
                              pre + "micro_batch_size_per_gpu", pre + "micro_batch_size"))
"""verl's micro-batches: the actor's and the log-prob passes' dynamic-batch switches, token budgets and fixed sizes,
per GPU and (deprecated) global (defaults False, 16384, null and null; the rollout's and the reference's switch and
budget default to the actor's)."""
LAYOUT_KEYS: tuple[str, ...] = (*MEGATRON_DEFAULTS, *ASYNC_DEFAULTS, *CPU_OPTIMIZER, "actor_rollout_ref.hybrid_engine",
                                M + "override_transformer_config.recompute_granularity", M + "expert_tensor_parallel_size",
                                *(M + "override_transformer_config." + k for k, _, _ in STAGE_SPLIT + SPLIT_ACCOUNTING),
                                *RM_POOL, *BUDGET_KEYS)

SCHEDULES = ("sync", "one-step-off", "fully-async")


def entry(stray: list[str], cfg: dict, given: set[str]) -> tuple[str, str | None, list[str]]:
    """(schedule, ``--config-name`` or None, the words that said so) from the launcher's words and keys."""
    schedule, config, said = "sync", None, []
    for i, w in enumerate(stray):
        module = w.removesuffix(".py").replace("/", ".")
        if "one_step_off_policy." in module and module.endswith(".main_ppo"):
            schedule, said = "one-step-off", said + [w]
        elif "fully_async_policy." in module and module.endswith(".fully_async_main"):
            schedule, said = "fully-async", said + [w]
        if w.startswith("--config-name"):
            name = w.partition("=")[2] if "=" in w else (stray[i + 1] if i + 1 < len(stray) else "")
            config, said = name.strip().removesuffix(".yaml"), said + [w if "=" in w else f"{w} {name}"]
    hybrid = as_bool("actor_rollout_ref.hybrid_engine", cfg.get("actor_rollout_ref.hybrid_engine", True))
    if schedule == "sync" and not hybrid:
        if any(k.startswith("async_training.") for k in given):
            schedule = "fully-async"
        elif "rollout.n_gpus_per_node" in given:
            schedule = "one-step-off"
        else:
            raise ConfigError("actor_rollout_ref.hybrid_engine=False: verl's main_ppo needs the hybrid engine; run it "
                              "with the one-step-off or fully-async entry point (and rollout.n_gpus_per_node)")
    return schedule, config, said


def megatron(b: Builder, cfg: dict, dflt: dict) -> None:
    """``--train-backend megatron`` with verl's Megatron parallelism, offload and recompute."""
    tp, pp, cp, ep = (as_int(M + k, cfg[M + k]) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                                          "context_parallel_size", "expert_model_parallel_size"))
    vk = M + "virtual_pipeline_model_parallel_size"
    vpp = 1 if cfg[vk] in (None, "null", "None") else as_int(vk, cfg[vk])
    b.use(M + "tensor_model_parallel_size", tp, "--train-backend", "megatron", "--train-tp", tp,
          default=dflt[M + "tensor_model_parallel_size"], note="Megatron-Core, with sequence parallelism")
    b.use(M + "pipeline_model_parallel_size", pp, "--pp", pp, default=dflt[M + "pipeline_model_parallel_size"])
    b.use(vk, cfg[vk], "--vpp", vpp, default=dflt[vk])
    b.use(M + "context_parallel_size", cp, "--cp", cp, default=dflt[M + "context_parallel_size"])
    b.use(M + "expert_model_parallel_size", ep, "--ep", ep, default=dflt[M + "expert_model_parallel_size"])
    k = M + "use_distributed_optimizer"
    on = as_bool(k, cfg[k])
    b.use(k, on, "--distributed-optimizer" if on else "--no-distributed-optimizer", default=dflt[k])
    offload = [k for k in ("param_offload", "grad_offload", "optimizer_offload") if as_bool(M + k, cfg[M + k])]
    for k in ("param_offload", "grad_offload"):
        b.use(M + k, k in offload, default=dflt[M + k])
    b.use(M + "optimizer_offload", "optimizer_offload" in offload,
          "--offload-train-state" if offload else "--no-offload-train-state", default=dflt[M + "optimizer_offload"],
          note="the trainer's state " + ("to host while vLLM generates" if offload else "stays on the GPUs"))
    _cpu_optimizer(b, cfg)
    if ep > 1:
        _dispatcher(b, cfg)
        _expert_tp(b, cfg, tp)
    for k, _, opt in STAGE_SPLIT:
        key = M + "override_transformer_config." + k
        if pp > 1 and cfg.get(key) not in (None, "null", "None"):
            b.use(key, cfg[key], opt, as_int(key, cfg[key]), note="an uneven pipeline split")
    for k, _, opt in SPLIT_ACCOUNTING:
        key = M + "override_transformer_config." + k
        if pp > 1 and as_bool(key, cfg.get(key, False)):
            b.use(key, cfg[key], opt, note="one decoder layer less on the " + ("first" if "embedding" in k else "last")
                  + " pipeline rank")
    rk = M + "override_transformer_config.recompute_granularity"
    gran = cfg.get(rk)
    gran = "none" if gran in (None, "null", "None") else str(gran).strip().lower()
    if gran not in ("none", "full", "selective"):
        raise ConfigError(f"{rk}: expected full, selective or null, got {cfg[rk]!r}")
    b.use(rk, cfg.get(rk), "--recompute", gran, default=dflt.get(rk, True),
          note="Megatron's activation recomputation")
    other = []
    for role in ("actor_rollout_ref.ref", "critic"):
        for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                  "expert_model_parallel_size"):
            key = f"{role}.megatron.{k}"
            if not dflt.get(key, True) and str(cfg[key]) != str(cfg[M + k]):
                other.append(f"{key}={cfg[key]}")
    if other:
        b.notes.append(f"{', '.join(other)}: oppo-sim lays the reference and the critic out as the actor")


def _expert_tp(b: Builder, cfg: dict, tp: int) -> None:
    """``expert_tensor_parallel_size`` -> ``--etp``; verl's default (null) is Megatron-Core's, the actor's TP."""
    k = M + "expert_tensor_parallel_size"
    if cfg.get(k) in (None, "null", "None"):
        b.use(k, None, "--etp", tp, default=True, note=f"unset: Megatron-Core takes tensor_model_parallel_size ({tp})")
    else:
        b.use(k, cfg[k], "--etp", as_int(k, cfg[k]))


def _dispatcher(b: Builder, cfg: dict) -> None:
    """``override_transformer_config.moe_token_dispatcher_type`` -> ``--moe-dispatcher`` (verl's Megatron config sets
    ``alltoall``: ``verl/models/mcore/config_converter.py``)."""
    k = M + "override_transformer_config.moe_token_dispatcher_type"
    how = str(cfg.get(k, "alltoall")).strip().lower()
    if how not in MOE_DISPATCHERS:
        raise ConfigError(f"{k}: expected one of {', '.join(MOE_DISPATCHERS)}, got {cfg[k]!r}")
    b.use(k, cfg.get(k, "alltoall"), "--moe-dispatcher", how, default=k not in cfg,
          note="DeepEP, priced as alltoall" if how == "flex" else "")
    r = M + "override_transformer_config.moe_router_dtype"
    if r in cfg:
        dt = str(cfg[r]).strip().lower()
        dt = "model" if dt in ("null", "none") else dt
        if dt not in ROUTER_DTYPES:
            raise ConfigError(f"{r}: expected fp32, fp64 or null, got {cfg[r]!r}")
        b.use(r, cfg[r], "--moe-router-dtype", dt)


def _cpu_optimizer(b: Builder, cfg: dict) -> None:
    """Megatron's hybrid optimizer: ``optimizer_offload_fraction`` of the Adam state stepped on the CPU where
    ``optimizer_cpu_offload`` is on -> ``--optimizer-offload``."""
    on_key, frac_key = CPU_OPTIMIZER
    on = as_bool(on_key, cfg.get(on_key, False))
    frac = as_float(frac_key, cfg.get(frac_key, 0.0))
    if on_key in cfg:
        b.use(on_key, on, *(("--optimizer-offload", frac) if on else ()),
              note=("Adam on the GPUs" if not on else "the Adam step of that share on the host CPU" if frac > 0 else
                    "no optimizer_offload_fraction: Megatron's default 0 keeps Adam on the GPUs"))
    if frac_key in cfg:
        b.use(frac_key, frac, note="in --optimizer-offload" if on else "not used: optimizer_cpu_offload is off")


def _pools(cfg: dict, dflt: dict) -> tuple[int, int, int, int]:
    """(rollout GPUs, trainer GPUs, nodes, GPUs per node) of a one-step-off / fully-async job."""
    vals = {k: as_int(k, cfg[k]) for k in ("rollout.n_gpus_per_node", "rollout.nnodes", "trainer.n_gpus_per_node",
                                            "trainer.nnodes")}
    if min(vals.values()) < 1:
        raise ConfigError(f"rollout.* and trainer.* GPU counts must be >= 1, got {vals}")
    gen = vals["rollout.n_gpus_per_node"] * vals["rollout.nnodes"]
    train = vals["trainer.n_gpus_per_node"] * vals["trainer.nnodes"]
    shared = vals["rollout.n_gpus_per_node"] + vals["trainer.n_gpus_per_node"] <= NODE_GPUS
    nodes = max(vals["rollout.nnodes"], vals["trainer.nnodes"]) if shared else vals["rollout.nnodes"] + vals["trainer.nnodes"]
    return gen, train, nodes, vals["trainer.n_gpus_per_node"]


def placement_and_policy(b: Builder, cfg: dict, dflt: dict, schedule: str, tp: int) -> None:
    """The placement (``--placement``, ``--devices``, ``--nodes``) and, off the synchronous loop, the policy."""
    per, nodes = as_int("trainer.n_gpus_per_node", cfg["trainer.n_gpus_per_node"]), as_int("trainer.nnodes",
                                                                                          cfg["trainer.nnodes"])
    score, score_nodes = _reward_pool(b, cfg)
    if schedule == "sync":
        b.schedule = "baseline"
        if per < 1 or nodes < 1:
            raise ConfigError(f"trainer.n_gpus_per_node and trainer.nnodes must be >= 1, got {per} and {nodes}")
        where = ("--placement", "colocated", "--devices", per * nodes) if not score else (
            "--placement", f"shared {per * nodes}+{score}")
        b.use("trainer.n_gpus_per_node", per, *where, default=dflt["trainer.n_gpus_per_node"],
              note="hybrid engine: every role on every GPU" + (f"; the reward model on {score} more" if score else ""))
        b.use("trainer.nnodes", nodes, "--nodes", nodes + score_nodes, default=dflt["trainer.nnodes"])
        if not dflt["actor_rollout_ref.hybrid_engine"]:
            b.use("actor_rollout_ref.hybrid_engine", cfg["actor_rollout_ref.hybrid_engine"], note="every role on every GPU")
        b.notes.append("verl runs the synchronous schedule (oppo-sim's baseline policy); --policy chooses the one "
                       "simulated")
        return
    gen, train, nodes, _ = _pools(cfg, dflt)
    if gen % tp:
        raise ConfigError(f"rollout.n_gpus_per_node x rollout.nnodes = {gen} GPUs do not hold whole rollout "
                          f"replicas of tensor_model_parallel_size {tp}")
    label = f"split {gen}+{train}+{score}" if score else f"gen-apart {gen}+{train}"
    for k in ("rollout.n_gpus_per_node", "rollout.nnodes", "trainer.n_gpus_per_node"):
        b.use(k, cfg[k], default=dflt[k], note="in the placement below")
    b.use("trainer.nnodes", cfg["trainer.nnodes"], "--placement", label, "--nodes", nodes + score_nodes,
          default=dflt["trainer.nnodes"], note=f"rollout on {gen} GPUs, the trainer (and reference" + (
              f") on {train}, the reward model on {score}" if score else f", reward) on {train}")
          + f"; {nodes + score_nodes} node(s) of up to {NODE_GPUS} GPUs")
    b.use("actor_rollout collective group", "all", "--refit-group", "all", default=True,
          note="the weights are broadcast over every actor and rollout worker (ParameterSynchronizer)")
    hk = "actor_rollout_ref.hybrid_engine"
    if schedule == "one-step-off":
        _async(b, hk, cfg[hk], 1, "one-step-off: step t+1 generates while step t trains", dflt[hk])
        return
    b.use(hk, cfg[hk], note="fully-async: the rollout apart from the trainer", default=dflt[hk])
    _fully_async(b, cfg, dflt)


def _reward_pool(b: Builder, cfg: dict) -> tuple[int, int]:
    """(GPUs, nodes) of the reward model's own pool (0, 0 where it shares the trainer's)."""
    on = as_bool(RM_POOL[0], cfg.get(RM_POOL[0], False)) and as_bool("reward_model.enable", cfg["reward_model.enable"])
    if not on:
        return 0, 0
    per, nodes = (as_int(k, cfg.get(k, d)) for k, d in ((RM_POOL[1], 8), (RM_POOL[2], 0)))
    if per < 1 or nodes < 1:
        raise ConfigError(f"{RM_POOL[0]}=True needs {RM_POOL[1]} and {RM_POOL[2]} >= 1 (verl refuses it), got {per} "
                          f"and {nodes}")
    b.use(RM_POOL[0], True, note=f"the reward model on {per} x {nodes} GPUs of its own")
    b.use(RM_POOL[1], per)
    b.use(RM_POOL[2], nodes)
    if any(as_bool(k, cfg[k]) for k in (A + "use_kl_loss", "algorithm.use_kl_in_reward")):
        b.notes.append("reward_model.enable_resource_pool: verl keeps the reference with the actor; oppo-sim's "
                       "scoring pool runs it beside the reward model")
    return per * nodes, nodes


def _async(b: Builder, key: str, value: Any, k: int, note: str, default: bool = False) -> None:
    """The policy args of an asynchronous schedule: ``--policy`` on run, ``--policies`` on compare/sweep (the
    command's parser keeps the one it has, the other is listed as ignored)."""
    b.schedule = f"async(k={k})"
    bound = () if k == Async.staleness else ("--staleness", k)  # the default bound is left untyped: a typed
    b.use(key, value, "--policy", "async", "--policies", "baseline,async,oppo", *bound,  # --policies may drop async
          note=note + "; run: --policy, compare/sweep: --policies", default=default)


def _fully_async(b: Builder, cfg: dict, dflt: dict) -> None:
    keys = [f"async_training.{k}" for k in ("require_batches", "trigger_parameter_sync_step", "staleness_threshold",
                                             "partial_rollout")]
    req, trig = as_int(keys[0], cfg[keys[0]]), as_int(keys[1], cfg[keys[1]])
    thr, partial = as_float(keys[2], cfg[keys[2]]), as_bool(keys[3], cfg[keys[3]])
    mini = as_int(A + "ppo_mini_batch_size", cfg[A + "ppo_mini_batch_size"])
    if min(req, trig, mini) < 1 or thr < 0:
        raise ConfigError(f"{keys[0]}, {keys[1]} and ppo_mini_batch_size must be >= 1 and {keys[2]} >= 0, got "
                          f"{req}, {trig}, {mini} and {thr}")
    b.use(A + "ppo_mini_batch_size", mini, "--minibatches", req * trig, default=dflt[A + "ppo_mini_batch_size"],
          note=f"{req * trig} updates of {mini} prompts per parameter version")
    b.use(keys[0], req, default=dflt[keys[0]])
    b.use(keys[1], trig, "--batch", mini * req * trig, default=dflt[keys[1]],
          note=f"a parameter version: {req} x {mini} x {trig} prompts = oppo-sim's step")
    b.use(keys[3], partial, default=dflt[keys[3]], note="interrupted generations resume after the weight sync"
          if partial and thr > 0 else "")
    if thr > 0:
        k = max(1, math.ceil(thr))
        _async(b, keys[2], thr, k, f"up to {thr:g} of a version's samples generated ahead, stale", dflt[keys[2]])
        b.notes.append(f"verl's fully-async rollout runs ahead by at most staleness_threshold={thr:g} of a version's "
                       f"samples; oppo-sim's async(k={k}) lets a whole step's generation run ahead: an upper bound on "
                       "the overlap" + ("; partial rollout's interrupted generations are not modelled" if partial else ""))
    else:
        b.schedule = "baseline"
        b.use(keys[2], thr, default=dflt[keys[2]], note="0: synchronous between parameter versions")
        b.notes.append("verl's fully-async trainer with staleness_threshold=0 trains each version's samples as they "
                       "arrive; oppo-sim's baseline on the two pools trains them after the version is generated")


def fsdp(b: Builder, cfg: dict, dflt: dict, k: str, strategy: str) -> None:
    """The FSDP actor (``actor.strategy`` ``k`` = ``fsdp`` / ``fsdp2``): full-shard = ZeRO-3 (SHARD_GRAD_OP =
    ZeRO-2), hybrid sharding (``fsdp_size``), ``--sp``, its offload switches."""
    if strategy not in ("fsdp", "fsdp2"):
        raise ConfigError(f"{k}: expected fsdp, fsdp2 or megatron, got {cfg[k]!r}")
    zk = A + "fsdp_config.reshard_after_forward"
    reshard = cfg.get(zk) is None or as_bool(zk, cfg[zk])
    b.use(k, strategy, "--zero", 3 if reshard else 2, default=dflt[k],
          note="FSDP full-shard: ZeRO-3 (the reference sharded with it)" if reshard else "FSDP SHARD_GRAD_OP: ZeRO-2")
    if cfg.get(zk) is not None:
        b.use(zk, reshard, note="False: parameters stay gathered after the forward (SHARD_GRAD_OP, verl's ZeRO-2)")
    sk = A + "ulysses_sequence_parallel_size"
    b.use(sk, cfg[sk], "--sp", as_int(sk, cfg[sk]), default=dflt[sk])
    fk = A + "fsdp_config.fsdp_size"
    if fk in cfg:
        n = as_int(fk, cfg[fk])
        b.use(fk, n, *(("--fsdp-size", n) if n > 0 else ()),
              note="hybrid sharding: the state sharded in groups of N, replicated across them" if n > 0 else "the whole pool")
    pk, ok = A + "fsdp_config.param_offload", A + "fsdp_config.optimizer_offload"
    param, opt = as_bool(pk, cfg[pk]), as_bool(ok, cfg[ok])
    b.use(pk, param, default=dflt[pk])
    b.use(ok, opt, "--offload-train-state" if param or opt else "--no-offload-train-state", default=dflt[ok],
          note="with param_offload: the trainer's state " + ("to host while vLLM generates" if param or opt else
                                                            "stays on the GPUs while vLLM generates"))
    if not (param or opt):
        b.use("gradients after an update", "freed", "--free-grads", default=True,
              note="dp_actor.update_policy ends with zero_grad(): they take turns with vLLM")
    for key in CPU_OPTIMIZER:
        if key in cfg:
            b.ignore(key, cfg[key], "Megatron's hybrid CPU optimizer: under FSDP, verl's is fsdp_config.offload_policy")
    k = A + "fsdp_config.offload_policy"
    if k in cfg:
        on = as_bool(k, cfg[k])
        b.use(k, on, *(("--optimizer-offload", 1) if on else ()), note="FSDP2's CPUOffloadPolicy: the Adam step on the "
              "CPU (the parameters it also streams from the host every pass are not priced)" if on else "")


def micro_batches(b: Builder, cfg: dict, dflt: dict, backend: str) -> None:
    """A rank's micro-batches, per pass: with verl's dynamic batch size (``actor.use_dynamic_bsz``) packed to
    ``ppo_max_token_len_per_gpu`` tokens, times the Ulysses degree under FSDP (``dp_actor.py``) or the
    context-parallel one under Megatron (``megatron_actor.py``) -> ``--micro-batch-tokens``; without it
    ``ppo_micro_batch_size_per_gpu`` sequences -> ``--micro-batch-size``. The policy's log-prob pass likewise
    (``rollout.log_prob_use_dynamic_bsz`` / ``log_prob_max_token_len_per_gpu`` / ``log_prob_micro_batch_size_per_gpu``)
    -> ``--logprob-micro-batch-tokens`` / ``-size``: one rule for every forward, a reference's own is said."""
    scale = as_int(M + "context_parallel_size", cfg.get(M + "context_parallel_size", 1)) if backend == "megatron" else \
        as_int(A + "ulysses_sequence_parallel_size", cfg.get(A + "ulysses_sequence_parallel_size", 1))
    times = f" x {'context' if backend == 'megatron' else 'Ulysses'} parallel {scale}" if scale > 1 else ""
    rules: dict[str, tuple[str, int]] = {}
    for role, pre, opt in ((A, "", "--micro-batch"), (R, "log_prob_", "--logprob-micro-batch"), (REF, "log_prob_", "")):
        on_key = role + pre + "use_dynamic_bsz"
        len_key, n_key = role + (pre or "ppo_") + "max_token_len_per_gpu", role + (pre or "ppo_") + "micro_batch_size_per_gpu"
        on = as_bool(on_key, cfg.get(on_key, cfg.get(A + "use_dynamic_bsz", False)))
        if on_key in cfg or on:
            b.use(on_key, on, default=dflt.get(on_key, True))
        key, unused = (len_key, n_key) if on else (n_key, len_key)
        if _set(cfg, unused):
            b.use(unused, cfg[unused], default=dflt.get(unused, True), note=f"not read: use_dynamic_bsz is {'on' if on else 'off'}")
        raw = cfg.get(len_key, cfg.get(A + "ppo_max_token_len_per_gpu", 16384)) if on else cfg.get(n_key)
        if not on and _set(cfg, role + (pre or "ppo_") + "micro_batch_size"):
            key, raw = _global_size(b, cfg, role + (pre or "ppo_") + "micro_batch_size", backend, dflt)
        elif not on and not _set(cfg, n_key):
            continue  # neither size: verl refuses to run; oppo-sim keeps one longest sequence a micro-batch
        n = as_int(key, raw)
        rule = ("tokens", n * scale) if on else ("size", n)
        rules[role] = rule
        if opt:
            b.use(key, n, f"{opt}-{rule[0]}", rule[1], default=dflt.get(key, True),
                  note=f"tokens a micro-batch{times}" if on else "sequences a micro-batch")
        elif _set(cfg, key):
            b.use(key, n, default=dflt.get(key, True), note="the policy log-prob's" if rules.get(R) == rule else
                  "oppo-sim's forwards share the policy log-prob's micro-batch")


def _global_size(b: Builder, cfg: dict, key: str, backend: str, dflt: dict) -> tuple[str, int]:
    """verl's deprecated global micro-batch size (``ppo_micro_batch_size``, ``log_prob_micro_batch_size``): each worker
    divides it by the data-parallel size and it replaces the per-GPU one (``fsdp_workers.py``,
    ``megatron_workers.py``). -> (the key, sequences a rank's micro-batch)."""
    gpus = as_int("trainer.n_gpus_per_node", cfg["trainer.n_gpus_per_node"]) * as_int("trainer.nnodes", cfg["trainer.nnodes"])
    if backend == "megatron":
        split = 1
        for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size"):
            split *= as_int(M + k, cfg.get(M + k, 1))
    else:
        split = as_int(A + "ulysses_sequence_parallel_size", cfg.get(A + "ulysses_sequence_parallel_size", 1))
    dp = max(gpus // max(split, 1), 1)
    n = as_int(key, cfg[key]) // dp
    if n < 1:
        raise ConfigError(f"{key}={cfg[key]} over {dp} data-parallel ranks is {n} a rank; verl needs at least 1")
    b.use(key, cfg[key], default=dflt.get(key, True), note=f"deprecated global size: / {dp} data-parallel ranks = {n}")
    return key, n


def _set(cfg: dict, key: str) -> bool:
    return cfg.get(key) not in (None, "null", "None", "")


def fused_kernels(b: Builder, cfg: dict, dflt: dict) -> None:
    """``model.use_fused_kernels`` (verl's default off): without it ``dp_actor`` takes the lm_head's logits for every
    token of a micro-batch (``output.logits``) -> ``--full-logits``; on, FusedLinearForPPO's 512-token chunks."""
    k = "actor_rollout_ref.model.use_fused_kernels"
    on = as_bool(k, cfg[k])
    b.use(k, on, *(() if on else ("--full-logits",)), default=dflt[k],
          note="log-probs in 512-token chunks (FusedLinearForPPO)" if on else
          "dp_actor takes every token's logits from the lm_head")
