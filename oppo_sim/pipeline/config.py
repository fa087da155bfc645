"""Typed, frozen configuration of a simulated RLHF pipeline: placement, models, PPO shape, engine."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import TRAINER_PASSES, Placement, check_after_update, paper_placement
from oppo_sim.core.policies import MAX_STEP_PROMPTS
from oppo_sim.engine.factory import EngineKind
from oppo_sim.engine.request import EngineConfig
from oppo_sim.engine.static import StaticConfig, StaticCostParams
from oppo_sim.hw.costs.eager import check_host_op_s, host_op_seconds
from oppo_sim.hw.costs.expert_parallel import check_expert_parallel
from oppo_sim.hw.models.heads import check_heads_split
from oppo_sim.hw.devices.hardware import Hardware, get_hardware
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.hw.memory.pool_memory import COLOCATE_MODES
from oppo_sim.hw.models.lookup import ModelSpec, get_model
from oppo_sim.hw.fitting.overheads import ExecutorOverheads
from oppo_sim.hw.costs.sleepwake import DEFAULT_SLEEP_LEVEL, OPTIMIZER_MOVES, check_sleep_level
from oppo_sim.hw.costs.sync import SYNC_MECHANISMS, check_refit_buffers, check_refit_group
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.pipeline.padding import check_padded_roles
from oppo_sim.traces.synthetic import RewardCurve
from oppo_sim.traces.trace import DEFAULT_MAX_PROMPT, DEFAULT_MAX_RESPONSE, Trace


def _model(m: str | ModelSpec) -> ModelSpec:
    return m if isinstance(m, ModelSpec) else get_model(m)


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation needs besides the trace and the policy. Defaults: the paper's setup
    (Qwen2.5-7B actor, 7B reward model, batch 112, 8 GPUs: 7 generate+train, 1 scores)."""

    batch: int = 112  # prompts per step, B (a step trains B x algorithm.n responses)
    steps: int = 20
    seed: int = 0
    gpu: str | Hardware = "h200"
    actor: str | ModelSpec = "qwen2.5-7b"
    reward: str | ModelSpec = "qwen2.5-7b"
    critic: str | ModelSpec | None = None  # default: same shape as the reward model (TRL initialises it so)
    placement: Placement = field(default_factory=paper_placement)
    engine: EngineConfig = field(default_factory=EngineConfig)
    engine_kind: EngineKind = EngineKind.CONTINUOUS  # continuous (vLLM-style) or static (TRL generate, calls of C)
    static: StaticConfig = field(default_factory=StaticConfig)  # the static engine's mini-batch and call size
    static_cost: StaticCostParams = field(default_factory=StaticCostParams)  # its per-call overhead
    eager_host_op_s: float | None = None  # host seconds per eagerly issued op (vLLM eager, Megatron; None: the x86
    #                                       EAGER_HOST_OP_S on each pool's host; 0: a profile's fits hold them)
    ppo_epochs: int = 4  # TRL PPOConfig.num_ppo_epochs
    minibatches: int = 1  # TRL PPOConfig.num_mini_batches
    max_response: int | None = DEFAULT_MAX_RESPONSE
    max_prompt: int | None = DEFAULT_MAX_PROMPT  # prompt cap (None: none); longer prompts filtered, as verl does
    truncate_prompt: bool = False  # cut prompts over max_prompt to it instead of filtering them
    contention: float = 0.0  # extra slowdown when two jobs share a device (0 = ideal time slicing)
    scorer_max_tokens: int = 65536  # tokens per scorer forward batch
    stream_batching: bool = True  # batch streamed chunks of several sequences into one forward (False: one each)
    padded_batches: bool = False  # whole-sequence scoring and training pad every sequence to the batch's longest
    padded_micro_batches: bool = False  # each counted micro-batch padded to its longest (OpenRLHF before packing)
    padded_roles: tuple[str, ...] = ()  # roles whose passes run padded to max_prompt + max_response (verl without
    #                                     use_remove_padding: its critic and reward model by default; pipeline.padding)
    overheads: ExecutorOverheads = field(default_factory=ExecutorOverheads)  # the driver's own time (0: ideal driver)
    reward_curve: RewardCurve = field(default_factory=RewardCurve)
    trace_offset: int = 0  # first trace row used (trace step, with a step column): oppo_sim.traces.rowmap
    train_memory: TrainMemoryConfig = field(default_factory=TrainMemoryConfig)  # ZeRO stage, recompute (None = auto)
    colocate: str = "sleep"  # generation sharing GPUs: "sleep" (engine and trainer take turns) or "resident"
    sleep_level: int = DEFAULT_SLEEP_LEVEL  # vLLM sleep level where the engine sleeps (oppo_sim.hw.costs.sleepwake)
    offload_train_state: bool = True  # colocate="sleep": the trainer's state (and frozen weights) go to host while
    #                                   the engine generates (verl param/optimizer_offload, OpenRLHF --deepspeed_enable_sleep)
    optimizer_move: str = "pinned"  # how that state's optimizer part crosses the host link: "pinned" (verl, DeepSpeed) or
    #                                 "pageable" (NeMo RL's move_optimizer: .to("cpu") per tensor; hw.costs.sleepwake)
    nodes: int = 1  # nodes the devices are spread over (equal shares, pools in order): with the GPU's
    #                 scale-up domain (gpu_table.domain_gpus) it picks the sync path
    sync: str = "auto"  # weight sync: auto (ipc colocated, nvlink in a scale-up domain, network across), ipc, nvlink, network, host
    algorithm: Algorithm = field(default_factory=Algorithm)  # ppo (critic, reward model, KL) unless told otherwise
    expert_parallel: int = 1  # training: a MoE actor's experts over this many ranks (Megatron/verl expert_model_parallel_size)
    trainer: TrainerLayout = field(default_factory=TrainerLayout)  # fsdp or megatron, and its tp/pp/vpp/cp
    train_memory_fraction: float = 0.9  # share of a GPU the trainer and scorers may use where the engine is not
    #                                     running (the rest: CUDA context, NCCL buffers, fragmentation)
    refit_buffers: int = 1  # weight sync: 1 tensor by tensor (verl, OpenRLHF), 2 NeMo RL's double-buffered refit
    refit_group: str = "rank0"  # the NCCL group a sync between pools broadcasts over: "rank0" (the trainer's rank 0
    #                             and the engines: OpenRLHF) or "all" (every trainer and engine rank: NeMo RL, verl)
    reference_on_host: bool = False  # NeMo RL: the reference's weights stay in pinned host memory and are swapped
    #                                  with the policy's for each reference pass (memory_plan.reference_swapped)
    reference_in_actor: bool = False  # verl under LoRA (ref_in_actor): the reference is the actor with its adapters off,
    #                                   no weights of its own (needs trainer.lora)
    after_update: tuple[str, ...] = TRAINER_PASSES  # the training loop's scoring passes: step t's wait for step t-1's
    #                                               update and weight sync, and run one after the other on a pool;
    #                                               oppo's train worker's own by default, every pass in a framework's

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.batch <= MAX_STEP_PROMPTS, f"batch must be in [1, {MAX_STEP_PROMPTS:,}] prompts, got {self.batch}"),
            (self.seed >= 0, f"seed must be >= 0, got {self.seed}"),
            (self.steps >= 1, f"steps must be >= 1, got {self.steps}"),
            (self.ppo_epochs >= 1, f"ppo_epochs must be >= 1, got {self.ppo_epochs}"),
            (1 <= self.minibatches <= self.sequences,
             f"minibatches must be in [1, batch x n = {self.sequences}], got {self.minibatches}"),
            (self.max_response is None or self.max_response >= 1, f"max_response must be >= 1, got {self.max_response}"),
            (self.max_prompt is None or (isinstance(self.max_prompt, int) and not isinstance(self.max_prompt, bool)
                                         and self.max_prompt >= 1), f"max_prompt must be an integer >= 1 or None, got {self.max_prompt!r}"),
            (isinstance(self.truncate_prompt, bool), f"truncate_prompt must be a bool, got {self.truncate_prompt!r}"),
            (self.optimizer_move in OPTIMIZER_MOVES,
             f"optimizer_move must be {' or '.join(OPTIMIZER_MOVES)}, got {self.optimizer_move!r}"),
            (isinstance(self.offload_train_state, bool),
             f"offload_train_state must be a bool, got {self.offload_train_state!r}"),
            (isinstance(self.reference_on_host, bool), f"reference_on_host must be a bool, got {self.reference_on_host!r}"),
            (isinstance(self.reference_in_actor, bool), f"reference_in_actor must be a bool, got {self.reference_in_actor!r}"),
            (isinstance(self.contention, (int, float)) and math.isfinite(self.contention) and 0 <= self.contention <= 100,
             f"contention must be a number in [0, 100] (a job sharing a device runs up to 1 + contention times slower), "
             f"got {self.contention!r}"),
            (isinstance(self.train_memory_fraction, (int, float)) and 0 < self.train_memory_fraction <= 1,
             f"train_memory_fraction must be in (0, 1], got {self.train_memory_fraction!r}"),
            (self.scorer_max_tokens >= 1, f"scorer_max_tokens must be >= 1, got {self.scorer_max_tokens}"),
            (self.trace_offset >= 0, f"trace_offset must be >= 0, got {self.trace_offset}"),
            (isinstance(self.train_memory, TrainMemoryConfig),
             f"train_memory must be a TrainMemoryConfig, got {type(self.train_memory).__name__}"),
            (self.colocate in COLOCATE_MODES, f"colocate must be one of {', '.join(COLOCATE_MODES)}, got {self.colocate!r}"),
            (isinstance(self.nodes, int) and not isinstance(self.nodes, bool)
             and 1 <= self.nodes <= self.placement.total_devices,
             f"nodes must be an integer in [1, {self.placement.total_devices}] (the devices), got {self.nodes!r}"),
            (self.sync in ("auto", *SYNC_MECHANISMS), f"sync must be one of auto, {', '.join(SYNC_MECHANISMS)}, got {self.sync!r}"),
            (self.sync != "ipc" or self.placement.generate == self.placement.train,
             f"sync ipc hands weights over on the trainer's own GPUs: generation (pool {self.placement.generate!r}) "
             f"must run on the training pool ({self.placement.train!r})"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        check_sleep_level(self.sleep_level)
        check_host_op_s(self.eager_host_op_s)
        object.__setattr__(self, "engine_kind", EngineKind.parse(self.engine_kind))
        if self.engine.enforce_eager and self.engine_kind == EngineKind.STATIC:
            raise ConfigError("engine enforce_eager is vLLM's (the continuous engine); the static engine prices Hugging "
                              "Face generate's eager host time itself")
        if self.reward_curve.seed is None:  # the synthetic rewards follow the run's seed
            object.__setattr__(self, "reward_curve", replace(self.reward_curve, seed=self.seed))
        self._check_pools()
        self._check_scoring()
        # resolve names now so a typo fails at construction with a one-line error
        actor = self.models()["train"]
        self.hardware_of(self.placement.generate)
        check_expert_parallel(actor, self.expert_parallel, self.placement.pool(self.placement.train).devices)
        self._check_trainer(actor)

    def _check_trainer(self, actor: ModelSpec) -> None:
        if not isinstance(self.trainer, TrainerLayout):
            raise ConfigError(f"trainer must be a TrainerLayout, got {type(self.trainer).__name__}")
        self.trainer.check_devices(self.placement.pool(self.placement.train).devices)
        self.trainer.check_experts(self.placement.pool(self.placement.train).devices, self.expert_parallel)
        self.trainer.check_stages(actor.layers, actor.pipeline_layers)
        check_heads_split(actor, self.engine.tp, "generation tensor parallelism (--tp)")
        if self.trainer.megatron:
            check_heads_split(actor, self.trainer.tp, "the trainer's tensor parallelism (--train-tp)")
        if self.trainer.megatron and self.train_memory.sequence_parallel > 1:
            raise ConfigError(f"--sp {self.train_memory.sequence_parallel} is FSDP's Ulysses sequence parallelism; "
                              f"under --train-backend megatron sequences are split with --cp")
        if self.engine.enable_expert_parallel and not actor.moe:
            raise ConfigError(f"expert parallelism (--ep) needs a mixture-of-experts model; '{actor.id}' is dense")

    def _check_scoring(self) -> None:
        object.__setattr__(self, "padded_roles", check_padded_roles(self.padded_roles))
        object.__setattr__(self, "after_update", check_after_update(self.after_update))
        if not isinstance(self.padded_micro_batches, bool):
            raise ConfigError(f"padded_micro_batches must be a bool, got {self.padded_micro_batches!r}")
        if self.padded_roles and self.max_prompt == DEFAULT_MAX_PROMPT:
            raise ConfigError(f"padded_roles pads every sequence to max_prompt + max_response: give the run's prompt cap "
                              f"(--max-prompt, verl data.max_prompt_length); the default {DEFAULT_MAX_PROMPT:,} stands for no cap")

    def _check_pools(self) -> None:
        gen = self.placement.pool(self.placement.generate)
        if gen.devices % self.engine.tp:
            raise ConfigError(
                f"generation pool '{gen.name}' has {gen.devices} devices, not a multiple of tensor parallelism {self.engine.tp}"
            )
        check_refit_buffers(self.refit_buffers)
        check_refit_group(self.refit_group)
        if self.reference_on_host and self.placement.pool_of("reference") != self.placement.train:
            raise ConfigError("reference_on_host swaps the reference with the policy on the trainer's GPUs (NeMo RL's "
                              "policy worker): the reference must run on the training pool")
        if self.reference_in_actor and (self.trainer.lora is None or self.reference_on_host
                                        or self.placement.pool_of("reference") != self.placement.train):
            raise ConfigError("reference_in_actor runs the reference as the actor with its LoRA adapters off (verl's "
                              "ref_in_actor): it needs --lora-rank, the reference on the training pool, and not "
                              "--reference-on-host")

    def trace_limits(self) -> dict:
        """The caps every trace of this run gets (``load_trace`` / ``Trace.limited`` keywords)."""
        return {"max_response": self.max_response, "max_prompt": self.max_prompt, "truncate_prompt": self.truncate_prompt}

    def limit(self, trace: Trace) -> Trace:
        """``trace`` with this run's response and prompt caps (``Trace.limited``; unchanged if applied already)."""
        return trace.limited(**self.trace_limits())

    @property
    def sequences(self) -> int:
        """Sequences one step trains: B prompts x n responses each."""
        return self.batch * self.algorithm.n

    def models(self) -> dict[str, ModelSpec]:
        """The model of every role a placement names (a role the algorithm does not run keeps its entry, so a
        placement stays valid across algorithms; :meth:`scoring_roles` and :meth:`trained` say what runs)."""
        actor, reward = _model(self.actor), _model(self.reward)
        critic = _model(self.critic) if self.critic is not None else reward
        return {"generate": actor, "reward": reward, "reference": actor, "critic": critic, "logprob": actor, "train": actor}

    @property
    def reference_with_trainer(self) -> bool:
        """Whether the reference runs on the trainer's GPUs by construction: swapped in from host memory
        (``reference_on_host``) or the actor itself with its adapters off (``reference_in_actor``)."""
        return self.reference_on_host or self.reference_in_actor

    def scoring_roles(self) -> tuple[str, ...]:
        """The GPU forwards each sample needs before the update (no critic without one, no reference
        without KL, no reward model with a rule reward): ``algorithm.scoring_roles()``."""
        return self.algorithm.scoring_roles()

    def trained(self) -> tuple[tuple[str, ModelSpec, bool], ...]:
        """(role, model, scalar head) of each model the update trains, in the trainer's order: the actor,
        then the critic when the algorithm has one."""
        models = self.models()
        out = [("actor", models["train"], False)]
        if self.algorithm.critic:
            out.append(("critic", models["critic"], True))
        return tuple(out)

    def host_op_s(self, pool: str) -> float:
        """Host seconds per eagerly issued op on ``pool``'s host (``oppo_sim.hw.costs.eager.host_op_seconds``)."""
        return host_op_seconds(self.eager_host_op_s, self.hardware_of(pool).host_scale)

    def hardware_of(self, pool: str) -> Hardware:
        p = self.placement.pool(pool)
        g = p.gpu if p.gpu is not None else self.gpu
        return g if isinstance(g, Hardware) else get_hardware(g)

    @property
    def gpu_id(self) -> str:
        return self.gpu.id if isinstance(self.gpu, Hardware) else str(self.gpu)
