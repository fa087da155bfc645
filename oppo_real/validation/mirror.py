"""The simulator configuration and workload that describe a real run, request for request.

:func:`mirror_config` takes every setting from the real run's configuration: the models' shapes (read
from the model directories), the pools (a "main" pool where generation, actor log-probs, critic values
and training share the cores, a "score" pool with the frozen reward and reference), B, the PPO epochs
and mini-batches, the generation engine's settings (:class:`oppo_real.config.EngineSettings`: sequences,
token budget, block size, and the number of KV blocks its byte budget holds) -- or, for the static
torch decoder (``--backend torch-static``), the simulator's static engine with the same mini-batch size and
the profiled per-call overhead -- and how the executor's torch code batches. :func:`mirror_trace` gives the simulator the same requests in the same order: the
prompts' lengths from the run's prompt sampler, the forced response lengths by the run's own rule
(:meth:`oppo_real.executor.sample_store.SampleStore.target_of`), and — when a measured run is given — each sample's
measured reward-model score, so reward-driven controllers (dynamic Δ) see the rewards the run saw. A trace with
a ``step`` column chooses a sample's row by the step that admitted it (:mod:`oppo_sim.traces.rowmap`): the run's
``decisions`` table says which step admitted each sample; without it every step is taken to admit B x n fresh
samples (what a baseline run does). The mirror lists the rows in sample order, with no step column.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from oppo_real.config import RealConfig
from oppo_real.executor.sample_store import SampleStore
from oppo_real.profiling.engine_ops import model_spec
from oppo_sim.engine.factory import EngineKind
from oppo_sim.engine.request import EngineConfig
from oppo_sim.engine.static_params import StaticConfig, StaticCostParams
from oppo_sim.hw.devices.hardware import Hardware
from oppo_sim.hw.fitting.overheads import ExecutorOverheads
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.traces.trace import Trace


def _admitting_steps(cfg: RealConfig, rows: int, decisions: pd.DataFrame | None) -> list[int]:
    """The step that admitted each sample id below ``rows`` (by ``decisions``; else B x n a step)."""
    per_step = cfg.batch * cfg.algorithm.group_size
    steps = [sid // per_step for sid in range(rows)]
    if decisions is not None and len(decisions):
        for step, admitted in zip(decisions["step"], decisions["admitted"]):
            for sid in admitted:
                if sid < rows:
                    steps[sid] = int(step)
    return steps


def mirror_trace(cfg: RealConfig, trace: Trace | None, rows: int, rollouts: pd.DataFrame | None = None,
                 decisions: pd.DataFrame | None = None) -> Trace:
    """The requests a real run admits, in sample-id order; ``rollouts`` (a measured run's) adds the
    reward-model score each trained sample got; ``decisions`` (the run's) says which step admitted each
    sample, for a trace with a ``step`` column, and which groups dapo dropped. A sample the run did not train
    gets 0 -- under dapo, only if its group was dropped (all equal); the others get rewards that differ within
    their group (1 for the first member, 0 for the rest): the run kept them (trimmed beyond B, or carried at
    its end), and dynamic sampling reads no more than whether a group's rewards differ."""
    store = SampleStore(cfg, trace)
    prompts = [store.prompt_of(sid) for sid in range(rows)]  # a group's members share its prompt
    resp = [store.target_of(sid, step) for sid, step in enumerate(_admitting_steps(cfg, rows, decisions))]
    reward = None
    if rollouts is not None and len(rollouts):
        scores = dict(zip(rollouts["sid"].astype(int), rollouts["rm_score"].astype(float)))
        n = cfg.algorithm.group_size
        has = cfg.algorithm.name == "dapo" and decisions is not None and "dropped" in decisions
        dropped = {int(s) for sids in decisions["dropped"] for s in sids} if has else set(range(rows))
        reward = [scores[sid] if sid in scores else 0.0 if sid in dropped else float(sid % n == 0) for sid in range(rows)]
    return Trace.from_arrays([len(p) for p in prompts], resp, reward=reward,
                             name=f"mirror:{trace.name if trace else 'natural'}")


def engine_config(cfg: RealConfig, kv_bytes_per_token: int) -> EngineConfig:
    """The simulated engine with the real engine's settings (KV blocks = its KV byte budget / block bytes; the
    executor's vLLM runs eagerly, ``VLLMActorConfig.enforce_eager``, so it holds no CUDA-graph memory — its host
    time is in the measured profile, see :func:`mirror_config`)."""
    e = cfg.engine
    return EngineConfig(
        max_num_seqs=e.max_num_seqs, max_num_batched_tokens=e.batched_tokens(cfg.max_model_len), block_size=e.block_size,
        num_gpu_blocks_override=max(2, e.kv_cache_bytes // (e.block_size * kv_bytes_per_token)),
        enable_prefix_caching=e.enable_prefix_caching, enable_chunked_prefill=e.enable_chunked_prefill,
        enforce_eager=cfg.backend == "vllm",
    )


def static_engine_config(cfg: RealConfig) -> tuple[EngineKind, StaticConfig]:
    """The simulated generation engine of the run's backend: continuous batching for vLLM and the
    per-request torch loop; for the static torch decoder the static engine with its mini-batch size, the
    KV carried across calls, and the call size left to the driver (each step's C, unchunked without one)."""
    if not cfg.static_engine:
        return EngineKind.CONTINUOUS, StaticConfig()
    return EngineKind.STATIC, StaticConfig(call_tokens=None, gen_batch=cfg.gen_batch, carry_kv=True)


def mirror_config(cfg: RealConfig, hw: Hardware, paths, steps: int | None = None,
                  overheads: ExecutorOverheads | None = None, static_cost: StaticCostParams | None = None) -> SimConfig:
    """The simulator configuration of the run; ``overheads``: the driver's measured costs; ``static_cost`` (the
    static decoder's per-call overhead, from the profile's ``meta["static"]``) applies when the run's backend
    is the static decoder."""
    from oppo_real.ppo.algo import PPOConfig

    ppo = cfg.ppo or PPOConfig()
    nb = cfg.devices.dtype_bytes  # bytes per element of each role's dtype (bf16 on a GPU)
    actor = model_spec(Path(paths.actor), nb("gen"))
    kind, static = static_engine_config(cfg)
    engine = engine_config(cfg, actor.kv_bytes_per_token())
    if kind is EngineKind.STATIC:  # the static decoder's padded cache is bounded by max_model_len, not a block pool
        engine = replace(engine, num_gpu_blocks_override=1 << 30)
    return SimConfig(
        batch=cfg.batch, steps=steps or cfg.steps, seed=cfg.seed, gpu=hw, actor=actor,
        reward=model_spec(Path(paths.reward), nb("score")), critic=model_spec(Path(paths.critic), nb("train")),
        placement=cfg.placement(), algorithm=cfg.algorithm, engine=engine, engine_kind=kind, static=static,
        static_cost=static_cost or StaticCostParams(), ppo_epochs=ppo.epochs, minibatches=ppo.minibatches,
        max_response=None, eager_host_op_s=0.0,  # priced from the engine's measured profile, which holds its host time
        # how the executor's torch code batches: the streamed chunks of one report in one padded forward,
        # whole-sequence scoring and PPO mini-batches padded to the longest sequence; the driver's own
        # time per round trip, step, sample and token (measured by oppo_real.profiling.driver_overheads)
        stream_batching=True, padded_batches=True, overheads=overheads or ExecutorOverheads(),
        # the executor's models never leave their device: its "sleep" frees the torch KV cache (vLLM on the CPU
        # only pauses) and the trainer offloads nothing, so no host transfer is charged (oppo_sim.hw.costs.sleepwake)
        colocate="resident",
    )
