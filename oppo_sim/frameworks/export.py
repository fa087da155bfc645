"""``oppo-sim plan --export verl|openrlhf|nemo-rl``: the plan's chosen configuration as that framework's settings.

- **verl**: Hydra ``key=value`` overrides, one per line, for ``python3 -m verl.trainer.main_ppo`` (save them to
  a file: ``oppo-sim run --from-verl FILE`` reads them back); a Megatron layout adds
  ``--config-name=ppo_megatron_trainer``; an async plan of staleness 1 on separate generation GPUs is verl's
  one-step-off trainer (``verl.experimental.one_step_off_policy.main_ppo``).
- **OpenRLHF**: a ``train_ppo_ray`` command-line fragment in its current dotted flags (OpenRLHF since
  2026-04-19; :mod:`~oppo_sim.frameworks.export_openrlhf`); ``--from-openrlhf`` reads it back.
- **NeMo RL**: a GRPO recipe on top of NeMo RL's ``grpo_math_1B.yaml`` (:mod:`~oppo_sim.frameworks.export_nemo_rl`);
  ``--from-nemo-rl`` reads it back.

Safe to paste: what a framework cannot express is a ``#`` comment (an overlap policy it has no setting for, a
placement it has no layout for, a ZeRO stage or trainer backend it does not have), never a setting that
would run something else; the run's length is not written (oppo-sim's simulated ``--steps`` is not the
user's training length); epochs and mini-batches are the plan's (``plan --ppo-epochs/--minibatches``).
Export then import gives back the same configuration where the framework can express it
(``tests/test_export_roundtrip.py``): batch, n, lengths, tp, devices, nodes, placement, memory fraction, sp,
algorithm, offload, ZeRO stage and recompute, the trainer's backend and layout, and the async policy.
"""

from __future__ import annotations

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.verl_padding import export_padding
from oppo_sim.frameworks.export_common import (Chosen, layout_of, micro_rules, model_name, per_gpu_budget, per_node,
                                                split_notes, weight_move_notes)
from oppo_sim.hw.costs.micro_batches import MicroBatch
from oppo_sim.hw.costs.trainer_layout import SPLIT_ACCOUNTING, STAGE_SPLIT
from oppo_sim.pipeline.config import SimConfig

FRAMEWORKS: tuple[str, ...] = ("verl", "openrlhf", "nemo-rl")
_VERL_EST = {"ppo": "gae", "grpo": "grpo", "dapo": "grpo", "rloo": "rloo", "reinforce++": "reinforce_plus_plus_baseline"}
_M = "actor_rollout_ref.actor.megatron."
_A, _R, _REF = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout.", "actor_rollout_ref.ref."


def _verl_micro_batches(cfg: SimConfig) -> list[str]:
    """The plan's micro-batches (``micro_rules``) in verl's keys: a token budget as its dynamic batch size (per GPU:
    verl scales it by ``--cp`` under Megatron, by the Ulysses degree under FSDP), a count of sequences as its
    ``*_micro_batch_size_per_gpu``."""
    t = cfg.train_memory
    scale = cfg.trainer.cp if cfg.trainer.megatron else t.sequence_parallel
    train, fwd = micro_rules(cfg, MicroBatch(sequences=1))
    notes: list[str] = []
    out = []
    for pre, on, rule in ((_A, "use_dynamic_bsz", train), (_R, "log_prob_use_dynamic_bsz", fwd),
                          (_REF, "log_prob_use_dynamic_bsz", fwd)):
        what = "ppo_" if pre == _A else "log_prob_"
        out.append(f"{pre}{on}={rule.tokens is not None}")
        if rule.tokens is None:
            out.append(f"{pre}{what}micro_batch_size_per_gpu={rule.sequences}")
            continue
        n, note = per_gpu_budget("verl", rule.tokens, scale)
        notes += [x for x in note if x not in notes]
        out.append(f"{pre}{what}max_token_len_per_gpu={n}")
    return notes + out


def _verl_lora(cfg: SimConfig) -> list[str]:
    """LoRA as verl's keys: ``model.lora_rank`` / ``target_modules`` and the frozen weights' ``model_dtype`` (FSDP; the
    sync is verl's adapter-only one), ``model.lora.rank`` (Megatron; ``lora.merge`` for a merged sync)."""
    lora = cfg.trainer.lora
    if lora is None:
        return []
    names = "all-linear" if lora.all_linear else "[" + ",".join(lora.targets) + "]"
    if cfg.trainer.megatron:
        return [f"actor_rollout_ref.model.lora.rank={lora.rank}"] + (
            [] if lora.all_linear else [f"actor_rollout_ref.model.lora.target_modules=[{','.join(lora.megatron_targets())}]"]) + (
            ["actor_rollout_ref.model.lora.merge=True"] if lora.sync == "merged" else [])
    dtype = ["actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16"] if lora.base_dtype == "bf16" else []
    return [f"actor_rollout_ref.model.lora_rank={lora.rank}", f"actor_rollout_ref.model.target_modules={names}"] + dtype + (
        ["# the plan syncs the merged weights; verl's FSDP path hands vLLM the adapters alone"] if lora.sync == "merged" else [])


def _verl_trainer(cfg: SimConfig, chosen: Chosen) -> list[str]:
    """The actor's backend, layout, ZeRO stage and offload as verl keys."""
    t, off = cfg.trainer, cfg.offload_train_state
    if t.megatron:
        out = ["--config-name=ppo_megatron_trainer", "actor_rollout_ref.actor.strategy=megatron",
               f"{_M}tensor_model_parallel_size={t.tp}", f"{_M}pipeline_model_parallel_size={t.pp}",
               f"{_M}context_parallel_size={t.cp}", f"{_M}expert_model_parallel_size={cfg.expert_parallel}",
               f"{_M}use_distributed_optimizer={t.distributed_optimizer}"]
        out += [f"{_M}virtual_pipeline_model_parallel_size={t.vpp}"] if t.vpp > 1 else []
        out += [f"+{_M}override_transformer_config.{k}={getattr(t, field)}"
                for k, field, _ in STAGE_SPLIT if getattr(t, field) is not None]
        out += [f"+{_M}override_transformer_config.{k}=True" for k, field, _ in SPLIT_ACCOUNTING if getattr(t, field)]
        out += [f"{_M}expert_tensor_parallel_size={t.expert_tp}",
                f"+{_M}override_transformer_config.moe_token_dispatcher_type={t.moe_dispatcher}"] \
            if cfg.expert_parallel > 1 else []
        out += [f"+{_M}override_transformer_config.moe_router_dtype={t.moe_router_dtype}"] \
            if cfg.expert_parallel > 1 and t.moe_router_dtype != "model" else []
        _O = "+actor_rollout_ref.actor.optim.override_optimizer_config."
        out += [f"{_O}optimizer_cpu_offload=True", f"{_O}optimizer_offload_fraction={t.optimizer_offload:g}"] \
            if t.optimizer_offload > 0 else []
        return out + [f"{_M}param_offload={off}", f"{_M}grad_offload={off}", f"{_M}optimizer_offload={off}",
                      f"actor_rollout_ref.ref.megatron.param_offload={off}"]
    out = ["actor_rollout_ref.actor.strategy=fsdp"]
    if chosen.zero_stage in (0, 1, 2):
        if chosen.zero_stage < 2:
            out.append(f"# the plan's trainer uses ZeRO-{chosen.zero_stage}; verl's FSDP shards at least gradients and "
                       f"optimizer state: ZeRO-2 (SHARD_GRAD_OP)")
        out.append("actor_rollout_ref.actor.fsdp_config.reshard_after_forward=False  # ZeRO-2: FSDP SHARD_GRAD_OP")
    if t.fsdp_size:
        out += [f"actor_rollout_ref.actor.fsdp_config.fsdp_size={t.fsdp_size}  # hybrid sharding",
                f"actor_rollout_ref.ref.fsdp_config.fsdp_size={t.fsdp_size}"]
    if cfg.expert_parallel > 1:
        out.append(f"# expert parallelism {cfg.expert_parallel} needs verl's Megatron trainer: FSDP shards the experts")
    if 0 < t.optimizer_offload < 1:
        out.append(f"# the plan steps {t.optimizer_offload:.0%} of the Adam state on the CPU; FSDP2's offload_policy "
                   "moves all of it (and streams the parameters from the host)")
    out += ["actor_rollout_ref.actor.fsdp_config.offload_policy=True"] if t.optimizer_offload > 0 else []
    return out + [f"actor_rollout_ref.actor.fsdp_config.param_offload={off}",
                  f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={off}",
                  f"actor_rollout_ref.ref.fsdp_config.param_offload={off}"]


def _verl_placement(cfg: SimConfig, chosen: Chosen, layout: str, sizes: tuple[int, int, int]) -> list[str]:
    gen, train, score = sizes
    k = chosen.param("k") if chosen.kind == "async" else None
    if layout == "gen-apart" and k == 1:
        return ["# async k=1 on separate generation GPUs: verl's one-step-off trainer; run with "
                "python3 -m verl.experimental.one_step_off_policy.main_ppo",
                "actor_rollout_ref.hybrid_engine=False", f"trainer.nnodes={cfg.nodes}",
                f"trainer.n_gpus_per_node={per_node(cfg, train, 'training')}", f"rollout.nnodes={cfg.nodes}",
                f"rollout.n_gpus_per_node={per_node(cfg, gen, 'generation')}"]
    out = []
    if chosen.kind == "async":
        out.append(f"# {chosen.policy}: verl runs async training only with generation on its own GPUs (one-step-off "
                   "for k=1; verl.experimental.fully_async_policy bounds staleness by a sample fraction, "
                   "async_training.staleness_threshold, not by versions): set it up by hand")
    elif chosen.kind == "partial-rollout":
        out.append(f"# {chosen.policy}: verl's nearest is fully_async_policy with async_training.partial_rollout=True, "
                   "which also trains stale samples: not set")
    elif chosen.kind != "baseline":
        out.append(f"# verl runs the synchronous schedule: the overlap policy {chosen.policy} has no verl setting")
    if layout != "colocated":
        out.append(f"# verl's hybrid engine colocates every role: the plan's {layout} {gen}/{train}/{score} placement "
                   f"cannot be expressed; these overrides set up colocated {cfg.placement.total_devices}")
    devices = cfg.placement.total_devices
    return out + [f"trainer.n_gpus_per_node={per_node(cfg, devices, 'the run')}", f"trainer.nnodes={cfg.nodes}"]


def export_verl(cfg: SimConfig, chosen: Chosen = Chosen()) -> str:
    """Hydra overrides for verl's ``main_ppo`` that set up ``cfg``."""
    layout, gen, train, score = layout_of(cfg)
    alg, eng = cfg.algorithm, cfg.engine
    mini = cfg.batch // cfg.minibatches
    out = [f"# oppo-sim plan: {chosen.policy} on {layout} {cfg.placement.total_devices} GPUs ({cfg.trainer.label()} "
           "trainer); the run's length is yours: set trainer.total_epochs or trainer.total_training_steps"]
    out += _verl_placement(cfg, chosen, layout, (gen, train, score))
    out += [f"# {note}" for note in weight_move_notes(cfg, "verl", chosen)]
    out.append(f"data.train_batch_size={cfg.batch}")
    out.append(f"data.max_response_length={cfg.max_response}" if cfg.max_response else
               "# the plan's responses have no cap: set data.max_response_length to the longest you allow")
    if cfg.max_prompt is not None:
        out += [f"data.max_prompt_length={cfg.max_prompt}", f"data.filter_overlong_prompts={not cfg.truncate_prompt}"]
        out += ["data.truncation=right"] if cfg.truncate_prompt else []
    else:
        out.append("# the plan's prompts have no cap: set data.max_prompt_length to your longest prompt")
    out += ["# the model paths name oppo-sim's table models: point them at your copies",
            f"actor_rollout_ref.model.path={model_name(cfg.actor)}", f"actor_rollout_ref.rollout.n={alg.n}",
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={eng.tp}",
            f"actor_rollout_ref.rollout.gpu_memory_utilization={eng.gpu_memory_utilization}",
            f"actor_rollout_ref.rollout.max_num_seqs={eng.max_num_seqs}",
            f"actor_rollout_ref.rollout.max_num_batched_tokens={eng.max_num_batched_tokens}",
            f"actor_rollout_ref.rollout.enable_chunked_prefill={eng.enable_chunked_prefill}",
            f"actor_rollout_ref.rollout.enforce_eager={eng.enforce_eager}",
            f"actor_rollout_ref.rollout.free_cache_engine={cfg.colocate == 'sleep'}",
            f"trainer.balance_batch={cfg.trainer.balance_batch}"]
    if cfg.batch % cfg.minibatches:
        out.append(f"# {cfg.batch} prompts do not split into {cfg.minibatches} equal mini-batches; verl's are of {mini}")
    out += [f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}", f"actor_rollout_ref.actor.ppo_epochs={cfg.ppo_epochs}",
            f"actor_rollout_ref.actor.use_kl_loss={alg.kl and alg.grouped}",
            f"algorithm.use_kl_in_reward={alg.kl and not alg.grouped}",
            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={cfg.train_memory.sequence_parallel}"]
    if chosen.recompute is not None and cfg.trainer.megatron:  # Megatron's own switch, as verl's Megatron scripts set it
        gran = "null" if chosen.recompute == "none" else chosen.recompute
        out.append(f"{_M}override_transformer_config.recompute_granularity={gran}")
        out += [f"{_M}override_transformer_config.recompute_method=uniform",
                f"{_M}override_transformer_config.recompute_num_layers=1"] if chosen.recompute == "full" else []
    elif chosen.recompute is not None:
        if chosen.recompute == "selective":
            out.append("# verl checkpoints whole layers: the plan's selective recomputation becomes full")
        out.append(f"actor_rollout_ref.model.enable_gradient_checkpointing={chosen.recompute != 'none'}")
    out += _verl_trainer(cfg, chosen) + _verl_lora(cfg) + _verl_micro_batches(cfg)
    out.append(f"actor_rollout_ref.model.use_fused_kernels={not cfg.train_memory.full_logits}")  # chunked log-probs, or not
    out.append(f"algorithm.adv_estimator={_VERL_EST[alg.name]}")
    if alg.name == "dapo":
        out.append("algorithm.filter_groups.enable=True  # DAPO's dynamic sampling (verl's DAPO recipe)")
    out += ["reward_model.enable=False"] if alg.reward == "rule" else [
        "reward_model.enable=True", f"reward_model.model.path={model_name(cfg.reward)}"]
    if alg.critic:  # verl's critic defaults to deepseek-llm-7b: name it (oppo-sim's is the reward model's shape)
        out.append(f"critic.model.path={model_name(cfg.models()['critic'])}")
    out += export_padding(cfg)  # each model's use_remove_padding as the plan priced it
    lines = split_notes(out)
    name = [line for line in lines if line.startswith("--config-name=")]
    if name and "actor_rollout_ref.hybrid_engine=False" in lines:  # one-step-off's Megatron config
        name = ["--config-name=one_step_off_ppo_megatron_trainer"]
    lines = [line for line in lines if line.startswith("#")] + name + [
        line for line in lines if not line.startswith(("#", "--config-name="))]
    return "\n".join(lines) + "\n"


def export(cfg: SimConfig, framework: str, chosen: Chosen = Chosen()) -> str:
    """``cfg`` as ``framework``'s settings (``verl``, ``openrlhf`` or ``nemo-rl``)."""
    key = framework.strip().lower().replace("_", "-")
    if key not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
    if key == "openrlhf":
        from oppo_sim.frameworks.export_openrlhf import export_openrlhf

        return export_openrlhf(cfg, chosen)
    if key == "nemo-rl":
        from oppo_sim.frameworks.export_nemo_rl import export_nemo_rl

        return export_nemo_rl(cfg, chosen)
    return export_verl(cfg, chosen)


def export_best(res, framework: str) -> str:
    """The plan result's best configuration (``PlanResult.best``) as ``framework``'s settings."""
    import pandas as pd

    from oppo_sim.explore.space import Candidate, PlacementSpec, PolicySpec
    from oppo_sim.hw.costs.trainer_layout import TrainerLayout

    row, base = res.best, res.request.base
    trainer = TrainerLayout(str(row["train_backend"]), int(row["train_tp"]), int(row["pp"]), int(row["vpp"]), int(row["cp"]),
                            bool(row["distributed_optimizer"]), base.trainer.balance_batch, base.trainer.optimizer_offload,
                            base.trainer.balance_order, int(row.get("fsdp_size", 0) or 0), base.trainer.moe_dispatcher,
                            base.trainer.moe_router_dtype, lora=base.trainer.lora)
    spec = PlacementSpec(row["layout"], int(row["gen_gpus"]), int(row["train_gpus"]), int(row["score_gpus"]),
                         int(row["tp"]), int(row["sp"]), trainer, int(row["ep"]))
    cfg = Candidate(spec, PolicySpec("baseline")).config(base)  # the planner's own placement rule, with its trainer

    def num(col: str) -> int | None:
        return None if col not in row or pd.isna(row[col]) else int(row[col])

    chosen = Chosen(str(row["policy_label"]), num("zero_stage"), str(row["recompute"]), num("staleness_bound"),
                    num("budget"))
    return export(cfg, framework, chosen)


__all__ = ["Chosen", "FRAMEWORKS", "export", "export_best", "export_verl", "layout_of", "model_name", "per_node",
           "split_notes"]
