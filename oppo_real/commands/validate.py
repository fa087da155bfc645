"""``oppo-real validate``: simulate and run each policy; the predicted-vs-measured tables and figures."""

from __future__ import annotations

import argparse
from pathlib import Path

from oppo_real.commands.common import (
    BACKEND_HELP,
    BACKENDS,
    DEFAULT_LENGTH_SCALE,
    DEFAULT_MAX_RESPONSE,
    DEFAULT_TRACE,
    profile_engines,
    save_engine_profile,
)
from oppo_sim.cliargs import nonneg_int, positive


def add_parser(sub) -> None:
    v = sub.add_parser("validate", help="simulate and run each policy; predicted vs measured table and figures")
    v.add_argument("--policies", default="baseline,intra,inter,oppo", help="comma list")
    v.add_argument("--trace", default=DEFAULT_TRACE, help="forced lengths from this trace ('none' = natural)")
    v.add_argument("--length-scale", type=positive(float), default=DEFAULT_LENGTH_SCALE)
    v.add_argument("--max-response", type=positive(), default=DEFAULT_MAX_RESPONSE)
    v.add_argument("--steps", type=positive(), default=12)
    v.add_argument("--warmup", type=nonneg_int, default=2, help="first steps left out of both medians (default 2)")
    v.add_argument("--repeat", type=positive(), default=1, help="runs per policy, interleaved across policies (default 1)")
    v.add_argument("--batch", type=positive(), default=8)
    v.add_argument("--chunk", type=positive(), default=16)
    v.add_argument("--delta", type=nonneg_int, default=2)
    v.add_argument("--profile", default=None, help="a profile.json from `oppo-real profile` (default: profile now)")
    v.add_argument("--quick-profile", action="store_true", help="profile on the small grid")
    v.add_argument("--backend", default="vllm", choices=BACKENDS, help=BACKEND_HELP)
    v.add_argument("--gen-batch", type=positive(), default=None, help="torch-static: rows per generate mini-batch")
    v.add_argument("--workers", default="ray", choices=("ray", "local"))
    v.add_argument("--cache", default=None)
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--out", default="out/validate", help="directory for the table, figures and runs")
    v.add_argument("--json", default=None)
    v.set_defaults(func=cmd_validate)



def cmd_validate(a: argparse.Namespace) -> int:
    from oppo_real.config import RealConfig
    from oppo_real.validation.run import validate
    from oppo_sim.core.policies import make_policy
    from oppo_sim.traces.catalog import load_trace

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    policies = {n.strip(): make_policy(n.strip(), chunk=a.chunk, delta=a.delta) for n in a.policies.split(",") if n.strip()}
    trace = None if a.trace.lower() == "none" else load_trace(a.trace, max_response=None)
    cfg = RealConfig(batch=a.batch, steps=a.steps, seed=a.seed, backend=a.backend, gen_batch=a.gen_batch,
                     cache_dir=a.cache, max_response=a.max_response, length_scale=a.length_scale, workers=a.workers)
    hw, static = _engine_profile(a, cfg, out)
    v = validate(cfg, policies, hw, trace, warmup=a.warmup, repeat=a.repeat, log=lambda m: print(m, flush=True),
                 out_dir=out / "runs", static_cost=static)
    _report(v, a, out)
    return 0


def _engine_profile(a: argparse.Namespace, cfg, out: Path):
    """The hardware profile (and the static decoder's call overhead): loaded from --profile, or measured now."""
    import pandas as pd

    from oppo_real.models.tiny import build_models, default_cache_dir
    from oppo_real.profile_static import load_static_params
    from oppo_sim.hw.profiles import load_profile

    if a.profile:
        return load_profile(a.profile), load_static_params(a.profile) if cfg.static_engine else None
    paths = build_models(Path(a.cache) if a.cache else default_cache_dir(), cfg.tiny, cfg.task)
    print("profiling the engines on this machine ...", flush=True)
    table, hw, report, static = profile_engines(paths, a.backend, a.quick_profile, cfg.main_cores, log=lambda _m: None)
    table.to_csv(out / "measurements.csv", index=False)
    report.to_csv(out / "fit.csv", index=False)
    save_engine_profile(hw, static, out / "profile.json", {"backend": a.backend})
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(report[["op", "n", "eff_compute", "eff_memory", "overhead_s", "mape"]].to_string(index=False))
    return hw, static


def _report(v, a: argparse.Namespace, out: Path) -> None:
    import json

    import pandas as pd

    from oppo_real.validation.plots import plot_parity, plot_pred_vs_meas_timelines

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
        doc = {"table": v.table.to_dict(orient="records"), "components": v.components.to_dict(orient="records"),
               "decision_agreement": dict(zip(v.table["policy"], v.table["decision_agreement"])), **h}
        Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
