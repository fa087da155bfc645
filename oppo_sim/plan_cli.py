"""``oppo-sim plan``: search placements, tensor parallelism, policies and knobs for the fastest run on
the GPUs one has, and print the ranked table (``oppo_sim.explore.plan``).

    oppo-sim plan --trace servegen_deepseek_r1_sampled --actor qwen2.5-7b --reward qwen2.5-7b \\
        --gpus 8xh100-sxm --steps 50 --top 10 --out out/plan

writes ``plan.csv`` (every configuration tried, the refused ones with their reason) and ``pareto.png``
(throughput against staleness, the Pareto front marked) into ``--out``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from oppo_sim.cli_limits import add_limit_args, add_logits_arg, limit_fields
from oppo_sim.cli_policy import check_policy_flags
from oppo_sim.cli_trainer import add_lora_args, lora_of
from oppo_sim.cli_setup import (add_algorithm_args, add_engine_args, add_offload_arg, add_sleep_level_arg,
                                 add_weight_moves_args, algorithm_fields, engine_fields)
from oppo_sim.cliargs import file_path, int_list, nonneg_float, nonneg_int, output, positive, str_list

_GPUS_RE = re.compile(r"^\s*(\d+)\s*[x×*]\s*(\S.*?)\s*$")
SHOWN = ("rank", "config", "samples_per_s", "speedup", "time_to_steps_s", "step_time_s", "util_gen", "util_train",
         "util_score", "staleness_mean", "staleness_max", "headroom_gib", "trainer")


def gpus_arg(text: str) -> tuple[int, str]:
    """``COUNTxGPU`` (``8xh100-sxm``; GPU a table id, a calibrated profile ``.json`` or a datasheet
    ``.yaml``) -> (count, gpu)."""
    m = _GPUS_RE.match(text)
    if not m or int(m.group(1)) < 2:
        raise argparse.ArgumentTypeError(f"expected COUNTxGPU with COUNT >= 2, e.g. 8xh100-sxm, got {text!r}")
    return int(m.group(1)), m.group(2)


def sps_arg(text: str) -> tuple[int, ...] | None:
    """``auto`` (None: sequence parallelism where needed) or a comma list of integers."""
    return None if text.strip().lower() == "auto" else int_list(text)


def eps_arg(text: str) -> tuple[int, ...] | None:
    """``auto`` (None: every expert parallelism that suits the MoE actor) or a comma list of integers."""
    return None if text.strip().lower() == "auto" else int_list(text)


def _add_trainer_args(p: argparse.ArgumentParser) -> None:
    """The trainer dimension of the space (``explore/trainer_space.py``, ``explore/trainer_rank.py``)."""
    from oppo_sim.explore.trainer_rank import KEEP
    from oppo_sim.hw.costs.trainer_layout import MOE_DISPATCHERS, ROUTER_DTYPES, TRAIN_BACKENDS

    t = p.add_argument_group("trainer layout searched")
    t.add_argument("--train-backend", choices=("auto", *TRAIN_BACKENDS), default="auto",
                   help="the trainer: auto searches both fsdp (FSDP / DeepSpeed ZeRO; verl actor.strategy=fsdp, "
                        "OpenRLHF) and megatron (Megatron-Core TP/PP/EP; verl ppo_megatron_trainer, NeMo RL "
                        "megatron_cfg); fsdp or megatron pins it (default %(default)s)")
    t.add_argument("--train-tps", type=int_list, default="1,2,4,8",
                   help="megatron tensor_model_parallel_size tried, within a node and dividing the heads (default %(default)s)")
    t.add_argument("--pps", type=int_list, default="1,2,4",
                   help="megatron pipeline_model_parallel_size tried, dividing the layers (default %(default)s)")
    t.add_argument("--vpps", type=int_list, default="1",
                   help="megatron virtual_pipeline_model_parallel_size tried where pp > 1 (default %(default)s)")
    t.add_argument("--eps", type=eps_arg, default="auto",
                   help="megatron expert_model_parallel_size tried for a MoE actor, or auto: every one that divides "
                        "the experts and a pipeline stage's GPUs (default %(default)s)")
    t.add_argument("--optimizer-offload", type=nonneg_float, default=0.0, metavar="FRACTION",
                   help="share of the optimizer state stepped on the host CPU in every layout (not searched: "
                        "DeepSpeed offload_optimizer / OpenRLHF --adam_offload = 1) (default %(default)s)")
    t.add_argument("--moe-dispatcher", choices=MOE_DISPATCHERS, default="alltoall",
                   help="megatron moe_token_dispatcher_type in every layout (not searched): alltoall (verl's), allgather "
                        "(Megatron-Core's and NeMo RL's default), flex (DeepEP, priced as alltoall) (default %(default)s)")
    t.add_argument("--moe-router-dtype", choices=tuple(ROUTER_DTYPES), default="model",
                   help="megatron moe_router_dtype in every layout (not searched): the allgather dispatcher's combine "
                        "dtype; model = the model's (default %(default)s)")
    add_lora_args(t)
    t.add_argument("--trainer-keep", type=positive(), default=KEEP,
                   help="trainer layouts searched per placement: of those that fit memory, the cheapest by "
                        "trainer-phase cost on a representative step (default %(default)s)")


def _add_export_args(p: argparse.ArgumentParser) -> None:
    """``--export`` and the training settings it writes that the search does not vary (epochs, mini-batches)."""
    from oppo_sim.frameworks.export import FRAMEWORKS

    p.add_argument("--export", choices=FRAMEWORKS, default=None,
                   help="also print the best configuration as verl overrides, an OpenRLHF command line (dotted "
                        "flags) or a NeMo RL recipe (default: not printed)")
    p.add_argument("--ppo-epochs", type=positive(), default=4,
                   help="PPO epochs per step, as run's (what --export writes) (default %(default)s)")
    p.add_argument("--minibatches", type=positive(), default=1,
                   help="mini-batches per epoch, as run's (what --export writes) (default %(default)s)")


def _add_search_args(p) -> None:
    """How the planner searches: exhaustive or Optuna, trials, seed, processes, Ray."""
    from oppo_sim.explore.plan import SEARCHES

    s = p.add_argument_group("search")
    s.add_argument("--search", choices=SEARCHES, default="auto",
                   help="auto: exhaustive if the space has <= --trials configurations, else Optuna TPE "
                        "(default %(default)s)")
    s.add_argument("--trials", type=positive(), default=200,
                   help="distinct configurations Optuna tries (default %(default)s)")
    s.add_argument("--seed", type=nonneg_int, default=0, help="seed of the search and of the simulations (default %(default)s)")
    s.add_argument("--processes", type=positive(), default=None, help="worker processes (default: all cores)")
    s.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="evaluate on Ray: an existing cluster's ADDRESS, or a local Ray without one (default: no Ray)")


def add_plan_parser(sub) -> None:
    """Register ``plan`` on the ``oppo-sim`` sub-command parsers."""
    from oppo_sim.core.policies import POLICY_NAMES
    from oppo_sim.hw.costs.op_cost import add_op_costs_arg
    from oppo_sim.explore.plan import OBJECTIVES
    from oppo_sim.explore.space import DELTA_RULES, LAYOUTS
    from oppo_sim.traces.trace import DEFAULT_MAX_RESPONSE, DEFAULT_TRACE

    p = sub.add_parser("plan", help="search placements, tp, policies and knobs for the fastest configuration")
    p.add_argument("--trace", default=DEFAULT_TRACE, help="trace name or file (default %(default)s)")
    p.add_argument("--actor", default="qwen2.5-7b", help="actor: a table id or a Hugging Face config.json (default %(default)s)")
    p.add_argument("--gpus", type=gpus_arg, default="8xh200",
                   help="COUNTxGPU, e.g. 8xh100-sxm (GPU id, profile .json or datasheet .yaml) (default %(default)s)")
    p.add_argument("--nodes", type=positive(), default=1, help="nodes the GPUs are spread over, equally (default %(default)s)")
    add_op_costs_arg(p)
    p.add_argument("--steps", type=positive(), default=50, help="training steps simulated per configuration (default %(default)s)")
    p.add_argument("--batch", type=positive(), default=112,
                   help="prompts per step, B; a step trains B x --n responses (default %(default)s)")
    p.add_argument("--max-response", type=positive(), default=DEFAULT_MAX_RESPONSE,
                   help="generation cap, max new tokens (default %(default)s)")
    add_limit_args(p)
    p.add_argument("--objective", choices=tuple(OBJECTIVES), default="samples-per-s",
                   help="what the ranking maximises (default %(default)s)")
    p.add_argument("--max-staleness", type=nonneg_int, default=None,
                   help="refuse samples more than k versions stale (default: no bound)")
    p.add_argument("--top", type=positive(), default=10, help="rows of the ranked table printed (default %(default)s)")
    p.add_argument("--out", default=None, help="folder for plan.csv and pareto.png (default: not written)")
    p.add_argument("--json", type=file_path, default=None, help="write the whole table as JSON records (default: not written)")
    _add_export_args(p)
    _add_trainer_args(p)
    _add_search_args(p)
    k = p.add_argument_group("search space (comma lists)")
    k.add_argument("--layouts", type=str_list, default=",".join(LAYOUTS), help="placement layouts tried (default %(default)s)")
    k.add_argument("--policies", type=str_list, default=",".join(POLICY_NAMES),
                   help="policies tried (default %(default)s)")
    k.add_argument("--chunks", type=int_list, default="256,500,1024", help="chunk sizes C (default %(default)s)")
    k.add_argument("--deltas", type=int_list, default="4,8,16,32", help="Δ / Δ0 values (default %(default)s)")
    k.add_argument("--rules", type=str_list, default=",".join(DELTA_RULES), help="Δ rules (default %(default)s)")
    k.add_argument("--budgets", type=int_list, default="1024,4096",
                   help="partial-rollout token budgets (default %(default)s)")
    k.add_argument("--stalenesses", type=int_list, default="1,2", help="async staleness bounds k (default %(default)s)")
    k.add_argument("--in-flight-weight-updates", action="store_const", const=True, default=None,
                   help="async candidates refit their weights in flight, as NeMo RL's in_flight_weight_updates (the "
                        "next step's prompt groups start beside the generations still in flight) (default off)")
    k.add_argument("--tps", type=int_list, default=None,
                   help="generation tensor parallelism allowed (default: any that divides the heads and fits a node)")
    k.add_argument("--sps", type=sps_arg, default="auto",
                   help="training sequence parallelism tried, a comma list, or auto: none unless a configuration "
                        "does not fit without it, then the smallest that fits (default %(default)s)")
    k.add_argument("--placements", type=str_list, default=None,
                   help='only these device splits, e.g. "shared 7+1,colocated 8" (default: all of --layouts)')
    for add in (add_algorithm_args, add_sleep_level_arg, add_offload_arg, add_weight_moves_args, add_logits_arg):
        add(p)
    add_engine_args(p, tp=False)  # every configuration runs this engine with these settings (tp: --tps)
    p.set_defaults(func=cmd_plan)


def _request(a: argparse.Namespace):
    from oppo_sim.core.errors import ConfigError
    from oppo_sim.core.placement import colocated_placement, paper_placement
    from oppo_sim.explore.plan import PlanRequest
    from oppo_sim.explore.space import space_for
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
    from oppo_sim.hw.costs.op_cost import hardware_for
    from oppo_sim.hw.costs.trainer_layout import TRAIN_BACKENDS, TrainerLayout
    from oppo_sim.pipeline.config import SimConfig

    count, gpu = a.gpus
    if count % a.nodes:
        raise ConfigError(f"{count} GPUs cannot be spread evenly over {a.nodes} nodes")
    policies = tuple(x.lower() for x in a.policies)
    check_policy_flags(a, policies)  # --[no-]stream-batching with no streaming policy in the space
    auto = a.train_backend == "auto"
    trainer = TrainerLayout("fsdp" if auto else a.train_backend,  # auto: the reference trains as verl's default
                            optimizer_offload=a.optimizer_offload, moe_dispatcher=a.moe_dispatcher,
                            moe_router_dtype=a.moe_router_dtype, lora=lora_of(a))
    base = SimConfig(batch=a.batch, steps=a.steps, seed=a.seed, ppo_epochs=a.ppo_epochs, minibatches=a.minibatches, gpu=hardware_for(gpu, a.op_costs), actor=a.actor, trainer=trainer,
                     placement=(colocated_placement if a.reference_on_host or a.reference_in_actor else paper_placement)(count),
                     max_response=a.max_response, nodes=a.nodes, sleep_level=a.sleep_level,
                     offload_train_state=a.offload_train_state, optimizer_move=a.optimizer_move,
                     reference_on_host=a.reference_on_host, reference_in_actor=a.reference_in_actor,
                     refit_buffers=a.refit_buffers, refit_group=a.refit_group,
                     train_memory=TrainMemoryConfig(full_logits=a.full_logits), **limit_fields(a),
                     **engine_fields(a, gpu), **algorithm_fields(a))
    space = space_for(base, count, a.nodes, layouts=a.layouts, policies=policies,
                      chunks=a.chunks, deltas=a.deltas, rules=a.rules, budgets=a.budgets, stalenesses=a.stalenesses, in_flight=bool(a.in_flight_weight_updates),
                      tps=a.tps, sps=a.sps, only=a.placements, max_staleness=a.max_staleness,
                      backends=TRAIN_BACKENDS if auto else (a.train_backend,), train_tps=a.train_tps, pps=a.pps,
                      vpps=a.vpps, eps=a.eps)
    return PlanRequest(space, base, a.trace, a.objective, a.search, a.trials, a.seed, a.trainer_keep)


def _print(df: pd.DataFrame) -> None:
    fmt = {c: "{:.3f}".format for c in df.columns if df[c].dtype.kind == "f"}
    print(df.to_string(index=False, formatters=fmt, max_colwidth=48))


def _report(res, top: int) -> None:
    from oppo_sim.explore.space import default_candidate

    req, t = res.request, res.table
    base = req.base
    n_ok = int((t["status"] == "ok").sum())
    print(f"plan: {req.space.devices} x {base.hardware_of(base.placement.generate).label} over {req.space.nodes} node(s), actor {base.models()['generate'].id}, "
          f"{base.algorithm.label()}, reward {'rule' if base.algorithm.reward == 'rule' else base.models()['reward'].id}, "
          f"B={base.batch}, {base.steps} steps of {req.trace}; objective {req.objective}")
    searched = f" ({res.searched_size} after the trainer pruning)" if res.searched_size not in (None, res.space_size) else ""
    print(f"space: {res.space_size} configurations{searched}; search {res.search}: {len(t)} tried, {n_ok} fit, "
          f"{int((t['status'] == 'refused').sum())} refused, {int((t['status'] == 'over-stale').sum())} over-stale")
    if res.trainers is not None:
        print(f"{res.trainers.line()}; {res.simulated_layouts} simulated")
    if base.reference_with_trainer:
        how = "swaps in from host memory" if base.reference_on_host else "is the actor with its adapters off"
        flag = "--reference-on-host" if base.reference_on_host else "--reference-in-actor"
        print(f"the reference {how} on the trainer's GPUs ({flag}): layouts {', '.join(req.space.layouts)} only")
    default = t[t["config"] == default_candidate(req.space.devices, base).label()]
    if len(default) and default.iloc[0]["status"] == "refused":
        print(f"the default placement does not fit: {default.iloc[0]['config']}: {default.iloc[0]['reason']}")
    ref = res.reference
    ref = ref if ref is not None and ref["status"] == "ok" else None
    if ref is not None:
        print(f"reference: {ref['config']} {ref['samples_per_s']:.3f} samples/s (speedup 1)")
    else:
        print("reference: no synchronous baseline fits; no speedup column")
    print()
    if n_ok:
        _print(res.ranked(top)[list(SHOWN)])
    else:
        print("no configuration tried fits these GPUs: see the reasons below")
    if n_ok:
        best = res.best
        sp = f", sequence parallel {best['sp']}" if best["sp"] > 1 else ""
        state = best["trainer"] if best["train_backend"] == "megatron" else f"{best['trainer']} ZeRO-{best['zero_stage']}"
        print(f"\nbest: {best['config']} ({best['placement']}, {best['replicas']} generation replica(s) of tp {best['tp']}, "
              f"trainer {state}{sp}, recompute {best['recompute']}, sync {'in place (ipc)' if best['sync'] == 'ipc' else 'over ' + str(best['sync'])}): "
              f"{best['samples_per_s']:.3f} samples/s" + (f", {best['speedup']:.2f}x the reference" if ref is not None else ""))
    refused = t[t["status"] != "ok"]
    if len(refused):
        print(f"\nnot ranked: {len(refused)} configurations; most common reasons (all in plan.csv):")
        for reason, n in refused["reason"].value_counts().head(3).items():
            print(f"  {n} x {reason}")


def cmd_plan(a: argparse.Namespace) -> int:
    from oppo_sim.explore.plan import run_plan

    req = _request(a)
    res = run_plan(req, processes=a.processes, progress=sys.stderr.isatty(), use_ray=a.ray is not None,
                   ray_address=a.ray or None)
    _report(res, a.top)
    if a.out:
        from oppo_sim.explore.plan_plots import plot_pareto

        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        res.table.to_csv(out / "plan.csv", index=False)
        plot_pareto(res.table).savefig(out / "pareto.png", dpi=120, bbox_inches="tight")
        print(f"\ntable: {out / 'plan.csv'}\nfigure: {out / 'pareto.png'}")
    if a.json:
        output(a.json).write_text(res.table.to_json(orient="records", indent=2) + "\n")
        print(f"json: {a.json}")
    if a.export:
        from oppo_sim.frameworks.export import export_best

        print(f"\n{a.export} settings of the best configuration:\n" + export_best(res, a.export))
    return 0


__all__ = ["add_plan_parser", "cmd_plan", "gpus_arg"]
