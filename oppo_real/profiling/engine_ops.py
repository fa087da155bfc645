"""Profile the real engines: time every operation the simulator's cost model uses, over a grid of sizes,
on whatever device this is, and write the measurements table that ``oppo_sim.hw.calibration`` fits.

- ``decode``: one vLLM (or torch) engine iteration of ``batch`` sequences over ``kv`` cached tokens each;
- ``prefill``: a scorer forward of ``new`` tokens over ``ctx`` cached ones (incremental prefill);
- ``train``: one PPO mini-batch step (forward, clipped loss, backward, Adam) of the actor, and of the critic;
- ``sync``: loading the actor's weights into the generation engine.

Each row: ``op, devices, flops, bytes, seconds`` (what the call had to do, from the same formulas the
simulator charges: ``CostModel.*_work``) plus the grid coordinates. ``fit(table)`` turns it into a
hardware profile the simulator runs on (``oppo-sim run --profile``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.calibration import fit_profile
from oppo_sim.hw.costmodel import CostModel
from oppo_sim.hw.hardware import Hardware
from oppo_sim.hw.models import ModelSpec, model_from_hf_config
from oppo_sim.hw.profiles import cpu_spec


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


def model_spec(model_dir: Path, dtype_bytes: int = 4) -> ModelSpec:
    """The simulator's shape of a local HF model (the tiny models run in float32)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return model_from_hf_config(cfg, id=Path(model_dir).parent.name or "local").with_(dtype_bytes=dtype_bytes)


def _rows(op: str, flops: float, nbytes: float, times: list[float], **coords) -> list[dict]:
    return [{"op": op, "devices": 1, "flops": flops, "bytes": nbytes, "seconds": t, **coords} for t in times]


def _dtype(device: str) -> tuple[str, int]:
    """(dtype, bytes per element) a device computes in: bf16 on a GPU, fp32 on the CPU."""
    return ("bfloat16", 2) if device.startswith("cuda") else ("float32", 4)


def profile_decode(actor_dir: Path, backend: str, grid: ProfileGrid, cores: tuple[int, ...] | None, log,
                   device: str = "cpu", warmup_s: float = 0.0) -> list[dict]:
    from oppo_real.backends.api import GenRequest, SamplingConfig

    dtype, nbytes_el = _dtype(device)
    spec = model_spec(actor_dir, nbytes_el)
    rng = np.random.default_rng(0)
    max_len = max(1024, max(grid.decode_kv) + grid.repeats + grid.decode_warm + 8)
    if backend == "vllm":
        from oppo_real.backends.vllm_actor import VLLMActor, VLLMActorConfig

        gpu = {"kv_cache_bytes": None} if device.startswith("cuda") else {}
        gen = VLLMActor(VLLMActorConfig(model=str(actor_dir), dtype=dtype, max_model_len=max_len, max_num_seqs=max(64, max(grid.decode_batch)),
                                        sampling=SamplingConfig(temperature=1.0, seed=0),
                                        cpu_threads_bind=",".join(map(str, cores)) if cores else None, **gpu))
    else:
        from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig

        gen = TorchActor(TorchActorConfig(model=str(actor_dir), dtype=dtype, device=device, max_model_len=max_len,
                                          max_prefill_tokens=max(grid.decode_batch) * (max(grid.decode_kv) + 1)))
    rows: list[dict] = []
    try:
        from oppo_real.backends.warmup import burn_in

        burn_in(gen, warmup_s, spec.vocab, max(grid.decode_batch), log=log)
        n = 0
        for kv in grid.decode_kv:
            for b in grid.decode_batch:
                reqs = [GenRequest(f"p{n}.{i}", tuple(int(x) for x in rng.integers(3, spec.vocab, size=kv)),
                                   grid.repeats + grid.decode_warm + 1, ignore_eos=True) for i in range(b)]
                n += 1
                for r in reqs:
                    gen.add(r)
                gen.step()  # prefill (+ first token): not a decode iteration
                for _ in range(grid.decode_warm):  # to the steady state of this batch
                    gen.step()
                times = []
                ctx = kv + 1
                for _ in range(grid.repeats):
                    t0 = time.perf_counter()
                    gen.step()
                    times.append(time.perf_counter() - t0)
                    ctx += 1
                while gen.has_unfinished():
                    gen.step()
                flops, nbytes = CostModel.decode_work(spec, b, b * (kv + 1 + grid.decode_warm + grid.repeats // 2))
                rows += _rows("decode", flops, nbytes, times, batch=b, kv=kv)
                log(f"decode b={b:3d} kv={kv:4d}: {1000 * np.median(times):7.2f} ms")
        # weight sync: the actor's own weights back in
        from oppo_real.models.tiny import load_causal_lm

        sd = {k: v.detach().to(device) for k, v in load_causal_lm(actor_dir).state_dict().items()}  # the trainer's, in place
        times = [gen.load_weights(sd) for _ in range(grid.sync_repeats)]
        flops, nbytes = CostModel.sync_work(spec)
        rows += _rows("sync", flops, nbytes, times)
        log(f"sync: {1000 * np.median(times):.2f} ms")
    finally:
        gen.close()
    return rows


def profile_prefill(reward_dir: Path, grid: ProfileGrid, log, device: str = "cpu") -> list[dict]:
    from oppo_real.backends.scorer import IncrementalScorer, ScorerConfig

    dtype, nbytes_el = _dtype(device)
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
            rows += _rows("prefill", flops, nbytes, times, new=new, ctx=ctx)
            log(f"prefill new={new:4d} ctx={ctx:4d}: {1000 * np.median(times):7.2f} ms")
    return rows


def profile_train(actor_dir: Path, critic_dir: Path, grid: ProfileGrid, log, device: str = "cpu") -> list[dict]:
    """One PPO mini-batch step as the trainer runs it: actor log-probs + clipped policy loss + backward +
    Adam step, and critic values + clipped value loss + backward + Adam step (each a ``train`` row)."""
    import torch

    from oppo_real.devices.device_map import synchronize
    from oppo_real.models.tiny import load_causal_lm, load_value_model
    from oppo_real.ppo.algo import (
        critic_values,
        policy_loss,
        token_logprobs,
        value_loss,
    )

    spec = model_spec(actor_dir, _dtype(device)[1])
    cspec = model_spec(critic_dir, _dtype(device)[1])
    actor = load_causal_lm(actor_dir).to(device).train()  # fp32 master weights; bf16 autocast on a GPU
    critic = load_value_model(critic_dir).to(device).train()
    opt_a = torch.optim.Adam(actor.parameters(), lr=1e-6)
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-6)
    g = torch.Generator().manual_seed(2)
    rows: list[dict] = []
    for b in grid.train_batch:
        for length in grid.train_len:
            ids = torch.randint(3, spec.vocab, (b, length), generator=g).to(device)
            attn = torch.ones_like(ids)
            mask = torch.zeros((b, length), device=device)
            mask[:, length // 4:] = 1.0
            old = torch.zeros((b, length), device=device)
            adv = torch.randn((b, length), generator=g).to(device) * mask
            for role, run in (("actor", lambda: policy_loss(token_logprobs(actor, ids, attn, mask), old, adv, mask, 0.2)[0]),
                              ("critic", lambda: value_loss(critic_values(critic, ids, attn, mask), old, adv, mask, 0.2)[0])):
                opt = opt_a if role == "actor" else opt_c
                times = []
                for _ in range(grid.repeats + 1):
                    t0 = time.perf_counter()
                    loss = run()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    synchronize(device)
                    times.append(time.perf_counter() - t0)
                times = times[1:]
                flops, nbytes = CostModel.train_work(spec if role == "actor" else cspec, [length] * b, scalar_head=role == "critic")
                rows += _rows("train", flops, nbytes, times, batch=b, length=length, role=role)
                log(f"train {role} b={b:2d} len={length:4d}: {1000 * np.median(times):7.2f} ms")
    return rows


def run_profile(paths, backend: str = "vllm", grid: ProfileGrid | None = None, cores: tuple[int, ...] | None = (0,),
                log: Callable[[str], None] = print, device: str = "cpu", warmup_s: float = 0.0) -> pd.DataFrame:
    """Time every operation on ``device`` (pinned to ``cores``), after ``warmup_s`` seconds of throw-away
    decoding (``oppo_real.backends.warmup``); returns the measurements table."""
    from oppo_real.workers.recorder import pin_to_cores

    grid = grid or ProfileGrid()
    pin_to_cores(cores)
    rows = profile_decode(Path(paths.actor), backend, grid, cores, log, device, warmup_s)
    rows += profile_prefill(Path(paths.reward), grid, log, device)
    rows += profile_train(Path(paths.actor), Path(paths.critic), grid, log, device)
    return pd.DataFrame(rows)


def fit(table: pd.DataFrame, cores: int = 1, name: str = "cpu") -> tuple[Hardware, pd.DataFrame]:
    """Fit the cost model to a measurements table on a nominal CPU spec (the fitted efficiencies carry
    the truth); returns the hardware profile and the per-op fit report."""
    if table.empty:
        raise ConfigError("the measurements table is empty")
    return fit_profile(table, cpu_spec(name=name, cores=cores))
