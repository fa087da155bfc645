"""Profile the real static decoder (`TorchStaticActor`): time calls of C tokens over a grid of batch x
prompt x C, in the measurement-table format of ``oppo_real.profiling.engine_ops`` (``op, devices, flops, bytes,
seconds`` + grid coordinates), so a profile fitted on it drives the simulator's static engine
(``oppo_sim.engine.static``).

Rows:
- ``decode``: one forward of the static decoder, charged exactly as the simulator's
  :class:`~oppo_sim.hw.costs.costmodel.DecodeCost` charges it: a decode iteration of ``rows`` sequences over
  ``kv = rows x width`` padded cached tokens (``CostModel.decode_work``), or a prefill of ``new = rows x
  P`` padded tokens with ``rows x P(P+1)/2`` attention pairs (``kind == "prefill"``);
- ``static_call`` (:data:`STATIC_CALL_OP`): the per-call overhead — seconds of a call's boundary work
  (admission, merging and trimming the padded cache, handing tokens out) beyond its forwards, with no
  FLOPs or bytes; ``call_s`` holds the whole call's wall time.

:func:`run_static_profile` adds what a whole run needs (``sync`` into the static decoder, and the scorers'
``prefill`` and the PPO ``train`` rows of ``oppo_real.profiling.engine_ops``): what ``oppo-real profile|validate
--backend torch-static`` measure. :func:`fit_static` fits the cost-model rows with
``oppo_sim.hw.fitting.calibration.fit_profile`` (ops absent from the table keep their defaults) and takes the
per-call overhead as the median of the ``static_call`` rows;
:func:`save_static_profile` / :func:`load_static_params` keep it in a profile's ``meta["static"]``.
:func:`predict_static_calls` replays every profiled point on the simulator's static engine and puts
predicted and measured call times side by side (the engine-level check of the static model).
"""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.request import EngineConfig, Req
from oppo_sim.engine.static import StaticConfig, StaticCostParams, StaticEngineCore
from oppo_sim.hw.fitting.calibration import MEASUREMENT_COLUMNS, fit_profile
from oppo_sim.hw.costs.costmodel import CostModel, DecodeCost
from oppo_sim.hw.devices.hardware import OP_KINDS, GPUSpec, Hardware
from oppo_sim.hw.models.lookup import ModelSpec
from oppo_sim.hw.fitting.profiles import cpu_spec, read_profile, save_profile

STATIC_CALL_OP = "static_call"
"""Measurement-table op of the static engine's per-call overhead (not one of ``hardware.OP_KINDS``:
:func:`fit_static` takes it out before ``fit_profile`` sees the table)."""

_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class StaticProfileGrid:
    """Points ``batch x prompt x call_tokens``; each generates ``calls`` calls of C tokens. ``mixed``:
    every other row stops after the first call (rows leave and the padded cache is trimmed, as in a
    long-tail batch); prompts within a point differ by up to ``prompt // 2`` tokens (left padding)."""

    batch: tuple[int, ...] = (1, 4, 16)
    prompt: tuple[int, ...] = (16, 128)
    call_tokens: tuple[int, ...] = (4, 16, 64)
    calls: int = 3
    mixed: bool = True
    repeats: int = 2

    def __post_init__(self) -> None:
        for name in ("batch", "prompt", "call_tokens"):
            v = getattr(self, name)
            if not v or any(x < 1 for x in v):
                raise ConfigError(f"StaticProfileGrid.{name} must be non-empty integers >= 1, got {v}")
        if self.calls < 1 or self.repeats < 1:
            raise ConfigError("StaticProfileGrid.calls and repeats must be >= 1")

    @classmethod
    def quick(cls) -> "StaticProfileGrid":
        return cls(batch=(1, 4), prompt=(16, 64), call_tokens=(4, 16), calls=2, repeats=1)


def point_requests(batch: int, prompt: int, c: int, calls: int, mixed: bool) -> list[tuple[int, int]]:
    """(prompt tokens, response tokens) of the rows of one grid point (shared by profiler and predictor)."""
    out = []
    for i in range(batch):
        p = max(1, prompt - (i % 4) * (prompt // 8))
        out.append((p, c if mixed and i % 2 == 1 else calls * c))
    return out


def decode_iteration_work(spec: ModelSpec, rows: int, kv: float, new: int = 0, pairs: float = 0.0) -> tuple[float, float]:
    """(FLOPs, bytes) of one generation forward as ``DecodeCost.iteration`` charges it: ``rows`` decodes
    over ``kv`` cached tokens (``new == 0``), or a prefill of ``new`` tokens with ``pairs`` attention pairs."""
    if new == 0:
        return CostModel.decode_work(spec, rows, kv)
    flops = 2.0 * spec.matmul_params * new + 4.0 * spec.layers * spec.attn_width * pairs
    return flops, spec.weight_bytes() + spec.kv_bytes_per_token() * new


def _timing_row(spec: ModelSpec, rec: dict, coords: dict) -> dict:
    """One measurement row from a `TorchStaticActor.timings` record (a forward, or a call boundary)."""
    if rec["kind"] == "call":
        return {"op": STATIC_CALL_OP, "devices": 1, "flops": 0.0, "bytes": 0.0, "seconds": max(rec["boundary_s"], 1e-9),
                "kind": "call", "call_s": rec["call_s"], **coords}
    n, w = rec["rows"], rec["width"]
    if rec["kind"] == "prefill":
        flops, nbytes = decode_iteration_work(spec, n, 0.0, rec["new"], n * w * (w + 1) / 2.0)
    else:
        flops, nbytes = decode_iteration_work(spec, n, rec["kv"])
    return {"op": "decode", "devices": 1, "flops": flops, "bytes": nbytes, "seconds": max(rec["seconds"], 1e-9),
            "kind": rec["kind"], "rows": n, "width": w, "new": rec["new"], **coords}


def profile_static_decode(actor_dir: Path, grid: StaticProfileGrid | None = None, device: str = "cpu",
                          dtype: str = "float32", log: Callable[[str], None] = print,
                          backend: str = "torch-static") -> pd.DataFrame:
    """Time the static decoder of ``backend`` over ``grid`` on ``device``; returns the measurement table (see module)."""
    from oppo_real.backends.api import GenRequest, SamplingConfig
    from oppo_real.backends.torch_static import TorchStaticConfig
    from oppo_real.backends.torch_static_graph import static_actor
    from oppo_real.profiling.engine_ops import model_spec

    grid = grid or StaticProfileGrid()
    if dtype not in _BYTES:
        raise ConfigError(f"dtype must be one of {sorted(_BYTES)}, got {dtype!r}")
    spec = model_spec(Path(actor_dir), dtype_bytes=_BYTES[dtype])
    rng = np.random.default_rng(0)
    cfg = TorchStaticConfig(model=str(actor_dir), dtype=dtype, device=device, sampling=SamplingConfig(temperature=0.0),
                            max_model_len=max(grid.prompt) + grid.calls * max(grid.call_tokens) + 2, record_timings=True)
    actor = static_actor(cfg, backend)

    def run(rows: list[tuple[int, int]], c: int, tag: str) -> list[dict]:
        actor.set_call_tokens(c)
        actor.timings.clear()
        for i, (p, t) in enumerate(rows):
            ids = tuple(int(x) for x in rng.integers(3, spec.vocab, size=p))
            actor.add(GenRequest(f"{tag}.{i}", ids, t, ignore_eos=True))
        while actor.has_unfinished():
            actor.step()
        return list(actor.timings)

    run(point_requests(2, min(grid.prompt), min(grid.call_tokens), 2, grid.mixed), min(grid.call_tokens), "warm")
    out: list[dict] = []
    point = 0
    try:
        for b in grid.batch:
            for p in grid.prompt:
                for c in grid.call_tokens:
                    rows = point_requests(b, p, c, grid.calls, grid.mixed)
                    for rep in range(grid.repeats):
                        call = 0
                        for rec in run(rows, c, f"p{point}.{rep}"):
                            coords = {"point": point, "repeat": rep, "batch": b, "prompt": p, "C": c, "calls": grid.calls,
                                      "mixed": grid.mixed, "call": call}
                            out.append(_timing_row(spec, rec, coords))
                            call += rec["kind"] == "call"
                    calls = [r for r in out if r["point"] == point and r["op"] == STATIC_CALL_OP]
                    log(f"static b={b:3d} prompt={p:4d} C={c:4d}: {len(calls)} calls, median call "
                        f"{1000 * np.median([r['call_s'] for r in calls]):8.2f} ms, boundary "
                        f"{1000 * np.median([r['seconds'] for r in calls]):6.2f} ms")
                    point += 1
    finally:
        actor.close()
    return pd.DataFrame(out)


def profile_static_sync(actor_dir: Path, repeats: int = 5, device: str = "cpu", dtype: str = "float32",
                        log: Callable[[str], None] = print, backend: str = "torch-static") -> pd.DataFrame:
    """``sync`` rows: loading the actor's weights into the static decoder (`TorchStaticActor.load_weights`)."""
    from oppo_real.backends.torch_static import TorchStaticConfig
    from oppo_real.backends.torch_static_graph import static_actor
    from oppo_real.models.tiny import load_causal_lm
    from oppo_real.profiling.engine_ops import model_spec

    actor = static_actor(TorchStaticConfig(model=str(actor_dir), dtype=dtype, device=device), backend)
    try:
        sd = {k: v.detach() for k, v in load_causal_lm(actor_dir).state_dict().items()}
        times = [actor.load_weights(sd) for _ in range(max(1, repeats))]
    finally:
        actor.close()
    flops, nbytes = CostModel.sync_work(model_spec(Path(actor_dir), dtype_bytes=_BYTES[dtype]))
    log(f"sync (static decoder): {1000 * np.median(times):.2f} ms")
    return pd.DataFrame([{"op": "sync", "devices": 1, "flops": flops, "bytes": nbytes, "seconds": max(s, 1e-9)}
                         for s in times])


def run_static_profile(paths, grid=None, static_grid: StaticProfileGrid | None = None,
                       cores: tuple[int, ...] | None = (0,), log: Callable[[str], None] = print,
                       backend: str = "torch-static") -> pd.DataFrame:
    """Everything a run on the static decoder needs, on this machine (pinned to ``cores``): the scorers'
    prefill and the PPO update (``oppo_real.profiling.engine_ops``, ``grid``), the static decoder's forwards and per-call
    overhead (``static_grid``) and the weight sync into it. :func:`fit_static` fits the whole table."""
    from oppo_real.profiling.engine_ops import ProfileGrid, profile_prefill
    from oppo_real.profiling.train_ops import profile_train
    from oppo_real.workers.recorder import pin_to_cores

    grid = grid or ProfileGrid()
    pin_to_cores(cores)
    parts = [profile_static_decode(Path(paths.actor), static_grid, log=log, backend=backend),
             profile_static_sync(Path(paths.actor), grid.sync_repeats, log=log, backend=backend),
             pd.DataFrame(profile_prefill(Path(paths.reward), grid, log)),
             pd.DataFrame(profile_train(Path(paths.actor), Path(paths.critic), grid, log))]
    return pd.concat(parts, ignore_index=True)


def fit_static(table: pd.DataFrame, spec: GPUSpec | None = None, cores: int = 1, name: str = "cpu"
               ) -> tuple[Hardware, StaticCostParams, pd.DataFrame]:
    """Fit the cost-model rows (``decode``, and ``prefill``/``train``/``sync`` where the table has them) on
    ``spec`` (default a nominal CPU of ``cores``) and the per-call overhead;
    returns the hardware, the static cost parameters and a per-op report (``static_call`` last)."""
    if table.empty:
        raise ConfigError("the measurements table is empty")
    core = table[table["op"].isin(OP_KINDS)]
    if core.empty:
        raise ConfigError("the measurements table has no decode rows to fit")
    hw, report = fit_profile(core[MEASUREMENT_COLUMNS].reset_index(drop=True), spec or cpu_spec(name=name, cores=cores))
    calls = table.loc[table["op"] == STATIC_CALL_OP, "seconds"].to_numpy(dtype=float)
    ovh = float(np.median(calls)) if len(calls) else 0.0
    params = StaticCostParams(call_overhead_s=ovh, host_op_s=0.0)  # the fitted decode holds the host time
    if len(calls):
        err = ovh - calls
        row = {"op": STATIC_CALL_OP, "n": len(calls), "eff_compute": float("nan"), "eff_memory": float("nan"),
               "overhead_s": ovh, "rmse_s": float(np.sqrt(np.mean(err**2))), "mape": float(np.mean(np.abs(err) / calls)),
               "r2": float("nan"), "note": "median of the measured per-call boundary seconds"}
        report = pd.concat([report, pd.DataFrame([row])], ignore_index=True)
    return hw, params, report


def save_static_profile(hw: Hardware, params: StaticCostParams, path: str | PathLike, meta: dict | None = None) -> None:
    """A JSON profile (``oppo_sim.hw.fitting.profiles`` format) with the static parameters in ``meta["static"]``."""
    save_profile(hw, path, {**(meta or {}), "static": params.to_meta()})


def load_static_params(path: str | PathLike) -> StaticCostParams:
    """The static engine's cost parameters of a profile (defaults if it has none)."""
    return StaticCostParams.from_meta(read_profile(path)[1])


def predict_static_calls(table: pd.DataFrame, hw: Hardware, params: StaticCostParams, spec: ModelSpec) -> pd.DataFrame:
    """Replay every profiled point on the simulator's static engine; one row per measured call with the
    predicted and measured seconds (``call_s``) and the relative error."""
    calls = table[table["op"] == STATIC_CALL_OP]
    if calls.empty:
        raise ConfigError("the measurements table has no static_call rows")
    dc = DecodeCost(spec, hw)
    rows = []
    for (point, rep), grp in calls.groupby(["point", "repeat"], sort=True):
        b, p, c, k_calls = (int(grp[k].iloc[0]) for k in ("batch", "prompt", "C", "calls"))
        n_calls = len(grp)
        reqs = point_requests(b, p, c, k_calls, bool(grp["mixed"].iloc[0]))
        core = StaticEngineCore(dc, EngineConfig(), 1 << 30, StaticConfig(call_tokens=c), params)
        for i, (pp, t) in enumerate(reqs):
            core.add(Req(i, pp, t))
        pred = []
        while (plan := core.plan()) is not None:
            pred.append(plan.seconds)
            core.commit(plan, sum(pred))
        if len(pred) != n_calls:
            raise RuntimeError(f"point {point}: the engine made {len(pred)} calls, the decoder {n_calls}")
        for k, (_, r) in enumerate(grp.sort_values("call").iterrows()):
            rows.append({"point": point, "repeat": rep, "batch": b, "prompt": p, "C": c, "call": k,
                         "pred_s": pred[k], "meas_s": float(r["call_s"]),
                         "err_pct": 100.0 * (pred[k] - float(r["call_s"])) / float(r["call_s"])})
    return pd.DataFrame(rows)

