"""Time one PPO mini-batch step of the actor and of the critic, as the trainer runs it: log-probs (values),
the clipped policy (value) loss, backward, Adam step — the ``train`` rows of a profile.

Each role is loaded, timed and freed in turn (the actor and a critic of 7B do not fit one GPU together).

**Full** (the trainer's own setting, whenever it fits): fp32 master weights, forwards under bf16 autocast
on a GPU, ``torch.optim.Adam`` over every parameter — 16 bytes per parameter of weights, gradients and
optimizer state.

**Sharded optimizer** (when those 16 bytes per parameter exceed :data:`FULL_ADAM_SHARE` of the GPU's
memory: from about 3.5B parameters on an 80 GB GPU, so the 7B shapes): the weights are bf16, forward and
backward run over the whole model (every gradient computed), and the Adam step is timed on a *shard* —
fp32 copies of the first parameters, a fraction ``f`` of the model — and charged as ``adam_seconds / f``
(the step is elementwise over the parameters, so its time scales with their number). The row says so:
``optimizer`` is ``full`` or ``shard f=0.160``, with ``fwd_bwd_s`` and ``optim_s`` (as charged) beside
``seconds``. A grid point that runs out of GPU memory is logged and skipped, not the whole stage. What a
real 7B run does instead (ZeRO / FSDP over several GPUs, or an 8-bit optimizer) is not measured here.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

FULL_ADAM_SHARE = 0.65
"""Full fp32 Adam is timed when its 16 bytes per parameter take at most this share of the GPU's memory."""
ADAM_BYTES = 16  # fp32 weights, gradients, two moments
SHARD_SHARE = 0.2  # the optimizer shard's fp32 state: this share of the GPU's memory


def optimizer_fraction(n_params: int, device_bytes: float | None) -> float:
    """1.0 (full Adam) where it fits, else the fraction of the parameters whose Adam state is timed."""
    if device_bytes is None or ADAM_BYTES * n_params <= FULL_ADAM_SHARE * device_bytes:
        return 1.0
    return min(1.0, SHARD_SHARE * device_bytes / (ADAM_BYTES * n_params))


def _device_bytes(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return float(torch.cuda.mem_get_info(torch.device(device))[1])


def _loss_fn(role: str, model, ids, attn, mask, old, adv):
    from oppo_real.ppo.algo import critic_values, policy_loss, token_logprobs, value_loss

    if role == "actor":
        return lambda: policy_loss(token_logprobs(model, ids, attn, mask), old, adv, mask, 0.2)[0]
    return lambda: value_loss(critic_values(model, ids, attn, mask), old, adv, mask, 0.2)[0]


def _shard(model, fraction: float):
    """fp32 copies of the first parameters, ``fraction`` of the model's, and their bf16 originals."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    total = sum(p.numel() for p in params)
    picked, n = [], 0
    for p in params:
        if picked and n + p.numel() > fraction * total:
            break
        picked.append(p)
        n += p.numel()
    copies = [torch.nn.Parameter(p.detach().float()) for p in picked]
    return picked, copies, n / total


def _steps(run, model, opt, picked, copies, frac: float, n: int, device: str) -> tuple[list[float], list[float]]:
    """``n`` training steps: (forward + backward seconds, optimizer seconds / ``frac``) of each; with a shard
    (``picked`` parameters, their fp32 ``copies``) the optimizer steps the copies."""
    from oppo_real.devices.device_map import synchronize

    fb, op = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        loss = run()
        model.zero_grad(set_to_none=True)
        loss.backward()
        synchronize(device)
        t1 = time.perf_counter()
        if picked is not None:
            for p, c in zip(picked, copies):
                c.grad = p.grad.float()
        opt.step()
        synchronize(device)
        fb.append(t1 - t0)
        op.append((time.perf_counter() - t1) / frac)
    return fb, op


def _time_role(role: str, model_dir: Path, spec, grid, log, device: str) -> list[dict]:
    import torch

    from oppo_real.models.tiny import load_causal_lm, load_value_model
    from oppo_sim.hw.costs.costmodel import CostModel

    load = load_causal_lm if role == "actor" else load_value_model
    n_params = spec.params
    frac = optimizer_fraction(int(n_params), _device_bytes(device))
    sharded = frac < 1.0
    model = load(model_dir, "bfloat16" if sharded else "float32").to(device).train()
    picked = copies = None
    if sharded:
        picked, copies, frac = _shard(model, frac)
        opt = torch.optim.Adam(copies, lr=1e-6)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-6)
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
            run = _loss_fn(role, model, ids, attn, mask, old, adv)
            try:
                fb, op = _steps(run, model, opt, picked, copies, frac, grid.repeats + 1, device)
            except torch.cuda.OutOfMemoryError:
                model.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                log(f"train {role} b={b:2d} len={length:4d}: out of GPU memory, point skipped")
                continue
            fb, op = fb[1:], op[1:]  # the first one warms up
            flops, nbytes = CostModel.train_work(spec, [length] * b, scalar_head=role == "critic")
            how = f"shard f={frac:.3f}" if sharded else "full"
            for f_s, o_s in zip(fb, op):
                rows.append({"op": "train", "devices": 1, "flops": flops, "bytes": nbytes, "seconds": f_s + o_s,
                             "batch": b, "length": length, "role": role, "optimizer": how, "fwd_bwd_s": f_s, "optim_s": o_s})
            log(f"train {role} b={b:2d} len={length:4d}: {1000 * np.median(np.add(fb, op)):7.2f} ms ({how})")
    del model, opt
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def profile_train(actor_dir: Path, critic_dir: Path, grid, log, device: str = "cpu") -> list[dict]:
    """``train`` rows of the actor, then of the critic (each loaded alone), over ``grid.train_batch x
    grid.train_len``; ``grid.repeats`` timed steps per point after one that warms up."""
    from oppo_real.profiling.model_shape import compute_dtype, model_spec

    nb = compute_dtype(device)[1]
    rows = _time_role("actor", Path(actor_dir), model_spec(actor_dir, nb), grid, log, device)
    rows += _time_role("critic", Path(critic_dir), model_spec(critic_dir, nb), grid, log, device)
    return rows
