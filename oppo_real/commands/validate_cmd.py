"""``oppo-real validate``: simulate and run each policy; the predicted-vs-measured tables and figures."""

from __future__ import annotations

import argparse
from pathlib import Path

from oppo_real.commands.common import (
    BACKEND_HELP,
    BACKENDS,
    DefaultsHelp,
    CPU_RUN_LENGTH_SCALE,
    CPU_RUN_MAX_RESPONSE,
    DEFAULT_TRACE,
    add_algorithm_args,
    add_device_args,
    algorithm_of,
    device_fields,
    profile_engines,
    save_engine_profile,
)
from oppo_sim.cliargs import nonneg_int, positive
from oppo_sim.core.errors import ConfigError


def add_parser(sub) -> None:
    v = sub.add_parser("validate", help="simulate and run each policy; predicted vs measured table and figures",
                       formatter_class=DefaultsHelp)
    v.add_argument("--policies", default="baseline,intra,inter,oppo", help="comma list of policies")
    v.add_argument("--trace", default=DEFAULT_TRACE, help="forced lengths from this trace ('none' = natural)")
    v.add_argument("--length-scale", type=positive(float), default=CPU_RUN_LENGTH_SCALE,
                   help="multiply the trace's lengths (CPU-sized)")
    v.add_argument("--max-response", type=positive(), default=CPU_RUN_MAX_RESPONSE, help="max new tokens (CPU-sized)")
    v.add_argument("--steps", type=positive(), default=12, help="PPO steps per run")
    v.add_argument("--warmup", type=nonneg_int, default=2, help="first steps left out of both medians (default 2)")
    v.add_argument("--repeat", type=positive(), default=1, help="runs per policy, interleaved across policies (default 1)")
    v.add_argument("--batch", type=positive(), default=8, help="prompts per step, B (a step trains B x --n responses)")
    v.add_argument("--chunk", type=positive(), default=16, help="chunk size C")
    v.add_argument("--delta", type=nonneg_int, default=2, help="over-commit Δ")
    v.add_argument("--profile", default=None, help="a profile.json from `oppo-real profile` (default: profile now)")
    v.add_argument("--quick-profile", action="store_true", help="profile on the small grid")
    v.add_argument("--backend", default="vllm", choices=BACKENDS, help=BACKEND_HELP)
    v.add_argument("--gen-batch", type=positive(), default=None, help="torch-static: rows per generate mini-batch (default: one)")
    v.add_argument("--workers", default="ray", choices=("ray", "local", "inline"),
                   help="ray: Ray actors (the default); local: in this process, a thread per role; inline: in this "
                        "process, every call in turn (nothing overlaps, unlike the simulated run: for debugging)")
    v.add_argument("--cache", default=None, help="model cache directory (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)")
    v.add_argument("--seed", type=int, default=0, help="seed of prompts, sampling and training")
    v.add_argument("--out", default="out/validate", help="directory for the table, figures and runs")
    v.add_argument("--json", default=None, help="also write the table, components and headline as JSON here (default: none)")
    v.add_argument("--no-checkpoint", action="store_true", help="runs keep no per-step checkpoint under <out>/runs")
    add_algorithm_args(v)
    add_device_args(v)
    v.set_defaults(func=cmd_validate)



def _calibrate(cfg, a: argparse.Namespace, out: Path, say):
    """The hardware profile to predict with: ``--profile``, or profile the engines now on the generator's
    device (a GPU is fitted against its GPU-table entry, the CPU against a nominal spec)."""
    import pandas as pd

    from oppo_real.executor.session import build_run_models, release_local_memory
    from oppo_real.profiling.engine_ops import ProfileGrid, fit, run_profile
    from oppo_sim.hw.fitting.profiles import load_profile, save_profile

    if a.profile:
        from oppo_real.profiling.static_decoder import load_static_params

        return load_profile(a.profile), load_static_params(a.profile) if cfg.static_engine else None
    device = cfg.devices.gen
    paths = build_run_models(cfg)
    say(f"profiling the engines on {device} ...")
    if cfg.static_engine:  # the static decoder: its forwards, per-call overhead and sync (oppo_real.profiling.static_decoder)
        table, hw, report, static = profile_engines(paths, cfg.backend, a.quick_profile, cfg.main_cores, log=lambda _m: None)
        table.to_csv(out / "measurements.csv", index=False)
        report.to_csv(out / "fit.csv", index=False)
        save_engine_profile(hw, static, out / "profile.json", {"backend": cfg.backend})
        return hw, static
    if a.quick_profile:
        grid = ProfileGrid.quick()
    elif device.startswith("cuda"):
        from oppo_real.devices.memory_fit import run_specs
        from oppo_real.profiling.gpu_model_error import gpu_grid

        grid = gpu_grid(run_specs(cfg)[0].params)
    else:
        grid = ProfileGrid()
    table = run_profile(paths, a.backend, grid, cores=cfg.main_cores, log=lambda _m: None, device=device,
                        warmup_s=cfg.engine_warmup_s)
    release_local_memory()  # the profiled engines' memory, before the runs' fit checks read what is free
    table.to_csv(out / "measurements.csv", index=False)
    if device.startswith("cuda"):
        from oppo_real.devices.device_map import device_memory
        from oppo_real.profiling.gpu_model_error import fit_gpu, table_spec

        _, total, name = device_memory(device)
        hw, report = fit_gpu(table, table_spec(name, total))
    else:
        hw, report = fit(table)
    report.to_csv(out / "fit.csv", index=False)
    save_profile(hw, out / "profile.json")
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        say(report[["op", "n", "eff_compute", "eff_memory", "overhead_s", "mape"]].to_string(index=False))
    return hw, None


def cmd_validate(a: argparse.Namespace) -> int:
    from oppo_real.config import RealConfig
    from oppo_real.console import Console
    from oppo_real.devices.memory_fit import check_fit, describe
    from oppo_sim.core.policies import make_policy
    from oppo_sim.traces.catalog import load_trace

    if a.warmup >= a.steps:
        raise ConfigError(f"--warmup {a.warmup} leaves none of the --steps {a.steps} to compare: give fewer warm-up steps")
    out = Path(a.out)
    policies = {n.strip(): make_policy(n.strip(), chunk=a.chunk, delta=a.delta) for n in a.policies.split(",") if n.strip()}
    trace = None if a.trace.lower() == "none" else load_trace(a.trace, max_response=None)
    cfg = RealConfig(batch=a.batch, steps=a.steps, seed=a.seed, backend=a.backend, gen_batch=a.gen_batch, cache_dir=a.cache,
                     max_response=a.max_response, length_scale=a.length_scale, workers=a.workers,
                     algorithm=algorithm_of(a), **device_fields(a))
    with Console(out, a.verbose) as con:
        fits = check_fit(cfg)  # before any model is built or loaded
        for pol in policies.values():  # each policy as it runs: async keeps a shared device resident
            check_fit(cfg, pol)
        con.print(f"oppo-real validate: {', '.join(policies)}, {cfg.algorithm.label()}, on {cfg.backend} / {cfg.workers} workers, devices "
                  f"{cfg.devices.describe()}, models {cfg.shape or 'tiny'}, B={cfg.batch}, {cfg.steps} steps"
                  + (f"; memory {describe(fits)}" if fits else ""))
        hw, static = _calibrate(cfg, a, out, con.print)
        return _validate_and_report(cfg, policies, hw, static, trace, a, out, con.print)


def _validate_and_report(cfg, policies, hw, static, trace, a, out: Path, say) -> int:
    import pandas as pd

    from oppo_real.validation.validate import validate
    from oppo_real.validation.validation_plots import plot_parity, plot_pred_vs_meas_timelines

    v = validate(cfg, policies, hw, trace, warmup=a.warmup, repeat=a.repeat, log=say,
                 out_dir=None if a.no_checkpoint else out / "runs", static_cost=static)
    v.table.to_csv(out / "validation.csv", index=False)
    v.components.to_csv(out / "components.csv", index=False)
    v.runs_table("steps").to_csv(out / "steps.csv", index=False)
    v.runs_table("timeline").to_csv(out / "timeline.csv.gz", index=False)
    plot_parity(v).savefig(out / "parity.png", dpi=120)
    plot_pred_vs_meas_timelines(v).savefig(out / "timelines.png", dpi=110)
    with pd.option_context("display.width", 250, "display.float_format", "{:.3f}".format, "display.max_colwidth", 90):
        say(v.table.drop(columns=["decision_diff"]).to_string(index=False))
        say(v.components.to_string(index=False))
        for _, r in v.table.iterrows():
            if r["decision_diff"]:
                say(f"{r['policy']}: decision agreement {r['decision_agreement']:.2f}; {r['decision_diff']}")
    h = v.headline()
    say(f"median |step-time error| {h['median_abs_step_err_pct']:.1f}%  (max {h['max_abs_step_err_pct']:.1f}%), "
        f"median |utilization error| {h['median_abs_util_err_pp']:.1f} pp, "
        f"median |speedup error| {h['median_abs_speedup_err_pct']:.1f}%, decision agreement >= {h['min_decision_agreement']:.2f}")
    say(f"wrote {out}/validation.csv, components.csv, steps.csv, timeline.csv.gz, parity.png, timelines.png")
    if a.json:
        import json

        doc = {"table": v.table.to_dict(orient="records"), "components": v.components.to_dict(orient="records"),
               "decision_agreement": dict(zip(v.table["policy"], v.table["decision_agreement"])), **h}
        Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0
