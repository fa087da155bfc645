"""``oppo-real profile``: time the engines' operations here and fit the simulator's cost model."""

from __future__ import annotations

import argparse
from pathlib import Path

from oppo_real.commands.common import (
    BACKEND_HELP,
    BACKENDS,
    profile_engines,
    save_engine_profile,
)
from oppo_real.commands.common import cores as _cores


def add_parser(sub) -> None:
    pr = sub.add_parser("profile", help="time the engines' operations here and fit the simulator's cost model")
    pr.add_argument("--backend", default="vllm", choices=BACKENDS, help=BACKEND_HELP)
    pr.add_argument("--cores", type=_cores, default=(0,), help="cores to pin to (default 0)")
    pr.add_argument("--cache", default=None, help="model cache directory")
    pr.add_argument("--quick", action="store_true", help="a small grid (for CI)")
    pr.add_argument("--out", default="out/profile", help="directory for measurements.csv, fit.csv, profile.json")
    pr.set_defaults(func=cmd_profile)



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
