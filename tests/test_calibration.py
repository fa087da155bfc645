"""Calibration: recover known cost parameters from synthetic measurements; profile JSON I/O."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.fitting.calibration import (
    MEASUREMENT_COLUMNS,
    REPORT_COLUMNS,
    fit_op,
    fit_profile,
    predict_seconds,
    validate_measurements,
    with_collective_busbw,
    with_collective_seconds,
)
from oppo_sim.hw.costs.costmodel import CostModel, DecodeCost
from oppo_sim.hw.devices.hardware import (
    DEFAULT_COST_PARAMS,
    CostParams,
    GPUSpec,
    Hardware,
    OpParams,
    get_gpu,
)
from oppo_sim.hw.models.lookup import ModelSpec, get_model
from oppo_sim.hw.fitting.profiles import (
    cpu_spec,
    load_profile,
    read_profile,
    resolve_hardware,
    save_profile,
)

TRUTH = CostParams(
    decode=OpParams(0.42, 0.63, 2.5e-3),
    prefill=OpParams(0.61, 0.55, 1.5e-3),
    train=OpParams(0.35, 0.80, 7e-3),
    sync=OpParams(1.0, 0.45, 0.02),
    collective=OpParams(1.0, 0.85, 1.2e-5),
)


def _work_grid() -> pd.DataFrame:
    """Calls spanning memory-bound (small batches) and compute-bound (large batches) regimes."""
    rows = []
    for mid in ["qwen2.5-0.5b", "qwen2.5-7b", "llama-3.1-70b"]:
        m = get_model(mid)
        kv = m.kv_bytes_per_token()
        for b in [1, 4, 16, 64, 256, 1024, 4096]:
            for ctx in [128, 2048]:
                flops = 2 * m.matmul_params * b + 4 * m.layers * m.attn_width * b * ctx
                rows.append(("decode", 1, flops, m.weight_bytes() + b * ctx * kv))
        for n in [16, 64, 256, 1024, 4096, 16384]:
            rows.append(("prefill", 1, m.forward_flops(n, 0, scalar_head=True), m.weight_bytes(True) + n * kv))
            rows.append(("train", 2, 3 * m.forward_flops(n), 2 * 3 * m.weight_bytes() + 16 * m.params))
        rows.append(("sync", 1, 0.0, m.weight_bytes()))
    for size in [1e5, 1e6, 1e7, 1e8, 1e9]:  # all-reduces, as nccl-tests times them: bus bytes per GPU
        for n in [2, 8]:
            rows.append(("collective", n, *CostModel.allreduce_work(size, n)))
    return pd.DataFrame(rows, columns=["op", "devices", "flops", "bytes"])


def _measure(work: pd.DataFrame, spec: GPUSpec, truth, noise: float, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = predict_seconds(work.assign(seconds=1.0), spec, truth)
    return work.assign(seconds=t * np.exp(rng.normal(0.0, noise, len(work))))[MEASUREMENT_COLUMNS]


def _close(fit: OpParams, truth: OpParams, rel: float) -> None:
    assert fit.eff_compute == pytest.approx(truth.eff_compute, rel=rel)
    assert fit.eff_memory == pytest.approx(truth.eff_memory, rel=rel)
    assert fit.overhead_s == pytest.approx(truth.overhead_s, rel=rel)


@pytest.mark.parametrize("gid", ["h100-sxm", "a100-40gb", "rtx-4090"])
def test_fit_profile_recovers_truth(gid):
    spec = get_gpu(gid)
    df = _measure(_work_grid(), spec, TRUTH, noise=0.01, seed=1)
    # both regimes present for every op with FLOPs
    for op in ["decode", "prefill", "train"]:
        sub = df[df.op == op]
        a = sub.flops / (sub.devices * spec.peak_flops * TRUTH.op(op).eff_compute)
        b = sub.bytes / (sub.devices * spec.mem_bw * TRUTH.op(op).eff_memory)
        assert (a > b).any() and (b > a).any()
    hw, report = fit_profile(df, spec)
    assert hw.gpu is spec
    assert list(report.columns) == REPORT_COLUMNS
    assert list(report.op) == ["decode", "prefill", "train", "sync", "collective"]
    for op in ["decode", "prefill", "train"]:
        _close(hw.params.op(op), TRUTH.op(op), rel=0.04)
    sync = hw.params.sync
    assert sync.eff_memory == pytest.approx(0.45, rel=0.04)
    assert sync.overhead_s == pytest.approx(0.02, rel=0.1)
    assert sync.eff_compute == 1.0  # no FLOPs: default kept
    coll = hw.params.collective  # the all-reduce efficiency and latency come through the profile fit
    assert coll.eff_memory == pytest.approx(0.85, rel=0.04) and coll.overhead_s == pytest.approx(1.2e-5, rel=0.1)
    assert coll.eff_compute == 1.0
    assert (report.mape < 0.02).all()
    assert (report.r2 > 0.99).all()


def test_fit_exact_without_noise():
    spec = get_gpu("h200")
    df = _measure(_work_grid(), spec, TRUTH, noise=0.0)
    hw, report = fit_profile(df, spec)
    for op in ["decode", "prefill", "train", "sync", "collective"]:
        _close(hw.params.op(op), TRUTH.op(op), rel=1e-4)
    assert (report.mape < 1e-5).all()


def test_fit_on_cpu_spec_small_efficiencies():
    """A tiny locally built model on a nominal CPU spec: efficiencies far below 1, overhead-heavy calls."""
    spec = cpu_spec(cores=8, freq_hz=3e9)
    truth = OpParams(0.02, 0.3, 0.02)
    m = ModelSpec("tiny", "tiny", layers=4, hidden=256, heads=4, kv_heads=2, intermediate=1024, vocab=1000)
    rows = []
    for b in [1, 4, 16, 64, 256, 512]:
        for ctx in [0, 1024, 8192]:
            flops = 2.0 * m.matmul_params * b + 4 * m.layers * m.attn_width * b * ctx
            rows.append(("decode", 1, flops, m.weight_bytes() + b * ctx * m.kv_bytes_per_token()))
    work = pd.DataFrame(rows, columns=["op", "devices", "flops", "bytes"])
    df = _measure(work, spec, truth, noise=0.005, seed=3)
    params, rep = fit_op(df, spec)
    _close(params, truth, rel=0.05)
    assert rep.n == len(df) and rep.op == "decode" and rep.note == ""


def test_unidentified_efficiency_keeps_default_and_predictions():
    spec = get_gpu("h100-sxm")
    work = _work_grid()
    work = work[work.op == "decode"]
    p = TRUTH.decode  # keep only the calls that are memory-bound under the truth
    work = work[work.flops / (spec.peak_flops * p.eff_compute) < work.bytes / (spec.mem_bw * p.eff_memory)]
    assert len(work) > 10
    df = _measure(work, spec, TRUTH, noise=0.0)
    params, rep = fit_op(df, spec)
    assert "eff_compute not identifiable" in rep.note
    assert params.eff_compute >= DEFAULT_COST_PARAMS.decode.eff_compute
    assert params.eff_memory == pytest.approx(0.63, rel=1e-3)
    np.testing.assert_allclose(predict_seconds(df, spec, params), df.seconds, rtol=1e-4)


def test_same_work_sync_holds_overhead():
    spec = get_gpu("h100-sxm")
    m = get_model("qwen2.5-7b")
    work = pd.DataFrame({"op": "sync", "devices": 1, "flops": 0.0, "bytes": [float(m.weight_bytes())] * 6})
    df = _measure(work, spec, TRUTH, noise=0.01, seed=5)
    params, rep = fit_op(df, spec)
    assert "same work" in rep.note
    assert params.overhead_s == pytest.approx(min(0.05, 0.5 * df.seconds.min()))
    assert rep.mape < 0.03
    assert np.isnan(rep.r2)


def test_absent_ops_keep_defaults():
    spec = get_gpu("l40s")
    df = _measure(_work_grid(), spec, TRUTH, noise=0.0)
    hw, report = fit_profile(df[df.op == "prefill"], spec)
    assert list(report.op) == ["prefill"]
    assert hw.params.decode == DEFAULT_COST_PARAMS.decode
    assert hw.params.train == DEFAULT_COST_PARAMS.train
    assert hw.params.sync == DEFAULT_COST_PARAMS.sync
    assert hw.params.collective == DEFAULT_COST_PARAMS.collective
    _close(hw.params.prefill, TRUTH.prefill, rel=1e-4)
    grace, _ = fit_profile(df[df.op == "prefill"], replace(spec, host_op_scale=2.0))  # the same GPU on a slower host
    assert grace.host_scale == 2.0 and grace.params.prefill == hw.params.prefill  # measured: its host's own
    assert grace.params.decode.overhead_s == pytest.approx(DEFAULT_COST_PARAMS.decode.overhead_s * grace.host_scale)


def test_fit_op_needs_one_op():
    spec = get_gpu("h200")
    df = _measure(_work_grid(), spec, TRUTH, noise=0.0)
    with pytest.raises(ConfigError, match="exactly one op, got: decode, prefill"):
        fit_op(df[df.op.isin(["decode", "prefill"])], spec)
    with pytest.raises(ConfigError, match="empty"):
        fit_profile(df.iloc[:0], spec)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.drop(columns=["seconds", "bytes"]), "missing column.*bytes, seconds"),
        (lambda d: d.assign(op="generate"), "unknown op 'generate'"),
        (lambda d: d.assign(seconds=np.where(d.index == 2, np.nan, d.seconds)), r"'seconds'.*row 2"),
        (lambda d: d.assign(seconds=-d.seconds), "'seconds' must be > 0"),
        (lambda d: d.assign(flops=-1.0), "'flops' must be >= 0"),
        (lambda d: d.assign(devices=0), "'devices' must be a positive integer"),
        (lambda d: d.assign(devices=1.5), "'devices' must be a positive integer"),
        (lambda d: d.assign(bytes="x"), "'bytes'"),
    ],
)
def test_validate_measurements(mutate, match):
    df = _measure(_work_grid(), get_gpu("h200"), TRUTH, noise=0.0).head(5)
    validate_measurements(df)
    with pytest.raises(ConfigError, match=match) as e:
        validate_measurements(mutate(df))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="DataFrame"):
        validate_measurements({"op": []})


# ------------------------------------------------------------------------------------- profiles
def _fitted_hw() -> Hardware:
    spec = get_gpu("a100-80gb")
    hw, _ = fit_profile(_measure(_work_grid(), spec, TRUTH, noise=0.02, seed=7), spec)
    return hw


def test_profile_round_trip_exact(tmp_path):
    hw = _fitted_hw()
    path = tmp_path / "sub" / "a100.json"
    save_profile(hw, path, meta={"host": "node1", "n": np.int64(3)})
    back, meta = read_profile(path)
    assert back == hw  # floats round-trip exactly through JSON
    assert meta == {"host": "node1", "n": 3}
    assert load_profile(str(path)) == hw
    assert resolve_hardware(path) == hw
    assert resolve_hardware(str(path)) == hw
    doc = json.loads(path.read_text())
    assert doc["format"] == "oppo-profile/2"
    assert set(doc) == {"format", "gpu", "params", "host_scale", "meta"}
    assert set(doc["params"]) == {"decode", "prefill", "train", "sync", "collective"}


def test_cpu_profile_round_trip(tmp_path):
    spec = cpu_spec()
    assert spec.id == "cpu" and spec.peak_flops > 0 and spec.mem_bytes > 0
    assert "calibration" in spec.source
    hw = Hardware(spec)
    save_profile(hw, tmp_path / "cpu.json")
    assert load_profile(tmp_path / "cpu.json") == hw
    with pytest.raises(ConfigError, match="cores"):
        cpu_spec(cores=0)


def _write(tmp_path, doc) -> str:
    p = tmp_path / "p.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


def _good_doc() -> dict:
    return {
        "format": "oppo-profile/2",
        "gpu": {"id": "h200", "name": "H200", "peak_flops": 989e12, "mem_bw": 4.8e12, "mem_bytes": 143_771 * 2**20,
                "link_bw": 450e9, "source": "test"},
        "params": {op: {"eff_compute": 0.5, "eff_memory": 0.5, "overhead_s": 0.001}
                   for op in ["decode", "prefill", "train", "sync", "collective"]},
        "meta": {},
    }


def _edit(path: list, value=None, delete=False):
    def f(doc):
        node = doc
        for k in path[:-1]:
            node = node[k]
        if delete:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return doc
    return f


@pytest.mark.parametrize(
    "edit, match",
    [
        (_edit(["format"], "oppo-profile/3"), "field 'format' must be 'oppo-profile/2'"),
        (_edit(["format"], "oppo-profile/1"), "'oppo-profile/1' predates 'oppo-profile/2'.*one direction"),
        (_edit(["gpu"], delete=True), "missing field 'gpu'"),
        (_edit(["gpu", "mem_bw"], delete=True), "missing field 'gpu.mem_bw'"),
        (_edit(["gpu", "mem_bw"], "fast"), "field 'gpu.mem_bw' must be a number"),
        (_edit(["gpu", "peak_flops"], -1.0), "field 'gpu'.*peak_flops"),
        (_edit(["gpu", "colour"], "green"), "unknown field 'gpu.colour'"),
        (_edit(["params", "train"], delete=True), "missing field 'params.train'"),
        (_edit(["params", "decode", "eff_memory"], 1.5), "field 'params.decode'.*eff_memory"),
        (_edit(["params", "decode", "overhead_s"], delete=True), "missing field 'params.decode.overhead_s'"),
        (_edit(["params", "generate"], {}), "unknown field 'params.generate'"),
        (_edit(["meta"], [1, 2]), "field 'meta' must be an object"),
    ],
)
def test_load_profile_errors(tmp_path, edit, match):
    load_profile(_write(tmp_path, _good_doc()))
    path = _write(tmp_path, edit(_good_doc()))
    with pytest.raises(ConfigError, match=match) as e:
        load_profile(path)
    msg = str(e.value)
    assert "\n" not in msg and "p.json" in msg


def test_profile_without_collective_keeps_its_default(tmp_path):
    doc = _good_doc()
    del doc["params"]["collective"]
    assert load_profile(_write(tmp_path, doc)).params.collective == DEFAULT_COST_PARAMS.collective


def test_load_profile_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="nope.json': file not found"):
        load_profile(tmp_path / "nope.json")
    with pytest.raises(ConfigError, match="nope.json': file not found"):
        resolve_hardware(str(tmp_path / "nope.json"))
    with pytest.raises(ConfigError, match="not valid JSON.*line 1") as e:
        load_profile(_write(tmp_path, "{not json"))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="top level must be a JSON object"):
        load_profile(_write(tmp_path, "[1, 2]"))


def test_save_profile_rejects_bad_meta(tmp_path):
    with pytest.raises(ConfigError, match="meta is not JSON serialisable"):
        save_profile(Hardware(get_gpu("h200")), tmp_path / "x.json", meta={"f": object()})
    with pytest.raises(ConfigError, match="meta"):
        save_profile(Hardware(get_gpu("h200")), tmp_path / "x.json", meta={"f": float("nan")})


def test_with_sync_seconds_reproduces_a_measured_sync():
    from oppo_sim.hw.fitting.calibration import with_sync_seconds
    from oppo_sim.hw.costs.costmodel import CostModel
    from oppo_sim.hw.models.lookup import get_model

    hw, m = Hardware(get_gpu("h100-sxm")), get_model("qwen2.5-0.5b")
    # 0.99e9 B over 450e9 B/s at 0.6 take 3.66 ms, and 290 tensors x 0.157 ms 45.6 ms: a slower sync raises the
    # overhead, a faster one the efficiency; one faster than the tensors' estimate alone (10 ms: an in-process copy on
    # one GPU, as the H200 validation measured) leaves the transfer at the link's full rate and the rest per tensor
    fast = with_sync_seconds(hw, m.weight_bytes(), hw.gpu.link_bw, 0.01, m.param_tensors)
    assert CostModel(fast).weight_sync(m) == pytest.approx(0.01, rel=1e-9)
    assert fast.sync_tensor_s == pytest.approx((0.01 - m.weight_bytes() / 450e9) / 290 - 7.2e-6, rel=1e-6)  # NCCL's kept
    assert hw.sync_tensor_s is None and fast.params.sync.eff_memory == pytest.approx(1.0)
    for seconds in (0.5, 0.048):
        fitted = with_sync_seconds(hw, m.weight_bytes(), hw.gpu.link_bw, seconds, m.param_tensors)
        assert CostModel(fitted).weight_sync(m) == pytest.approx(seconds, rel=1e-9)  # the tensors' share included
    with pytest.raises(ConfigError, match="seconds must be a positive"):
        with_sync_seconds(hw, m.weight_bytes(), hw.gpu.link_bw, 0.0)


def test_a_measured_per_tensor_sync_time_prices_every_path_and_survives_a_profile(tmp_path):
    from oppo_sim.hw.costs.sync import SyncMechanism, per_tensor_seconds

    base = Hardware(get_gpu("h100-sxm"))
    hw = replace(base, sync_tensor_s=3e-5)  # the host's part on the device paths; NCCL's latency and the host path kept
    assert per_tensor_seconds(hw, SyncMechanism.IPC) == 3e-5
    for mech in (SyncMechanism.NVLINK, SyncMechanism.NETWORK):
        assert per_tensor_seconds(hw, mech) - 3e-5 == pytest.approx(per_tensor_seconds(base, mech) - 1.5e-4, rel=1e-9)
    assert per_tensor_seconds(hw, SyncMechanism.HOST) == per_tensor_seconds(base, SyncMechanism.HOST) == 2e-3
    save_profile(hw, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json").sync_tensor_s == 3e-5
    save_profile(Hardware(get_gpu("h100-sxm")), tmp_path / "q.json")
    assert load_profile(tmp_path / "q.json").sync_tensor_s is None
    with pytest.raises(ConfigError, match="sync_tensor_s"):
        replace(hw, sync_tensor_s=-1.0)


def test_with_collective_seconds_reproduces_a_measured_allreduce():
    hw, m = Hardware(get_gpu("h100-sxm")), get_model("qwen2.5-7b")
    nbytes = 256 * m.hidden * m.dtype_bytes  # one tensor-parallel all-reduce of a 256-token iteration
    for seconds in (1e-4, 1e-5):  # slower: more overhead; faster than the default efficiency (with NCCL's 3.6 us
        # of hops over 4 GPUs, hardware.collective_latency): a higher one
        fitted = with_collective_seconds(hw, nbytes, 4, seconds)
        assert DecodeCost(m, fitted, 4).comm(256) == pytest.approx(2 * m.layers * seconds, rel=1e-9)
    with pytest.raises(ConfigError, match="devices must be an integer >= 2"):
        with_collective_seconds(hw, nbytes, 1, 1e-4)


def test_with_collective_busbw_sets_the_efficiency():
    hw = Hardware(get_gpu("h100-sxm"))
    fitted = with_collective_busbw(hw, 370e9, latency_s=2e-5)  # nccl-tests' ring busbw on NVLink 4
    assert fitted.params.collective == OpParams(1.0, 370e9 / 450e9, 2e-5)
    assert fitted.params.sync == hw.params.sync and fitted.gpu is hw.gpu
    assert with_collective_busbw(hw, 225e9).params.collective.overhead_s == hw.params.collective.overhead_s
    for bad in (0.0, 900e9):  # above the one-direction link: a both-directions figure, refused
        with pytest.raises(ConfigError, match="busbw must be in"):
            with_collective_busbw(hw, bad)
