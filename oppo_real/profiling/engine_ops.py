"""Profile the real engines: time every operation the simulator's cost model uses, over a grid of sizes,
on whatever device this is, and write the measurements table that ``oppo_sim.hw.fitting.calibration`` fits.

- ``decode``: one engine iteration (vLLM, torch or torch-graph) of ``batch`` sequences over ``kv`` cached
  tokens each; on a GPU also its kernel share (``kernel_s``, ``kernel_share``: GPU time over wall time,
  ``oppo_real.profiling.kernel_share``; on the CPU NaN, ``kernel_note`` says why);
- ``prefill``: a scorer forward of ``new`` tokens over ``ctx`` cached ones (incremental prefill);
- ``train``: one PPO mini-batch step (forward, clipped loss, backward, Adam) of the actor, and of the
  critic (``oppo_real.profiling.train_ops``: the optimizer timed on a shard where full Adam does not fit);
- ``sync``: loading the actor's weights into the generation engine, from the same device (``path``
  device) and, on a GPU, from pinned host memory (``path`` host: reported, not fitted).

``run_profile(ops=...)`` times a subset (one op per call keeps a 7B profile within a device machine's
10 minutes per command). Each row: ``op, devices, flops, bytes, seconds`` (what the call had to do, from
the same formulas the simulator charges: ``CostModel.*_work``) plus the grid coordinates. ``fit(table)``
turns it into a hardware profile the simulator runs on (``oppo-sim run --profile``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.fitting.calibration import fit_profile
from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.devices.hardware import Hardware
from oppo_real.profiling.model_shape import compute_dtype, expert_columns, model_spec
from oppo_sim.hw.models.lookup import ModelSpec
from oppo_sim.hw.fitting.profiles import cpu_spec


@dataclass(frozen=True)
class ProfileGrid:
    decode_batch: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    decode_kv: tuple[int, ...] = (16, 64, 256)  # cached tokens per sequence
    prefill_new: tuple[int, ...] = (1, 8, 32, 128, 512)
    prefill_ctx: tuple[int, ...] = (0, 64, 256)
    train_batch: tuple[int, ...] = (2, 4, 8)
    train_len: tuple[int, ...] = (32, 64, 128)
    repeats: int = 5
    sync_repeats: int = 5
    decode_warm: int = 1  # decode iterations after a grid point's prefill before its timed ones (steady state)

    @classmethod
    def quick(cls) -> "ProfileGrid":
        return cls(decode_batch=(1, 4, 16), decode_kv=(16, 128), prefill_new=(8, 64, 256), prefill_ctx=(0, 128),
                   train_batch=(2, 8), train_len=(32, 96), repeats=3, sync_repeats=3)


PREFILL_TOKENS = 32768
"""Padded tokens the torch-graph engine prefills per step when profiling decode (a 7B model's MLP
activations for 128 x 2k tokens at once would not fit beside its KV cache; the prefill is not timed)."""
OPS: tuple[str, ...] = ("decode", "prefill", "train", "sync")
"""The operations a profile times (``run_profile(ops=...)``, ``oppo-real profile --ops``)."""


def _rows(op: str, flops: float, nbytes: float, times: list[float], **coords) -> list[dict]:
    return [{"op": op, "devices": 1, "flops": flops, "bytes": nbytes, "seconds": t, **coords} for t in times]


def make_generator(actor_dir: Path, backend: str, max_len: int, max_batch: int, cores: tuple[int, ...] | None,
                   device: str = "cpu", cuda_graphs: bool = True):
    """The generation engine ``backend`` (vllm, torch or torch-graph) over ``actor_dir``, sized for
    ``max_batch`` sequences of ``max_len`` tokens, sampling at temperature 1."""
    from oppo_real.backends.api import SamplingConfig

    dtype = compute_dtype(device)[0]
    sampling = SamplingConfig(temperature=1.0, seed=0)
    if backend == "vllm":
        from oppo_real.backends.vllm_actor import VLLMActor, VLLMActorConfig

        gpu = {"kv_cache_bytes": None} if device.startswith("cuda") else {}
        return VLLMActor(VLLMActorConfig(model=str(actor_dir), dtype=dtype, max_model_len=max_len, max_num_seqs=max(64, max_batch),
                                         sampling=sampling, cpu_threads_bind=",".join(map(str, cores)) if cores else None, **gpu))
    if backend == "torch-graph":
        from oppo_real.backends.torch_graph import TorchGraphActor, TorchGraphConfig

        return TorchGraphActor(TorchGraphConfig(model=str(actor_dir), dtype=dtype, device=device, max_model_len=max_len,
                                                sampling=sampling, max_num_seqs=max_batch, cuda_graphs=cuda_graphs,
                                                max_prefill_tokens=min(max_batch * max_len, PREFILL_TOKENS)))
    from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig

    return TorchActor(TorchActorConfig(model=str(actor_dir), dtype=dtype, device=device, max_model_len=max_len,
                                       sampling=sampling, max_prefill_tokens=max_batch * max_len))


def decode_kv_tokens(grid: ProfileGrid, batch: int, kv: int) -> int:
    """Cached tokens a timed decode iteration of grid point (``batch``, ``kv``) reads, as the profile prices it: the
    prompt, the prefill's token, the warm-up iterations and half the timed ones, per sequence."""
    return batch * (kv + 1 + grid.decode_warm + grid.repeats // 2)


def _decode_rows(gen, spec: ModelSpec, grid: ProfileGrid, log, device: str) -> list[dict]:
    """Decode iterations over the batch x KV grid; on CUDA each point's kernel share too."""
    from oppo_real.backends.api import GenRequest
    from oppo_real.profiling.kernel_share import UNMEASURED, measure_kernel_share

    cuda = device.startswith("cuda")
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    n = 0
    for kv in grid.decode_kv:
        for b in grid.decode_batch:
            budget = grid.repeats + grid.decode_warm + 1 + (2 * grid.repeats if cuda else 0)
            for i in range(b):
                gen.add(GenRequest(f"p{n}.{i}", tuple(int(x) for x in rng.integers(3, spec.vocab, size=kv)), budget, ignore_eos=True))
            n += 1
            gen.step()  # prefill (+ first token): not a decode iteration
            for _ in range(grid.decode_warm):  # to the steady state of this batch
                gen.step()
            times = []
            for _ in range(grid.repeats):
                t0 = time.perf_counter()
                gen.step()
                times.append(time.perf_counter() - t0)
            share = measure_kernel_share(gen.step, grid.repeats, device) if cuda else UNMEASURED
            while gen.has_unfinished():
                gen.step()
            flops, nbytes = CostModel.decode_work(spec, b, decode_kv_tokens(grid, b, kv))
            rows += _rows("decode", flops, nbytes, times, batch=b, kv=kv, **share.columns(),
                          **expert_columns(spec, b, getattr(gen, "model", None)))
            extra = f", kernels {100 * share.share:5.1f}% of {1000 * share.wall_s:.2f} ms" if cuda else ""
            log(f"decode b={b:3d} kv={kv:4d}: {1000 * np.median(times):7.2f} ms{extra}")
    return rows


def _sync_rows(gen, actor_dir: Path, spec: ModelSpec, grid: ProfileGrid, log, device: str) -> list[dict]:
    """Weight sync: the actor's own weights loaded into the engine from the device (``path`` device: the
    trainer's copy on the same GPU) and, on a GPU, from host memory (``path`` host: pinned CPU tensors)."""
    from oppo_real.models.tiny import load_causal_lm

    host = load_causal_lm(actor_dir, compute_dtype(device)[0]).state_dict()  # as the trainer exports them
    flops, nbytes = CostModel.sync_work(spec)
    rows: list[dict] = []
    paths = [("device", {k: v.detach().to(device) for k, v in host.items()})]
    if device.startswith("cuda"):
        paths.append(("host", {k: v.detach().pin_memory() for k, v in host.items()}))
    for path, sd in paths:
        times = [gen.load_weights(sd) for _ in range(grid.sync_repeats)]
        rows += _rows("sync", flops, nbytes, times, path=path)
        log(f"sync from {path}: {1000 * np.median(times):.2f} ms")
    return rows


def profile_decode(actor_dir: Path, backend: str, grid: ProfileGrid, cores: tuple[int, ...] | None, log,
                   device: str = "cpu", warmup_s: float = 0.0, ops: tuple[str, ...] = ("decode", "sync"),
                   cuda_graphs: bool = True) -> list[dict]:
    """Decode iterations and weight syncs (those of ``ops``) of the generation engine ``backend``."""
    spec = model_spec(actor_dir, compute_dtype(device)[1])
    extra = 3 * grid.repeats if device.startswith("cuda") else 0
    max_len = max(1024, max(grid.decode_kv) + grid.repeats + grid.decode_warm + extra + 8)
    gen = make_generator(actor_dir, backend, max_len, max(grid.decode_batch), cores, device, cuda_graphs)
    rows: list[dict] = []
    try:
        from oppo_real.backends.warmup import burn_in

        burn_in(gen, warmup_s, spec.vocab, max(grid.decode_batch), log=log)
        if "decode" in ops:
            rows += _decode_rows(gen, spec, grid, log, device)
        if "sync" in ops:
            rows += _sync_rows(gen, Path(actor_dir), spec, grid, log, device)
    finally:
        gen.close()
    return rows


def profile_prefill(reward_dir: Path, grid: ProfileGrid, log, device: str = "cpu") -> list[dict]:
    from oppo_real.backends.scorer import IncrementalScorer, ScorerConfig

    dtype, nbytes_el = compute_dtype(device)
    spec = model_spec(reward_dir, nbytes_el)
    sc = IncrementalScorer(ScorerConfig(kind="reward", model=str(reward_dir), dtype=dtype, device=device))
    rng = np.random.default_rng(1)
    rows: list[dict] = []
    k = 0
    for ctx in grid.prefill_ctx:
        for new in grid.prefill_new:
            times = []
            for _ in range(grid.repeats + 1):
                sid = f"q{k}"
                k += 1
                sc.open(sid, tuple(int(x) for x in rng.integers(3, spec.vocab, size=max(ctx, 1))))
                if ctx:
                    sc.flush(sid)  # the context is prefilled (cached) before the timed chunk
                toks = tuple(int(x) for x in rng.integers(3, spec.vocab, size=new))
                t0 = time.perf_counter()
                sc.feed(sid, toks)
                times.append(time.perf_counter() - t0)
                sc.drop(sid)
            times = times[1:]  # first one warms up
            flops, nbytes = CostModel.prefill_work(spec, [new], [max(ctx, 1) if ctx else 0], scalar_head=True)
            rows += _rows("prefill", flops, nbytes, times, new=new, ctx=ctx, **expert_columns(spec, new, sc.model))
            log(f"prefill new={new:4d} ctx={ctx:4d}: {1000 * np.median(times):7.2f} ms")
    return rows


def run_profile(paths, backend: str = "vllm", grid: ProfileGrid | None = None, cores: tuple[int, ...] | None = (0,),
                log: Callable[[str], None] = print, device: str = "cpu", warmup_s: float = 0.0,
                ops: tuple[str, ...] = OPS, cuda_graphs: bool = True) -> pd.DataFrame:
    """Time the operations ``ops`` on ``device`` (pinned to ``cores``), after ``warmup_s`` seconds of
    throw-away decoding (``oppo_real.backends.warmup``); returns the measurements table."""
    from oppo_real.profiling.train_ops import profile_train
    from oppo_real.workers.recorder import pin_to_cores

    unknown = sorted(set(ops) - set(OPS))
    if unknown or not ops:
        raise ConfigError(f"unknown profile op(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(OPS)}")
    grid = grid or ProfileGrid()
    pin_to_cores(cores)
    rows: list[dict] = []
    if "decode" in ops or "sync" in ops:
        rows += profile_decode(Path(paths.actor), backend, grid, cores, log, device, warmup_s, ops, cuda_graphs)
    if "prefill" in ops:
        rows += profile_prefill(Path(paths.reward), grid, log, device)
    if "train" in ops:
        rows += profile_train(Path(paths.actor), Path(paths.critic), grid, log, device)
    return pd.DataFrame(rows)


def fittable(table: pd.DataFrame) -> pd.DataFrame:
    """The rows a fit uses: every row but the weight syncs through host memory (``path`` host), which
    cross a different link than the cost model's ``sync`` prices (they are reported, not fitted)."""
    if "path" not in table.columns:
        return table
    return table[table["path"].fillna("device") != "host"].reset_index(drop=True)


def fit(table: pd.DataFrame, cores: int = 1, name: str = "cpu") -> tuple[Hardware, pd.DataFrame]:
    """Fit the cost model to a measurements table on a nominal CPU spec (the fitted efficiencies carry
    the truth); returns the hardware profile and the per-op fit report."""
    if table.empty:
        raise ConfigError("the measurements table is empty")
    return fit_profile(fittable(table), cpu_spec(name=name, cores=cores))
