"""The generation worker: actor generation (vLLM, a per-request torch loop, or the static torch decoder)
behind the ``ActorBackend`` contract, stepped by the driver up to the next mark (a finish, a chunk
boundary, a token budget). With the static decoder the driver also sets each step's call size C
(:meth:`GenWorker.set_call_tokens`)."""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Sequence

from oppo_real.backends.api import GenRequest, SamplingConfig
from oppo_real.config import EngineSettings
from oppo_real.executor.messages import GenOutput
from oppo_real.workers.recorder import Recorder


@dataclass(frozen=True)
class GenWorkerConfig:
    actor: str  # HF model dir of the initial actor
    backend: str = "vllm"  # one of oppo_real.config.BACKENDS
    gen_batch: int | None = None  # torch-static: rows per mini-batch; None: one
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_model_len: int = 1024
    engine: EngineSettings = field(default_factory=EngineSettings)
    cores: tuple[int, ...] | None = None
    pool: str = "main"
    device: str = "cpu"  # where the actor runs ("cuda:0" under Ray: the worker sees only its GPU)
    dtype: str = "float32"  # "bfloat16" on a GPU
    release: bool = False  # free the engine's memory while training runs (vLLM sleep / the torch KV cache)
    sleep_level: int = 1  # vLLM sleep level
    warmup_s: float = 0.0  # decode throw-away requests for this long at start (once per process; backends.warmup)


class GenWorker(Recorder):
    """Actor generation (vLLM or plain torch) behind the `ActorBackend` contract."""

    def __init__(self, cfg: GenWorkerConfig) -> None:
        super().__init__()
        self._place(cfg.pool, cfg.cores)
        self.cfg = cfg
        t0 = time.time()
        self.gen = self._make_backend()
        if cfg.warmup_s > 0:
            from oppo_real.backends.warmup import burn_in
            from oppo_real.profiling.engine_ops import model_spec

            burn_in(self.gen, cfg.warmup_s, model_spec(Path(cfg.actor)).vocab, cfg.engine.max_num_seqs)
        self.init_seconds = time.time() - t0
        self.version = 0
        self.asleep = False

    def _make_backend(self):
        cfg = self.cfg
        if cfg.backend == "vllm":
            from oppo_real.backends.vllm_actor import VLLMActor, VLLMActorConfig

            bind = ",".join(map(str, cfg.cores)) if cfg.cores else None
            e = cfg.engine
            return VLLMActor(VLLMActorConfig(
                model=cfg.actor, dtype=cfg.dtype, sleep_mode=cfg.release and cfg.device.startswith("cuda"),
                sleep_level=cfg.sleep_level, sampling=cfg.sampling, max_model_len=cfg.max_model_len, max_num_seqs=e.max_num_seqs,
                max_num_batched_tokens=e.batched_tokens(cfg.max_model_len), enable_chunked_prefill=e.enable_chunked_prefill,
                enable_prefix_caching=e.enable_prefix_caching, block_size=e.block_size, kv_cache_bytes=e.kv_cache_bytes,
                cpu_threads_bind=bind))
        if cfg.backend == "torch":
            from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig

            return TorchActor(TorchActorConfig(model=cfg.actor, dtype=cfg.dtype, device=cfg.device, sampling=cfg.sampling,
                                               max_model_len=cfg.max_model_len))
        if cfg.backend == "torch-graph":
            from oppo_real.backends.torch_graph import TorchGraphActor, TorchGraphConfig

            return TorchGraphActor(TorchGraphConfig(model=cfg.actor, dtype=cfg.dtype, device=cfg.device, sampling=cfg.sampling,
                                                    max_model_len=cfg.max_model_len, max_num_seqs=cfg.engine.max_num_seqs,
                                                    kv_cache_bytes=cfg.engine.kv_cache_bytes))
        if cfg.backend in ("torch-static", "torch-static-graph"):
            from oppo_real.backends.torch_static import TorchStaticConfig
            from oppo_real.backends.torch_static_graph import static_actor

            return static_actor(TorchStaticConfig(model=cfg.actor, dtype=cfg.dtype, device=cfg.device, sampling=cfg.sampling,
                                                  max_model_len=cfg.max_model_len, gen_batch=cfg.gen_batch),
                                cfg.backend, cfg.engine.max_num_seqs, kv_cache_bytes=cfg.engine.kv_cache_bytes)
        from oppo_real.config import BACKENDS
        from oppo_sim.core.errors import ConfigError

        if cfg.backend == "lockstep":
            from oppo_real.backends.lockstep import LockstepActor

            return LockstepActor()
        raise ConfigError(f"unknown actor backend '{cfg.backend}'; known: {', '.join(BACKENDS)}")

    def set_call_tokens(self, c: int | None) -> None:
        """The step's chunk size C as the static decoder's tokens per call (None: one call to the longest
        response); a no-op for engines without calls (vLLM, the per-request torch loop)."""
        setter = getattr(self.gen, "set_call_tokens", None)
        if setter is not None:
            setter(c)

    def add(self, reqs: Sequence[GenRequest]) -> None:
        for r in reqs:
            self.gen.add(r)

    def abort(self, req_ids: Sequence[str]) -> None:
        for rid in req_ids:
            self.gen.abort(rid)

    def generate(self, step: int, max_iters: int, report_at: dict[str, int] | None = None) -> GenOutput:
        """Step the engine up to ``max_iters`` iterations; return early once a request finishes or a request
        in ``report_at`` has produced that many new tokens during this call (chunk boundary, budget)."""
        self.wake(step)
        report_at = report_at or {}
        toks: dict[str, list[int]] = {}
        lps: dict[str, list[float]] = {}
        fin: dict[str, str] = {}
        t0 = time.time()
        it = produced = 0
        while it < max_iters and self.gen.has_unfinished():
            deltas = self.gen.step()
            it += 1
            hit = False
            for d in deltas:
                toks.setdefault(d.req_id, []).extend(d.token_ids)
                lps.setdefault(d.req_id, []).extend(d.logprobs)
                produced += len(d.token_ids)
                if d.finished:
                    fin[d.req_id] = d.finish_reason or "length"
                    hit = True
                need = report_at.get(d.req_id)
                if need is not None and len(toks[d.req_id]) >= need:
                    hit = True
            if hit:
                break
        if it:
            self._rec("generate", "generate", step, t0, time.time(), produced)
        return GenOutput(toks, lps, fin, it, self.version)

    def has_unfinished(self) -> bool:
        return self.gen.has_unfinished()

    def sleep(self, step: int) -> int:
        """Release the engine's memory for the training that follows (timeline activity ``sleep``); returns the
        bytes released where the backend can tell. A no-op unless the config asks for it or while requests run."""
        release = getattr(self.gen, "sleep", None)
        if not self.cfg.release or self.asleep or release is None or self.gen.has_unfinished():
            return 0
        t0 = time.time()
        freed = int(release() or 0)
        self._rec("sleep", "sleep", step, t0, time.time(), 0)
        self.asleep = True
        return freed

    def wake(self, step: int) -> None:
        """Take the memory back (timeline activity ``wake``); a no-op when awake."""
        if not self.asleep:
            return
        t0 = time.time()
        self.gen.wake_up()
        self._rec("wake", "wake", step, t0, time.time(), 0)
        self.asleep = False

    def load_weights(self, step: int, version: int, state_dict: dict) -> float:
        """Weight sync from the trainer (the engine wakes first if it slept); returns the seconds spent loading."""
        self.wake(step)
        t0 = time.time()
        secs = self.gen.load_weights(state_dict)
        self._rec("sync", "sync", step, t0, time.time(), 0)
        self.version = version
        return secs

    def close(self) -> None:
        self.gen.close()


