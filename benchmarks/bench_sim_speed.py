"""Simulator speed: wall time, simulation events and wall time per simulated sample.

Headline: a 1,000-step run of the Mooncake conversation trace with B=112 on the paper's setup under
``oppo`` and ``baseline`` (the planner's goal: about a second per configuration), timed two ways:

- ``cli``: ``python -m oppo_sim.cli run --policy P --steps 1000 --batch 112 --trace mooncake_conversation``
  as a user runs it (interpreter start, imports, trace load, printing included);
- ``simulate``: ``simulate(trace, P, steps=1000, batch=112)`` in a warm process (the trace already loaded).

For each: wall time and CPU time (median of ``--repeat`` runs, with the min-max spread), simulated samples per
second of wall time, wall time per simulated sample, and simulation events (simpy events processed, counted in
a separate untimed run) per simulated sample, and what simpy alone takes for that many events (a floor for
any design with that many events). Then how ``simulate()`` scales with B and with the trace's maximum
response length.

GRPO case (``--skip-grpo`` leaves it out): 64 prompts x 32 responses per step (2,048 simulated responses) on 16
H100s, colocated (every GPU generates, scores and trains — verl's hybrid engine, how GRPO jobs usually run),
Qwen2.5-7B, a rule reward (5 ms of CPU per response) and a KL reference, 100 steps of the bundled long-tail
trace, ``simulate()`` in a warm process: wall time and µs per simulated response. It needs groups in the step
machine (a step trains B x n responses); until they are there it is skipped with a message saying so.

Every measurement runs in a fresh subprocess pinned to one core (``--cpu``, default 1). ``--trees A B``
measures several source trees (e.g. a ``git worktree`` of an older commit, then this one), interleaved run by
run so that load from other processes hits both alike. The trace ships with the project (``oppo_sim/data``,
found by name on the usual search path):

    python benchmarks/bench_sim_speed.py                      # full
    python benchmarks/bench_sim_speed.py --quick              # 200 steps, 1 repeat, smaller scaling runs
    python benchmarks/bench_sim_speed.py --trees /tmp/before . --skip-scaling
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
TRACE = "mooncake_conversation"


# -- workers (run in a subprocess, inside the tree being measured) ----------------------------------------
def _worker(spec: dict) -> dict:
    import simpy

    from oppo_sim.pipeline.simulate import simulate
    from oppo_sim.traces.catalog import load_trace
    from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

    if spec.get("grpo"):
        from oppo_sim.core.algorithms import Algorithm
        from oppo_sim.core.placement import colocated_placement
        from oppo_sim.traces.trace import DEFAULT_TRACE

        g = spec["grpo"]
        trace = load_trace(DEFAULT_TRACE)
        cfg = {"algorithm": Algorithm("grpo", n=g["n"], reward="rule"), "placement": colocated_placement(g["devices"]),
               "gpu": "h100-sxm"}
    elif spec.get("cap"):
        trace = generate_longtail(LongTailSpec(tail_fraction=0.1, tail_alpha=1.1, cap=spec["cap"]), 20000, seed=0)
        cfg = {"max_response": None}
    else:
        trace, cfg = load_trace(TRACE), {}
    events = [0]
    if spec["count_events"]:  # an untimed run: count every simpy event processed
        step = simpy.Environment.step

        def counting(env):
            events[0] += 1
            return step(env)

        simpy.Environment.step = counting
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(trace, spec["policy"], steps=spec["steps"], batch=spec["batch"], **cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = res.summary
    out = {"wall_s": wall, "cpu_s": cpu, "events": events[0], "gen_iterations": int(s["gen_iterations"]),
           "timeline_rows": len(res.timeline), "simulated_step_s": float(s["step_time_s"]),
           "samples_trained": int(s["samples_trained"])}
    if spec.get("cap"):
        d = trace.describe()
        out.update(resp_mean=d["resp_mean"], resp_p99=d["resp_p99"])
    return out


def _simpy_floor(events: int) -> dict:
    """What simpy alone takes for ``events`` events: processes that only wait on timeouts (every event also
    resumes a process and schedules the next one; in a simulation about 40% of events resume a process)."""
    import simpy

    env = simpy.Environment()

    def wait():
        while True:
            yield env.timeout(1.0)

    for _ in range(8):
        env.process(wait())
    t0 = time.perf_counter()
    env.run(until=events / 8 + 0.5)
    return {"wall_s": time.perf_counter() - t0}


def _run_worker(tree: Path, spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)], cwd=tree, env=env,
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"worker failed in {tree}: {spec}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _run_cli(tree: Path, policy: str, steps: int, batch: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "oppo_sim.cli", "run", "--policy", policy, "--steps", str(steps), "--batch", str(batch),
           "--trace", TRACE]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


# -- orchestration ----------------------------------------------------------------------------------------
def _median(runs: list[dict], key: str) -> tuple[float, float, float]:
    vals = [r[key] for r in runs]
    return statistics.median(vals), min(vals), max(vals)


def _headline(trees: list[Path], steps: int, repeat: int) -> list[dict]:
    rows = []
    for policy in ("oppo", "baseline"):
        counts = {t: _run_worker(t, {"policy": policy, "steps": steps, "batch": 112, "count_events": True}) for t in trees}
        runs: dict[tuple[Path, str], list[dict]] = {(t, how): [] for t in trees for how in ("cli", "simulate")}
        for _ in range(repeat):  # interleaved: tree A, tree B, tree A, ...
            for t in trees:
                runs[(t, "cli")].append(_run_cli(t, policy, steps, 112))
                runs[(t, "simulate")].append(_run_worker(t, {"policy": policy, "steps": steps, "batch": 112, "count_events": False}))
        floor = {t: _run_worker(t, {"floor": counts[t]["events"]})["wall_s"] for t in trees}
        samples = steps * 112
        for t in trees:
            for how in ("cli", "simulate"):
                wall, wmin, wmax = _median(runs[(t, how)], "wall_s")
                cpu, cmin, cmax = _median(runs[(t, how)], "cpu_s")
                rows.append({
                    "tree": t.name or str(t), "policy": policy, "path": how, "wall_s": wall, "wall_min": wmin, "wall_max": wmax,
                    "cpu_s": cpu, "cpu_min": cmin, "cpu_max": cmax, "samples_per_s": samples / wall,
                    "wall_us_per_sample": 1e6 * wall / samples, "events_per_sample": counts[t]["events"] / samples,
                    "events": counts[t]["events"], "gen_iterations": counts[t]["gen_iterations"], "simpy_floor_s": floor[t],
                })
    return rows


def _scaling(tree: Path, steps: int, repeat: int) -> tuple[list[dict], list[dict]]:
    def med(spec: dict) -> dict:
        runs = [_run_worker(tree, {**spec, "count_events": False}) for _ in range(repeat)]
        best = dict(runs[0])
        best["wall_s"] = statistics.median(r["wall_s"] for r in runs)
        best["cpu_s"] = statistics.median(r["cpu_s"] for r in runs)
        return best

    by_b = []
    for b in (28, 56, 112, 224, 448):
        r = med({"policy": "oppo", "steps": steps, "batch": b})
        by_b.append({"B": b, **r, "wall_us_per_sample": 1e6 * r["wall_s"] / (b * steps)})
    by_len = []
    for cap in (1024, 4096, 16384, 65536):
        r = med({"policy": "oppo", "steps": steps, "batch": 112, "cap": cap})
        by_len.append({"max_len": cap, **r})
    return by_b, by_len


GRPO_DEVICES = 16


def _grpo(tree: Path, steps: int, prompts: int, n: int, repeat: int) -> list[dict] | str:
    """The GRPO case's rows (oppo and baseline), or why it was skipped: a 1-step probe of 2 prompts x 2 must
    train 4 responses (groups in the step machine, contract of issue 17)."""
    probe = _run_worker(tree, {"policy": "baseline", "steps": 1, "batch": 2, "count_events": False,
                               "grpo": {"n": 2, "devices": GRPO_DEVICES}})
    if probe["samples_trained"] != 4:
        return (f"skipped: the step machine does not batch groups yet (a step of 2 prompts x 2 trained "
                f"{probe['samples_trained']} responses, not 4); it runs once groups land in core/")
    rows = []
    for policy in ("oppo", "baseline"):
        spec = {"policy": policy, "steps": steps, "batch": prompts, "count_events": False,
                "grpo": {"n": n, "devices": GRPO_DEVICES}}
        runs = [_run_worker(tree, spec) for _ in range(repeat)]
        wall, wmin, wmax = _median(runs, "wall_s")
        responses = steps * prompts * n
        rows.append({"policy": policy, "steps": steps, "prompts": prompts, "n": n, "responses": responses,
                     "samples_trained": runs[0]["samples_trained"], "wall_s": wall, "wall_min": wmin, "wall_max": wmax,
                     "cpu_s": _median(runs, "cpu_s")[0], "wall_us_per_response": 1e6 * wall / responses,
                     "gen_iterations": runs[0]["gen_iterations"], "simulated_step_s": runs[0]["simulated_step_s"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200 steps, 1 repeat, smaller scaling runs")
    ap.add_argument("--trees", nargs="+", type=Path, default=[HERE], help="source trees to measure, interleaved")
    ap.add_argument("--cpu", type=int, default=1, help="pin every run to this core (-1: do not pin)")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--skip-headline", action="store_true", help="leave out the headline (it needs the shared traces)")
    ap.add_argument("--skip-grpo", action="store_true", help="leave out the GRPO case")
    ap.add_argument("--grpo-steps", type=int, default=100, help="steps of the GRPO case (default %(default)s)")
    ap.add_argument("--grpo-prompts", type=int, default=64, help="prompts per step of the GRPO case (default %(default)s)")
    ap.add_argument("--grpo-n", type=int, default=32, help="responses per prompt of the GRPO case (default %(default)s)")
    ap.add_argument("--grpo-json", type=Path, default=None, help="also write the GRPO rows (or the skip reason) as JSON")
    ap.add_argument("--json", type=Path, default=None, help="also write the headline rows as JSON")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        spec = json.loads(a.worker)
        print(json.dumps(_simpy_floor(spec["floor"]) if "floor" in spec else _worker(spec)))
        return
    import pandas as pd

    if a.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})  # inherited by every subprocess
    steps, repeat = (200, 1) if a.quick else (a.steps, a.repeat)
    trees = [t.resolve() for t in a.trees]
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)

    if not a.skip_grpo:
        g = _grpo(trees[-1], a.grpo_steps, a.grpo_prompts, a.grpo_n, repeat)
        print(f"== GRPO: {a.grpo_prompts} prompts x {a.grpo_n} responses, {GRPO_DEVICES} x H100 colocated, qwen2.5-7b, "
              f"rule reward, {a.grpo_steps} steps, simulate(), median of {repeat}, tree {trees[-1].name}")
        if isinstance(g, str):
            print(g)
        else:
            print(pd.DataFrame(g).to_string(index=False, float_format="{:.2f}".format))
        if a.grpo_json:
            a.grpo_json.write_text(json.dumps(g if not isinstance(g, str) else {"skipped": g}, indent=1))
        print()
    if a.skip_headline:
        return
    head = pd.DataFrame(_headline(trees, steps, repeat))
    print(f"== headline: {steps} steps, {TRACE}, B=112, H200 x 8 (7 gen+train, 1 score); median of {repeat} "
          f"(min-max), one core")
    cols = ["tree", "policy", "path", "wall_s", "wall_min", "wall_max", "cpu_s", "cpu_min", "cpu_max", "samples_per_s",
            "wall_us_per_sample", "events_per_sample", "gen_iterations", "simpy_floor_s"]
    print(head[cols].to_string(index=False, float_format="{:.2f}".format))
    print("simpy_floor_s: the same number of simpy events with nothing else to do (each resuming a process)")
    if a.json:
        a.json.write_text(head.to_json(orient="records", indent=1))
    if a.skip_scaling:
        return
    scale_steps = max(20, steps // 10)
    by_b, by_len = _scaling(trees[-1], scale_steps, repeat)
    print()
    print(f"== scaling with B: oppo, {TRACE}, {scale_steps} steps, simulate(), tree {trees[-1].name}")
    print(pd.DataFrame(by_b)[["B", "wall_s", "cpu_s", "wall_us_per_sample", "gen_iterations", "timeline_rows"]]
          .to_string(index=False, float_format="{:.3f}".format))
    print()
    print(f"== scaling with the trace's max length: oppo, synthetic long tail (Pareto alpha 1.1), B=112, {scale_steps} steps")
    print(pd.DataFrame(by_len)[["max_len", "resp_mean", "resp_p99", "wall_s", "cpu_s", "gen_iterations"]]
          .to_string(index=False, float_format="{:.2f}".format))


if __name__ == "__main__":
    main()
