"""Time the bulk copies that sleep / wake and weight sync make, at the sizes of a real engine and trainer,
and fit a fixed cost and a rate (GiB/s) per direction — what the simulator charges a switch
(``oppo_sim.hw.costs.sleepwake``: ``overhead_s + bytes / (host_bw * eff)``, with the ``sync`` op's parameters)
and a sync through host memory (``oppo_sim.hw.costs.sync``).

Two measurements (``MOVES``), each over *tensor sets* shaped as a model's (the parameter shapes of its
transformers model, read on the meta device; nothing is loaded or built):

- ``sleepwake``: a colocated engine's sleep and wake — its **weights** (bf16) and its **KV cache**
  (``kv_tokens`` tokens of every layer's keys and values, bf16) copied to host memory (``d2h``: sleep,
  vLLM level 1 / the torch engines' KV) and back into freshly allocated device memory (``h2d``: wake);
  then the **trainer's state** — fp32 weights, gradients and both Adam moments, 16 bytes per parameter
  (verl's ``param_offload`` + ``optimizer_offload``, DeepSpeed's ``offload_states``) — offloaded and
  reloaded the same way. Where 16 bytes per parameter exceed ``state_share`` of the GPU's memory (3B and 7B on
  80 GB) the first parameters up to that share are moved (a *shard*: what one GPU holds under ZeRO /
  FSDP) and the row says ``shard f=…``. At the largest fraction the offload is also timed pinning its host
  buffers on the spot (``host_alloc`` = ``per offload``, as vLLM's sleep allocates its CPU backup each
  time; verl's FSDP offload, a non-blocking ``.to("cpu")``, lands in fresh pinned memory too), and the trainer's
  state is moved as NeMo RL's ``move_optimizer`` moves its optimizer state: a blocking ``.to("cpu")`` per tensor
  into fresh *pageable* memory and ``.to(device)`` back (``host_alloc`` = ``pageable``); the fit takes the
  copies into buffers pinned once (``reused``), and the pageable ones apart.
- ``sync``: the engine's weights refilled from the trainer's copy on the same GPU (``d2d``), exported to
  pinned host memory (``d2h``) and loaded from it (``h2d``): the legs of a weight sync on one GPU and
  through the host. (``oppo-real profile --ops sync`` times the engine's own ``load_weights`` end to end.)

Every set is moved at ``fractions`` of its bytes (the first tensors up to that share), ``repeats`` times
each after one untimed round, so the fit ``seconds = fixed_s + bytes / rate`` per (set, direction) — and over all sets per
direction (``set`` = ``all``) — separates the per-call cost from the bandwidth. Copies go tensor by
tensor (``non_blocking`` from / to pinned memory), one synchronisation at the end, as the frameworks do.
On a CPU the "device" is host memory too: a row's ``host_memory`` says ``host (no GPU)``, and the rates
are host memory copies — the code path is exercised, not a GPU's link.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError

MOVES: tuple[str, ...] = ("sleepwake", "sync")
GiB = float(1 << 30)
ADAM_BYTES = 16  # fp32 weights, gradients, two moments


@dataclass(frozen=True)
class MoveGrid:
    fractions: tuple[float, ...] = (0.25, 0.5, 1.0)  # shares of each set's bytes moved (the fit's x axis)
    repeats: int = 3
    kv_tokens: int = 131072  # the engine's KV cache: 64 sequences x 2048 tokens
    state_share: float = 0.35  # the trainer state moved: at most this share of the GPU's memory (1.5B whole on 80 GB)

    def __post_init__(self) -> None:
        if not self.fractions or any(not 0 < f <= 1 for f in self.fractions):
            raise ConfigError(f"MoveGrid.fractions must be in (0, 1], got {self.fractions}")
        if self.repeats < 1 or self.kv_tokens < 1 or not 0 < self.state_share <= 1:
            raise ConfigError("MoveGrid needs repeats >= 1, kv_tokens >= 1 and state_share in (0, 1]")

    @classmethod
    def quick(cls) -> "MoveGrid":
        return cls(fractions=(0.5, 1.0), repeats=2, kv_tokens=4096)


@dataclass(frozen=True)
class TensorSet:
    name: str  # engine_weights | kv_cache | train_state | weights
    shapes: tuple[tuple[int, ...], ...]
    dtype: str  # "bfloat16" | "float32"
    note: str = ""

    def _cum(self) -> np.ndarray:
        """Bytes of the first 1, 2, ... tensors."""
        el = 2 if self.dtype == "bfloat16" else 4
        return np.cumsum([int(np.prod(s)) * el for s in self.shapes], dtype=np.int64)

    def bytes_of(self, n: int) -> int:
        return int(self._cum()[n - 1]) if n > 0 else 0

    def prefix(self, fraction: float) -> int:
        """Tensors in the first ``fraction`` of the set's bytes (at least one)."""
        cum = self._cum()
        return max(1, int(np.searchsorted(cum, fraction * cum[-1] * (1 + 1e-9), side="right")))


def weight_shapes(config) -> tuple[tuple[int, ...], ...]:
    """The parameter shapes of ``config``'s causal LM (a transformers config), counted on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return tuple(tuple(p.shape) for p in model.parameters())


def kv_shapes(config, tokens: int) -> tuple[tuple[int, ...], ...]:
    """Keys and values of every layer for ``tokens`` tokens: ``[tokens, kv_heads, head_dim]`` each."""
    hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return ((tokens, kv, hd),) * (2 * config.num_hidden_layers)


def state_set(weights: tuple[tuple[int, ...], ...], device_bytes: float | None, share: float) -> TensorSet:
    """The trainer's fp32 weights, gradients and Adam moments (four tensors per parameter), or the shard of
    the first parameters that fits ``share`` of ``device_bytes``."""
    n_params = sum(int(np.prod(s)) for s in weights)
    frac = 1.0 if device_bytes is None else min(1.0, share * device_bytes / (ADAM_BYTES * n_params))
    picked, n = [], 0
    for s in weights:
        if picked and n + int(np.prod(s)) > frac * n_params:
            break
        picked.append(s)
        n += int(np.prod(s))
    note = "" if frac >= 1.0 else f"shard f={n / n_params:.3f}"
    return TensorSet("train_state", tuple(x for s in picked for x in (s,) * 4), "float32", note)


def tensor_sets(move: str, config, grid: MoveGrid, device_bytes: float | None) -> list[TensorSet]:
    """The sets one measurement moves (``MOVES``)."""
    w = weight_shapes(config)
    if move == "sleepwake":
        return [TensorSet("engine_weights", w, "bfloat16"), TensorSet("kv_cache", kv_shapes(config, grid.kv_tokens), "bfloat16"),
                state_set(w, device_bytes, grid.state_share)]
    if move == "sync":
        return [TensorSet("weights", w, "bfloat16")]
    raise ConfigError(f"unknown move {move!r}; known: {', '.join(MOVES)}")


class _Mover:
    """Copies of a set's tensors between ``device`` and host memory (pinned on a GPU), timed to the end of
    the last copy."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch, self.device = torch, device
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def empty(self, s: TensorSet, n: int, where: str) -> list:
        t = self.torch
        dt = getattr(t, s.dtype)
        if where == "host":
            return [t.empty(shape, dtype=dt, pin_memory=self.cuda) for shape in s.shapes[:n]]
        return [t.empty(shape, dtype=dt, device=self.device) for shape in s.shapes[:n]]

    def copy(self, dst: list, src: list) -> float:
        self.sync()
        t0 = time.perf_counter()
        for d, x in zip(dst, src):
            d.copy_(x, non_blocking=True)
        self.sync()
        return time.perf_counter() - t0

    def offload_alloc(self, s: TensorSet, src: list) -> float:
        """An offload that allocates its (pinned) host buffers on the spot."""
        self.sync()
        t0 = time.perf_counter()
        dst = self.empty(s, len(src), "host")
        for d, x in zip(dst, src):
            d.copy_(x, non_blocking=True)
        self.sync()
        return time.perf_counter() - t0

    def pageable(self, src: list, to: str) -> tuple[float, list]:
        """A blocking ``Tensor.to(to)`` of each tensor (``"cpu"``: into fresh pageable host memory; the device: back
        from it), as NeMo RL's ``move_optimizer`` copies; timed to the end of the last copy."""
        self.sync()
        t0 = time.perf_counter()
        out = [x.to(to, copy=True) for x in src]  # (a copy on the CPU too, where .to("cpu") would return x)
        self.sync()
        return time.perf_counter() - t0, out

    def reload(self, s: TensorSet, host: list) -> tuple[float, list]:
        """A reload into freshly allocated device memory (a wake: the memory was given back)."""
        self.sync()
        t0 = time.perf_counter()
        out = [self.torch.empty_like(h, device=self.device) for h in host]
        for d, h in zip(out, host):
            d.copy_(h, non_blocking=True)
        self.sync()
        return time.perf_counter() - t0, out

    def release(self) -> None:
        """Give freed device memory back, and the pinned host blocks torch caches for reuse (so an offload
        that pins its buffers really pins them, and the cache does not hold a second copy of every set)."""
        if self.cuda:
            self.torch.cuda.empty_cache()
            host_empty = getattr(self.torch._C, "_host_emptyCache", None)
            if host_empty is not None:
                host_empty()


def _legs(s: TensorSet) -> dict[str, str]:
    return {"d2h": "offload", "h2d": "reload"} if s.name == "train_state" else {"d2h": "sleep", "h2d": "wake"}


def _sleepwake_rows(mv: _Mover, s: TensorSet, grid: MoveGrid, row: Callable[..., dict]) -> list[dict]:
    """Offload and reload cycles of ``s`` at each fraction (into host buffers pinned once), then at the largest
    fraction offloads that pin their buffers on the spot."""
    legs, rows = _legs(s), []
    host = mv.empty(s, len(s.shapes), "host")
    for frac in sorted(grid.fractions):
        n = s.prefix(frac)
        dev = mv.empty(s, n, "device")
        for i in range(grid.repeats + 1):  # the first cycle warms up (first touch of the pages), untimed
            off = row(s, n, frac, "d2h", legs["d2h"], mv.copy(host[:n], dev), "reused")
            dev = None
            mv.release()
            sec, dev = mv.reload(s, host[:n])
            rows += [off, row(s, n, frac, "h2d", legs["h2d"], sec, "reused")] if i else []
        if frac == max(grid.fractions):
            for _ in range(grid.repeats):
                mv.release()  # the previous one's pinned buffers: freed, not reused
                rows.append(row(s, n, frac, "d2h", legs["d2h"], mv.offload_alloc(s, dev), "per offload"))
            for _ in range(grid.repeats if s.name == "train_state" else 0):  # NeMo RL's pageable moves
                mv.release()
                sec, paged = mv.pageable(dev, "cpu")
                dev = None
                mv.release()
                back, dev = mv.pageable(paged, mv.device)
                paged = None  # one pageable copy alive at a time
                rows += [row(s, n, frac, "d2h", legs["d2h"], sec, "pageable"), row(s, n, frac, "h2d", legs["h2d"], back, "pageable")]
        dev = None
        mv.release()
    return rows


def _sync_rows(mv: _Mover, s: TensorSet, grid: MoveGrid, row: Callable[..., dict]) -> list[dict]:
    """The legs of a weight sync at each fraction: trainer -> engine on the device, trainer -> pinned host,
    pinned host -> engine."""
    full = len(s.shapes)
    trainer, engine, host = mv.empty(s, full, "device"), mv.empty(s, full, "device"), mv.empty(s, full, "host")
    rows = []
    for frac in sorted(grid.fractions):
        n = s.prefix(frac)
        for i in range(grid.repeats + 1):  # the first round warms up, untimed
            got = [row(s, n, frac, "d2d", "sync", mv.copy(engine[:n], trainer[:n]), "reused"),
                   row(s, n, frac, "d2h", "export", mv.copy(host[:n], trainer[:n]), "reused"),
                   row(s, n, frac, "h2d", "load", mv.copy(engine[:n], host[:n]), "reused")]
            rows += got if i else []
    return rows


def device_info(device: str) -> tuple[str, float]:
    """(device name, its memory in bytes): a GPU's total; on the CPU half the memory available now (the
    "device" copy and the host copy both live there)."""
    if not device.startswith("cuda"):
        import os

        return "cpu", os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") / 2.0
    import torch

    dev = torch.device(device)
    return torch.cuda.get_device_name(dev), float(torch.cuda.mem_get_info(dev)[1])


def run_moves(config, moves: tuple[str, ...], grid: MoveGrid, device: str = "cpu", model: str = "",
              log: Callable[[str], None] = print) -> pd.DataFrame:
    """Every copy of the measurements ``moves`` (``MOVES``) of a model of transformers ``config`` on
    ``device``: one row per timed copy."""
    unknown = sorted(set(moves) - set(MOVES))
    if unknown or not moves:
        raise ConfigError(f"unknown move(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(MOVES)}")
    name, total = device_info(device)
    mv = _Mover(device)
    host_memory = "pinned" if mv.cuda else "host (no GPU: the 'device' is host memory too)"

    def row(s: TensorSet, n: int, frac: float, direction: str, leg: str, seconds: float, alloc: str) -> dict:
        b = s.bytes_of(n)
        return {"op": "move", "device": name, "model": model, "move": move, "set": s.name, "direction": direction,
                "leg": leg, "fraction": frac, "tensors": n, "bytes": b, "seconds": seconds, "gib_s": b / GiB / seconds,
                "host_memory": "pageable" if mv.cuda and alloc == "pageable" else host_memory, "host_alloc": alloc,
                "note": s.note}

    rows: list[dict] = []
    for move in moves:
        for s in tensor_sets(move, config, grid, total):
            got = (_sleepwake_rows if move == "sleepwake" else _sync_rows)(mv, s, grid, row)
            mv.release()
            rows += got
            for (d, alloc), g in pd.DataFrame(got).groupby(["direction", "host_alloc"]):
                top = g[g["fraction"] == g["fraction"].max()]
                log(f"{move} {s.name:14s} {d} ({alloc}): {top['bytes'].iloc[0] / GiB:7.2f} GiB in "
                    f"{1000 * top['seconds'].median():8.2f} ms = {top['gib_s'].median():6.2f} GiB/s {s.note}")
    return pd.DataFrame(rows)


def fit_line(nbytes: np.ndarray, seconds: np.ndarray) -> tuple[float, float, float]:
    """(fixed seconds, GiB/s, r2) of ``seconds = fixed + bytes / rate`` by least squares; the fixed cost is
    held at 0 where the free fit makes it negative, and NaN (rate from the median) with one size only."""
    x, y = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if len(np.unique(x)) < 2:
        return float("nan"), float(np.median(x / y) / GiB), float("nan")
    slope, fixed = np.polyfit(x, y, 1)
    if fixed < 0:
        fixed, slope = 0.0, float(x @ y / (x @ x))
    pred = fixed + slope * x
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else float("nan")
    return float(fixed), (float(1.0 / slope / GiB) if slope > 0 else float("nan")), r2


def fit_moves(table: pd.DataFrame, host_bw: float | None = None) -> pd.DataFrame:
    """Fixed cost and GiB/s per (measurement, set, direction) and per (measurement, direction) over all its
    sets (``set`` = ``all``), from the copies into buffers pinned once; the pageable moves of the trainer's state
    apart (``set`` = ``train_state (pageable)``, one size: the median rate). ``host_bw`` (bytes/s, the GPU table's
    host link): the ``eff`` the simulator's ``host_bw * eff`` would need to match the fitted rate."""
    reused, paged = table[table["host_alloc"] == "reused"], table[table["host_alloc"] == "pageable"]
    out = []
    for keys, g in list(reused.groupby(["move", "set", "direction"])) + [
            ((m, "all", d), g) for (m, d), g in reused.groupby(["move", "direction"]) if g["set"].nunique() > 1] + [
            ((m, f"{st} (pageable)", d), g) for (m, st, d), g in paged.groupby(["move", "set", "direction"])]:
        fixed, rate, r2 = fit_line(g["bytes"].to_numpy(), g["seconds"].to_numpy())
        out.append({"device": g["device"].iloc[0], "model": g["model"].iloc[0], "move": keys[0], "set": keys[1],
                    "direction": keys[2], "n": len(g), "points": g["bytes"].nunique(), "fixed_s": fixed, "gib_s": rate,
                    "r2": r2, "max_gib": g["bytes"].max() / GiB,
                    "eff_vs_host_bw": rate * GiB / host_bw if host_bw else float("nan"),
                    "host_memory": g["host_memory"].iloc[0], "note": "; ".join(sorted(set(g["note"]) - {""}))})
    return pd.DataFrame(out)
