"""scripts/gpu_collect.py on per-op stages (one device-machine call each): each model's profile merged from the
stages that measured each op (the torch-graph engine's decode over the per-request torch one), the held-out
fit tables gathered with the backend that was measured, and decode kernel shares summarised."""

import importlib.util
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from oppo_sim.hw.devices.hardware import DEFAULT_COST_PARAMS, Hardware, OpParams, get_gpu
from oppo_sim.hw.fitting.profiles import load_profile, save_profile

REPO = Path(__file__).resolve().parents[1]


def _collect_module():
    spec = importlib.util.spec_from_file_location("gpu_collect", REPO / "scripts" / "gpu_collect.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stage(root: Path, name: str, backend: str, op: str, eff: float, share: float | None = None) -> None:
    d = root / "stages" / name
    d.mkdir(parents=True)
    hw = Hardware(get_gpu("h100-sxm"), replace(DEFAULT_COST_PARAMS, **{op: OpParams(eff, eff, 1e-3)}))
    save_profile(hw, d / "profile.json", meta={"backend": backend, "ops": [op], "suggested_defaults": {op: {"eff_compute": eff}}})
    rows = pd.DataFrame({"device": "NVIDIA H100 80GB HBM3", "model": "qwen2.5-1.5b", "op": op, "seconds": [0.01, 0.02],
                         "err_pct": [5.0, -5.0], "batch": [16, 32], "kernel_share": [share, share]})
    rows.to_csv(d / "measurements.csv", index=False)
    pd.DataFrame({"op": [op, op], "split": ["fit", "held-out"], "r2": [0.99, 0.9]}).to_csv(d / "heldout.csv", index=False)
    pd.DataFrame({"op": [op], "r2": [0.99]}).to_csv(d / "fit.csv", index=False)


def test_per_op_stages_merge_into_one_profile_per_model(tmp_path):
    _stage(tmp_path, "profile-qwen2.5-1.5b--decode", "torch-graph", "decode", 0.5, share=0.85)
    _stage(tmp_path, "profile-qwen2.5-1.5b--decode-torch", "torch", "decode", 0.05, share=0.1)
    _stage(tmp_path, "profile-qwen2.5-1.5b--train", "torch-graph", "train", 0.3)
    summary = _collect_module().collect(tmp_path)
    merged = load_profile(tmp_path / "stages" / "profile-qwen2.5-1.5b" / "profile.json")
    assert merged.params.decode.eff_compute == 0.5  # the graph engine's fit, not the torch loop's
    assert merged.params.train.eff_compute == 0.3
    assert merged.params.prefill == DEFAULT_COST_PARAMS.prefill  # not measured: the default
    assert summary["merged_profiles"] == {"qwen2.5-1.5b": ["decode", "train"]}
    assert summary["decode_kernel_share"] == {"qwen2.5-1.5b/torch/16": 0.1, "qwen2.5-1.5b/torch/32": 0.1,
                                              "qwen2.5-1.5b/torch-graph/16": 0.85, "qwen2.5-1.5b/torch-graph/32": 0.85}
    held = pd.read_csv(tmp_path / "gpu_fit_heldout.csv")
    assert set(held["split"]) == {"fit", "held-out"} and set(held["backend"]) == {"torch", "torch-graph"}
    assert (pd.read_csv(tmp_path / "gpu_profile.csv")["device"] == "NVIDIA H100 80GB HBM3").all()
    assert json.loads((tmp_path / "gpu_summary.json").read_text())["suggested_defaults"]["qwen2.5-1.5b"]["decode"] == {"eff_compute": 0.5}


def test_a_decode_stage_cut_before_its_table_is_read_from_its_log(tmp_path):
    cut = tmp_path / "stages" / "profile-qwen2.5-1.5b--decode-eager"
    cut.mkdir(parents=True)
    (cut / "profile.log").write_text("warming the engine for 5 s\n"
                                     "decode b=  1 kv= 128:   20.38 ms, kernels  16.6% of 20.73 ms\n"
                                     "decode b= 64 kv=2048:   28.19 ms, kernels  19.0% of 32.19 ms\n"
                                     "decode b=128 kv= 128:   9.10 ms\n")
    whole = tmp_path / "stages" / "profile-qwen2.5-3b--decode"  # wrote its table: its log is not read again
    whole.mkdir(parents=True)
    (whole / "profile.log").write_text("decode b=  1 kv= 128:   5.00 ms, kernels  90.0% of 5.00 ms\n")
    (whole / "measurements.csv").write_text("op,seconds\n")
    rows = _collect_module().decode_from_logs(tmp_path / "stages")
    assert rows[["model", "stage", "batch", "kv"]].values.tolist() == [
        ["qwen2.5-1.5b", "decode-eager", 1, 128], ["qwen2.5-1.5b", "decode-eager", 64, 2048], ["qwen2.5-1.5b", "decode-eager", 128, 128]]
    assert rows["median_ms"].tolist() == [20.38, 28.19, 9.10]
    assert rows["kernel_share"].iloc[0] == 0.166 and pd.isna(rows["kernel_share"].iloc[2])
    assert rows["kernel_wall_ms"].iloc[1] == 32.19
    shutil.rmtree(whole)  # (a stand-in table, not a whole profile)
    cpu = tmp_path / "stages" / "profile-tiny--decode-torch"  # cut on a CPU: no kernel share at all
    cpu.mkdir(parents=True)
    (cpu / "profile.log").write_text("decode b=  4 kv=  16:   3.00 ms\n")
    summary = _collect_module().collect(tmp_path)
    assert len(pd.read_csv(tmp_path / "gpu_decode_cut.csv")) == 4
    assert summary["decode_kernel_share_cut"] == {"qwen2.5-1.5b/decode-eager/1": 0.166, "qwen2.5-1.5b/decode-eager/64": 0.19}
    json.loads((tmp_path / "gpu_summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


def test_an_eager_decode_stages_host_cost_per_op_is_collected(tmp_path):
    _stage(tmp_path, "profile-qwen2.5-1.5b--decode", "torch-graph", "decode", 0.5, share=0.85)
    eager = tmp_path / "stages" / "profile-qwen2.5-1.5b--decode-eager"
    _stage(tmp_path, eager.name, "torch-graph", "decode", 0.05, share=0.2)
    hw = load_profile(eager / "profile.json")
    save_profile(hw, eager / "profile.json", meta={"backend": "torch-graph", "ops": ["decode"], "host_op_us": 21.9})
    summary = _collect_module().collect(tmp_path)
    assert summary["host_op_us"] == {"qwen2.5-1.5b--decode-eager": 21.9}
    assert json.loads((tmp_path / "gpu_summary.json").read_text())["host_op_us"] == {"qwen2.5-1.5b--decode-eager": 21.9}


def test_a_later_session_is_added_to_a_cards_folder(tmp_path):
    mod = _collect_module()
    first, later, card = tmp_path / "first", tmp_path / "later", tmp_path / "card"
    _stage(first, "profile-qwen2.5-1.5b--decode", "torch-graph", "decode", 0.5)
    mod.collect(first)
    mod.merge_into(first, card, session="2026-11-26")
    _stage(later, "profile-qwen2.5-1.5b--train", "torch-graph", "train", 0.3)
    _stage(later, "profile-qwen2.5-3b--sync", "torch-graph", "sync", 0.9)  # one size a path: nothing to merge
    val = later / "stages" / "validate-qwen2.5-1.5b"
    val.mkdir(parents=True)
    pd.DataFrame({"policy": ["baseline", "oppo"], "pred_step_s": [2.0, 1.5], "meas_step_s": [2.5, 1.8]}).to_csv(
        val / "validation.csv", index=False)
    mod.collect(later)
    wrote = mod.merge_into(later, card, session="2026-11-27")
    merged = load_profile(card / "profile_qwen2.5-1.5b.json")
    assert (merged.params.decode.eff_compute, merged.params.train.eff_compute) == (0.5, 0.3)  # both sessions' ops
    assert not (card / "profile_qwen2.5-3b.json").exists() and "profile_qwen2.5-3b.json" not in wrote
    assert len(pd.read_csv(card / "gpu_profile.csv")) == 6  # 2 + 2 + 2 rows, none lost or repeated
    v = pd.read_csv(card / "gpu_validation.csv")
    assert v["session"].tolist() == ["2026-11-27"] * 2 and v["model"].tolist() == ["qwen2.5-1.5b"] * 2
    summary = json.loads((card / "gpu_summary.json").read_text())
    assert summary["suggested_defaults"]["qwen2.5-1.5b"] == {"decode": {"eff_compute": 0.5}, "train": {"eff_compute": 0.3}}
    assert summary["merged_profiles"]["qwen2.5-1.5b"] == ["decode", "train"]
    mod.merge_into(later, card, session="2026-11-27")  # the same stages again: rows not repeated
    assert len(pd.read_csv(card / "gpu_validation.csv")) == 2
