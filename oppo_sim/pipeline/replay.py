"""Replay an arrival-timed trace through one generation engine, as a vLLM server would see it.

The same :class:`~oppo_sim.engine.continuous.EngineCore` that generates rollouts in the pipeline serves requests
arriving at the trace's ``timestamp`` (or as a Poisson process at ``rate``), so its fidelity can be
checked against public vLLM serving measurements: per-request TTFT, TPOT and end-to-end latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.continuous import EngineCore
from oppo_sim.engine.request import FINISH, EngineConfig, Req, kv_blocks_for
from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.costs.eager import check_host_op_s, host_op_seconds
from oppo_sim.hw.devices.hardware import Hardware, get_hardware
from oppo_sim.hw.models.lookup import ModelSpec, get_model
from oppo_sim.pipeline.devices import DevicePool, Timeline
from oppo_sim.pipeline.generation import GenReplica
from oppo_sim.traces.trace import Trace
from oppo_sim.hw.models.heads import check_heads_split


@dataclass(frozen=True)
class ReplayConfig:
    gpu: str | Hardware = "h100-sxm"
    model: str | ModelSpec = "llama-3.1-8b"
    engine: EngineConfig = field(default_factory=EngineConfig)
    limit: int | None = 1000  # first N requests of the trace (None: all)
    time_scale: float = 1.0  # multiply inter-arrival times (0.5 = twice the load)
    rate: float | None = None  # requests/s Poisson arrivals instead of the trace's timestamps
    seed: int = 0
    eager_host_op_s: float | None = None  # engine.enforce_eager: host seconds per issued op (None: the x86 constant on
    #                                       the GPU's host; 0: a profile's)

    def __post_init__(self) -> None:
        check_host_op_s(self.eager_host_op_s)
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1, got {self.limit}")
        if self.time_scale <= 0:
            raise ConfigError(f"time_scale must be > 0, got {self.time_scale}")
        if self.rate is not None and self.rate <= 0:
            raise ConfigError(f"rate must be > 0 requests/s, got {self.rate}")


@dataclass(frozen=True)
class ReplayResult:
    requests: pd.DataFrame  # rid, arrival, prompt_tokens, output_tokens, ttft_s, tpot_s, e2e_s, preemptions
    summary: dict


def _arrivals(trace: Trace, n: int, cfg: ReplayConfig) -> np.ndarray:
    if cfg.rate is not None:
        rng = np.random.default_rng(cfg.seed)
        return np.cumsum(rng.exponential(1.0 / cfg.rate, size=n)) - 0.0
    if trace.timestamp is None:
        raise ConfigError(f"trace '{trace.name}' has no timestamp column; pass a request rate (--rate) to replay it")
    ts = np.asarray(trace.timestamp[:n], dtype=np.float64)
    ts = np.maximum.accumulate(ts - ts.min())
    return ts * cfg.time_scale


def replay(trace: Trace, cfg: ReplayConfig | None = None) -> ReplayResult:
    cfg = cfg or ReplayConfig()
    hw = cfg.gpu if isinstance(cfg.gpu, Hardware) else get_hardware(cfg.gpu)
    model = cfg.model if isinstance(cfg.model, ModelSpec) else get_model(cfg.model)
    n = len(trace) if cfg.limit is None else min(cfg.limit, len(trace))
    arrivals = _arrivals(trace, n, cfg)
    env = simpy.Environment()
    tp = cfg.engine.tp
    check_heads_split(model, tp, "tensor parallelism (--tp)")
    pool = DevicePool(env, "serve", tp, hw.gpu.peak_flops, 0.0, Timeline())
    blocks = kv_blocks_for(model, hw.gpu.mem_bytes, cfg.engine, f"{tp} x {hw.gpu.id} ({model.id})")
    host_op_s = host_op_seconds(cfg.eager_host_op_s, hw.host_scale) if cfg.engine.enforce_eager else 0.0
    decode = CostModel(hw).decode(model, tp, cfg.engine.enable_expert_parallel, host_op_s, cfg.engine.vllm_version)
    core = EngineCore(decode, cfg.engine, blocks)
    reqs = [Req(i, int(trace.prompt_tokens[i]), int(trace.response_tokens[i]), arrival=float(arrivals[i])) for i in range(n)]
    finished: list[Req] = []
    all_done = env.event()

    def sink(_replica, events):
        for kind, r in events:
            if kind == FINISH:
                finished.append(r)
        if len(finished) == n and not all_done.triggered:
            all_done.succeed()

    replica = GenReplica(env, 0, core, pool, tuple(range(tp)), sink)

    def arrive():
        for r in reqs:
            if r.arrival > env.now:
                yield env.timeout(r.arrival - env.now)
            replica.add(r)

    env.process(arrive())
    env.run(until=all_done)
    df = _per_request(reqs)
    summary = {"requests": n, "gpu": hw.gpu.id, "model": model.id, "tp": tp, "kv_blocks": blocks,
               **_latencies(df, reqs, arrivals, n), "iterations": core.iterations}
    return ReplayResult(df, summary)


def _per_request(reqs: list[Req]) -> pd.DataFrame:
    rows = []
    for r in reqs:
        out = r.target
        ttft = r.first_token_t - r.arrival
        e2e = r.finish_t - r.arrival
        tpot = (r.finish_t - r.first_token_t) / (out - 1) if out > 1 else float("nan")
        rows.append((r.rid, r.arrival, r.prompt, out, ttft, tpot, e2e, r.preemptions))
    return pd.DataFrame(rows, columns=["rid", "arrival", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s", "preemptions"])


def _latencies(df: pd.DataFrame, reqs: list[Req], arrivals: np.ndarray, n: int) -> dict:
    makespan = float(max(r.finish_t for r in reqs))
    return {
        "ttft_mean_s": float(df.ttft_s.mean()), "ttft_p50_s": float(df.ttft_s.median()),
        "ttft_p99_s": float(df.ttft_s.quantile(0.99)), "tpot_mean_s": float(df.tpot_s.mean()),
        "tpot_p50_s": float(df.tpot_s.median()), "e2e_mean_s": float(df.e2e_s.mean()),
        "e2e_p99_s": float(df.e2e_s.quantile(0.99)), "makespan_s": makespan,
        "output_tokens_per_s": float(df.output_tokens.sum() / makespan) if makespan > 0 else 0.0,
        "request_rate": float(n / arrivals[-1]) if n > 1 and arrivals[-1] > 0 else float("nan"),
        "preemptions": int(df.preemptions.sum()),
    }
