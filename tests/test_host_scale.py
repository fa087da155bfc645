"""The host CPU: constants measured on x86 server hosts take longer on a Grace host by the GPU table's
``host_op_scale`` (``Hardware.host_scale``), everywhere the simulator prices host work, and nowhere a calibrated
profile's fits already hold the host's time."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import colocated_placement
from oppo_sim.frameworks.check_fit import hardware_at
from oppo_sim.engine.static_params import StaticCostParams
from oppo_sim.hw.costs.eager import EAGER_HOST_OP_S
from oppo_sim.hw.costs.op_cost import priced_by
from oppo_sim.hw.costs.sync import HOST_PER_TENSOR_S, SYNC_PER_TENSOR_S, SyncMechanism, per_tensor_seconds
from oppo_sim.hw.devices.gpu_table import GH200_HOST_OP_SCALE, GRACE_HOST_OP_SCALE, GPUS
from oppo_sim.hw.devices.gpu_yaml import gpu_yaml_dict, load_gpu_yaml
from oppo_sim.hw.devices.hardware import DEFAULT_COST_PARAMS, HOST_OVERHEAD_OPS, datasheet_hardware, get_hardware
from oppo_sim.hw.fitting.profiles import load_profile, resolve_hardware, save_profile
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.pipeline.topology import cost_models
from oppo_sim.traces.trace import Trace


def test_the_measured_ratios_and_which_gpus_sit_on_grace():
    # NVIDIA/TransformerEngine#2053: a torch Linear forward's host time, GB200 37.08 us, GH200 33.17, DGX H100 13.48
    assert GRACE_HOST_OP_SCALE == pytest.approx(2.751, abs=1e-3) and GH200_HOST_OP_SCALE == pytest.approx(2.461, abs=1e-3)
    grace = {g.id for g in GPUS.values() if g.host_op_scale != 1.0}
    assert grace == {"gh200", "gb200", "gb300"}
    with pytest.raises(ConfigError, match="host_op_scale must be a positive"):
        replace(GPUS["h100-sxm"], host_op_scale=0.0)


def test_a_grace_gpus_default_host_overheads_are_longer_and_its_links_are_not():
    x86, grace = get_hardware("b200"), get_hardware("gb200")
    assert x86.host_scale == 1.0 and x86.params == DEFAULT_COST_PARAMS
    assert grace.host_scale == pytest.approx(GRACE_HOST_OP_SCALE)
    for op in HOST_OVERHEAD_OPS:
        assert grace.params.op(op).overhead_s == pytest.approx(DEFAULT_COST_PARAMS.op(op).overhead_s * GRACE_HOST_OP_SCALE)
        assert grace.params.op(op).eff_memory == DEFAULT_COST_PARAMS.op(op).eff_memory
    assert grace.params.collective == DEFAULT_COST_PARAMS.collective  # NCCL's latency is the links', not the host's
    assert resolve_hardware("gb200") == grace  # the command line's resolver is the same rule
    assert "x2.75" in priced_by(grace)["host"] and priced_by(x86)["host"] == "x86-measured host constants"


def test_a_profile_keeps_the_host_scale_it_was_fitted_with(tmp_path):
    """A profile fitted on GB200's datasheet hardware (oppo-sim check --calibrate) prices the constants it did not
    fit as the fit did; a profile from before the field had none: 1."""
    grace = replace(get_hardware("gb200"), params_source="check fit")
    save_profile(grace, tmp_path / "gb200.json")
    loaded = load_profile(tmp_path / "gb200.json")
    assert loaded.host_scale == pytest.approx(GRACE_HOST_OP_SCALE) and loaded.params == grace.params
    assert per_tensor_seconds(loaded, SyncMechanism.IPC) == pytest.approx(per_tensor_seconds(grace, SyncMechanism.IPC))
    doc = json.loads((tmp_path / "gb200.json").read_text())
    del doc["host_scale"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert load_profile(tmp_path / "old.json").host_scale == 1.0
    assert hardware_at(get_hardware("gb200"), {}).host_scale == pytest.approx(GRACE_HOST_OP_SCALE)


def test_a_gpu_yaml_states_its_host_and_an_overhead_it_gives_is_kept(tmp_path):
    doc = gpu_yaml_dict(GPUS["gb200"])
    assert doc["host_op_scale"] == pytest.approx(GRACE_HOST_OP_SCALE)
    body = "\n".join(f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in {**doc, "host_op_scale": 2}.items())
    path = tmp_path / "grace.yaml"
    path.write_text(body + "\nefficiencies:\n  decode: {eff_memory: 0.75}\n  prefill: {overhead_s: 0.004}\n")
    hw = load_gpu_yaml(path)
    assert hw.host_scale == 2 and hw.gpu.host_op_scale == 2
    assert hw.params.prefill.overhead_s == 0.004  # given for this GPU: its host's own
    assert hw.params.decode.overhead_s == pytest.approx(2 * DEFAULT_COST_PARAMS.decode.overhead_s)  # only eff given
    assert hw.params.decode.eff_memory == 0.75
    path.write_text(body.replace("host_op_scale: 2", "host_op_scale: 0") + "\n")
    with pytest.raises(ConfigError, match=r"^GPU spec '[^']+': 'host_op_scale' must be a positive"):
        load_gpu_yaml(path)


def test_per_tensor_sync_work_and_the_static_engines_host_terms_scale():
    grace = get_hardware("gb200")
    k = grace.host_scale
    assert per_tensor_seconds(grace, SyncMechanism.IPC) == pytest.approx(SYNC_PER_TENSOR_S * k)
    assert per_tensor_seconds(grace, SyncMechanism.HOST) == pytest.approx(HOST_PER_TENSOR_S * k)
    assert per_tensor_seconds(get_hardware("b200"), SyncMechanism.IPC) == SYNC_PER_TENSOR_S
    d = StaticCostParams()
    assert d.on_host(1.0) is d
    slow = d.on_host(3.0)  # the x86-measured defaults on a host three times slower
    assert (slow.call_overhead_s, slow.host_op_s) == pytest.approx((3 * d.call_overhead_s, 3 * d.host_op_s))
    assert slow.ops_per_layer == d.ops_per_layer and slow.gather_s == 0.0
    given = StaticCostParams(call_overhead_s=0.01)  # --call-overhead, or a profile's fit: that host's own
    assert given.on_host(3.0) is given


def _cfg(gpu) -> SimConfig:
    return SimConfig(steps=2, batch=8, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu=gpu,
                     placement=colocated_placement(4), max_response=512)


def test_the_cost_models_issue_megatron_and_eager_ops_at_the_hosts_speed():
    cfg = _cfg("gb200")
    costs = cost_models(cfg, check_fits(cfg))
    assert all(c.host_op_s == pytest.approx(EAGER_HOST_OP_S * GRACE_HOST_OP_SCALE) for c in costs.values())
    x86 = _cfg("b200")
    assert all(c.host_op_s == EAGER_HOST_OP_S for c in cost_models(x86, check_fits(x86)).values())
    own = replace(cfg, eager_host_op_s=3e-5)  # --host-op-us measured on the user's own (Grace) host: not stretched
    assert all(c.host_op_s == 3e-5 for c in cost_models(own, check_fits(own)).values())


def test_the_same_job_on_a_grace_host_generates_slower():
    """GB200 against the same GPU on an x86 host: each decode step pays the engine's longer per-step overhead."""
    trace = Trace.from_arrays([64] * 32, [300] * 32, name="host")
    grace = get_hardware("gb200")
    x86 = datasheet_hardware(replace(grace.gpu, host_op_scale=1.0))
    slow, fast = (simulate(trace, "baseline", _cfg(hw)) for hw in (grace, x86))
    assert (slow.steps["generation_s"] > fast.steps["generation_s"]).all()
    assert slow.summary["wall_s"] > fast.summary["wall_s"]
