"""Simulator speed: simulated steps and decode iterations per second of wall time.

Headline: a 1,000-step run of the Mooncake conversation trace with B=112 on the paper's setup
(target: under 10 s on one core). Then how wall time scales with B and with the trace's max length.
Every figure is the median of ``--repeat`` runs; run it on an otherwise idle machine.

    python benchmarks/bench_sim_speed.py            # full
    python benchmarks/bench_sim_speed.py --quick    # 200 steps, 1 repeat
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd

from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.catalog import load_trace
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail


def timed(trace, policy, repeat, **cfg):
    walls, res = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = simulate(trace, policy, **cfg)
        walls.append(time.perf_counter() - t0)
    wall = statistics.median(walls)
    s = res.summary
    return {
        "wall_s": wall,
        "steps_per_s": s["steps"] / wall,
        "iterations_per_s": s["gen_iterations"] / wall,
        "gen_iterations": s["gen_iterations"],
        "timeline_rows": len(res.timeline),
        "simulated_step_s": s["step_time_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200 steps, 1 repeat, smaller scaling runs")
    a = ap.parse_args()
    steps, repeat = (200, 1) if a.quick else (a.steps, a.repeat)
    pd.set_option("display.width", 160)

    mooncake = load_trace("mooncake_conversation")
    rows = []
    for policy in ("baseline", "oppo"):
        rows.append({"policy": policy, "trace": "mooncake_conversation", "B": 112, "steps": steps,
                     **timed(mooncake, policy, repeat, steps=steps, batch=112)})
    head = pd.DataFrame(rows)
    print(f"== headline: {steps} steps, Mooncake conversation, B=112, H200 x 8 (7 gen+train, 1 score), median of {repeat}")
    print(head.to_string(index=False, float_format="{:.2f}".format))
    print()

    scale_steps = max(20, steps // 10)
    rows = []
    for b in (28, 56, 112, 224, 448):
        rows.append({"B": b, **timed(mooncake, "oppo", repeat, steps=scale_steps, batch=b)})
    df = pd.DataFrame(rows)
    df["wall_per_sample_ms"] = 1000 * df["wall_s"] / (df["B"] * scale_steps)
    print(f"== scaling with B: oppo, Mooncake, {scale_steps} steps")
    print(df.to_string(index=False, float_format="{:.3f}".format))
    print()

    rows = []
    for cap in (1024, 4096, 16384, 65536):
        t = generate_longtail(LongTailSpec(tail_fraction=0.1, tail_alpha=1.1, cap=cap), 20000, seed=0)
        d = t.describe()
        rows.append({"max_len": cap, "resp_mean": d["resp_mean"], "resp_p99": d["resp_p99"],
                     **timed(t, "oppo", repeat, steps=scale_steps, batch=112, max_response=None)})
    df = pd.DataFrame(rows)
    print(f"== scaling with the trace's max length: oppo, synthetic long tail (Pareto alpha 1.1), B=112, {scale_steps} steps")
    print(df.to_string(index=False, float_format="{:.2f}".format))


if __name__ == "__main__":
    main()
