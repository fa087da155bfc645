"""Gather the stages of ``scripts/gpu_measure.sh`` into the files that are kept (``paper_figs/out/``):

    gpu_profile.csv     every timed call of every profiled model: device name, GPU-table entry, model, backend,
                        op, grid point, measured seconds, uncalibrated prediction (default cost parameters),
                        error, and for decode iterations the kernel share (GPU time / wall time)
    gpu_fit.csv         the fitted cost parameters per model, backend and op (against the GPU table's entry)
    gpu_fit_heldout.csv the fit on half of each op's grid, r2 and error per op on the fitted (split=fit) and
                        the held-out (split=held-out) grid points (oppo_sim.hw.fitting.holdout states the split)
    gpu_profile.png     measured vs uncalibrated prediction per op (the first model's figure)
    gpu_validation.csv  predicted vs measured per policy and model (validation.csv of each validate stage)
    gpu_validation_components.csv, gpu_validation_steps.csv, gpu_validation_timeline.csv.gz   its step components,
                        every step and every call, predicted and measured
    gpu_parity.png, gpu_timelines.png   the first validation's figures
    gpu_moves.csv       every timed copy of the sleepwake-* and sync-* stages (oppo_real.profiling.host_moves):
                        device, model, set (engine_weights, kv_cache, train_state, weights), direction (d2h,
                        h2d, d2d), leg, bytes, seconds, GiB/s, host memory (pinned), host buffers reused or not
    gpu_moves_fit.csv   fixed cost and GiB/s per model, set and direction (set "all": over the engine's and the
                        trainer's sets), r2, and the eff the GPU table's host_bw would need (eff_vs_host_bw)
    gpu_decode_cut.csv  decode rows read from the console log (``profile.log``, which gpu_measure.sh keeps per
                        profile stage) of a decode stage cut before it wrote its table: the stage (decode-torch,
                        decode-eager, ...), median ms per grid point, kernel share and the profiled wall time
    gpu_summary.json    versions, device, stage status, per-op error medians, decode kernel shares per
                        model / backend / batch, suggested default parameters per model, the host-link fits
                        per direction (``host_moves``), the host's microseconds per eager op of each eager decode
                        stage (``host_op_us``: ``oppo-real profile --no-cuda-graphs``'s, the ``--host-op-us`` to pass)

    python scripts/gpu_collect.py OUT
    python scripts/gpu_collect.py OUT --into paper_figs/out/gpu_h200   # a later session's stages, added to a card's folder

A profile may be measured one op per stage (``profile-<model>--<op>``, one device-machine call each): the
per-op fits of a model are merged into ``OUT/stages/profile-<model>/profile.json`` (each op's parameters
from the stage that measured it, with the torch-graph engine where both engines were measured), which the
validate stage predicts with. Whatever a stage did not produce is left out (and said so in
gpu_summary.json); nothing here needs a GPU.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd


def model_of(p: Path) -> str:
    """``profile-qwen2.5-7b--train/x`` or ``validate-qwen2.5-7b/x`` -> ``qwen2.5-7b``."""
    return p.parent.name.split("-", 1)[1].split("--")[0]


def _meta(p: Path) -> dict:
    f = p.parent / "profile.json"
    return json.loads(f.read_text()).get("meta", {}) if f.exists() else {}


def _read(paths: list[Path], tag_backend: bool = False) -> pd.DataFrame | None:
    frames = []
    for p in paths:
        df = pd.read_csv(p)
        if "model" not in df.columns:
            df.insert(0, "model", model_of(p))
        if tag_backend and "backend" not in df.columns:
            df.insert(1, "backend", _meta(p).get("backend", ""))
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else None


def _first(paths: list[Path], dst: Path) -> str | None:
    for p in paths:
        if p.exists():
            shutil.copyfile(p, dst)
            return str(p)
    return None


MERGED_OPS = ("decode", "prefill", "train")
"""The ops a profile stage fits over a grid, merged into a model's profile. A ``profile-SIZE-sync`` stage times the
engine's weight load at one size along two paths (from the device, from pinned host memory): no fit can be made of
it (its rows stay in gpu_profile.csv); ``oppo-real validate`` measures the sync it predicts with itself."""


def merge_profiles(stages: Path) -> dict[str, list[str]]:
    """Per model, one profile.json from its per-op stages (the ops of :data:`MERGED_OPS`); returns {model: [ops merged]}."""
    from oppo_sim.hw.fitting.profiles import read_profile, save_profile

    by_model: dict[str, list[tuple[Path, dict]]] = {}
    for p in sorted(stages.glob("profile-*--*/profile.json")):
        by_model.setdefault(model_of(p), []).append((p, _meta(p)))
    merged: dict[str, list[str]] = {}
    for model, parts in by_model.items():
        parts.sort(key=lambda pm: pm[1].get("backend") == "torch-graph")  # graph-engine fits win
        hw, ops, suggested, used = None, [], {}, []
        for p, meta in parts:
            part, _ = read_profile(p)
            hw = part if hw is None else hw
            for op in (o for o in meta.get("ops", []) if o in MERGED_OPS):
                used.append(str(p))
                hw = replace(hw, params=replace(hw.params, **{op: part.params.op(op)}))
                suggested[op] = (meta.get("suggested_defaults") or {}).get(op)
                ops.append(op)
        if not ops:  # only un-fittable stages (a sync): no profile for the model
            continue
        save_profile(hw, stages / f"profile-{model}" / "profile.json",
                     meta={"merged_from": list(dict.fromkeys(used)), "ops": sorted(set(ops)), "suggested_defaults": suggested})
        merged[model] = sorted(set(ops))
    return merged


def kernel_shares(table: pd.DataFrame) -> dict:
    """Median kernel share of decode iterations per model, backend and batch (where measured)."""
    if "kernel_share" not in table.columns:
        return {}
    dec = table[(table["op"] == "decode") & table["kernel_share"].notna()]
    keys = [c for c in ("model", "backend", "batch") if c in dec.columns]
    return {"/".join(str(v) for v in (k if isinstance(k, tuple) else (k,))): round(float(g["kernel_share"].median()), 3)
            for k, g in dec.groupby(keys)} if len(dec) else {}


_DECODE_LINE = re.compile(r"decode b=\s*(\d+) kv=\s*(\d+):\s*([\d.]+) ms(?:, kernels\s*([\d.]+)% of ([\d.]+) ms)?")


def decode_from_logs(stages: Path) -> pd.DataFrame | None:
    """The decode grid points a stage cut before its table printed (``profile-<model>--<stage>/profile.log``)."""
    rows = []
    for log in sorted(stages.glob("profile-*--*/profile.log")):
        if (log.parent / "measurements.csv").exists():
            continue
        for m in _DECODE_LINE.finditer(log.read_text()):
            b, kv, ms, share, wall = m.groups()
            rows.append({"model": model_of(log), "stage": log.parent.name.split("--", 1)[1], "batch": int(b), "kv": int(kv),
                         "median_ms": float(ms), "kernel_share": float(share) / 100 if share else None,
                         "kernel_wall_ms": float(wall) if wall else None})
    return pd.DataFrame(rows) if rows else None


def collect_moves(stages: Path, out: Path) -> dict:
    """gpu_moves.csv and gpu_moves_fit.csv from the ``moves-<model>--<move>`` stages; returns the fits per
    direction (over all the engine's and trainer's sets, or the weights' for sync) for the summary."""
    moves = _read(sorted(stages.glob("moves-*/moves.csv")))
    if moves is not None:
        moves.to_csv(out / "gpu_moves.csv", index=False)
    fit = _read(sorted(stages.glob("moves-*/moves_fit.csv")))
    if fit is None:
        return {}
    fit.to_csv(out / "gpu_moves_fit.csv", index=False)
    pooled = fit[(fit["set"] == "all") | (fit["move"] == "sync")]

    def num(x, digits: int):
        return round(float(x), digits) if pd.notna(x) else None  # JSON has no NaN

    return {f"{r.model}/{r.move}/{r.set}/{r.direction}": {"fixed_s": num(r.fixed_s, 5), "gib_s": num(r.gib_s, 3),
                                                         "r2": num(r.r2, 3), "eff_vs_host_bw": num(r.eff_vs_host_bw, 3)}
            for r in pooled.itertuples()}


def collect(out: Path) -> dict:
    stages = out / "stages"
    summary: dict = {"files": {}}
    summary["merged_profiles"] = merge_profiles(stages) if stages.exists() else {}
    prof = sorted(stages.glob("profile-*/measurements.csv"))
    table = _read(prof, tag_backend=True)
    if table is not None:
        table.to_csv(out / "gpu_profile.csv", index=False)
        summary["device"] = str(table["device"].iloc[0]) if "device" in table else None
        err = table.groupby(["model", "op"])["err_pct"].median().round(1)
        summary["median_err_pct_uncalibrated"] = {f"{m}/{op}": float(v) for (m, op), v in err.items()}
        summary["decode_kernel_share"] = kernel_shares(table)
    for name, dst in (("fit.csv", "gpu_fit.csv"), ("heldout.csv", "gpu_fit_heldout.csv")):
        df = _read(sorted(stages.glob(f"profile-*/{name}")), tag_backend=True)
        if df is not None:
            df.to_csv(out / dst, index=False)
    for p in sorted(stages.glob("profile-*/profile.json")):
        meta = _meta(p)
        if "--" not in p.parent.name:  # whole or merged profiles
            summary.setdefault("suggested_defaults", {})[model_of(p)] = meta.get("suggested_defaults")
        if meta.get("host_op_us") is not None:  # an eager decode stage's host cost per op (oppo-real profile)
            summary.setdefault("host_op_us", {})[p.parent.name.removeprefix("profile-")] = meta["host_op_us"]
    summary["host_moves"] = collect_moves(stages, out)
    cut = decode_from_logs(stages)
    if cut is not None:
        cut.to_csv(out / "gpu_decode_cut.csv", index=False)
        summary["decode_kernel_share_cut"] = {f"{m}/{st}/{b}": round(float(g["kernel_share"].median()), 3)
                                              for (m, st, b), g in cut.groupby(["model", "stage", "batch"])
                                              if g["kernel_share"].notna().any()}  # JSON has no NaN
    for name, dst in (("validation.csv", "gpu_validation.csv"), ("components.csv", "gpu_validation_components.csv"),
                      ("steps.csv", "gpu_validation_steps.csv"), ("timeline.csv.gz", "gpu_validation_timeline.csv.gz")):
        val = _read(sorted(stages.glob(f"validate-*/{name}")))
        if val is not None:
            val.to_csv(out / dst, index=False)
    summary["files"]["gpu_profile.png"] = _first([p.parent / "profile.png" for p in prof], out / "gpu_profile.png")
    vdirs = sorted(stages.glob("validate-*"))
    summary["files"]["gpu_parity.png"] = _first([d / "parity.png" for d in vdirs], out / "gpu_parity.png")
    summary["files"]["gpu_timelines.png"] = _first([d / "timelines.png" for d in vdirs], out / "gpu_timelines.png")
    for name in ("env.txt", "status.txt"):
        f = stages / name
        summary[name.split(".")[0]] = f.read_text().splitlines() if f.exists() else None
    (out / "gpu_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


KEPT_CSVS = ("gpu_profile.csv", "gpu_fit.csv", "gpu_fit_heldout.csv", "gpu_validation.csv", "gpu_validation_components.csv",
             "gpu_validation_steps.csv", "gpu_validation_timeline.csv.gz", "gpu_moves.csv", "gpu_moves_fit.csv", "gpu_decode_cut.csv")


VALIDATION_CSVS = ("gpu_validation.csv", "gpu_validation_components.csv", "gpu_validation_steps.csv",
                   "gpu_validation_timeline.csv.gz")
"""Tables of validation runs: each row says the ``session`` it was measured in (a later run of the same policies is
another session, not a repeat of the first)."""


def merge_into(out: Path, dest: Path, session: str) -> list[str]:
    """Add what ``collect(out)`` gathered to a card's folder ``dest`` measured in earlier sessions (one device-machine
    lease rarely measures everything): each CSV's rows appended (exact repeats dropped; validation rows tagged with
    ``session``), each model's merged profile written as ``profile_<model>.json`` with the new ops' parameters over
    the old ones (and the new profile's host fields and meta), figures ``dest`` lacks copied, the summary merged key by
    key at every depth (lists joined), the log appended. Returns the files written."""
    dest.mkdir(parents=True, exist_ok=True)
    wrote = []
    for name in KEPT_CSVS:
        if (out / name).exists():
            new = pd.read_csv(out / name)
            if name in VALIDATION_CSVS and "session" not in new:
                new.insert(0, "session", session)
            both = pd.concat([pd.read_csv(dest / name), new], ignore_index=True) if (dest / name).exists() else new
            both.drop_duplicates().to_csv(dest / name, index=False)
            wrote.append(name)
    for p in sorted((out / "stages").glob("profile-*/profile.json")):
        if "--" not in p.parent.name:
            wrote.append(_merge_profile(p, dest / f"profile_{model_of(p)}.json"))
    for name in ("gpu_profile.png", "gpu_parity.png", "gpu_timelines.png"):
        if (out / name).exists() and not (dest / name).exists():
            shutil.copyfile(out / name, dest / name)
            wrote.append(name)
    summary = out / "gpu_summary.json"
    if summary.exists():
        new = json.loads(summary.read_text())
        new["files"] = {k: v for k, v in new.get("files", {}).items() if k in wrote}  # only figures copied here
        old = json.loads((dest / "gpu_summary.json").read_text()) if (dest / "gpu_summary.json").exists() else {}
        (dest / "gpu_summary.json").write_text(json.dumps(_deep_merge(old, new), indent=1) + "\n")
        wrote.append("gpu_summary.json")
    if (out / "gpu_measure.log").exists():
        with open(dest / "gpu_measure.log", "a") as f:
            f.write((out / "gpu_measure.log").read_text())
        wrote.append("gpu_measure.log")
    return wrote


def _merge_profile(new_path: Path, target: Path) -> str:
    """``target`` with the ops of the profile at ``new_path`` over its own; the rest of the new profile (GPU, host
    fields, meta) wins too, its ``merged_from`` and ``suggested_defaults`` joined to the old ones."""
    from oppo_sim.hw.fitting.profiles import read_profile, save_profile

    hw, meta = read_profile(new_path)
    if target.exists():
        old, old_meta = read_profile(target)
        new_ops = set(meta.get("ops", []))
        keep = {op: old.params.op(op) for op in old_meta.get("ops", []) if op not in new_ops}
        hw = replace(hw, params=replace(old.params, **keep, **{op: hw.params.op(op) for op in new_ops}))
        meta = {**old_meta, **meta, "merged_from": old_meta.get("merged_from", []) + meta.get("merged_from", [str(new_path)]),
                "ops": sorted(new_ops | set(keep)),
                "suggested_defaults": _deep_merge(old_meta.get("suggested_defaults") or {}, meta.get("suggested_defaults") or {})}
    save_profile(hw, target, meta=meta)
    return target.name


def _deep_merge(old: dict, new: dict) -> dict:
    """``old`` updated by ``new`` at every depth: dicts merged, lists joined (order kept, repeats dropped), None skipped."""
    out = dict(old)
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        elif isinstance(v, list) and isinstance(out.get(k), list):
            out[k] = out[k] + [x for x in v if x not in out[k]]
        elif v is not None:
            out[k] = v
    return out


if __name__ == "__main__":
    import argparse
    from datetime import datetime, timezone

    ap = argparse.ArgumentParser(description="gather scripts/gpu_measure.sh's stages into the kept gpu_* files")
    ap.add_argument("out", help="the folder gpu_measure.sh wrote (its stages/ folder is read)")
    ap.add_argument("--into", metavar="CARD_FOLDER", help="then add them to a card's folder measured in earlier sessions "
                    "(e.g. paper_figs/out/gpu_h200) (default: none)")
    ap.add_argument("--session", default=datetime.now(timezone.utc).date().isoformat(),
                    help="the session the validation rows are tagged with under --into (default: today, UTC)")
    a = ap.parse_args()
    s = collect(Path(a.out))
    print(json.dumps({k: v for k, v in s.items() if k != "env"}, indent=1))
    if a.into:
        print("added to", a.into + ":", ", ".join(merge_into(Path(a.out), Path(a.into), a.session)))
