"""Gather the stages of ``scripts/gpu_measure.sh`` into the files that are kept (``paper_figs/out/``):

    gpu_profile.csv     every timed call of every profiled model: device name, GPU-table entry, model, op,
                        grid point, measured seconds, uncalibrated prediction (default cost parameters), error
    gpu_fit.csv         the fitted cost parameters per model and op (against the GPU table's datasheet entry)
    gpu_profile.png     measured vs uncalibrated prediction per op (the first model's figure)
    gpu_validation.csv  predicted vs measured per policy and model (validation.csv of each validate stage)
    gpu_parity.png, gpu_timelines.png   the first validation's figures
    gpu_summary.json    versions, device, stage status, per-op error medians, suggested default parameters

    python scripts/gpu_collect.py OUT

Whatever a stage did not produce is left out (and said so in gpu_summary.json); nothing here needs a GPU.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd


def _read(paths: list[Path], model_of) -> pd.DataFrame | None:
    frames = []
    for p in paths:
        df = pd.read_csv(p)
        if "model" not in df.columns:
            df.insert(0, "model", model_of(p))
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else None


def _first(paths: list[Path], dst: Path) -> str | None:
    for p in paths:
        if p.exists():
            shutil.copyfile(p, dst)
            return str(p)
    return None


def collect(out: Path) -> dict:
    stages = out / "stages"
    model_of = lambda p: p.parent.name.split("-", 1)[1]  # noqa: E731  profile-qwen2.5-0.5b -> qwen2.5-0.5b
    summary: dict = {"files": {}}
    prof = sorted(stages.glob("profile-*/measurements.csv"))
    table = _read(prof, model_of)
    if table is not None:
        table.to_csv(out / "gpu_profile.csv", index=False)
        summary["device"] = str(table["device"].iloc[0]) if "device" in table else None
        err = table.groupby(["model", "op"])["err_pct"].median().round(1)
        summary["median_err_pct_uncalibrated"] = {f"{m}/{op}": float(v) for (m, op), v in err.items()}
    fits = _read(sorted(stages.glob("profile-*/fit.csv")), model_of)
    if fits is not None:
        fits.to_csv(out / "gpu_fit.csv", index=False)
    for p in sorted(stages.glob("profile-*/profile.json")):
        meta = json.loads(p.read_text()).get("meta", {})
        summary.setdefault("suggested_defaults", {})[model_of(p)] = meta.get("suggested_defaults")
    val = _read(sorted(stages.glob("validate-*/validation.csv")), model_of)
    if val is not None:
        val.to_csv(out / "gpu_validation.csv", index=False)
    summary["files"]["gpu_profile.png"] = _first([p.parent / "profile.png" for p in prof], out / "gpu_profile.png")
    vdirs = sorted(stages.glob("validate-*"))
    summary["files"]["gpu_parity.png"] = _first([d / "parity.png" for d in vdirs], out / "gpu_parity.png")
    summary["files"]["gpu_timelines.png"] = _first([d / "timelines.png" for d in vdirs], out / "gpu_timelines.png")
    for name in ("env.txt", "status.txt"):
        f = stages / name
        summary[name.split(".")[0]] = f.read_text().splitlines() if f.exists() else None
    (out / "gpu_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/gpu_collect.py OUT")
    s = collect(Path(sys.argv[1]))
    print(json.dumps({k: v for k, v in s.items() if k != "env"}, indent=1))
