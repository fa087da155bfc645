"""``oppo-real``: run a policy for real (vLLM / torch engines, a real PPO update) and measure it.

    oppo-real run --policy oppo --steps 20 --out out/real/oppo

Writes into ``--out``: ``steps.csv`` and ``timeline.csv`` (the simulator's schema, measured),
``summary.json`` (the same keys as ``oppo-sim run`` plus ``reward_curve``), ``rollouts.csv`` (one row per
trained sample) and ``rollout_trace.csv.gz`` — the response lengths this run produced, as a trace the
simulator can replay. A checkpoint is kept in ``--out/checkpoint`` after every step; ``--resume``
continues from it. Bad input exits with status 2 and one line, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from oppo_sim.cli import _nonneg_int, _Parser, _positive, run_command

DEFAULT_TRACE = "oppo-longtail-default"
BACKENDS = ("vllm", "torch", "torch-static")  # oppo_real.config.BACKENDS (not imported here: keeps --help light)
BACKEND_HELP = ("actor generation engine: vllm (continuous batching), torch (per-request decode loop) or torch-static "
                "(TRL-style static padded batches generated in calls of the step's chunk size C, KV carried across calls)")
DEFAULT_LENGTH_SCALE = 0.1
DEFAULT_MAX_RESPONSE = 256


def _cores(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated core ids, got {text!r}") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"expected core ids >= 0, got {text!r}")
    return vals


def build_parser() -> argparse.ArgumentParser:
    from oppo_sim.core.policies import POLICY_NAMES

    p = _Parser(prog="oppo-real", description="Run OPPO and peer policies on real engines and measure them.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    _add_run(sub.add_parser("run", help="a real PPO run under a policy"), POLICY_NAMES)
    _add_profile_and_validate(sub)
    return p


def _add_run(r: argparse.ArgumentParser, policy_names) -> None:
    r.add_argument("--policy", default="oppo", help=f"one of {', '.join(policy_names)} (default oppo)")
    r.add_argument("--chunk", type=_positive(), default=None, help="chunk size C (default 16 here)")
    r.add_argument("--delta", type=_nonneg_int, default=None, help="over-commit Δ (default 2 here)")
    r.add_argument("--budget", type=_positive(), default=None, help="per-step token budget (partial-rollout)")
    r.add_argument("--staleness", type=_positive(), default=None, help="staleness bound (async)")
    r.add_argument("--steps", type=_positive(), default=20)
    r.add_argument("--batch", type=_positive(), default=8, help="samples per PPO step, B (default 8)")
    r.add_argument("--trace", default=DEFAULT_TRACE,
                   help=f"force response lengths from this trace (default {DEFAULT_TRACE}); 'none' = natural EOS lengths")
    r.add_argument("--length-scale", type=_positive(float), default=DEFAULT_LENGTH_SCALE,
                   help=f"multiply the trace's lengths (default {DEFAULT_LENGTH_SCALE}: CPU-sized)")
    r.add_argument("--max-response", type=_positive(), default=DEFAULT_MAX_RESPONSE, help="max new tokens")
    r.add_argument("--model", default=None, help="a local Hugging Face causal-LM directory to use as the actor")
    r.add_argument("--cache", default=None, help="where built models are cached (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)")
    r.add_argument("--backend", default="vllm", choices=BACKENDS, help=BACKEND_HELP)
    r.add_argument("--gen-batch", type=_positive(), default=None,
                   help="torch-static: rows per generate mini-batch (TRL's local_rollout_forward_batch_size; default: one)")
    r.add_argument("--workers", default="ray", choices=("ray", "local"), help="ray actors (default) or in-process")
    r.add_argument("--ray-address", default=None, help="join an existing Ray cluster")
    r.add_argument("--main-cores", type=_cores, default=(0,), help="cores of the generate+train pool (default 0)")
    r.add_argument("--score-cores", type=_cores, default=(1,), help="cores of the scoring pool (default 1)")
    r.add_argument("--gpus-per-worker", type=float, default=0.0, help="Ray GPUs per role worker")
    r.add_argument("--temperature", type=float, default=1.0)
    r.add_argument("--ppo-epochs", type=_positive(), default=None)
    r.add_argument("--minibatches", type=_positive(), default=None)
    r.add_argument("--lr", type=_positive(float), default=None, help="learning rate of actor and critic")
    r.add_argument("--tis-cap", type=_positive(float), default=None, help="truncated importance sampling for stale samples")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default=None, help="output directory (default out/real/<policy>)")
    r.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    r.add_argument("--overwrite", action="store_true", help="start over in an --out that already holds a run")
    r.add_argument("--json", default=None, help="also write the summary JSON here")
    r.set_defaults(func=cmd_run)


def _add_profile_and_validate(sub) -> None:
    pr = sub.add_parser("profile", help="time the engines' operations here and fit the simulator's cost model")
    pr.add_argument("--backend", default="vllm", choices=BACKENDS, help=BACKEND_HELP)
    pr.add_argument("--cores", type=_cores, default=(0,), help="cores to pin to (default 0)")
    pr.add_argument("--cache", default=None, help="model cache directory")
    pr.add_argument("--quick", action="store_true", help="a small grid (for CI)")
    pr.add_argument("--out", default="out/profile", help="directory for measurements.csv, fit.csv, profile.json")
    pr.set_defaults(func=cmd_profile)

    v = sub.add_parser("validate", help="simulate and run each policy; predicted vs measured table and figures")
    v.add_argument("--policies", default="baseline,intra,inter,oppo", help="comma list")
    v.add_argument("--trace", default=DEFAULT_TRACE, help="forced lengths from this trace ('none' = natural)")
    v.add_argument("--length-scale", type=_positive(float), default=DEFAULT_LENGTH_SCALE)
    v.add_argument("--max-response", type=_positive(), default=DEFAULT_MAX_RESPONSE)
    v.add_argument("--steps", type=_positive(), default=12)
    v.add_argument("--warmup", type=_nonneg_int, default=2, help="first steps left out of both medians (default 2)")
    v.add_argument("--repeat", type=_positive(), default=1, help="runs per policy, interleaved across policies (default 1)")
    v.add_argument("--batch", type=_positive(), default=8)
    v.add_argument("--chunk", type=_positive(), default=16)
    v.add_argument("--delta", type=_nonneg_int, default=2)
    v.add_argument("--profile", default=None, help="a profile.json from `oppo-real profile` (default: profile now)")
    v.add_argument("--quick-profile", action="store_true", help="profile on the small grid")
    v.add_argument("--backend", default="vllm", choices=BACKENDS, help=BACKEND_HELP)
    v.add_argument("--gen-batch", type=_positive(), default=None, help="torch-static: rows per generate mini-batch")
    v.add_argument("--workers", default="ray", choices=("ray", "local"))
    v.add_argument("--cache", default=None)
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--out", default="out/validate", help="directory for the table, figures and runs")
    v.add_argument("--json", default=None)
    v.set_defaults(func=cmd_validate)


def profile_engines(paths, backend: str, quick: bool, cores, log=print):
    """Time this machine's engines for ``backend`` and fit the cost model: ``(table, hw, report, static)``;
    ``static`` (the static decoder's per-call overhead, ``StaticCostParams``) is None unless the backend is
    ``torch-static``, which is profiled with ``oppo_real.profile_static`` (its forwards, calls and sync)."""
    from oppo_real.profile import ProfileGrid, fit, run_profile

    grid = ProfileGrid.quick() if quick else ProfileGrid()
    if backend == "torch-static":
        from oppo_real.profile_static import StaticProfileGrid, fit_static, run_static_profile

        table = run_static_profile(paths, grid, StaticProfileGrid.quick() if quick else StaticProfileGrid(), cores, log)
        hw, static, report = fit_static(table, cores=len(cores or (0,)))
        return table, hw, report, static
    table = run_profile(paths, backend, grid, cores=cores, log=log)
    hw, report = fit(table, cores=len(cores or (0,)))
    return table, hw, report, None


def save_engine_profile(hw, static, path: Path, meta: dict | None = None) -> None:
    from oppo_real.profile_static import save_static_profile
    from oppo_sim.hw.profiles import save_profile

    if static is not None:
        save_static_profile(hw, static, path, meta)
    else:
        save_profile(hw, path, meta=meta)


def cmd_profile(a: argparse.Namespace) -> int:
    from oppo_real.models.tiny import build_models, default_cache_dir

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = build_models(Path(a.cache) if a.cache else default_cache_dir())
    table, hw, report, static = profile_engines(paths, a.backend, a.quick, a.cores)
    table.to_csv(out / "measurements.csv", index=False)
    report.to_csv(out / "fit.csv", index=False)
    save_engine_profile(hw, static, out / "profile.json",
                        {"backend": a.backend, "cores": list(a.cores), "model": str(paths.actor)})
    import pandas as pd

    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(report.to_string(index=False))
    print(f"wrote {out}/measurements.csv, fit.csv, profile.json  (use: oppo-sim run --profile {out}/profile.json)")
    return 0


def cmd_validate(a: argparse.Namespace) -> int:
    import pandas as pd

    from oppo_real.config import RealConfig
    from oppo_real.models.tiny import build_models, default_cache_dir
    from oppo_real.profile_static import load_static_params
    from oppo_real.validation.plots import plot_parity, plot_pred_vs_meas_timelines
    from oppo_real.validation.run import validate
    from oppo_sim.core.policies import make_policy
    from oppo_sim.hw.profiles import load_profile
    from oppo_sim.traces.trace import load_trace

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    policies = {n.strip(): make_policy(n.strip(), chunk=a.chunk, delta=a.delta) for n in a.policies.split(",") if n.strip()}
    trace = None if a.trace.lower() == "none" else load_trace(a.trace, max_response=None)
    cfg = RealConfig(batch=a.batch, steps=a.steps, seed=a.seed, backend=a.backend, gen_batch=a.gen_batch,
                     cache_dir=a.cache, max_response=a.max_response, length_scale=a.length_scale, workers=a.workers)
    if a.profile:
        hw, static = load_profile(a.profile), load_static_params(a.profile) if cfg.static_engine else None
    else:
        paths = build_models(Path(a.cache) if a.cache else default_cache_dir(), cfg.tiny, cfg.task)
        print("profiling the engines on this machine ...", flush=True)
        table, hw, report, static = profile_engines(paths, a.backend, a.quick_profile, cfg.main_cores, log=lambda _m: None)
        table.to_csv(out / "measurements.csv", index=False)
        report.to_csv(out / "fit.csv", index=False)
        save_engine_profile(hw, static, out / "profile.json", {"backend": a.backend})
        with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
            print(report[["op", "n", "eff_compute", "eff_memory", "overhead_s", "mape"]].to_string(index=False))
    v = validate(cfg, policies, hw, trace, warmup=a.warmup, repeat=a.repeat, log=lambda m: print(m, flush=True),
                 out_dir=out / "runs", static_cost=static)
    v.table.to_csv(out / "validation.csv", index=False)
    v.components.to_csv(out / "components.csv", index=False)
    plot_parity(v).savefig(out / "parity.png", dpi=120)
    plot_pred_vs_meas_timelines(v).savefig(out / "timelines.png", dpi=110)
    with pd.option_context("display.width", 250, "display.float_format", "{:.3f}".format, "display.max_colwidth", 90):
        print(v.table.drop(columns=["decision_diff"]).to_string(index=False))
        print(v.components.to_string(index=False))
        for _, r in v.table.iterrows():
            if r["decision_diff"]:
                print(f"{r['policy']}: decision agreement {r['decision_agreement']:.2f}; {r['decision_diff']}")
    h = v.headline()
    print(f"median |step-time error| {h['median_abs_step_err_pct']:.1f}%  (max {h['max_abs_step_err_pct']:.1f}%), "
          f"median |utilization error| {h['median_abs_util_err_pp']:.1f} pp, "
          f"median |speedup error| {h['median_abs_speedup_err_pct']:.1f}%, decision agreement >= {h['min_decision_agreement']:.2f}")
    print(f"wrote {out}/validation.csv, components.csv, parity.png, timelines.png")
    if a.json:
        import json

        doc = {"table": v.table.to_dict(orient="records"), "components": v.components.to_dict(orient="records"),
               "decision_agreement": dict(zip(v.table["policy"], v.table["decision_agreement"])), **h}
        Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


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
    from oppo_real.run import run_real
    from oppo_sim.core.policies import make_policy
    from oppo_sim.traces.trace import load_trace

    trace = None if a.trace.lower() == "none" else load_trace(a.trace, max_response=None)
    policy = make_policy(a.policy, chunk=a.chunk or 16, delta=2 if a.delta is None else a.delta, budget=a.budget,
                         staleness=a.staleness)
    cfg = RealConfig(
        batch=a.batch, steps=a.steps, seed=a.seed, backend=a.backend, gen_batch=a.gen_batch, model_dir=a.model,
        cache_dir=a.cache,
        max_response=a.max_response, length_scale=a.length_scale, temperature=a.temperature, ppo=_ppo(a),
        workers=a.workers, ray_address=a.ray_address, main_cores=a.main_cores, score_cores=a.score_cores,
        gpus_per_worker=a.gpus_per_worker,
    )
    out = Path(a.out or f"out/real/{policy.name}")
    print(f"oppo-real: {policy.label()}, {cfg.backend} on {cfg.workers} workers, B={cfg.batch}, {cfg.steps} steps, "
          f"lengths {'natural (EOS)' if trace is None else f'forced from {trace.name} x{cfg.length_scale}'}, out {out}",
          flush=True)
    t0 = time.time()

    def progress(rec: dict) -> None:
        chunk = rec["chunk"] if rec["chunk"] is not None else "-"
        print(f"step {rec['step']:4d}  reward {rec['reward']:.3f}  rm {rec['rm_score']:+.3f}  step {rec['step_time_s']:6.2f} s  "
              f"gen {rec['generation_s']:5.2f}  score {rec['scoring_s']:5.2f}  train {rec['training_s']:5.2f}  "
              f"Δ {rec['delta']}  C {chunk}  deferred {rec['deferred']}  stale≤{rec['staleness_max']}", flush=True)

    res = run_real(cfg, policy, trace, out_dir=out, resume=a.resume, overwrite=a.overwrite, on_step=progress)
    write_outputs(res, out)
    s = res.summary
    print(f"done in {time.time() - t0:.0f} s: step {s['step_time_s']:.2f} s (median {s['step_time_median_s']:.2f}), "
          f"{s['samples_per_s']:.2f} samples/s, utilization "
          + ", ".join(f"{k} {v:.0%}" for k, v in s["utilization"].items())
          + f", final reward {s['final_reward']:.3f}")
    if a.json:
        res.write_json(a.json)
    return 0


def write_outputs(res, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    res.steps.to_csv(out / "steps.csv", index=False)
    res.timeline.to_csv(out / "timeline.csv", index=False)
    res.write_json(out / "summary.json")
    res.rollouts.to_csv(out / "rollouts.csv", index=False)
    if len(res.rollouts):
        trace = res.rollouts[["prompt_tokens", "response_tokens", "reward", "step"]].copy()
        trace["source"] = f"oppo-real {res.summary['policy']}"
        trace.to_csv(out / "rollout_trace.csv.gz", index=False)
    print(f"wrote {out}/steps.csv, timeline.csv, summary.json, rollouts.csv, rollout_trace.csv.gz")


def quiet_libraries() -> None:
    """Keep the per-step progress readable: no library progress bars or banners."""
    import os

    for k, v in {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1",
                 "VLLM_LOGGING_LEVEL": "WARNING", "RAY_DEDUP_LOGS": "1", "PYTHONWARNINGS": "ignore"}.items():
        os.environ.setdefault(k, v)


def main(argv: Sequence[str] | None = None) -> int:
    quiet_libraries()
    return run_command(build_parser(), argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
