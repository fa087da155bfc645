"""Profile what the real executor's driver spends outside the engines: the real :class:`Driver` on workers
that do no model work (a ``lockstep`` generation backend, null score and train workers), on Ray or in
process as the runs are. Every step's wall time is then the driver's own — remote round trips, the step
machine, building requests, batches and records — and is fitted (``oppo_sim.hw.fitting.overheads``) against
the step's generation round trips, samples and tokens."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

import pandas as pd

from oppo_real.config import RealConfig
from oppo_real.executor.real_driver import Driver
from oppo_real.workers.gen import GenWorker, GenWorkerConfig
from oppo_real.workers.handles import spawn, start_ray
from oppo_real.workers.null import NullScoreWorker, NullTrainWorker
from oppo_sim.core.policies import make_policy
from oppo_sim.hw.fitting.overheads import OVERHEAD_COLUMNS, ExecutorOverheads, fit_overheads
from oppo_sim.traces.trace import Trace

GRID_BATCHES = (4, 8, 16)
GRID_POLICIES = ("baseline", "oppo")


def _handles(workers: str) -> dict:
    gen = spawn(workers, "gen", GenWorker, GenWorkerConfig(actor="none", backend="lockstep"), num_cpus=0.01)
    return {"gen": gen,
            "score": spawn(workers, "score", NullScoreWorker, num_cpus=0.01),
            "train": spawn(workers, "train", NullTrainWorker, num_cpus=0.01)}


def profile_driver(cfg: RealConfig, trace: Trace | None, steps: int = 6, chunk: int = 16, delta: int = 2,
                   log: Callable[[str], None] = print) -> pd.DataFrame:
    """One row per measured step (the first of each run left out): its round trips, samples, tokens, seconds."""
    if cfg.workers == "ray":
        start_ray(cfg.ray_address)
    rows = []
    algo = cfg.algorithm
    if algo.name == "dapo":  # the lockstep engine's responses are all alike: dapo would drop every group and
        algo = replace(algo, name="grpo")  # sample on forever; grpo has the same driver work per call/sample/token
    for name in GRID_POLICIES:
        for b in GRID_BATCHES:
            run_cfg = replace(cfg, batch=b, steps=steps, algorithm=algo)
            handles = _handles(cfg.workers)
            try:
                d = Driver(run_cfg, make_policy(name, chunk=chunk, delta=delta), trace, handles)
                while d.step < steps:
                    d.run_step()
                d.drain()
            finally:
                for h in handles.values():
                    h.kill()
            for rec in d.records[1:]:
                rows.append({"policy": name, "batch": b, "calls": rec["gen_calls"], "samples": rec["samples"],
                             "tokens": rec["tokens"], "seconds": rec["step_time_s"]})
            log(f"driver profile: {name} B={b}: median step {pd.Series([r['step_time_s'] for r in d.records[1:]]).median() * 1e3:.1f} ms")
    return pd.DataFrame(rows, columns=["policy", "batch", *OVERHEAD_COLUMNS])


def measure_overheads(cfg: RealConfig, trace: Trace | None, log: Callable[[str], None] = print) -> tuple[ExecutorOverheads, dict, pd.DataFrame]:
    table = profile_driver(cfg, trace, log=log)
    fit, report = fit_overheads(table)
    return fit, report, table


def driver_meta(cfg: RealConfig, out: Path, log: Callable[[str], None] = print) -> dict:
    """The driver's costs on ``cfg.workers`` (:func:`measure_overheads`; the measured steps to ``out/driver.csv``) as
    a profile's ``meta`` entries: ``overheads`` (what ``run``, ``compare`` and ``check`` charge) and ``driver``
    (the workers and the fit's error)."""
    from dataclasses import asdict

    fit, report, table = measure_overheads(cfg, None, log=log)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "driver.csv", index=False)
    return {"overheads": asdict(fit), "driver": {"workers": cfg.workers, "fit_mape": report["mape"], "rows": report["rows"]}}


def measure_sync(cfg: RealConfig, rounds: int = 6) -> float:
    """Median seconds of the weight sync as the driver runs it, end to end: the train worker exports the
    actor's weights, they travel (a Ray object on Ray workers), the generator loads them (and resets its
    prefix cache). The profile's ``sync`` op times only the last part."""
    import statistics
    import time

    from oppo_real.executor.session import build_run_models, worker_resources, worker_specs
    from oppo_real.ppo.algo import PPOConfig

    if cfg.workers == "ray":
        start_ray(cfg.ray_address)
    specs = worker_specs(cfg, build_run_models(cfg), cfg.ppo or PPOConfig())
    res = worker_resources(cfg)
    handles = {r: spawn(cfg.workers, r, *specs[r], **res[r]) for r in ("gen", "train")}
    try:
        times = []
        for i in range(rounds + 1):
            t0 = time.perf_counter()
            handles["gen"].call("load_weights", i, i + 1, handles["train"].submit("weights", i))
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:])
    finally:
        for h in handles.values():
            h.kill()
