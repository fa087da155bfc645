"""Planner speed: configurations per second of wall time for an exhaustive plan of the paper's setup.

Headline: every configuration of a space of >= 500 (8 x H200, Qwen2.5-7B actor and reward, B=112, the
ServeGen DeepSeek-R1 reasoning trace), each simulated for 100 steps, on ``--processes`` local worker
processes (default 2, this machine's cores). Configurations that do not fit are refused by the memory
check without simulating: the figures count them apart. The table it writes (``--out``) is also the
planner's exhaustive answer for the paper's setup over this knob grid.

    python benchmarks/bench_plan.py                         # the full benchmark (minutes)
    python benchmarks/bench_plan.py --limit 60 --steps 20   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from oppo_sim.core.placement import paper_placement
from oppo_sim.explore.plan import PlanRequest, run_plan
from oppo_sim.explore.space import space_for
from oppo_sim.pipeline.config import SimConfig

TRACE = "servegen_deepseek_r1_sampled"


def bench_space(base: SimConfig, devices: int):
    """>= 500 configurations: every layout, split and tp, every policy, C=500, Δ in 8/16/32 (step rule)."""
    return space_for(base, devices, chunks=(500,), deltas=(8, 16, 32), rules=("step",), budgets=(1024, 4096),
                     stalenesses=(1, 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="evaluate only a TPE-chosen subset of this many (0: all)")
    ap.add_argument("--out", default="out/bench_plan")
    a = ap.parse_args()
    os.environ.setdefault("OPPO_TRACES", str(Path(__file__).resolve().parents[2] / "shared" / "traces"))
    base = SimConfig(steps=a.steps, gpu=a.gpu, placement=paper_placement(a.devices))
    space = bench_space(base, a.devices)
    size = len(space)
    req = PlanRequest(space, base, a.trace, search="tpe" if a.limit else "exhaustive", trials=a.limit or size)
    t0 = time.perf_counter()
    res = run_plan(req, processes=a.processes, progress=True)
    wall = time.perf_counter() - t0
    t = res.table
    simulated = int(t["status"].isin(["ok", "over-stale"]).sum())
    sim_cpu = float(t["wall_clock_s"].sum())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t.to_csv(out / "plan.csv", index=False)
    figures = {
        "space": size, "tried": len(t), "simulated": simulated, "refused": len(t) - simulated, "steps": a.steps,
        "processes": a.processes, "wall_s": round(wall, 1), "configs_per_s": round(len(t) / wall, 3),
        "simulated_per_s": round(simulated / wall, 3), "sim_cpu_s": round(sim_cpu, 1),
        "sim_s_per_config": round(sim_cpu / max(simulated, 1), 3), "search": res.search,
    }
    (out / "bench.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    cols = ["rank", "config", "samples_per_s", "speedup", "util_gen", "util_train", "util_score", "staleness_mean"]
    print(res.ranked(10)[cols].to_string(index=False))
    paper = t[(t["placement"] == f"shared {a.devices - 1}+1") & (t["status"] == "ok")]
    if len(paper):
        print(f"best on the paper's {a.devices - 1}+1: {paper.iloc[0]['config']} {paper.iloc[0]['samples_per_s']:.3f} samples/s "
              f"(rank {paper.iloc[0]['rank']}); best overall {res.best['samples_per_s']:.3f}")


if __name__ == "__main__":
    main()
