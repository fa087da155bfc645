"""Real executor: OPPO vs the synchronous baseline on a long-tail trace, measured on this machine.

Both policies run in one invocation, one after the other, with the `oppo-real run` defaults: vLLM actor
on Ray workers (generate+train pool on core 0, scoring pool on core 1), tiny locally built models,
B=8, response lengths forced from ``oppo-longtail-default`` x 0.1 (capped at 256), C=16, Δ0=2.
The first ``--warmup`` steps (engine warm-up) are left out of every median and utilization.

    python benchmarks/bench_real.py                 # 30 steps per policy (a few minutes)
    python benchmarks/bench_real.py --steps 10      # quicker look
    python benchmarks/bench_real.py --json out/bench_real.json

Run it on an otherwise idle machine: the two pools are pinned to two cores, and anything else running
on them shows up as step time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import pandas as pd

from oppo_real.cli import quiet_libraries
from oppo_real.commands.common import (
    CPU_RUN_LENGTH_SCALE,
    CPU_RUN_MAX_RESPONSE,
    DEFAULT_TRACE,
)
from oppo_real.config import RealConfig
from oppo_real.executor.real_result import RealResult
from oppo_real.executor.runner import run_real
from oppo_sim.core.policies import make_policy
from oppo_sim.traces.catalog import load_trace


def window_utilization(res: RealResult, warmup: int) -> dict[str, float]:
    """Busy fraction of each pool over the steps after ``warmup`` (union of its engine-call intervals)."""
    st = res.steps[res.steps["step"] >= warmup]
    lo, hi = float(st["start"].min()), float(st["end"].max())
    out = {}
    for pool, g in res.timeline.groupby("pool"):
        iv = sorted((max(lo, s), min(hi, e)) for s, e in zip(g["start"], g["end"]) if e > lo and s < hi)
        busy, cur_s, cur_e = 0.0, None, None
        for s, e in iv:
            if cur_e is None or s > cur_e:
                busy += (cur_e - cur_s) if cur_e is not None else 0.0
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy += (cur_e - cur_s) if cur_e is not None else 0.0
        out[str(pool)] = busy / (hi - lo) if hi > lo else 0.0
    return out


def summarize_run(name: str, res: RealResult, warmup: int, wall: float) -> dict:
    st = res.steps[res.steps["step"] >= warmup]
    util = window_utilization(res, warmup)
    return {
        "policy": name,
        "label": res.summary["policy"],
        "steps": len(res.steps),
        "median_step_s": statistics.median(st["step_time_s"]),
        "mean_step_s": float(st["step_time_s"].mean()),
        "samples_per_s": float(st["samples"].sum() / st["step_time_s"].sum()),
        "median_gen_s": statistics.median(st["generation_s"]),
        "median_score_s": statistics.median(st["scoring_s"]),
        "median_train_s": statistics.median(st["training_s"]),
        "util_main": util.get("main", float("nan")),
        "util_score": util.get("score", float("nan")),
        "reward_mean": float(st["reward"].mean()),
        "reward_last10": float(res.steps["reward"].tail(10).mean()),
        "staleness_mean": float(st["staleness_mean"].mean()),
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of medians and utilization")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--policies", default="baseline,oppo")
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--delta", type=int, default=2)
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--length-scale", type=float, default=CPU_RUN_LENGTH_SCALE)
    ap.add_argument("--max-response", type=int, default=CPU_RUN_MAX_RESPONSE)
    ap.add_argument("--backend", default="vllm", choices=("vllm", "torch"))
    ap.add_argument("--workers", default="ray", choices=("ray", "local"))
    ap.add_argument("--cache", default=None, help="model cache (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the table and per-step rows here")
    a = ap.parse_args()
    if a.steps <= a.warmup:
        ap.error(f"--steps ({a.steps}) must exceed --warmup ({a.warmup})")
    quiet_libraries()

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    trace = load_trace(a.trace, max_response=None)
    cfg = RealConfig(batch=a.batch, steps=a.steps, seed=a.seed, backend=a.backend, workers=a.workers, cache_dir=a.cache,
                     max_response=a.max_response, length_scale=a.length_scale)
    print(f"== bench_real: {a.policies} on {trace.name} x{a.length_scale} (cap {a.max_response}), B={a.batch}, "
          f"{a.steps} steps ({a.warmup} warm-up), {a.backend} on {a.workers} workers, C={a.chunk}, Δ0={a.delta}; "
          f"load average at start {load:.2f} on {os.cpu_count()} cores", flush=True)
    rows, per_step = [], {}
    for name in [p.strip() for p in a.policies.split(",") if p.strip()]:
        policy = make_policy(name, chunk=a.chunk, delta=a.delta)
        t0 = time.time()
        res = run_real(cfg, policy, trace)
        wall = time.time() - t0
        rows.append(summarize_run(name, res, a.warmup, wall))
        per_step[name] = res.steps.drop(columns=["start", "end"]).to_dict(orient="records")
        r = rows[-1]
        print(f"  {name}: median step {r['median_step_s']:.3f} s, reward {r['reward_mean']:.3f}, wall {wall:.0f} s", flush=True)
    table = pd.DataFrame(rows)
    base = table.set_index("policy")["median_step_s"].get("baseline")
    if base is not None:
        table["vs_baseline"] = table["median_step_s"] / base
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cols = ["policy", "median_step_s", "vs_baseline", "mean_step_s", "samples_per_s", "median_gen_s", "median_score_s", "median_train_s",
            "util_main", "util_score", "reward_mean", "reward_last10", "staleness_mean", "wall_s"]
    with pd.option_context("display.width", 220, "display.max_columns", 30):
        print(table[[c for c in cols if c in table]].to_string(index=False, float_format="{:.3f}".format))
    if base is not None and "oppo" in set(table["policy"]):
        o = table.set_index("policy").loc["oppo"]
        b = table.set_index("policy").loc["baseline"]
        print(f"oppo / baseline median step time: {o['median_step_s'] / b['median_step_s']:.3f} "
              f"(speedup {b['median_step_s'] / o['median_step_s']:.2f}x); mean step time: "
              f"{o['mean_step_s'] / b['mean_step_s']:.3f} (throughput {o['samples_per_s'] / b['samples_per_s']:.2f}x); utilization main "
              f"{b['util_main']:.0%} -> {o['util_main']:.0%}, score {b['util_score']:.0%} -> {o['util_score']:.0%}")
    print(f"load average at end {load_end:.2f}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"config": vars(a) | {"json": str(a.json)}, "load_start": load, "load_end": load_end,
                                      "table": table.to_dict(orient="records"), "steps": per_step}, indent=2, default=str))
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
