"""``oppo-sim``: simulate RLHF pipelines under overlap policies from the command line.

Commands: ``run`` (one simulation), ``compare`` (baseline vs overlap policies), ``sweep`` (a grid to
CSV/Parquet), ``plan`` (the fastest placement/policy/knobs, ``plan_cli.py``), ``replay`` (a generation
engine serving an arrival-timed trace), ``traces`` (what traces the search path finds), ``import`` (a verl
rollout dump or a metrics export as a trace, ``import_cli.py``), ``check`` (a run's log against the
simulator, calibrated on it, ``check_cli.py``). The shared options
and the config they build: ``cli_setup.py`` (workload, hardware, memory, engine, scoring) and
``cli_policy.py`` (policy knobs). :func:`build_parser` returns the whole parser (the CLI reference is
generated from it). Bad input exits with status 2 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import pandas as pd

from oppo_sim.cli_limits import limits_note
from oppo_sim.cli_policy import add_policy_args, check_policy_flags, policy_options
from oppo_sim.cli_setup import add_engine_args, add_setup_args, sim_config
from oppo_sim.hw.costs.eager import EAGER_HOST_OP_S
from oppo_sim.hw.costs.op_cost import add_op_costs_arg
from oppo_sim.cliargs import (Parser, figure_path, file_path, int_list, nonneg_float, nonneg_int, on_off, output, positive, run_command,
                              str_list, table_path)
from oppo_sim.core.errors import ConfigError, OppoError

DEFAULT_COMPARE = ("baseline", "stream", "intra", "inter", "oppo")


def _config(a: argparse.Namespace, policies: Sequence[str]):
    """The run's ``SimConfig``, after refusing knobs that none of ``policies`` uses."""
    check_policy_flags(a, policies)
    if any(getattr(a, k, None) for k in ("from_verl", "from_openrlhf", "from_nemo_rl")):  # parsed without main()
        raise ConfigError("--from-verl/--from-openrlhf/--from-nemo-rl are translated by oppo_sim.cli.main before parsing")
    return sim_config(a)


def _policy(name: str, a: argparse.Namespace):
    from oppo_sim.core.policies import make_policy

    return make_policy(name, **policy_options(a))


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


def _memory_line(s: dict, cfg=None) -> str:
    """Headroom per pool (GiB per device), the KV cache generation gets, the training setup (its Megatron
    layout, or the ZeRO stage) and sync path."""
    pools = ", ".join(
        f"{pool} {gib:.1f} GiB" + (f" (KV cache {s['kv_cache_gib'][pool]:.1f} GiB at gpu_memory_utilization "
                                   f"{s['engine_share'][pool]:g})" if pool in s["kv_cache_gib"] else "")
        for pool, gib in s["memory_headroom_gib"].items()
    )
    sleeps = (f"; the engine sleeps (vLLM level {s['sleep_level']}) and wakes: {s['sleep_wake_s']:.2f} s a step"
              if s.get("sleep_level") else "")
    if s.get("sleep_optimizer_s"):
        sleeps += f" ({s['sleep_optimizer_s']:.2f} s of it the optimizer state through pageable host memory)"
    if s.get("reference_swap_s"):
        sleeps += f"; the reference is held on the host, swapped with the policy's weights: {s['reference_swap_s']:.2f} s a step"
    state = cfg.trainer.state(s["zero_stage"], cfg.expert_parallel) if cfg is not None else f"ZeRO-{s['zero_stage']}"
    return (f"memory headroom per device: {pools}; trainer {state}, recompute {s['recompute']} "
            f"(longest sequence {s['max_seq_tokens']:,} tokens); {_sync_words(s)}{sleeps}")


def _sync_words(s: dict) -> str:
    """The weight sync: its path (``oppo_sim.hw.costs.sync``), its seconds and its largest parts (the trainer's
    export, ``oppo_sim.hw.costs.weight_export``, and the hand-off)."""
    m = s["sync_mechanism"]
    where = "in place (ipc: generation on the training GPUs)" if m == "ipc" else f"over {m}"
    legs = s.get("sync_legs_s") or {}
    if not legs:
        return f"weight sync {where}"
    top = sorted(legs.items(), key=lambda kv: -kv[1])[:3]
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in top if v > 0)
    return f"weight sync {where}: {sum(legs.values()):.2f} s a step ({parts})"


def _gpu(cfg) -> str:
    """The generating GPU and where its cost parameters come from, for a header line."""
    return cfg.hardware_of(cfg.placement.generate).label


def _profile_eager(hardware: str) -> dict:
    """``eager_host_op_s`` of a profile (``cli_setup.profile_eager_host_op_s``); nothing for a GPU id."""
    from oppo_sim.cli_setup import profile_eager_host_op_s
    from oppo_sim.hw.fitting.profiles import profile_meta

    meta = profile_meta(hardware)
    return {} if meta is None else {"eager_host_op_s": profile_eager_host_op_s(meta)}


def _engine(cfg) -> str:
    """``continuous engine``, with vLLM's eager mode's host time a step where it is on (``hw/costs/eager.py``)."""
    if not (cfg.engine.enforce_eager and cfg.engine_kind.value == "continuous"):
        return f"{cfg.engine_kind.value} engine"
    from oppo_sim.hw.costs.eager import eager_ops_per_step

    ops = eager_ops_per_step(cfg.models()["generate"], cfg.engine.tp, cfg.engine.vllm_version)
    op_s = cfg.host_op_s(cfg.placement.generate)
    host = f"{ops * op_s * 1e3:.1f} ms of host time" if op_s else "host time in the profile"
    return f"continuous engine, eager (no CUDA graphs: {ops:,} ops a step in vLLM {cfg.engine.vllm_version}, {host})"


def _print_table(df: pd.DataFrame) -> None:
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.float_format", "{:.3f}".format):
        print(df.to_string(index=False))


def cmd_run(a: argparse.Namespace) -> int:
    from oppo_sim.pipeline.simulate import simulate
    from oppo_sim.traces.catalog import load_trace

    cfg = _config(a, [a.policy])
    trace = load_trace(a.trace, seed=cfg.seed, **cfg.trace_limits())
    res = simulate(trace, _policy(a.policy, a), cfg, progress=sys.stderr.isatty())
    s = res.summary
    print(f"trace {s['trace']} ({len(trace)} rows, cap {cfg.max_response}{limits_note(trace)}), {_gpu(cfg)}, placement {res.meta['placement']}, "
          f"{_engine(cfg)}, algorithm {cfg.algorithm.label()}")
    print(_memory_line(s, cfg))
    if cfg.hardware_of(cfg.placement.generate).ops is not None:  # --op-costs tables took effect: say what priced what
        print("priced by: " + "; ".join(f"{k}: {v}" for k, v in res.meta["priced_by"].items()))
    _print_table(pd.DataFrame([_row(res)]))
    cols = ["step", "step_time_s", "generation_s", "scoring_s", "training_s", "sleep_wake_s", "deferred", "delta", "chunk",
            "staleness_max"]
    print()
    _print_table(res.steps[cols].head(10))
    if len(res.steps) > 10:
        print(f"... {len(res.steps) - 10} more steps")
    if a.steps_csv:
        res.steps.to_csv(output(a.steps_csv), index=False)
    if a.timeline_csv:
        res.timeline.to_csv(output(a.timeline_csv), index=False)
    if a.plot:
        from oppo_sim.explore.plots import plot_timeline

        plot_timeline(res, steps=(0, min(3, len(res.steps) - 1))).savefig(output(a.plot), dpi=120, bbox_inches="tight")
        print(f"figure: {a.plot}")
    if a.json:
        res.write_json(output(a.json))
        print(f"json: {a.json}")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from oppo_sim.pipeline.simulate import simulate
    from oppo_sim.traces.catalog import load_trace

    names = [n.strip().lower() for n in a.policies]
    cfg = _config(a, names)  # a knob is refused only if none of the chosen policies uses it
    trace = load_trace(a.trace, seed=cfg.seed, **cfg.trace_limits())
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
    print(f"trace {trace.name} ({len(trace)} rows, cap {cfg.max_response}{limits_note(trace)}), {_gpu(cfg)}, B={cfg.batch} prompts x "
          f"n={cfg.algorithm.n}, {cfg.steps} steps, placement {results['baseline'].meta['placement']}, "
          f"{_engine(cfg)}, algorithm {cfg.algorithm.label()}")
    print(_memory_line(base, cfg))
    _print_table(df)
    if a.plot:
        from oppo_sim.explore.plots import plot_compare

        plot_compare(results).savefig(output(a.plot), dpi=120, bbox_inches="tight")
        print(f"figure: {a.plot}")
    if a.json:
        out = {"trace": trace.name, "gpu": cfg.gpu_id, "batch": cfg.batch, "n": cfg.algorithm.n,
               "algorithm": cfg.algorithm.name, "steps": cfg.steps,
               "policies": {name: r.to_json() for name, r in results.items()},
               "speedup": dict(zip(names, df["speedup"].tolist()))}
        output(a.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"json: {a.json}")
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from oppo_sim.explore.sweep import SweepGrid, run_sweep, save_table
    from oppo_sim.hw.costs.op_cost import hardware_for

    cfg = _config(a, a.policies)
    grid = SweepGrid(policies=a.policies, chunks=a.chunks, deltas=a.deltas, traces=a.traces or (a.trace,),
                     gpus=tuple(hardware_for(g, a.op_costs) for g in a.gpus) if a.gpus else (cfg.gpu,), base=cfg,
                     options=tuple(policy_options(a).items()))
    df = run_sweep(grid, processes=a.processes, progress=sys.stderr.isatty(), use_ray=a.ray, ray_address=a.ray_address)
    cols = [c for c in ("policy", "chunk", "delta", "trace", "gpu", "step_time_s", "samples_per_s", "speedup",
                        "utilization_overall", "flop_utilization") if c in df.columns]
    _print_table(df[cols])
    if a.out:
        save_table(df, a.out)
        print(f"table: {a.out}")
    if a.json:
        output(a.json).write_text(df.to_json(orient="records", indent=2) + "\n")
        print(f"json: {a.json}")
    return 0


def cmd_replay(a: argparse.Namespace) -> int:
    from oppo_sim.engine.request import EngineConfig
    from oppo_sim.pipeline.replay import ReplayConfig, replay
    from oppo_sim.traces.catalog import load_trace

    engine = EngineConfig(max_num_seqs=a.max_num_seqs, max_num_batched_tokens=a.max_batched_tokens,
                          block_size=a.block_size, gpu_memory_utilization=a.gpu_mem_util, tp=a.tp,
                          enable_chunked_prefill=a.enable_chunked_prefill, enable_prefix_caching=a.enable_prefix_caching,
                          long_prefill_token_threshold=a.long_prefill_token_threshold,
                          num_gpu_blocks_override=a.num_gpu_blocks_override, enforce_eager=a.enforce_eager)
    from oppo_sim.hw.costs.op_cost import hardware_for

    hardware = a.profile or a.gpu
    cfg = ReplayConfig(gpu=hardware_for(hardware, a.op_costs), model=a.model, engine=engine, limit=a.limit or None,
                       time_scale=a.time_scale, rate=a.rate, seed=a.seed,
                       **(_profile_eager(hardware) if a.host_op_us is None else {"eager_host_op_s": a.host_op_us * 1e-6}))
    trace = load_trace(a.trace, max_response=a.max_response or None, seed=a.seed, max_prompt=None)  # serving: no RL cap
    res = replay(trace, cfg)
    s = res.summary
    print(f"replay of {trace.name}: {s['requests']} requests on {s['tp']} x {s['gpu']}, {s['model']}, "
          f"{s['kv_blocks']} KV blocks")
    if cfg.gpu.ops is not None:  # --op-costs tables took effect
        from oppo_sim.hw.costs.op_cost import priced_line

        print(priced_line(cfg.gpu))
    _print_table(pd.DataFrame([{k: v for k, v in s.items() if k not in ("gpu", "model", "tp", "kv_blocks")}]))
    if a.requests_csv:
        res.requests.to_csv(output(a.requests_csv), index=False)
    if a.json:
        output(a.json).write_text(json.dumps(s, indent=2) + "\n")
        print(f"json: {a.json}")
    return 0


def cmd_traces(a: argparse.Namespace) -> int:
    from oppo_sim.traces.catalog import available_traces, trace_search_path

    print("search path: " + ", ".join(str(p) for p in trace_search_path()))
    _print_table(available_traces())
    return 0


def _add_run_like(p: argparse.ArgumentParser, grid: bool = False) -> None:
    from oppo_sim.frameworks.framework_args import add_framework_args

    add_setup_args(p)
    add_engine_args(p)
    add_policy_args(p, grid=grid)
    add_framework_args(p)  # --from-verl / --from-openrlhf: translated in main(), before parsing


def build_parser() -> argparse.ArgumentParser:
    """The ``oppo-sim`` parser with every sub-command (no side effects: the CLI reference is generated from it)."""
    from oppo_sim.core.policies import POLICY_NAMES
    from oppo_sim.check_cli import add_check_parser
    from oppo_sim.import_cli import add_import_parser
    from oppo_sim.plan_cli import add_plan_parser

    p = Parser(prog="oppo-sim", description="Simulate PPO-RLHF pipelines under OPPO and peer overlap policies.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=Parser)

    r = sub.add_parser("run", help="one simulation")
    _add_run_like(r)
    o = r.add_argument_group("policy and output")
    o.add_argument("--policy", default="oppo", help=f"one of {', '.join(POLICY_NAMES)} (default %(default)s)")
    o.add_argument("--json", type=file_path, help="write the summary as JSON (default: not written)")
    o.add_argument("--steps-csv", help="write the per-step table (default: not written)")
    o.add_argument("--timeline-csv", type=file_path, help="write the timeline table (default: not written)")
    o.add_argument("--plot", type=figure_path, help="write a timeline figure of the first steps, PNG/PDF/SVG (default: not written)")
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("compare", help="baseline vs overlap policies, side by side")
    _add_run_like(c)
    o = c.add_argument_group("policies and output")
    o.add_argument("--policies", type=str_list, default=",".join(DEFAULT_COMPARE),
                   help="comma list; baseline is always added (default %(default)s)")
    o.add_argument("--json", type=file_path, help="write every policy's summary as JSON (default: not written)")
    o.add_argument("--plot", type=figure_path, help="write a figure: speedup, utilization and timelines (default: not written)")
    c.set_defaults(func=cmd_compare)

    s = sub.add_parser("sweep", help="a grid of policies x C x Δ x traces x GPUs")
    _add_run_like(s, grid=True)
    g = s.add_argument_group("grid and output")
    g.add_argument("--policies", type=str_list, default="baseline,intra,inter,oppo", help="comma list (default %(default)s)")
    g.add_argument("--chunks", type=int_list, default="128,256,512,1024",
                   help="chunk sizes C of the chunked policies (default %(default)s)")
    g.add_argument("--deltas", type=int_list, default="0,4,8,16",
                   help="Δ (Δ0 of the Δ rule) of the over-admitting policies (default %(default)s)")
    g.add_argument("--traces", type=str_list, default=None, help="comma list of traces (default: --trace)")
    g.add_argument("--gpus", type=str_list, default=None, help="comma list of GPU ids (default: --gpu)")
    g.add_argument("--processes", type=positive(), default=None, help="worker processes (default: all cores)")
    g.add_argument("--ray", action="store_true",
                   help="run the grid on Ray, ray.init locally or --ray-address (default off)")
    g.add_argument("--ray-address", default=None, help="address of an existing Ray cluster (default: none)")
    g.add_argument("--out", type=table_path, help="write the table, .csv, .csv.gz or .parquet (default: not written)")
    g.add_argument("--json", type=file_path, help="write the table as JSON records (default: not written)")
    s.set_defaults(func=cmd_sweep)

    _add_replay_parser(sub)
    t = sub.add_parser("traces", help="list the traces found on the search path")
    t.set_defaults(func=cmd_traces)
    add_plan_parser(sub)  # ``plan``: oppo_sim/plan_cli.py
    add_import_parser(sub)  # ``import``: oppo_sim/import_cli.py
    add_check_parser(sub, _add_run_like)  # ``check``: oppo_sim/check_cli.py
    return p


def _add_replay_parser(sub) -> None:
    from oppo_sim.engine.request import EngineConfig as E

    rp = sub.add_parser("replay", help="serve an arrival-timed trace with one generation engine (vLLM v1 model)")
    rp.add_argument("--trace", required=True, help="trace name or file with arrival timestamps (required)")
    rp.add_argument("--gpu", default="h100-sxm", help="GPU id (default %(default)s)")
    rp.add_argument("--profile", default=None, help="calibrated hardware profile (.json); overrides --gpu (default: none)")
    add_op_costs_arg(rp)
    rp.add_argument("--model", default="llama-3.1-8b", help="served model id (default %(default)s)")
    rp.add_argument("--tp", type=positive(), default=E.tp, help="tensor parallelism (default %(default)s)")
    rp.add_argument("--max-num-seqs", type=positive(), default=E.max_num_seqs,
                    help="sequences per iteration (default %(default)s)")
    rp.add_argument("--max-num-batched-tokens", "--max-batched-tokens", dest="max_batched_tokens", type=positive(), metavar="N",
                    default=8192, help="token budget per iteration (default %(default)s, vLLM's OpenAI server)")
    rp.add_argument("--block-size", type=positive(), default=E.block_size, help="KV block size in tokens (default %(default)s)")
    rp.add_argument("--gpu-memory-utilization", "--gpu-mem-util", dest="gpu_mem_util", type=positive(float),
                    default=E.gpu_memory_utilization, metavar="FRACTION",
                    help="usable fraction of device memory (default %(default)s)")
    rp.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=E.enable_chunked_prefill,
                    help=f"split long prefills over iterations (default {on_off(E.enable_chunked_prefill)})")
    rp.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=E.enable_prefix_caching,
                    help=f"reuse cached full KV blocks (default {on_off(E.enable_prefix_caching)})")
    rp.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=E.enforce_eager,
                    help=f"no CUDA graphs: the host issues every kernel of a step (default {on_off(E.enforce_eager)})")
    rp.add_argument("--host-op-us", dest="host_op_us", type=nonneg_float, default=None, metavar="US",
                    help=f"with --enforce-eager: host microseconds per issued op; it depends on the host CPU (default "
                         f"{EAGER_HOST_OP_S * 1e6:g}, measured on an x86 H200 machine, times a Grace GPU id's host_op_scale; a "
                         f"profile's own where it has one; a value given is your host's own)")
    rp.add_argument("--long-prefill-token-threshold", type=nonneg_int, default=E.long_prefill_token_threshold,
                    help="most prefill tokens of one request per iteration (default %(default)s = off)")
    rp.add_argument("--num-gpu-blocks-override", type=positive(), default=None,
                    help="KV blocks instead of sizing the KV cache from memory (default: from memory)")
    rp.add_argument("--limit", type=nonneg_int, default=1000, help="first N requests (default %(default)s; 0 = all)")
    rp.add_argument("--time-scale", type=positive(float), default=1.0, help="multiply inter-arrival times (default %(default)s)")
    rp.add_argument("--rate", type=positive(float), default=None,
                    help="Poisson arrivals at this rate per second instead of timestamps (default: the timestamps)")
    rp.add_argument("--max-response", type=nonneg_int, default=0, help="cap output tokens (default %(default)s = as traced)")
    rp.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals and synthetic traces (default %(default)s)")
    rp.add_argument("--requests-csv", help="write per-request TTFT/TPOT/E2E (default: not written)")
    rp.add_argument("--json", type=file_path, help="write the summary as JSON (default: not written)")
    rp.set_defaults(func=cmd_replay)


def subcommand_parsers(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.ArgumentParser]:
    """``{sub-command: its parser}`` of ``parser`` (default: :func:`build_parser`'s), for a CLI reference."""
    p = parser or build_parser()
    return {name: sp for a in p._actions if isinstance(a, argparse._SubParsersAction) for name, sp in a.choices.items()}


def main(argv: Sequence[str] | None = None) -> int:
    from oppo_sim.frameworks.framework_args import with_framework_args

    parser = build_parser()
    try:  # a framework's settings become oppo-sim arguments placed before the typed ones (oppo_sim/frameworks/)
        argv = with_framework_args(parser, sys.argv[1:] if argv is None else argv)
    except OppoError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    return run_command(parser, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
