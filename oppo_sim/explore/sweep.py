"""Parameter sweeps: expand a grid of (policy, chunk, delta, trace, gpu) points, simulate each one
(in-process, in a process pool or as Ray tasks) and collect one table row per point.

    grid = SweepGrid(policies=("baseline", "oppo"), chunks=(128, 256, 500), deltas=(0, 8, 16))
    df = run_sweep(grid)              # one row per point, in point order, with a ``speedup`` column
    save_table(df, "sweep.csv")

Which knob multiplies which policy: the chunk size C only the chunked policies in
:data:`CHUNK_POLICIES`, the over-admission Δ (Δ0 for the dynamic rule) only :data:`DELTA_POLICIES`; every
other policy contributes one point per (trace, gpu) with ``chunk``/``delta`` left empty.

Points carry the trace *name* (a file path is made absolute); each worker loads a trace once
(:func:`functools.lru_cache`). A point's result does not depend on where it runs, so the table is the same
whatever ``processes`` is (apart from ``wall_clock_s``, the simulation's own run time).
"""

from __future__ import annotations

import functools
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from oppo_sim.cliargs import TABLE_SUFFIXES
from oppo_sim.explore.parallel import connect_ray
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import POLICY_NAMES, Policy, make_policy
from oppo_sim.core.userfiles import user_path
from oppo_sim.hw.devices.hardware import Hardware, get_hardware
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.traces.catalog import SYNTHETIC_PREFIX, find_trace, load_trace
from oppo_sim.traces.trace import SUFFIXES, Trace

CHUNK_POLICIES: frozenset[str] = frozenset({"intra", "oppo"})
"""Policies whose streaming chunk size C is a sweep dimension. (``chunk-autotune`` picks C itself from its
candidates, so a grid's ``chunks`` would only produce identical rows for it.)"""

DELTA_POLICIES: frozenset[str] = frozenset({"inter", "dynamic-delta", "oppo", "partial-rollout", "chunk-autotune"})
"""Policies whose Δ (fixed Δ, or Δ0 of the reward-slope rule) is a sweep dimension."""

IDENTITY_COLUMNS: tuple[str, ...] = ("policy", "label", "chunk", "delta", "trace", "gpu")
METRIC_COLUMNS: tuple[str, ...] = (
    "step_time_s", "step_time_median_s", "samples_per_s", "tokens_per_s", "utilization_overall",
    "flop_utilization", "staleness_mean", "staleness_max", "steps", "samples_trained", "wall_s",
)
"""Summary metrics copied into a row (plus one ``utilization_<pool>`` column per device pool)."""


def _as_tuple(value: Any, name: str) -> tuple:
    if isinstance(value, (str, int, np.integer)):
        value = (value,)
    try:
        out = tuple(dict.fromkeys(value))  # de-duplicate, keep order
    except TypeError:
        raise ConfigError(f"SweepGrid.{name} must be a sequence, got {value!r}") from None
    if not out:
        raise ConfigError(f"SweepGrid.{name} is empty; give at least one value")
    return out


def _trace_source(name: str) -> str:
    """What a worker loads: a path found relative to the current directory becomes absolute (a worker may
    run elsewhere); a bare name found on the trace search path, or a synthetic one, stays a name."""
    if name.startswith(SYNTHETIC_PREFIX):
        return name
    find_trace(name)  # raises TraceError with the places searched
    direct = user_path(name)
    if any(Path(str(direct) + s).is_file() for s in SUFFIXES):
        return str(direct.absolute())
    return name


@dataclass(frozen=True)
class SweepPoint:
    """One simulation of a sweep. ``chunk``/``delta`` are None where the policy has no such knob."""

    policy: str
    chunk: int | None
    delta: int | None
    trace: str
    gpu: str
    config: SimConfig = field(repr=False, default_factory=SimConfig)
    trace_source: str = field(default="", repr=False, compare=False)
    options: tuple[tuple[str, Any], ...] = field(default=(), repr=False)  # SweepGrid.options

    def make_policy(self) -> Policy:
        return make_policy(self.policy, chunk=self.chunk, delta=self.delta, **dict(self.options))

    @property
    def label(self) -> str:
        return self.make_policy().label()


@dataclass(frozen=True)
class SweepGrid:
    """The cross product of policies × chunks × deltas × traces × gpus, where a knob only multiplies the
    policies that have it. Every point's config is ``replace(base, gpu=gpu)``."""

    policies: tuple[str, ...] = ("baseline", "intra", "inter", "oppo")
    chunks: tuple[int, ...] = (500,)
    deltas: tuple[int, ...] = (8,)
    traces: tuple[str, ...] = ("oppo-longtail-default",)
    gpus: tuple[str | Hardware, ...] = ("h200",)  # GPU-table ids or resolved (calibrated) Hardware
    base: SimConfig = field(default_factory=SimConfig)
    options: tuple[tuple[str, Any], ...] = ()  # further make_policy knobs of every point: (("window", 3), ...)

    def __post_init__(self) -> None:
        norm = {
            "policies": tuple(str(p).strip().lower() for p in _as_tuple(self.policies, "policies")),
            "chunks": _as_tuple(self.chunks, "chunks"),
            "deltas": _as_tuple(self.deltas, "deltas"),
            "traces": tuple(str(t) for t in _as_tuple(self.traces, "traces")),
            "gpus": tuple(g if isinstance(g, Hardware) else str(g) for g in _as_tuple(self.gpus, "gpus")),
        }
        norm["policies"] = tuple(dict.fromkeys(norm["policies"]))
        for k, v in norm.items():
            object.__setattr__(self, k, v)
        if not isinstance(self.base, SimConfig):
            raise ConfigError(f"SweepGrid.base must be a SimConfig, got {type(self.base).__name__}")
        for c in self.chunks:
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
                raise ConfigError(f"SweepGrid.chunks must be integers >= 1, got {c!r}")
        for d in self.deltas:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
                raise ConfigError(f"SweepGrid.deltas must be integers >= 0, got {d!r}")
        object.__setattr__(self, "options", tuple(dict(self.options).items()))
        for p in self.policies:
            make_policy(p, **dict(self.options))  # ConfigError listing the known names, or a bad knob
        for g in self.gpus:
            if not isinstance(g, Hardware):
                get_hardware(g)  # ConfigError listing the known GPUs (profiles are resolved by the caller)
            replace(self.base, gpu=g)  # the config must stay valid on every GPU
        for t in self.traces:
            _trace_source(t)  # TraceError naming the places searched

    def points(self) -> list[SweepPoint]:
        """All points, in a deterministic order: trace, gpu, policy (as given), chunk, delta."""
        out: dict[tuple, SweepPoint] = {}
        for trace in self.traces:
            source = _trace_source(trace)
            for gpu in self.gpus:
                cfg = replace(self.base, gpu=gpu)
                for policy in self.policies:
                    chunks = self.chunks if policy in CHUNK_POLICIES else (None,)
                    deltas = self.deltas if policy in DELTA_POLICIES else (None,)
                    for chunk in chunks:
                        for delta in deltas:
                            c = None if chunk is None else int(chunk)
                            d = None if delta is None else int(delta)
                            gid = gpu.id if isinstance(gpu, Hardware) else gpu
                            key = (policy, c, d, trace, gid)
                            out.setdefault(key, SweepPoint(policy, c, d, trace, gid, cfg, source, self.options))
        return list(out.values())

    def __len__(self) -> int:
        return len(self.points())


@functools.lru_cache(maxsize=16)
def _load_trace(source: str, limits: tuple, seed: int) -> Trace:
    """Each (worker) process reads a trace once (``limits``: ``SimConfig.trace_limits()`` as items)."""
    return load_trace(source, seed=seed, **dict(limits))


def run_point(point: SweepPoint) -> dict[str, Any]:
    """Simulate one point and return its table row (identity columns, then the summary metrics)."""
    from oppo_sim.pipeline.simulate import (
        simulate,  # local: keeps `import oppo_sim.explore.sweep` light for spawned workers
    )

    cfg = point.config
    trace = _load_trace(point.trace_source or point.trace, tuple(cfg.trace_limits().items()), cfg.seed)
    policy = point.make_policy()
    t0 = time.perf_counter()
    result = simulate(trace, policy, cfg)
    wall_clock = time.perf_counter() - t0
    s = result.summary
    row: dict[str, Any] = {
        "policy": point.policy, "label": policy.label(), "chunk": point.chunk, "delta": point.delta,
        "trace": point.trace, "gpu": point.gpu,
    }
    for key in METRIC_COLUMNS:
        row[key] = s.get(key, np.nan)
    for pool, frac in s.get("utilization", {}).items():
        row[f"utilization_{pool}"] = frac
    row["wall_clock_s"] = wall_clock
    return row


def _run_pool(points: Sequence[SweepPoint], processes: int, bar: tqdm) -> list[dict[str, Any]]:
    rows: list[dict[str, Any] | None] = [None] * len(points)
    with ProcessPoolExecutor(max_workers=processes) as ex:
        futures = {ex.submit(run_point, p): i for i, p in enumerate(points)}
        for fut in as_completed(futures):
            rows[futures[fut]] = fut.result()
            bar.update(1)
    return rows  # type: ignore[return-value]


def _run_ray(points: Sequence[SweepPoint], ray_address: str | None, bar: tqdm) -> list[dict[str, Any]]:
    ray, started = connect_ray(ray_address)
    try:
        task = ray.remote(run_point)
        refs = [task.remote(p) for p in points]
        index = {ref: i for i, ref in enumerate(refs)}
        rows: list[dict[str, Any] | None] = [None] * len(points)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                rows[index[ref]] = ray.get(ref)
                bar.update(1)
        return rows  # type: ignore[return-value]
    finally:
        if started:
            ray.shutdown()  # leave no cluster behind that this call started


def run_sweep(grid: SweepGrid, *, processes: int | None = None, progress: bool = True,
              ray_address: str | None = None, use_ray: bool = False) -> pd.DataFrame:
    """Simulate every point of ``grid``; one row per point, in point order.

    ``processes``: worker processes (default ``os.cpu_count()``; 1 runs in this process). ``use_ray`` (or
    a ``ray_address``) runs points as Ray tasks instead, connecting to ``ray_address`` or starting a local
    Ray (shut down again afterwards) unless Ray is already initialised. Adds ``speedup``: samples/s over
    the baseline's with the same (trace, gpu), NaN when the grid has no baseline.
    """
    if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int) or processes < 1):
        raise ConfigError(f"processes must be an integer >= 1, got {processes!r}")
    points = grid.points()
    with tqdm(total=len(points), disable=not progress, desc="sweep", unit="pt") as bar:
        if use_ray or ray_address:
            rows = _run_ray(points, ray_address, bar)
        else:
            n = min(processes or os.cpu_count() or 1, len(points))
            if n <= 1:
                rows = []
                for p in points:
                    rows.append(run_point(p))
                    bar.update(1)
            else:
                rows = _run_pool(points, n, bar)
    return _table(rows)


def _table(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows))
    util = sorted(c for c in df.columns if c.startswith("utilization_") and c != "utilization_overall")
    order = [*IDENTITY_COLUMNS, *METRIC_COLUMNS[:4], *util, *METRIC_COLUMNS[4:], "wall_clock_s"]
    df = df[[c for c in order if c in df.columns]]
    for col in ("chunk", "delta"):
        df[col] = df[col].astype("Int64")
    df["speedup"] = add_speedup(df)
    return df


def add_speedup(df: pd.DataFrame, baseline: str = "baseline") -> pd.Series:
    """samples/s of each row over that of the ``baseline`` policy's row with the same (trace, gpu);
    NaN where there is none."""
    keys = [k for k in ("trace", "gpu") if k in df.columns]
    base = df[df["policy"] == baseline]
    if base.empty:
        return pd.Series(np.nan, index=df.index, name="speedup")
    ref = base.groupby(keys, sort=False)["samples_per_s"].first().rename("_base") if keys else None
    if ref is None:
        denom = pd.Series(float(base["samples_per_s"].iloc[0]), index=df.index)
    else:
        denom = df[keys].merge(ref.reset_index(), on=keys, how="left")["_base"].to_numpy()
        denom = pd.Series(denom, index=df.index)
    return (df["samples_per_s"] / denom).rename("speedup")


def save_table(df: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write a sweep table as CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``), chosen by suffix."""
    p = Path(path)
    name = p.name.lower()
    p.parent.mkdir(parents=True, exist_ok=True)
    if name.endswith(TABLE_SUFFIXES[:2]):
        df.to_csv(p, index=False)
    elif name.endswith(TABLE_SUFFIXES[2]):
        df.to_parquet(p, index=False)
    else:
        raise ConfigError(f"cannot save a table as '{p.name}': use a {', '.join(TABLE_SUFFIXES)} suffix")
    return p


__all__ = [
    "CHUNK_POLICIES", "DELTA_POLICIES", "SweepGrid", "SweepPoint", "run_point", "run_sweep", "add_speedup",
    "save_table", "POLICY_NAMES",
]
