"""``oppo-real run``: a real RL run (PPO or a GRPO-family algorithm) under a policy, its outputs and a checkpoint per step."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from oppo_real.commands.common import (
    BACKEND_HELP,
    BACKENDS,
    CPU_RUN_LENGTH_SCALE,
    CPU_RUN_MAX_RESPONSE,
    DEFAULT_TRACE,
    DefaultsHelp,
    add_algorithm_args,
    add_device_args,
    algorithm_of,
    device_fields,
)
from oppo_real.commands.common import cores as _cores
from oppo_real.console import LOG_NAME
from oppo_sim.cli_limits import add_limit_args, limits_note
from oppo_sim.cliargs import nonneg_float, nonneg_int, positive


def add_parser(sub) -> None:
    r = sub.add_parser("run", help="a real PPO run under a policy", formatter_class=DefaultsHelp)
    r.add_argument("--policy", default="oppo", help=f"one of {', '.join(_policy_names())} (default oppo)")
    r.add_argument("--chunk", type=positive(), default=None, help="chunk size C (default 16 here)")
    r.add_argument("--delta", type=nonneg_int, default=None, help="over-commit Δ (default 2 here)")
    r.add_argument("--budget", type=positive(), default=None, help="per-step token budget (partial-rollout; default 1024)")
    r.add_argument("--staleness", type=positive(), default=None, help="staleness bound (async; default 1)")
    r.add_argument("--steps", type=positive(), default=20, help="PPO steps")
    r.add_argument("--batch", type=positive(), default=8, help="prompts per step, B: a step trains B x --n responses (default 8)")
    r.add_argument("--trace", default=DEFAULT_TRACE,
                   help=f"force response lengths from this trace (default {DEFAULT_TRACE}); 'none' = natural EOS lengths")
    add_limit_args(r)  # the trace's prompt cap, applied as the simulator applies it (Trace.limited)
    r.add_argument("--length-scale", type=positive(float), default=CPU_RUN_LENGTH_SCALE,
                   help=f"multiply the trace's lengths (default {CPU_RUN_LENGTH_SCALE}: CPU-sized)")
    r.add_argument("--max-response", type=positive(), default=CPU_RUN_MAX_RESPONSE, help="max new tokens (CPU-sized)")
    r.add_argument("--model", default=None, help="a local Hugging Face causal-LM directory to use as the actor (default: the tiny built actor)")
    r.add_argument("--cache", default=None, help="where built models are cached (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)")
    r.add_argument("--backend", default="vllm", choices=BACKENDS, help=BACKEND_HELP)
    r.add_argument("--gen-batch", type=positive(), default=None,
                   help="torch-static: rows per generate mini-batch (TRL's local_rollout_forward_batch_size; default: one)")
    r.add_argument("--workers", default="ray", choices=("ray", "local", "inline"),
                   help="ray actors (default); local: in this process, a thread per role (calls overlap); "
                        "inline: in this process, every call in turn (nothing overlaps; reproducible for debugging)")
    r.add_argument("--ray-address", default=None, help="join an existing Ray cluster (default: start a local one)")
    r.add_argument("--main-cores", type=_cores, default=None, help="cores of the generate+train pool (default 0; none on a GPU)")
    r.add_argument("--score-cores", type=_cores, default=None, help="cores of the scoring pool (default 1; none on a GPU)")
    r.add_argument("--gpus-per-worker", type=nonneg_float, default=0.0, help="Ray GPUs per role worker")
    r.add_argument("--temperature", type=nonneg_float, default=1.0, help="sampling temperature (0: greedy; default %(default)s)")
    r.add_argument("--ppo-epochs", type=positive(), default=None, help="PPO epochs per step (default 2)")
    r.add_argument("--minibatches", type=positive(), default=None, help="PPO mini-batches per epoch (default 2)")
    r.add_argument("--lr", type=positive(float), default=None, help="learning rate of actor and critic (default 1e-4)")
    r.add_argument("--tis-cap", type=positive(float), default=None,
                   help="truncated importance sampling for stale samples, capped at this ratio (default: off)")
    r.add_argument("--seed", type=int, default=0, help="seed of prompts, sampling and training")
    r.add_argument("--out", default=None, help="output directory (default out/real/<policy>)")
    r.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    r.add_argument("--overwrite", action="store_true", help="start over in an --out that already holds a run")
    r.add_argument("--json", default=None, help="also write the summary JSON here (default: only <out>/summary.json)")
    r.add_argument("--verl-metrics", default=None, metavar="PATH",
                   help="also write each step's metrics under verl's names (timing_s/gen, timing_s/update_actor, "
                        "response_length/mean, ...) to PATH: JSONL if it ends in .jsonl, else verl's console lines "
                        "'step:N - name:value - ...' (default: none)")
    r.add_argument("--no-checkpoint", action="store_true", help="no checkpoint per step (real-size models: GBs a step; default: a checkpoint after every step in <out>/checkpoint)")
    add_algorithm_args(r)
    add_device_args(r)
    r.set_defaults(func=cmd_run)



def _ppo(a):
    from dataclasses import replace

    from oppo_real.ppo.algo import PPOConfig

    cfg = PPOConfig()
    changes = {}
    if a.ppo_epochs:
        changes["epochs"] = a.ppo_epochs
    if a.minibatches:
        changes["minibatches"] = a.minibatches
    if a.lr:
        changes.update(lr_actor=a.lr, lr_critic=a.lr)
    if a.tis_cap:
        changes["tis_cap"] = a.tis_cap
    return replace(cfg, **changes)


def cmd_run(a: argparse.Namespace) -> int:
    from oppo_real.config import RealConfig
    from oppo_real.console import Console
    from oppo_sim.core.policies import make_policy
    from oppo_sim.traces.catalog import load_trace

    trace = None if a.trace.lower() == "none" else load_trace(a.trace, max_response=None, max_prompt=a.max_prompt or None,
                                                                 truncate_prompt=a.truncate_prompt)
    policy = make_policy(a.policy, chunk=a.chunk or 16, delta=2 if a.delta is None else a.delta, budget=a.budget,
                         staleness=a.staleness)
    cfg = RealConfig(
        batch=a.batch, steps=a.steps, seed=a.seed, backend=a.backend, gen_batch=a.gen_batch, model_dir=a.model, cache_dir=a.cache,
        max_response=a.max_response, length_scale=a.length_scale, temperature=a.temperature, ppo=_ppo(a),
        workers=a.workers, ray_address=a.ray_address, gpus_per_worker=a.gpus_per_worker, algorithm=algorithm_of(a),
        **device_fields(a),
    )
    out = Path(a.out or f"out/real/{policy.name}")
    with Console(out, a.verbose) as con:
        con.print(describe_run(cfg, policy, trace, out))
        con.print(checkpoint_line(out, not a.no_checkpoint, a.resume))
        res = run_with_progress(con, cfg, policy, trace, out, resume=a.resume, overwrite=a.overwrite,
                                checkpoint_steps=not a.no_checkpoint)
        write_outputs(res, out, con.print)
        if a.verl_metrics:
            from oppo_real.executor.verl_metrics import write_verl_metrics

            path = write_verl_metrics(res.steps, res.timeline, res.rollouts, cfg.max_response, a.verl_metrics)
            con.print(f"wrote {path}: {len(res.steps)} steps of verl's metrics (read it with oppo_sim.traces.runlog)")
    if a.json:
        res.write_json(a.json)
    return 0


def describe_run(cfg, policy, trace, out: Path) -> str:
    """The configuration line a run starts with."""
    lengths = "natural (EOS)" if trace is None else f"forced from {trace.name} x{cfg.length_scale}{limits_note(trace)}"
    models = cfg.shape or cfg.model_dir or "tiny"
    return (f"oppo-real: {policy.label()}, {cfg.algorithm.label()}, {cfg.backend} on {cfg.workers} workers, devices {cfg.devices.describe()}, "
            f"models {models}, B={cfg.batch}, {cfg.steps} steps, lengths {lengths}, colocate {cfg.colocate_mode}, out {out}")


def checkpoint_line(out: Path, every_step: bool, resume: bool) -> str:
    """When this run writes checkpoints (said before it starts)."""
    if not every_step:
        return "checkpoints: none (--no-checkpoint); this run cannot be resumed"
    return (f"checkpoints: after every step in {out / 'checkpoint'} (a training still in flight, under async, is "
            f"trained again on --resume){'; resuming from it' if resume else ''}")


def step_line(rec: dict) -> str:
    chunk = rec["chunk"] if rec["chunk"] is not None else "-"
    return (f"step {rec['step']:4d}  reward {rec['reward']:.3f}  rm {rec['rm_score']:+.3f}  step {rec['step_time_s']:6.2f} s  "
            f"gen {rec['generation_s']:5.2f}  score {rec['scoring_s']:5.2f}  train {rec['training_s']:5.2f}  "
            f"Δ {rec['delta']}  C {chunk}  deferred {rec['deferred']}  stale≤{rec['staleness_max']}")


def run_with_progress(con, cfg, policy, trace, out, **kw):
    """``run_real`` with one console line per step and a closing summary line."""
    from oppo_real.executor.runner import run_real

    t0 = time.time()
    bar = con.progress(cfg.steps, unit="step", desc=policy.name)
    try:
        res = run_real(cfg, policy, trace, out_dir=out, on_step=lambda rec: bar.line(step_line(rec)), **kw)
    finally:
        bar.close()
    s = res.summary
    con.print(f"done in {time.time() - t0:.0f} s: step {s['step_time_s']:.2f} s (median {s['step_time_median_s']:.2f}), "
              f"{s['samples_per_s']:.2f} samples/s, utilization "
              + ", ".join(f"{k} {v:.0%}" for k, v in s["utilization"].items())
              + f", final reward {s['final_reward']:.3f}")
    return res


def write_outputs(res, out: Path, say=print) -> None:
    out.mkdir(parents=True, exist_ok=True)
    res.steps.to_csv(out / "steps.csv", index=False)
    res.timeline.to_csv(out / "timeline.csv", index=False)
    res.write_json(out / "summary.json")
    res.rollouts.to_csv(out / "rollouts.csv", index=False)
    res.decisions.to_csv(out / "decisions.csv", index=False)
    res.conservation.to_csv(out / "conservation.csv", index=False)
    if len(res.rollouts):
        trace = res.rollouts[["prompt_tokens", "response_tokens", "reward", "step"]].copy()
        trace["source"] = f"oppo-real {res.summary['policy']}"
        trace.to_csv(out / "rollout_trace.csv.gz", index=False)
    say(f"wrote {out}/steps.csv, timeline.csv, summary.json, rollouts.csv, decisions.csv, conservation.csv, "
        "rollout_trace.csv.gz"
        + (f", {LOG_NAME}" if (out / LOG_NAME).exists() else ""))


def _policy_names() -> tuple[str, ...]:
    from oppo_sim.core.policies import POLICY_NAMES

    return POLICY_NAMES
