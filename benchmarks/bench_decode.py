"""The torch decoder's iteration cost, split into what the host spends and what the device computes.

For each batch size, requests with a prompt of ``--prompt`` tokens are prefilled, then ``--iters`` decode
iterations are timed one by one (wall clock, device synchronised after each). A second pass runs under
``torch.profiler`` and sums the device's kernel time per iteration and counts the kernel launches. When the
wall time per iteration is far above the kernel time, the decoder is bound by the host (Python and kernel
launches), not by the GPU, and no roofline of the GPU predicts it.

    python benchmarks/bench_decode.py --device cuda --shape qwen2.5-0.5b --batches 1,16,64
    python benchmarks/bench_decode.py                     # tiny model on the CPU (a smoke run)

Prints one row per batch size: median and spread of wall ms/iteration, kernel ms/iteration, launches per
iteration, aten operator calls per iteration (the host's work, on any device), and the host-bound share
``1 - kernel / wall``; ``--csv PATH`` writes the table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import pandas as pd


def _models(shape: str | None, cache: Path, device: str):
    if shape:
        from oppo_real.models.shaped import build_shaped_models

        return build_shaped_models(cache, shape, device=device)
    from oppo_real.models.tiny import build_models

    return build_models(cache)


def _actor(paths, device: str):
    from oppo_real.backends.api import SamplingConfig
    from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig

    dtype = "bfloat16" if device.startswith("cuda") else "float32"
    return TorchActor(TorchActorConfig(model=str(paths.actor), dtype=dtype, device=device, max_model_len=4096,
                                       sampling=SamplingConfig(temperature=1.0, seed=0)))


def _fill(actor, batch: int, prompt: int, iters: int, tag: str) -> None:
    from oppo_real.backends.api import GenRequest

    vocab = actor.model.config.vocab_size
    for i in range(batch):
        actor.add(GenRequest(req_id=f"{tag}-{i}", prompt_ids=tuple(3 + (7 * i + j) % (vocab - 3) for j in range(prompt)),
                             max_new_tokens=10 * iters + 10, ignore_eos=True))
    actor.step()  # the prefill


def measure(actor, batch: int, prompt: int, iters: int, sync) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    _fill(actor, batch, prompt, iters, f"w{batch}")
    walls = []
    for _ in range(iters):
        t0 = time.perf_counter()
        actor.step()
        sync()
        walls.append(time.perf_counter() - t0)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if actor.device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(iters):
            actor.step()
        sync()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    aten = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith("aten::"))
    kernel_s = sum(e.device_time_total for e in events) / 1e6 / iters if events else float("nan")
    actor.close()
    wall = statistics.median(walls)
    return {"batch": batch, "wall_ms": 1e3 * wall, "wall_min_ms": 1e3 * min(walls), "wall_max_ms": 1e3 * max(walls),
            "kernel_ms": 1e3 * kernel_s, "launches": len(events) / iters, "aten_ops": aten / iters, "host_bound_share": 1 - kernel_s / wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", default=None, help="a model-table shape, e.g. qwen2.5-0.5b (default: the tiny model)")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--cache", default="/tmp/oppo-bench-models")
    ap.add_argument("--csv", default=None)
    a = ap.parse_args(argv)
    import torch

    from oppo_real.cli import quiet_libraries

    quiet_libraries()
    sync = (lambda: torch.cuda.synchronize()) if a.device.startswith("cuda") else (lambda: None)
    actor = _actor(_models(a.shape, Path(a.cache), a.device), a.device)
    measure(actor, 1, a.prompt, 3, sync)  # warm-up: kernels, allocator
    rows = [measure(actor, int(b), a.prompt, a.iters, sync) for b in a.batches.split(",")]
    table = pd.DataFrame(rows)
    name = torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu"
    table.insert(0, "device", name)
    table.insert(1, "model", a.shape or "tiny")
    print(f"torch decoder on {name}, {a.shape or 'tiny'}, prompt {a.prompt}, {a.iters} iterations per batch size")
    with pd.option_context("display.width", 200, "display.float_format", "{:.2f}".format):
        print(table.to_string(index=False))
    if a.csv:
        table.to_csv(a.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
