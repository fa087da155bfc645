"""``oppo-sim``: simulate RLHF pipelines under overlap policies from the command line.

Commands: ``run`` (one simulation), ``compare`` (baseline vs overlap policies), ``sweep`` (a grid to
CSV/Parquet), ``plan`` (the fastest placement/policy/knobs, ``plan_cli.py``), ``replay`` (a generation engine serving an arrival-timed trace), ``traces`` (what traces
the search path finds). Bad input exits with status 2 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from oppo_sim.cliargs import (
    Parser,
    int_list,
    nonneg_int,
    positive,
    run_command,
    str_list,
)
from oppo_sim.core.errors import ConfigError

DEFAULT_COMPARE = ("baseline", "stream", "intra", "inter", "oppo")


def _add_setup(p: argparse.ArgumentParser) -> None:
    from oppo_sim.traces.trace import DEFAULT_MAX_RESPONSE, DEFAULT_TRACE

    g = p.add_argument_group("workload and hardware (defaults: the OPPO paper's setup)")
    g.add_argument("--trace", default=DEFAULT_TRACE, help=f"trace name on the search path or a file (default {DEFAULT_TRACE})")
    g.add_argument("--steps", type=positive(), default=20, help="PPO steps to simulate (default 20)")
    g.add_argument("--batch", type=positive(), default=112, help="samples trained per step, B (default 112)")
    g.add_argument("--gpu", default="h200", help="GPU id (h200, h100-sxm, a100-80gb, ...) or a calibrated .json profile")
    g.add_argument("--profile", default=None, help="calibrated hardware profile (.json); overrides --gpu")
    g.add_argument("--actor", default="qwen2.5-7b", help="actor model id (default qwen2.5-7b)")
    g.add_argument("--reward", default="qwen2.5-7b", help="reward model id (default qwen2.5-7b); the critic has its shape")
    g.add_argument("--placement", default="paper", help="paper (7 generate+train, 1 scores), colocated, disaggregated")
    g.add_argument("--devices", type=positive(), default=8, help="GPUs in total for the paper/colocated placements")
    g.add_argument("--tp", type=positive(), default=1, help="tensor parallelism of each generation replica")
    g.add_argument("--max-response", type=nonneg_int, default=DEFAULT_MAX_RESPONSE,
                   help=f"generation cap, max new tokens (default {DEFAULT_MAX_RESPONSE}; 0 = no cap)")
    g.add_argument("--ppo-epochs", type=positive(), default=4, help="PPO epochs per step (default 4, as TRL)")
    g.add_argument("--minibatches", type=positive(), default=1, help="mini-batches per epoch (default 1, as TRL)")
    g.add_argument("--contention", type=float, default=0.0, help="slowdown factor when jobs share a device (default 0)")
    g.add_argument("--seed", type=nonneg_int, default=0, help="seed of every random choice: synthetic rewards, synthetic traces")
    m = p.add_argument_group("memory and weight sync (a configuration that does not fit is refused)")
    m.add_argument("--zero", choices=("auto", "0", "1", "2", "3"), default="auto",
                   help="ZeRO stage of the trainer (default auto: 2, else 3, whichever fits first)")
    m.add_argument("--recompute", choices=("auto", "none", "selective", "full"), default="auto",
                   help="activation recomputation (default auto: none, else selective/full, whichever fits first)")
    m.add_argument("--eager-attention", action="store_true", help="attention stores its s x s scores (no FlashAttention)")
    m.add_argument("--micro-batch-tokens", type=positive(), default=None,
                   help="tokens per training micro-batch (default: one longest sequence)")
    m.add_argument("--sp", type=positive(), default=1, help="sequence parallelism of the trainer (default 1)")
    m.add_argument("--gpu-mem-util", type=positive(float), default=0.9, help="usable fraction of device memory (default 0.9)")
    m.add_argument("--colocate", choices=("sleep", "resident"), default="sleep",
                   help="generation sharing GPUs: engine and trainer take turns (sleep, default) or both stay resident")
    m.add_argument("--nodes", type=positive(), default=1, help="nodes the devices are spread over (default 1)")
    m.add_argument("--sync", choices=("auto", "nvlink", "network", "host"), default="auto",
                   help="weight sync path (default auto: nvlink within a node, network across nodes)")
    k = p.add_argument_group("policy knobs")
    k.add_argument("--chunk", type=positive(), default=None, help="chunk size C for intra/oppo (default 500)")
    k.add_argument("--delta", type=nonneg_int, default=None, help="over-commit Δ (inter) or initial Δ (dynamic)")
    k.add_argument("--budget", type=positive(), default=None, help="per-step token budget (partial-rollout)")
    k.add_argument("--staleness", type=positive(), default=None, help="staleness bound k (async)")


def _config(a: argparse.Namespace):
    from oppo_sim.core.placement import (
        colocated_placement,
        disaggregated_placement,
        paper_placement,
    )
    from oppo_sim.engine.request import EngineConfig
    from oppo_sim.hw.memory import TrainMemoryConfig
    from oppo_sim.hw.profiles import resolve_hardware
    from oppo_sim.pipeline.config import SimConfig

    place = a.placement.strip().lower()
    if place == "paper":
        placement = paper_placement(a.devices)
    elif place == "colocated":
        placement = colocated_placement(a.devices)
    elif place == "disaggregated":
        placement = disaggregated_placement()
    else:
        raise ConfigError(f"unknown placement '{a.placement}'; known: paper, colocated, disaggregated")
    if place == "paper" and a.devices < 2:
        raise ConfigError("the paper placement needs at least 2 devices (one scores)")
    return SimConfig(
        batch=a.batch, steps=a.steps, seed=a.seed, gpu=resolve_hardware(a.profile or a.gpu), actor=a.actor, reward=a.reward,
        placement=placement, engine=EngineConfig(tp=a.tp, gpu_memory_utilization=a.gpu_mem_util), ppo_epochs=a.ppo_epochs,
        minibatches=a.minibatches, max_response=a.max_response or None, contention=a.contention,
        train_memory=TrainMemoryConfig(
            zero_stage=None if a.zero == "auto" else int(a.zero), recompute=None if a.recompute == "auto" else a.recompute,
            flash_attention=not a.eager_attention, micro_batch_tokens=a.micro_batch_tokens, sequence_parallel=a.sp,
        ),
        colocate=a.colocate, nodes=a.nodes, sync=a.sync,
    )


def _policy(name: str, a: argparse.Namespace):
    from oppo_sim.core.policies import make_policy

    return make_policy(name, chunk=a.chunk, delta=a.delta, budget=a.budget, staleness=a.staleness)


def _row(res) -> dict:
    s = res.summary
    row = {
        "policy": s["policy"], "step_time_s": s["step_time_s"], "samples_per_s": s["samples_per_s"],
        "tokens_per_s": s["tokens_per_s"],
    }
    for pool, u in s["utilization"].items():
        row[f"util_{pool}"] = u
    row.update(util_overall=s["utilization_overall"], flop_util=s["flop_utilization"],
               staleness=s["staleness_mean"], in_flight=s["in_flight_end"])
    return row


def _memory_line(s: dict) -> str:
    """Headroom per pool (GiB per device), the KV cache generation gets, the training setup and sync path."""
    pools = ", ".join(
        f"{pool} {gib:.1f} GiB" + (f" (KV cache {s['kv_cache_gib'][pool]:.1f} GiB)" if pool in s["kv_cache_gib"] else "")
        for pool, gib in s["memory_headroom_gib"].items()
    )
    return (f"memory headroom per device: {pools}; trainer ZeRO-{s['zero_stage']}, recompute {s['recompute']} "
            f"(longest sequence {s['max_seq_tokens']:,} tokens); weight sync over {s['sync_mechanism']}")


def _print_table(df: pd.DataFrame) -> None:
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.float_format", "{:.3f}".format):
        print(df.to_string(index=False))


def cmd_run(a: argparse.Namespace) -> int:
    from oppo_sim.pipeline.simulate import simulate
    from oppo_sim.traces.catalog import load_trace

    cfg = _config(a)
    trace = load_trace(a.trace, max_response=cfg.max_response, seed=cfg.seed)
    res = simulate(trace, _policy(a.policy, a), cfg, progress=sys.stderr.isatty())
    s = res.summary
    print(f"trace {s['trace']} ({len(trace)} rows, cap {cfg.max_response}), {cfg.gpu_id}, placement {res.meta['placement']}")
    print(_memory_line(s))
    _print_table(pd.DataFrame([_row(res)]))
    cols = ["step", "step_time_s", "generation_s", "scoring_s", "training_s", "deferred", "delta", "chunk", "staleness_max"]
    print()
    _print_table(res.steps[cols].head(10))
    if len(res.steps) > 10:
        print(f"... {len(res.steps) - 10} more steps")
    if a.steps_csv:
        res.steps.to_csv(a.steps_csv, index=False)
    if a.timeline_csv:
        res.timeline.to_csv(a.timeline_csv, index=False)
    if a.plot:
        from oppo_sim.explore.plots import plot_timeline

        plot_timeline(res, steps=(0, min(3, len(res.steps) - 1))).savefig(a.plot, dpi=120, bbox_inches="tight")
        print(f"figure: {a.plot}")
    if a.json:
        res.write_json(a.json)
        print(f"json: {a.json}")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from oppo_sim.pipeline.simulate import simulate
    from oppo_sim.traces.catalog import load_trace

    cfg = _config(a)
    trace = load_trace(a.trace, max_response=cfg.max_response, seed=cfg.seed)
    names = list(a.policies)
    if "baseline" not in names:
        names.insert(0, "baseline")
    results = {}
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    it = tqdm(names, desc="policies", disable=not sys.stderr.isatty()) if tqdm else names
    for name in it:
        results[name] = simulate(trace, _policy(name, a), cfg)
    df = pd.DataFrame([_row(r) for r in results.values()])
    base = results["baseline"].summary
    df.insert(3, "speedup", df["samples_per_s"] / base["samples_per_s"])
    df.insert(4, "util_gain", df["util_overall"] / base["utilization_overall"])
    print(f"trace {trace.name} ({len(trace)} rows, cap {cfg.max_response}), {cfg.gpu_id}, B={cfg.batch}, "
          f"{cfg.steps} steps, placement {results['baseline'].meta['placement']}")
    print(_memory_line(base))
    _print_table(df)
    if a.plot:
        from oppo_sim.explore.plots import plot_compare

        plot_compare(results).savefig(a.plot, dpi=120, bbox_inches="tight")
        print(f"figure: {a.plot}")
    if a.json:
        out = {"trace": trace.name, "gpu": cfg.gpu_id, "batch": cfg.batch, "steps": cfg.steps,
               "policies": {name: r.to_json() for name, r in results.items()},
               "speedup": dict(zip(names, df["speedup"].tolist()))}
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"json: {a.json}")
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from oppo_sim.explore.sweep import SweepGrid, run_sweep, save_table
    from oppo_sim.hw.profiles import resolve_hardware

    cfg = _config(a)
    grid = SweepGrid(policies=a.policies, chunks=a.chunks, deltas=a.deltas, traces=a.traces or (a.trace,),
                     gpus=tuple(resolve_hardware(g) for g in a.gpus) if a.gpus else (cfg.gpu,), base=cfg)
    df = run_sweep(grid, processes=a.processes, progress=sys.stderr.isatty(), use_ray=a.ray, ray_address=a.ray_address)
    cols = [c for c in ("policy", "chunk", "delta", "trace", "gpu", "step_time_s", "samples_per_s", "speedup",
                        "utilization_overall", "flop_utilization") if c in df.columns]
    _print_table(df[cols])
    if a.out:
        save_table(df, a.out)
        print(f"table: {a.out}")
    if a.json:
        Path(a.json).write_text(df.to_json(orient="records", indent=2) + "\n")
        print(f"json: {a.json}")
    return 0


def cmd_replay(a: argparse.Namespace) -> int:
    from oppo_sim.engine.request import EngineConfig
    from oppo_sim.pipeline.replay import ReplayConfig, replay
    from oppo_sim.traces.catalog import load_trace

    engine = EngineConfig(max_num_seqs=a.max_num_seqs, max_num_batched_tokens=a.max_batched_tokens,
                          block_size=a.block_size, gpu_memory_utilization=a.gpu_mem_util, tp=a.tp)
    from oppo_sim.hw.profiles import resolve_hardware

    cfg = ReplayConfig(gpu=resolve_hardware(a.profile or a.gpu), model=a.model, engine=engine, limit=a.limit or None,
                       time_scale=a.time_scale, rate=a.rate, seed=a.seed)
    trace = load_trace(a.trace, max_response=a.max_response or None, seed=a.seed)
    res = replay(trace, cfg)
    s = res.summary
    print(f"replay of {trace.name}: {s['requests']} requests on {s['tp']} x {s['gpu']}, {s['model']}, "
          f"{s['kv_blocks']} KV blocks")
    _print_table(pd.DataFrame([{k: v for k, v in s.items() if k not in ("gpu", "model", "tp", "kv_blocks")}]))
    if a.requests_csv:
        res.requests.to_csv(a.requests_csv, index=False)
    if a.json:
        Path(a.json).write_text(json.dumps(s, indent=2) + "\n")
        print(f"json: {a.json}")
    return 0


def cmd_traces(a: argparse.Namespace) -> int:
    from oppo_sim.traces.catalog import available_traces, trace_search_path

    print("search path: " + ", ".join(str(p) for p in trace_search_path()))
    _print_table(available_traces())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from oppo_sim.core.policies import POLICY_NAMES
    from oppo_sim.plan_cli import add_plan_parser

    p = Parser(prog="oppo-sim", description="Simulate PPO-RLHF pipelines under OPPO and peer overlap policies.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    r = sub.add_parser("run", help="one simulation")
    _add_setup(r)
    r.add_argument("--policy", default="oppo", help=f"one of {', '.join(POLICY_NAMES)} (default oppo)")
    r.add_argument("--json", help="write the summary as JSON")
    r.add_argument("--steps-csv", help="write the per-step table")
    r.add_argument("--timeline-csv", help="write the timeline table")
    r.add_argument("--plot", help="write a timeline figure of the first steps (PNG/PDF/SVG)")
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("compare", help="baseline vs overlap policies, side by side")
    _add_setup(c)
    c.add_argument("--policies", type=str_list, default=DEFAULT_COMPARE, help=f"comma list (default {','.join(DEFAULT_COMPARE)})")
    c.add_argument("--json", help="write every policy's summary as JSON")
    c.add_argument("--plot", help="write a figure: speedup, utilization and timelines")
    c.set_defaults(func=cmd_compare)

    s = sub.add_parser("sweep", help="a grid of policies x C x Δ x traces x GPUs")
    _add_setup(s)
    s.add_argument("--policies", type=str_list, default=("baseline", "intra", "inter", "oppo"))
    s.add_argument("--chunks", type=int_list, default=(128, 256, 512, 1024))
    s.add_argument("--deltas", type=int_list, default=(0, 4, 8, 16))
    s.add_argument("--traces", type=str_list, default=None, help="comma list of traces (default --trace)")
    s.add_argument("--gpus", type=str_list, default=None, help="comma list of GPU ids (default --gpu)")
    s.add_argument("--processes", type=positive(), default=None, help="worker processes (default: all cores)")
    s.add_argument("--ray", action="store_true", help="run the grid on Ray (ray.init locally or --ray-address)")
    s.add_argument("--ray-address", default=None, help="address of an existing Ray cluster")
    s.add_argument("--out", help="write the table (.csv or .parquet)")
    s.add_argument("--json", help="write the table as JSON records")
    s.set_defaults(func=cmd_sweep)

    rp = sub.add_parser("replay", help="serve an arrival-timed trace with one generation engine (vLLM v1 model)")
    rp.add_argument("--trace", required=True)
    rp.add_argument("--gpu", default="h100-sxm")
    rp.add_argument("--profile", default=None, help="calibrated hardware profile (.json); overrides --gpu")
    rp.add_argument("--model", default="llama-3.1-8b")
    rp.add_argument("--tp", type=positive(), default=1)
    rp.add_argument("--max-num-seqs", type=positive(), default=256)
    rp.add_argument("--max-batched-tokens", type=positive(), default=8192)
    rp.add_argument("--block-size", type=positive(), default=16)
    rp.add_argument("--gpu-mem-util", type=positive(float), default=0.9)
    rp.add_argument("--limit", type=nonneg_int, default=1000, help="first N requests (default 1000; 0 = all)")
    rp.add_argument("--time-scale", type=positive(float), default=1.0, help="multiply inter-arrival times")
    rp.add_argument("--rate", type=positive(float), default=None, help="Poisson arrivals at this rate instead of timestamps")
    rp.add_argument("--max-response", type=nonneg_int, default=0, help="cap output tokens (default 0 = as traced)")
    rp.add_argument("--seed", type=int, default=0)
    rp.add_argument("--requests-csv", help="write per-request TTFT/TPOT/E2E")
    rp.add_argument("--json", help="write the summary as JSON")
    rp.set_defaults(func=cmd_replay)

    t = sub.add_parser("traces", help="list the traces found on the search path")
    t.set_defaults(func=cmd_traces)
    add_plan_parser(sub)  # ``plan``: oppo_sim/plan_cli.py
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser(), argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
