"""Planner speed: configurations per second of wall time for an exhaustive plan of the paper's setup.

Headline: every configuration of a space of >= 500 (8 x H200, Qwen2.5-7B actor and reward, B=112, the
ServeGen DeepSeek-R1 reasoning trace), each simulated for 100 steps, on ``--processes`` local worker
processes (default 2, this machine's cores) — the planner's exhaustive path (``Runner.map`` of
``evaluate``). Configurations that do not fit are refused by the memory check without simulating: the
figures count them apart. Besides wall time and configurations per second it reports the CPU seconds per
configuration, and from them what ``--processes`` idle cores would do (the machine may be shared), and
``--every k`` times every k-th configuration only, for a slow or busy machine (the extrapolation to
the whole space is then in ``idle_wall_s_whole_space``).

    python benchmarks/bench_plan.py                          # the whole space (~30 min on 2 idle cores)
    python benchmarks/bench_plan.py --every 4                # a quarter of it
    python benchmarks/bench_plan.py --case grpo              # issue 18 part 8 (below)

``--case grpo``: the planner as a user runs it (``run_plan``: Optuna TPE, the default space with the
trainer's layout searched too — FSDP and Megatron TP/PP, pruned by memory and trainer-phase cost, as
``--train-backend auto``) for a GRPO job of 64 prompts x 32 responses (rule reward, Qwen2.5-7B) on 16
H100s over 2 nodes, 200 trials of 30 steps each on the shipped trace — the same as ``oppo-sim plan
--algorithm grpo --n 32 --batch 64 --reward rule --gpus 16xh100-sxm --nodes 2 --steps 30 --trials 200``
(``--train-backend fsdp``: the space before the trainer was searched). It reports wall time (and the
trainer pruning's share of it), the CPU seconds of this process and its workers (the fairer figure on a
shared machine), the load average, the trainer pruning's counts, and a digest of the table without its
timing columns (same inputs and seed -> same digest).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import time
from pathlib import Path

from tqdm.auto import tqdm

from oppo_sim.core.placement import paper_placement
from oppo_sim.explore.parallel import Runner
from oppo_sim.explore.plan import EvalTask, PlanRequest, evaluate, plan_table
from oppo_sim.explore.space import default_candidate, space_for
from oppo_sim.pipeline.config import SimConfig

TRACE = "servegen_deepseek_r1_sampled"


def bench_space(base: SimConfig, devices: int):
    """>= 500 configurations: every layout, split and tp, every policy, C=500, Δ in 8/16/32 (step rule)."""
    return space_for(base, devices, chunks=(500,), deltas=(8, 16, 32), rules=("step",), budgets=(1024, 4096),
                     stalenesses=(1, 2))


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its finished children (the worker processes)."""
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def grpo_case(a: argparse.Namespace) -> None:
    """Issue 18 part 8: the planner's TPE search of a GRPO job at scale (module notes)."""
    from oppo_sim.core.algorithms import Algorithm
    from oppo_sim.explore.plan import run_plan
    from oppo_sim.explore.plan import _trace
    from oppo_sim.explore.trainer_rank import prune_trainers
    from oppo_sim.hw.fitting.profiles import resolve_hardware
    from oppo_sim.hw.costs.trainer_layout import TRAIN_BACKENDS

    base = SimConfig(batch=64, steps=a.steps, gpu=resolve_hardware("h100-sxm"), placement=paper_placement(16), nodes=2,
                     algorithm=Algorithm("grpo", n=32, reward="rule"))
    backends = TRAIN_BACKENDS if a.train_backend == "auto" else (a.train_backend,)
    req = PlanRequest(space_for(base, 16, 2, backends=backends), base, "oppo-longtail-default", search="tpe",
                      trials=a.trials, seed=0)
    load0, cpu0, t0 = os.getloadavg()[0], _cpu_s(), time.perf_counter()
    p0 = time.perf_counter()  # the pruning alone (run_plan repeats it: a few seconds)
    prune_trainers(req.space, base, _trace(req.trace, tuple(base.trace_limits().items()), base.seed), req.trainer_keep)
    prune_s = time.perf_counter() - p0
    res = run_plan(req, processes=a.processes, progress=True)
    wall, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
    t = res.table
    digest = hashlib.sha256(t.drop(columns=["wall_clock_s", "cpu_s"]).to_csv(index=False).encode()).hexdigest()[:16]
    pr = res.trainers
    figures = {"case": "grpo 64x32, 16 x h100-sxm over 2 nodes", "train_backend": a.train_backend, "trials": a.trials,
               "steps": a.steps, "processes": a.processes, "space": res.space_size, "searched_space": res.searched_size,
               "trainer_layouts": {"placements": pr.groups, "considered": pr.considered, "refused_by_memory": pr.refused,
                                   "ranked_out": pr.ranked_out, "kept": pr.kept, "simulated": res.simulated_layouts},
               "prune_wall_s": round(prune_s, 1), "tried": len(t),
               "fit": int((t["status"] == "ok").sum()), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
               "sim_cpu_s": round(float(t["cpu_s"].sum()), 1), "load_avg_1min_start": load0,
               "load_avg_1min_end": os.getloadavg()[0], "table_digest": digest, "best": res.best["config"],
               "best_trainer": res.best["trainer"], "simulated_by_backend": t[t["status"] != "refused"]["train_backend"]
               .value_counts().to_dict()}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t.to_csv(out / f"plan_grpo_{a.train_backend}.csv", index=False)
    (out / f"bench_grpo_{a.train_backend}.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None, help="steps per configuration (default 100; --case grpo 30)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--every", type=int, default=1, help="evaluate every k-th configuration of the space (default 1: all)")
    ap.add_argument("--out", default="out/bench_plan")
    ap.add_argument("--case", choices=("paper", "grpo"), default="paper",
                    help="paper: the exhaustive space above; grpo: issue 18's GRPO plan (TPE)")
    ap.add_argument("--trials", type=int, default=200, help="--case grpo: distinct configurations tried")
    ap.add_argument("--train-backend", choices=("auto", "fsdp", "megatron"), default="auto",
                    help="--case grpo: trainer backends searched (default auto: both)")
    a = ap.parse_args()
    if a.case == "grpo":
        a.steps = a.steps or 30
        return grpo_case(a)
    a.steps = a.steps or 100
    base = SimConfig(steps=a.steps, gpu=a.gpu, placement=paper_placement(a.devices))
    space = bench_space(base, a.devices)
    size = len(space)
    req = PlanRequest(space, base, a.trace, search="exhaustive", trials=size)
    todo = space.candidates()[:: a.every]
    t0 = time.perf_counter()
    with Runner(a.processes) as runner, tqdm(total=len(todo), desc="plan", unit="cfg") as bar:
        rows = runner.map(evaluate, [EvalTask(c, base, req.trace) for c in todo], bar)
    wall = time.perf_counter() - t0
    t = plan_table(rows, "samples-per-s", default_candidate(a.devices, base))
    simulated = int(t["status"].isin(["ok", "over-stale"]).sum())
    cpu = float(t["cpu_s"].sum())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t.to_csv(out / "plan.csv", index=False)
    per_cfg = cpu / len(t)  # CPU seconds per configuration tried (refused ones cost ~0)
    figures = {
        "space": size, "every": a.every, "tried": len(t), "simulated": simulated, "refused": len(t) - simulated,
        "steps": a.steps, "processes": a.processes, "wall_s": round(wall, 1), "configs_per_s": round(len(t) / wall, 3),
        "simulated_per_s": round(simulated / wall, 3), "cpu_s": round(cpu, 1), "cpu_s_per_config": round(per_cfg, 3),
        "idle_configs_per_s": round(a.processes / per_cfg, 3),  # what `processes` idle cores would do
        "idle_wall_s_whole_space": round(size * per_cfg / a.processes, 1), "load_avg_1min": os.getloadavg()[0],
    }
    (out / "bench.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    cols = ["rank", "config", "samples_per_s", "speedup", "util_gen", "util_train", "util_score", "staleness_mean"]
    print(t[t["status"] == "ok"].head(10)[cols].to_string(index=False))
    paper = t[(t["placement"] == f"shared {a.devices - 1}+1") & (t["status"] == "ok")]
    if len(paper):
        print(f"best on the paper's {a.devices - 1}+1: {paper.iloc[0]['config']} {paper.iloc[0]['samples_per_s']:.3f} samples/s "
              f"(rank {paper.iloc[0]['rank']}); best tried {t['samples_per_s'].max():.3f}")


if __name__ == "__main__":
    main()
