"""``plan --export nemo-rl``: a NeMo RL GRPO recipe (YAML) on top of NeMo RL's ``examples/configs/grpo_math_1B.yaml``
(``defaults: grpo_math_1B.yaml``: save it in that folder, or point ``defaults:`` at your copy), run with
``uv run examples/run_grpo.py --config RECIPE``; ``oppo-sim run --from-nemo-rl RECIPE`` reads it back.

NeMo RL runs GRPO-family algorithms on a rule or reward-model environment: ``ppo`` (a critic) cannot be
exported; a reward *model* is a ``#`` note (NeMo RL's reward-model environment is set up under ``env:``).
Placement: colocated, or generation on its own GPUs (``policy.generation.colocated.resources``: GPUs on one
node, whole nodes on several); the reference runs with the policy. Trainer: ``dtensor_cfg`` (FSDP2, ZeRO-3;
``context_parallel_size`` = sp) or ``megatron_cfg`` (tp/pp/cp/ep, distributed optimizer). Each step's samples
are trained once (no epochs). Async: ``grpo.async_grpo`` with ``max_trajectory_age_steps`` = k.
"""

from __future__ import annotations

from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.export_common import Chosen, layout_of, micro_rules, model_name, per_node, weight_move_notes
from oppo_sim.hw.costs.micro_batches import MicroBatch
from oppo_sim.hw.costs.trainer_layout import SPLIT_ACCOUNTING, STAGE_SPLIT
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.traces.trace import DEFAULT_MAX_PROMPT

_EST = {"grpo": "grpo", "rloo": "grpo", "dapo": "grpo", "reinforce++": "reinforce_plus_plus"}


def _placement(cfg: SimConfig, layout: str, sizes: tuple[int, int, int], notes: list[str]) -> dict[str, Any]:
    gen, train, score = sizes
    devices = cfg.placement.total_devices
    per = per_node(cfg, devices, "the cluster")
    if layout in ("colocated", "shared"):
        if layout == "shared":
            notes.append(f"NeMo RL scores in its environments and runs the reference with the policy: the plan's "
                         f"shared {gen}+{score} becomes colocated {devices}")
        if cfg.colocate != "sleep" or not cfg.offload_train_state:
            notes.append("NeMo RL's colocated generation always sleeps (level 1) and offloads the policy before "
                         "generating: the plan's resident engine or kept trainer state has no setting")
        return {"colocated": {"enabled": True}}
    if layout == "split":
        notes.append(f"NeMo RL runs the reference with the policy: the plan's split {gen}+{train}+{score} becomes "
                     f"generation on {gen} GPUs and training on {train + score}")
    if cfg.nodes == 1:
        resources = {"gpus_per_node": gen, "num_nodes": None}
    else:
        whole = -(-gen // per)
        if gen % per:
            notes.append(f"NeMo RL gives generation whole nodes on a multi-node cluster: {gen} GPUs become {whole} "
                         f"node(s) of {per}")
        resources = {"gpus_per_node": per, "num_nodes": whole}
    return {"colocated": {"enabled": False, "resources": resources}}


def _lora(cfg: SimConfig, notes: list[str]) -> dict[str, Any]:
    """LoRA as NeMo RL's ``peft`` (Megatron: its fused names, none = every linear) or ``lora_cfg`` (DTensor)."""
    lora = cfg.trainer.lora
    if lora is None:
        return {}
    if lora.sync == "adapter":
        notes.append("the plan syncs the adapters alone; NeMo RL's refit merges them into the weights")
    if cfg.trainer.megatron:
        return {"peft": {"enabled": True, "dim": lora.rank, "target_modules": [] if lora.all_linear else lora.megatron_targets()}}
    return {"lora_cfg": {"enabled": True, "dim": lora.rank, "match_all_linear": lora.all_linear,
                         "target_modules": [] if lora.all_linear else list(lora.targets)}}


def _trainer(cfg: SimConfig, chosen: Chosen, notes: list[str]) -> dict[str, Any]:
    t = cfg.trainer
    ckpt = chosen.recompute not in (None, "none")
    if chosen.recompute == "selective":
        notes.append("NeMo RL checkpoints whole layers: the plan's selective recomputation becomes full")
    if t.megatron:
        mcfg = {"enabled": True, "tensor_model_parallel_size": t.tp, "pipeline_model_parallel_size": t.pp,
                "context_parallel_size": t.cp, "expert_model_parallel_size": cfg.expert_parallel,
                "sequence_parallel": t.tp > 1, "activation_checkpointing": ckpt,
                "optimizer": {"use_distributed_optimizer": t.distributed_optimizer,
                              **({"optimizer_cpu_offload": True, "optimizer_offload_fraction": t.optimizer_offload}
                                 if t.optimizer_offload > 0 else {})}}
        mcfg.update({k: getattr(t, field) for k, field, _ in STAGE_SPLIT if getattr(t, field) is not None})
        counted = [k for k, field, _ in SPLIT_ACCOUNTING if getattr(t, field)]
        if counted:  # NeMo RL's megatron_cfg passes the first/last stage layers to Megatron, not these switches
            notes.append(f"{' and '.join(counted)}: policy.megatron_cfg has no key for it; set "
                         "num_layers_in_first/last_pipeline_stage to the same split")
        if cfg.expert_parallel > 1:
            mcfg["moe_token_dispatcher_type"] = t.moe_dispatcher
            mcfg["expert_tensor_parallel_size"] = t.expert_tp
            mcfg["moe_router_dtype"] = None if t.moe_router_dtype == "model" else t.moe_router_dtype
        if t.vpp > 1:
            notes.append(f"virtual pipeline stages ({t.vpp}): set them in policy.megatron_cfg as your NeMo RL version "
                         "names them")
        return {"dtensor_cfg": {"enabled": False}, "megatron_cfg": {**mcfg, **_lora(cfg, notes)}}
    if chosen.zero_stage not in (None, 3):
        notes.append(f"the plan's trainer uses ZeRO-{chosen.zero_stage}; NeMo RL's DTensor FSDP2 shards fully (ZeRO-3)")
    if cfg.expert_parallel > 1:
        notes.append(f"expert parallelism {cfg.expert_parallel} needs policy.megatron_cfg: DTensor shards the experts")
    if t.fsdp_size:
        notes.append(f"the plan shards the trainer's state in groups of {t.fsdp_size} (hybrid); DTensor FSDP2 here "
                     "shards it over every rank")
    if t.optimizer_offload > 0:
        notes.append("the plan steps Adam on the CPU: DTensor cannot (policy.megatron_cfg.optimizer.optimizer_cpu_offload can)")
    return {"dtensor_cfg": {"enabled": True, "tensor_parallel_size": 1,
                            "context_parallel_size": cfg.train_memory.sequence_parallel,
                            "activation_checkpointing": ckpt, **_lora(cfg, notes)},
            "megatron_cfg": {"enabled": False}}


def _micro_batches(cfg: SimConfig, longest: int, notes: list[str]) -> dict[str, Any]:
    """The plan's micro-batches (``micro_rules``): token budgets as sequence packing's, counts of sequences as
    ``train_micro_batch_size`` / ``logprob_batch_size`` without packing (each micro-batch padded to its longest, as
    ``--padded-batches`` prices it); packing cannot count sequences, so a mix packs by tokens."""
    train, fwd = micro_rules(cfg, MicroBatch(longest))
    off = {"dynamic_batching": {"enabled": False}}
    if cfg.padded_batches or (train.tokens is None and fwd.tokens is None):
        if not cfg.padded_batches:
            notes.append("NeMo RL counts micro-batches in sequences only without packing, each padded to its longest: "
                         "the plan's were not padded (plan with --padded-batches to price that)")
        sizes = [r.sequences if r.sequences is not None else 1 for r in (train, fwd)]
        if train.tokens is not None or fwd.tokens is not None:
            notes.append("padded micro-batches are counted in sequences: the plan's token budget becomes one sequence")
        return {"train_micro_batch_size": sizes[0], "logprob_batch_size": sizes[1],
                "sequence_packing": {"enabled": False}, **off}
    tokens = [r.worst_tokens(longest) for r in (train, fwd)]
    if train.tokens is None or fwd.tokens is None:
        notes.append("sequence packing budgets tokens: the plan's micro-batches of sequences become that many longest "
                     "sequences' tokens")
    return {"sequence_packing": {"enabled": True, "train_mb_tokens": tokens[0], "logprob_mb_tokens": tokens[1]}, **off}


def _grpo(cfg: SimConfig, chosen: Chosen, layout: str, notes: list[str]) -> dict[str, Any]:
    alg = cfg.algorithm
    grpo: dict[str, Any] = {"num_prompts_per_step": cfg.batch, "num_generations_per_prompt": alg.n,
                            "adv_estimator": {"name": _EST[alg.name]}, "use_dynamic_sampling": alg.name == "dapo"}
    if alg.name == "rloo":
        grpo["use_leave_one_out_baseline"] = True
    if chosen.kind == "async" and layout in ("gen-apart", "split"):
        in_flight = "in-flight" in chosen.policy
        grpo["async_grpo"] = {"enabled": True, "max_trajectory_age_steps": chosen.param("k") or 1,
                              "in_flight_weight_updates": in_flight}
        if not in_flight:
            notes.append("without in_flight_weight_updates NeMo RL also waits at each refit for the generations in "
                         "flight, which the plan did not; its performance recipes set it (plan with "
                         "--in-flight-weight-updates to price that)")
    elif chosen.kind == "async":
        notes.append(f"{chosen.policy}: NeMo RL's async GRPO generates on its own GPUs; the plan's async on {layout} "
                     "GPUs has no setting: this runs synchronously")
    elif chosen.kind == "partial-rollout":
        notes.append(f"{chosen.policy}: NeMo RL's nearest is grpo.async_grpo with in_flight_weight_updates, which also "
                     "trains stale samples: not set")
    elif chosen.kind != "baseline":
        notes.append(f"NeMo RL runs the synchronous GRPO loop: the overlap policy {chosen.policy} has no setting")
    return grpo


def export_nemo_rl(cfg: SimConfig, chosen: Chosen = Chosen()) -> str:
    """A NeMo RL GRPO recipe (YAML text) that sets up ``cfg``."""
    import yaml

    alg = cfg.algorithm
    if alg.name == "ppo":
        raise ConfigError("NeMo RL runs GRPO-family algorithms (no critic): export a ppo plan to verl or openrlhf")
    layout, gen, train, score = layout_of(cfg)
    notes = [f"oppo-sim plan: {chosen.policy} on {layout} {cfg.placement.total_devices} GPUs ({cfg.trainer.label()} "
             "trainer); the run's length is yours: set grpo.max_num_steps",
             "save next to NeMo RL's examples/configs/grpo_math_1B.yaml (or point defaults: at it); the model names "
             "oppo-sim's table model: point it at your copy"]
    if alg.reward != "rule":
        notes.append(f"the plan scores with the reward model {model_name(cfg.reward)}: set up NeMo RL's reward-model "
                     "environment under env: (the recipe keeps the math environment)")
    notes += weight_move_notes(cfg, "nemo-rl", chosen)
    if cfg.ppo_epochs > 1:
        notes.append(f"NeMo RL trains each step's samples once: the plan's {cfg.ppo_epochs} epochs have no setting")
    sequences = cfg.batch * alg.n
    if sequences % cfg.minibatches:
        notes.append(f"{sequences} samples do not split into {cfg.minibatches} equal training batches")
    if cfg.truncate_prompt:
        notes.append("NeMo RL drops (a weight-0 stub) a prompt over data.max_input_seq_length where the plan truncated it")
    prompt = cfg.max_prompt if cfg.max_prompt is not None else DEFAULT_MAX_PROMPT
    if not cfg.max_response:
        raise ConfigError("the plan's responses have no cap: NeMo RL needs policy.generation.max_new_tokens; "
                          "plan with --max-response")
    generation: dict[str, Any] = {"max_new_tokens": cfg.max_response,
                                  "vllm_cfg": {"tensor_parallel_size": cfg.engine.tp,
                                               "gpu_memory_utilization": cfg.engine.gpu_memory_utilization,
                                               "enforce_eager": cfg.engine.enforce_eager,
                                               "async_engine": chosen.kind == "async"}}
    generation.update(_placement(cfg, layout, (gen, train, score), notes))
    policy = {"model_name": model_name(cfg.actor), "train_global_batch_size": sequences // cfg.minibatches,
              "max_total_sequence_length": prompt + cfg.max_response, "generation": generation,
              **_trainer(cfg, chosen, notes), **_micro_batches(cfg, prompt + cfg.max_response, notes)}
    doc = {"grpo": _grpo(cfg, chosen, layout, notes),
           "loss_fn": {"reference_policy_kl_penalty": 0.01 if alg.kl else 0}, "policy": policy,
           "data": {"max_input_seq_length": prompt},
           "cluster": {"gpus_per_node": per_node(cfg, cfg.placement.total_devices, "the cluster"), "num_nodes": cfg.nodes}}
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return "".join(f"# {n}\n" for n in notes) + "defaults: grpo_math_1B.yaml\n" + body


__all__ = ["export_nemo_rl"]
