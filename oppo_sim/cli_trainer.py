"""The trainer's options of ``oppo-sim run/compare/sweep/check`` (``SimConfig.trainer``,
:mod:`oppo_sim.hw.costs.trainer_layout`): the backend and its parallelism in Megatron's and verl's own names, the
memory it may use, the optimizer on the CPU, FSDP's shard group and how a step's sequences are dealt to the ranks."""

from __future__ import annotations

import argparse

from oppo_sim.cliargs import nonneg_float, positive
from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.trainer_layout import BALANCE_ORDERS, MOE_DISPATCHERS, ROUTER_DTYPES, TRAIN_BACKENDS, TrainerLayout
from oppo_sim.hw.models.lora import LORA_BASE_DTYPES, LORA_SYNCS, LoRA

__all__ = ["add_lora_args", "add_trainer_layout_args", "lora_of", "trainer_layout"]


def add_lora_args(p) -> None:
    """LoRA (``TrainerLayout.lora``, :mod:`oppo_sim.hw.models.lora`): the rank, the adapted linears, what a sync moves."""
    p.add_argument("--lora-rank", type=int, default=0, metavar="R",
                   help="train rank-R LoRA adapters on frozen weights (verl model.lora_rank, OpenRLHF --lora_rank, NeMo RL "
                        "lora_cfg.dim / peft.dim): gradients and Adam state of the adapters only, no frozen weight's "
                        "gradient (default %(default)s: every weight trains)")
    p.add_argument("--lora-targets", default="all-linear", metavar="MODULES",
                   help="the adapted linears: all-linear, or Hugging Face module names such as q_proj,v_proj (verl / "
                        "PEFT target_modules) (default %(default)s)")
    p.add_argument("--lora-base-dtype", choices=tuple(LORA_BASE_DTYPES), default="bf16",
                   help="the frozen weights' dtype under LoRA: fp32 as verl's FSDP actor holds them unless its "
                        "fsdp_config.model_dtype says bf16 (memory only) (default %(default)s)")
    p.add_argument("--lora-sync", choices=LORA_SYNCS, default="merged",
                   help="what a weight sync hands the engines under LoRA: merged = the whole merged weights (OpenRLHF, "
                        "NeMo RL), adapter = the adapters alone, the base weights staying in the engine (verl) "
                        "(default %(default)s)")


def lora_of(a) -> LoRA | None:
    """``TrainerLayout.lora`` from the parsed options: None at rank 0."""
    rank = getattr(a, "lora_rank", 0)
    if rank < 0:
        raise ConfigError(f"--lora-rank must be >= 0 (0: no LoRA), got {rank}")
    return LoRA(rank, getattr(a, "lora_targets", "all-linear"), getattr(a, "lora_sync", "merged"),
                getattr(a, "lora_base_dtype", "bf16")) if rank else None


def add_trainer_layout_args(p) -> None:
    """The trainer's backend and model parallelism (``SimConfig.trainer``, ``oppo_sim.hw.costs.trainer_layout``)."""
    p.add_argument("--train-memory-fraction", type=positive(float), default=0.9, metavar="FRACTION",
                   help="share of each GPU the trainer and scoring models may use where the engine is not running (it "
                        "sleeps, or is on other GPUs); the engine's own share is --gpu-memory-utilization "
                        "(default %(default)s: the rest is CUDA context, NCCL buffers, fragmentation)")
    p.add_argument("--train-backend", choices=TRAIN_BACKENDS, default="fsdp",
                   help="the trainer: fsdp (FSDP / DeepSpeed ZeRO data parallel; verl actor.strategy=fsdp, OpenRLHF) or "
                        "megatron (Megatron-Core TP/PP/CP/EP; verl ppo_megatron_trainer, NeMo RL megatron_cfg) "
                        "(default %(default)s)")
    p.add_argument("--train-tp", type=positive(), default=1,
                   help="megatron tensor_model_parallel_size, with sequence parallelism (default %(default)s)")
    p.add_argument("--pp", type=positive(), default=1, help="megatron pipeline_model_parallel_size (default %(default)s)")
    p.add_argument("--vpp", type=positive(), default=1,
                   help="megatron virtual_pipeline_model_parallel_size: model chunks per pipeline rank (default %(default)s: none)")
    p.add_argument("--cp", type=positive(), default=1, help="megatron context_parallel_size (default %(default)s)")
    p.add_argument("--first-stage-layers", type=positive(), default=None, metavar="N",
                   help="megatron num_layers_in_first_pipeline_stage: an uneven pipeline split, the rest even over the "
                        "stages between (default: an even split)")
    p.add_argument("--last-stage-layers", type=positive(), default=None, metavar="N",
                   help="megatron num_layers_in_last_pipeline_stage (default: an even split)")
    p.add_argument("--account-for-embedding-in-pipeline-split", action="store_true", dest="embedding_in_split",
                   help="megatron's switch: the embedding counts as a layer, the first pipeline rank builds one decoder "
                        "layer less (default: off)")
    p.add_argument("--account-for-loss-in-pipeline-split", action="store_true", dest="loss_in_split",
                   help="megatron's switch: the output layer and loss count as a layer, the last pipeline rank builds one "
                        "decoder layer less (default: off)")
    p.add_argument("--etp", type=positive(), default=None, help="megatron expert_tensor_parallel_size: each routed "
                   "expert split over N ranks (default: --train-tp, Megatron-Core's; RL MoE recipes set 1)")
    p.add_argument("--distributed-optimizer", action=argparse.BooleanOptionalAction, default=True,
                   help="megatron use_distributed_optimizer: Adam state sharded over the data-parallel ranks (default on)")
    p.add_argument("--moe-dispatcher", choices=MOE_DISPATCHERS, default="alltoall",
                   help="megatron moe_token_dispatcher_type, how tokens reach their experts under --ep: alltoall "
                        "(verl's), allgather (Megatron-Core's and NeMo RL's default: more bytes where ep exceeds the "
                        "top-k), flex (DeepEP, priced as alltoall) (default %(default)s)")
    p.add_argument("--moe-router-dtype", choices=tuple(ROUTER_DTYPES), default="model",
                   help="megatron moe_router_dtype: the allgather dispatcher reduce-scatters the experts' output in it "
                        "(NeMo RL's fp64: four times the bf16 bytes); model = Megatron's None, the model's dtype "
                        "(default %(default)s)")
    p.add_argument("--balance-order", choices=BALANCE_ORDERS, default="length",
                   help="how --balance-batch orders each rank's share before the mini-batch split: length (verl from "
                        "0.6.1: by length, short ones at both ends) or batch (earlier verl: batch order) "
                        "(default %(default)s)")
    p.add_argument("--optimizer-offload", type=nonneg_float, default=0.0, metavar="FRACTION",
                   help="share of the optimizer state whose Adam step runs on the host CPU: 1 = DeepSpeed "
                        "offload_optimizer (OpenRLHF --adam_offload), Megatron optimizer_offload_fraction with "
                        "optimizer_cpu_offload (default %(default)s: Adam on the GPUs)")
    p.add_argument("--fsdp-size", type=int, default=0, metavar="N",
                   help="fsdp: verl fsdp_config.fsdp_size, ranks of one shard group - hybrid sharding, the state "
                        "sharded inside groups of N and replicated across them (default %(default)s: -1 / 0, the whole pool)")
    p.add_argument("--balance-batch", action=argparse.BooleanOptionalAction, default=True,
                   help="verl trainer.balance_batch: deal each step's sequences to the data-parallel ranks balanced by "
                        "tokens (default on, verl's); --no-balance-batch: contiguous chunks in batch order")
    p.add_argument("--free-grads", action=argparse.BooleanOptionalAction, default=False,
                   help="the trainer frees its gradients after each update (verl's FSDP actor: zero_grad() at the end of "
                        "update_policy), so where its state stays on the GPUs they take turns with the engine "
                        "(default off: held)")
    add_lora_args(p)


def trainer_layout(a) -> TrainerLayout:
    """``SimConfig.trainer`` from the parsed options (defaults where a command lacks them)."""
    return TrainerLayout(backend=getattr(a, "train_backend", "fsdp"), tp=getattr(a, "train_tp", 1), pp=getattr(a, "pp", 1),
                         vpp=getattr(a, "vpp", 1), cp=getattr(a, "cp", 1), etp=getattr(a, "etp", None),
                         first_stage_layers=getattr(a, "first_stage_layers", None),
                         last_stage_layers=getattr(a, "last_stage_layers", None),
                         embedding_in_split=getattr(a, "embedding_in_split", False),
                         loss_in_split=getattr(a, "loss_in_split", False),
                         distributed_optimizer=getattr(a, "distributed_optimizer", True),
                         balance_batch=getattr(a, "balance_batch", True),
                         optimizer_offload=getattr(a, "optimizer_offload", 0.0),
                         balance_order=getattr(a, "balance_order", "length"), fsdp_size=getattr(a, "fsdp_size", 0),
                         moe_dispatcher=getattr(a, "moe_dispatcher", "alltoall"),
                         moe_router_dtype=getattr(a, "moe_router_dtype", "model"), lora=lora_of(a),
                         free_grads=getattr(a, "free_grads", False))
