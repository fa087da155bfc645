"""The names of OpenRLHF's ``train_ppo_ray`` options, as its parser defines them, in its two command-line styles:
what the reader checks a command line against (a near-miss is a typo: "did you mean"), and the dotted names
of the options it reads, mapped to the flat names it reads them under.

Verified against github.com/OpenRLHF/OpenRLHF ``openrlhf/cli/train_ppo_ray.py`` (every ``add_argument``):

- **flat** (``--pretrain``, ``--rollout_batch_size``; OpenRLHF before 2026-04-19): the union of the names
  defined at every commit of that file from 2025-01-01 to c1ba971c (2026-04-13), the last flat one: a
  script of any 2025-26 flat release is read. Lengths changed within it: ``--prompt_max_len`` /
  ``--generate_max_len`` until d0e088b6 (2026-03-24), ``--max_len`` (prompt + response) /
  ``--max_new_tokens`` from then on.
- **dotted** (``--actor.model_name_or_path``, ``--rollout.batch_size``; since ed62d0e2, 2026-04-19, "dotted
  config hierarchy"): the union of the names at every commit from ed62d0e2 to 3c3be623 (2026-08-13).
"""

from __future__ import annotations

FLAT_VERSION = "flat flags (before 2026-04-19; names to c1ba971c)"
DOTTED_VERSION = "dotted flags (since 2026-04-19, ed62d0e2; names to 3c3be623)"
BOTH = frozenset({"local_rank", "use_ms"})
"""Options that are neither flat nor dotted (defined, undotted, in both styles)."""

FLAT: frozenset[str] = frozenset("""
    actor_init_on_gpu actor_learning_rate actor_num_gpus_per_node actor_num_nodes adam_betas adam_offload
    advantage_estimator agent_func_path apply_chat_template async_queue_size async_train attn_implementation
    aux_loss_coef best_metric_key bf16 ckpt_path colocate_actor_ref colocate_all_models colocate_critic_reward
    critic_learning_rate critic_num_gpus_per_node critic_num_nodes critic_pretrain dataloader_num_workers
    deepcompile deepspeed_enable_sleep disable_ds_ckpt disable_fast_tokenizer ds_tensor_parallel_size dual_clip
    dynamic_filtering dynamic_filtering_reward_range ema_beta enable_ema enable_prefix_caching
    enable_vllm_is_correction enforce_eager entropy_loss_coef eps_clip eps_clip_low_high eval_dataset
    eval_n_samples_per_prompt eval_split eval_steps eval_temperature flash_attn freeze_visual_encoder
    freezing_actor_steps full_determinism gamma generate_max_len grad_accum_dtype gradient_checkpointing
    gradient_checkpointing_use_reentrant image_key init_kl_coef input_key input_template kl_estimator kl_horizon
    kl_target l2 label_key lambd load_checkpoint load_in_4bit local_rank logging_steps lora_alpha lora_dropout
    lora_rank lr_scheduler lr_warmup_ratio max_ckpt_mem max_ckpt_num max_epochs max_images_per_prompt max_len
    max_new_tokens max_norm max_samples max_tokens_per_gpu micro_rollout_batch_size micro_train_batch_size
    n_samples_per_prompt no_advantage_std_norm normalize_reward num_episodes overlap_comm overlong_buffer_len
    overlong_penalty_factor packing_samples param_dtype partial_rollout perf policy_loss_type pretrain pretrain_data
    pretrain_data_probs pretrain_split prompt_data prompt_data_probs prompt_max_len prompt_split ptx_coef
    ref_num_gpus_per_node ref_num_nodes ref_reward_offload remote_rm_url reward_clip_range reward_num_gpus_per_node
    reward_num_nodes reward_pretrain ring_attn_size ring_head_stride rollout_batch_size rollout_max_tokens_per_gpu
    save_hf_ckpt save_path save_steps save_value_network seed stop_properly_penalty_coef target_modules temperature
    top_p torch_compile train_batch_size train_max_tokens_per_gpu universal_ckpt use_ds_universal_ckpt
    use_dynamic_batch use_icepop use_kl_estimator_k3 use_kl_loss use_liger_kernel use_linger_kernel use_ms
    use_tensorboard use_wandb value_clip value_head_prefix vllm_enable_sleep vllm_generate_batch_size
    vllm_gpu_memory_utilization vllm_is_correction_type vllm_is_truncated_threshold vllm_num_engines
    vllm_sync_backend vllm_sync_with_ray vllm_tensor_parallel_size wandb_group wandb_org wandb_project
    wandb_run_name zero_stage zpg
""".split())

DOTTED: frozenset[str] = frozenset("""
    actor.adam.betas actor.adam.eps actor.adam.lr actor.adam.weight_decay actor.aux_loss_coef actor.dual_clip
    actor.entropy_coef actor.eps_clip actor.eps_clip_low_high actor.freeze_visual_encoder
    actor.gradient_checkpointing_enable actor.gradient_checkpointing_reentrant actor.lr_scheduler
    actor.lr_warmup_ratio actor.max_norm actor.min_lr_ratio actor.model_name_or_path actor.muon.lr
    actor.muon.momentum actor.muon.nesterov actor.muon.no_nesterov actor.muon.ns_steps actor.num_gpus_per_node
    actor.num_nodes actor.optim actor.policy_loss_type algo.advantage.estimator algo.advantage.gamma
    algo.advantage.is_correction_enable algo.advantage.is_correction_threshold algo.advantage.is_correction_type
    algo.advantage.lambd algo.advantage.no_std_norm algo.dynamic_filtering_enable algo.dynamic_filtering_range
    algo.kl.estimator algo.kl.horizon algo.kl.init_coef algo.kl.target algo.kl.use_loss ckpt.best_metric_key
    ckpt.disable_ds ckpt.load_enable ckpt.max_mem ckpt.max_num ckpt.output_dir ckpt.path ckpt.save_hf
    ckpt.save_steps critic.adam.betas critic.adam.eps critic.adam.lr critic.adam.weight_decay critic.freezing_steps
    critic.lr_scheduler critic.lr_warmup_ratio critic.max_norm critic.min_lr_ratio critic.model_name_or_path
    critic.muon.lr critic.muon.momentum critic.muon.nesterov critic.muon.no_nesterov critic.muon.ns_steps
    critic.num_gpus_per_node critic.num_nodes critic.optim critic.save_value_network critic.value_clip
    data.apply_chat_template data.dataloader_num_workers data.disable_fast_tokenizer data.image_key data.input_key
    data.input_template data.label_key data.max_images_per_prompt data.max_len data.max_samples data.prompt_dataset
    data.prompt_probs data.prompt_split ds.adam_offload ds.attn_implementation ds.deepcompile ds.enable_sleep
    ds.experts_implementation ds.grad_accum_dtype ds.load_in_4bit ds.lora.alpha ds.lora.dropout ds.lora.rank
    ds.lora.target_modules ds.overlap_comm ds.packing_samples ds.param_dtype ds.ring_attn_head_stride
    ds.ring_attn_size ds.tensor_parallel_size ds.use_liger_kernel ds.use_universal_ckpt ds.value_head_prefix
    ds.zero_stage ds.zpg eval.dataset eval.n_samples_per_prompt eval.split eval.steps eval.temperature local_rank
    logger.logging_steps logger.tensorboard_dir logger.wandb.group logger.wandb.key logger.wandb.org
    logger.wandb.project logger.wandb.run_name ref.num_gpus_per_node ref.num_nodes ref.offload reward.clip_range
    reward.model_name_or_path reward.normalize_enable reward.num_gpus_per_node reward.num_nodes reward.offload
    reward.overlong_buffer_len reward.overlong_penalty_factor reward.remote_url reward.stop_properly_penalty_coef
    rollout.batch_size rollout.max_new_tokens rollout.max_tokens_per_gpu rollout.micro_batch_size
    rollout.n_samples_per_prompt rollout.temperature rollout.top_p rollout.vllm_generate_batch_size
    train.agent_func_path train.async_enable train.async_queue_size train.batch_size train.colocate_actor_ref
    train.colocate_all train.colocate_critic_reward train.dynamic_batch_enable train.ema_beta train.enable_ema
    train.full_determinism_enable train.max_epochs train.max_tokens_per_gpu train.micro_batch_size
    train.num_episodes train.partial_rollout_enable train.seed use_ms vllm.enable_prefix_caching vllm.enable_sleep
    vllm.enforce_eager vllm.gpu_memory_utilization vllm.num_engines vllm.sync_backend vllm.sync_with_ray
    vllm.tensor_parallel_size
""".split())

TO_FLAT: dict[str, str] = {
    "rollout.batch_size": "rollout_batch_size", "rollout.n_samples_per_prompt": "n_samples_per_prompt",
    "train.batch_size": "train_batch_size", "train.micro_batch_size": "micro_train_batch_size",
    "rollout.micro_batch_size": "micro_rollout_batch_size",
    "train.max_epochs": "max_epochs", "data.max_len": "max_len", "rollout.max_new_tokens": "max_new_tokens",
    "algo.advantage.estimator": "advantage_estimator", "algo.kl.init_coef": "init_kl_coef",
    "algo.kl.use_loss": "use_kl_loss", "algo.dynamic_filtering_enable": "dynamic_filtering",
    "actor.num_nodes": "actor_num_nodes", "actor.num_gpus_per_node": "actor_num_gpus_per_node",
    "ref.num_nodes": "ref_num_nodes", "ref.num_gpus_per_node": "ref_num_gpus_per_node",
    "reward.num_nodes": "reward_num_nodes", "reward.num_gpus_per_node": "reward_num_gpus_per_node",
    "critic.num_nodes": "critic_num_nodes", "critic.num_gpus_per_node": "critic_num_gpus_per_node",
    "vllm.num_engines": "vllm_num_engines", "vllm.tensor_parallel_size": "vllm_tensor_parallel_size",
    "vllm.gpu_memory_utilization": "vllm_gpu_memory_utilization", "vllm.enable_sleep": "vllm_enable_sleep",
    "vllm.enable_prefix_caching": "enable_prefix_caching", "vllm.enforce_eager": "enforce_eager", "ds.zero_stage": "zero_stage", "ds.adam_offload": "adam_offload",
    "ds.ring_attn_size": "ring_attn_size", "ds.enable_sleep": "deepspeed_enable_sleep", "ds.packing_samples": "packing_samples",
    "ds.tensor_parallel_size": "ds_tensor_parallel_size", "ds.lora.rank": "lora_rank", "ds.lora.target_modules": "target_modules", "actor.gradient_checkpointing_enable": "gradient_checkpointing",
    "train.colocate_all": "colocate_all_models", "train.colocate_actor_ref": "colocate_actor_ref",
    "train.colocate_critic_reward": "colocate_critic_reward", "train.async_enable": "async_train",
    "train.async_queue_size": "async_queue_size", "train.partial_rollout_enable": "partial_rollout",
    "actor.model_name_or_path": "pretrain", "reward.model_name_or_path": "reward_pretrain",
    "reward.remote_url": "remote_rm_url", "train.agent_func_path": "agent_func_path",
    "critic.model_name_or_path": "critic_pretrain", "train.dynamic_batch_enable": "use_dynamic_batch",
    "train.max_tokens_per_gpu": "train_max_tokens_per_gpu", "rollout.max_tokens_per_gpu": "rollout_max_tokens_per_gpu",
}
"""Dotted name -> the flat name of the same option (each checked in both lists above)."""

FROM_FLAT: dict[str, str] = {v: k for k, v in TO_FLAT.items()}


class Names:
    """The read options as the user spells them: flat names, or their dotted names under the dotted style."""

    def __init__(self, dotted: bool) -> None:
        self.dotted = dotted

    def __call__(self, k: str) -> str:
        return "--" + (FROM_FLAT.get(k, k) if self.dotted else k)


__all__ = ["BOTH", "DOTTED", "DOTTED_VERSION", "FLAT", "FLAT_VERSION", "FROM_FLAT", "TO_FLAT", "Names"]
