"""The record of one published RL run (``PublishedRun``) and its published stage times (``Stages``): the data
type of ``published_runs_data`` and ``published_runs_nemo``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Stages:
    """Published per-stage times of one step (None: not published), the framework whose timers published them
    (``timers``: a key of ``oppo_sim.frameworks.stages.FRAMEWORK_TIMERS``, which says what each timer covers
    and which timers make the generation / scoring / training columns) and what the source calls them."""

    generation_s: float | None = None
    scoring_s: float | None = None
    training_s: float | None = None
    timers: str = "trl"
    definition: str = ""


@dataclass(frozen=True)
class PublishedRun:
    """One published run, as its framework ran it. ``placement``: ``colocated`` (every role time-shares all
    devices), ``paper`` (N-1 generate+train, 1 scores) or ``pools:gen=G,train=T,score=S`` (generation on G
    devices, actor/critic training and the actor's log-probs on T, the frozen reward and reference on S; without
    ``score``, those on T as well)."""

    key: str
    framework: str
    source: str
    version: str
    model: str
    hf_model: str
    gpu: str
    devices: int
    nodes: int
    placement: str
    batch: int  # prompts per step
    n: int  # responses per prompt
    max_prompt: int
    max_response: int  # with total_cap: the cap on prompt + response (NeMo RL's max_total_sequence_length)
    algorithm: str
    reward: str  # "rule" (a verifier) or the reward model's table id
    kl: bool  # a frozen reference model for a KL term
    tp: int  # tensor parallelism of each generation replica
    published_step_s: float
    ppo_epochs: int = 1
    minibatches: int = 1  # optimizer steps per epoch (samples per step / the trainer's global batch)
    gpu_memory_utilization: float = 0.9
    engine: str = "continuous"  # continuous (vLLM/SGLang) or static (Hugging Face generate)
    gen_batch: int | None = None  # static engine: rows per generate call
    max_num_seqs: int | None = None  # continuous engine (vLLM): sequences per iteration (None: oppo-sim's default)
    max_num_batched_tokens: int | None = None  # continuous engine (vLLM): tokens per iteration (None: default)
    enforce_eager: bool = False  # vLLM without CUDA graphs, where the script (or its framework's default then) says so
    vllm_version: str = "0.11.0"  # the vLLM release whose eager ops price enforce_eager, where the source names one
    colocate: str = "sleep"  # generation sharing GPUs: "sleep" (vLLM sleep/wake, trainer offloaded) or "resident"
    sleep_level: int = 1  # vLLM sleep level where the engine sleeps (verl, OpenRLHF and NeMo RL call level 1)
    total_cap: bool = False  # max_response caps prompt + response together (a response gets the cap less its prompt)
    recompute: str | None = None  # "full" where the source turns activation/gradient checkpointing on
    sp: int = 1  # trainer sequence parallelism (verl ulysses_sequence_parallel_size)
    ep: int = 1  # trainer expert parallelism (Megatron expert_model_parallel_size); generation keeps vLLM's TP
    train_backend: str = "fsdp"  # the trainer: fsdp or megatron (with train_tp / pp / cp where the source states them)
    zero: int | None = None  # fsdp: the ZeRO stage the source states (verl's FSDP full-shard: 3); None: the memory plan's
    fsdp_size: int = 0  # fsdp: verl's fsdp_config.fsdp_size where the script sets it (hybrid sharding; 0: the whole pool)
    train_tp: int = 1  # Megatron tensor_model_parallel_size (as the source states it)
    pp: int = 1  # Megatron pipeline_model_parallel_size
    cp: int = 1  # Megatron context_parallel_size
    etp: int | None = None  # Megatron expert_tensor_parallel_size (None: Megatron-Core's default, train_tp)
    stage_layers: tuple[int | None, int | None] = (None, None)  # Megatron num_layers_in_first / last_pipeline_stage
    moe_dispatcher: str = "alltoall"  # Megatron moe_token_dispatcher_type under ep > 1 (NeMo RL's default: allgather)
    moe_router_dtype: str = "model"  # Megatron moe_router_dtype (NeMo RL's default fp64: the allgather combine's dtype)
    optimizer_offload: float = 0.0  # share of the Adam state stepped on the CPU (OpenRLHF --adam_offload, Megatron's fraction)
    reference_on_host: bool = False  # NeMo RL: the reference in pinned host memory, swapped in for its pass
    optimizer_move: str = "pinned"  # the offloaded optimizer state's copy: pinned, or pageable (NeMo RL's move_optimizer)
    refit_buffers: int = 1  # weight sync: 1 tensor by tensor, 2 NeMo RL's double-buffered refit
    refit_group: str = "rank0"  # a sync between pools: "rank0" (OpenRLHF's group), "all" (NeMo RL's, verl's)
    padded_batches: bool = False  # scoring and training pad every sequence to the batch's longest (no packing)
    padded_micro_batches: bool = False  # each counted micro-batch padded to its longest (OpenRLHF before packing)
    micro_batch_tokens: int | None = None  # packed micro-batches of training (NeMo RL train_mb_tokens, verl's dynamic bsz)
    logprob_micro_batch_tokens: int | None = None  # ... of the forward-only passes (NeMo RL logprob_mb_tokens)
    micro_batch_size: int | None = None  # or a fixed count of sequences (verl ppo_micro_batch_size_per_gpu, OpenRLHF's)
    logprob_micro_batch_size: int | None = None  # ... of the forward-only passes (OpenRLHF's micro rollout batch)
    policy: str = "baseline"  # the framework's schedule: baseline (synchronous) or async (generation overlaps training)
    staleness: int = 1  # async: policy versions a trajectory may lag (NeMo RL max_trajectory_age_steps)
    in_flight: bool = False  # async: weights refit in flight (NeMo RL in_flight_weight_updates with its async engine)
    balance_order: str = "batch"  # a rank's share before the mini-batch split: every run here predates verl's length
    #                               order (verl PR #3605, 2025-10-23, release 0.6.1); NeMo RL and OpenRLHF do not use it
    mean_response: float | None = None  # published mean response length (tokens)
    assumed_mean_response: float | None = None  # used when no mean is published
    mean_prompt: float | None = None  # published, derived (prompt_note says how) or assumed
    response_sigma: float = 0.7  # log-space spread of the synthetic response lengths
    prompt_sigma: float | None = None  # log-space spread of the synthetic prompt lengths (None: published_runs_sim's)
    trace: tuple[str, ...] | None = None  # named traces (the first found is used) instead of the synthetic one
    tokens_per_s_per_gpu: float | None = None  # NeMo RL: published throughput, for the prompt length
    stages: Stages = field(default_factory=Stages)
    prompt_note: str = ""
    response_note: str = ""
    notes: str = ""
