"""The fixed costs: tensors a weight sync moves one by one, collective latency by path and rank count, Hugging
Face ``generate``'s host time and a ZeRO-3 trainer's gather in the static engine, and sleep/wake priced from
the measured copy rates."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import make_policy
from oppo_sim.engine.request import EngineConfig, Req
from oppo_sim.engine.static import StaticConfig, StaticCostParams, StaticEngineCore
from oppo_sim.engine.static_params import HF_OPS_PER_LAYER, HF_STEP_OPS
from oppo_sim.hw.costs.costmodel import DecodeCost
from oppo_sim.hw.devices.hardware import OpParams, allreduce_seconds, collective_latency, get_hardware, nodes_spanned
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.hw.costs.sleepwake import MEMORY_SAVER_COPY, PINNED_COPY, HostCopy, SleepWake
from oppo_sim.hw.costs.sync import SYNC_PER_TENSOR_S, SyncPlan, sync_legs, sync_seconds
from oppo_sim.pipeline.config import SimConfig

GiB = 2**30
OP = OpParams(1.0, 0.8, 6.6e-6)


def test_tensor_count_from_the_layer_structure():
    # Qwen3-30B-A3B: 48 layers x (q k v o, gate up down, 2 norms, q/k norms = 11) + 48 MoE MLPs x (router +
    # 128 x 3 experts - the dense MLP's 3) + embedding, final norm, lm_head
    assert get_model("qwen3-30b-a3b").param_tensors == 48 * 11 + 48 * (1 + 3 * 128 - 3) + 3 == 18_867
    # DeepSeek-V3: 61 layers x (MLA's 7 + 3 MLP + 2 norms) + 58 MoE layers x (router, its bias, 256 x 3 experts;
    # the shared expert keeps the 3 MLP tensors) + 3
    assert get_model("deepseek-v3").param_tensors == 61 * 12 + 58 * (2 + 3 * 256) + 3 == 45_395
    assert get_model("llama-2-7b").param_tensors == 32 * 9 + 3  # no biases, no q/k norms


@pytest.mark.parametrize("mechanism", ["ipc", "nvlink", "network", "host"])
def test_every_sync_path_pays_per_tensor_and_grows_with_the_count(mechanism):
    hw = get_hardware("h100-sxm")
    dense = get_model("qwen3-32b")
    more = replace(dense, layers=2 * dense.layers)  # twice the layers: more tensors (and bytes)
    plan = SyncPlan(mechanism)
    legs = sync_legs(dense, hw, plan)
    assert legs["per_tensor"] > 0 and sync_seconds(dense, hw, plan) == pytest.approx(sum(legs.values()), rel=1e-12)
    assert sync_legs(more, hw, plan)["per_tensor"] > legs["per_tensor"]
    if mechanism == "nvlink":  # one broadcast over NVLink per tensor: 6.6 us + one 0.6 us hop, plus the host's share
        assert legs["per_tensor"] == pytest.approx(dense.param_tensors * (SYNC_PER_TENSOR_S + 7.2e-6), rel=1e-9)
    moe = get_model("qwen3-30b-a3b")  # about the bytes of a 30B dense model, 26x the tensors of Qwen3-32B
    assert sync_legs(moe, hw, plan)["per_tensor"] / legs["per_tensor"] == pytest.approx(18_867 / 707, rel=1e-9)


def test_collective_latency_grows_with_ranks_and_depends_on_the_path():
    # one node: a ring of 2(n-1) NVLink hops of 0.6 us on NCCL's 6.6 us base latency
    assert collective_latency(OP, "all-reduce", 2) == pytest.approx(6.6e-6 + 2 * 0.6e-6)
    assert collective_latency(OP, "all-reduce", 8) == pytest.approx(6.6e-6 + 14 * 0.6e-6)
    assert collective_latency(OP, "all-gather", 8) == pytest.approx(6.6e-6 + 7 * 0.6e-6)
    # TP16 over 2 nodes: ring = 6.6 + 28 x 0.6 + 2 x 2.7 = 28.8 us; tree = 6.6 + 2 (7 x 0.6 + 1 x 5.0) = 25.0 us
    assert collective_latency(OP, "all-reduce", 16, nodes=2) == pytest.approx(25.0e-6)
    # TP32 over 4 nodes: ring 6.6 + 56 x 0.6 + 6 x 2.7 = 56.4; tree 6.6 + 2 (7 x 0.6 + 2 x 5.0) = 35.0 us
    assert collective_latency(OP, "all-reduce", 32, nodes=4) == pytest.approx(35.0e-6)
    assert collective_latency(OP, "all-gather", 16, nodes=2) == pytest.approx(6.6e-6 + 14 * 0.6e-6 + 1 * 2.7e-6)
    assert collective_latency(OP, "all-to-all", 8, nodes=2) > collective_latency(OP, "all-to-all", 8)
    assert collective_latency(OP, "all-reduce", 1) == 0.0 == allreduce_seconds(OP, 1e6, 1, 450e9)
    assert allreduce_seconds(OP, 0.0, 16, 50e9, nodes=2) == pytest.approx(25.0e-6)  # latency alone at no bytes
    assert nodes_spanned(16, 8) == 2 and nodes_spanned(4, 8) == 1 and nodes_spanned(32, 72) == 1
    with pytest.raises(ConfigError, match="unknown collective"):
        collective_latency(OP, "gossip", 4)


def _one_call(params: StaticCostParams, gather: str = "call", response: int = 64):
    core = StaticEngineCore(DecodeCost(get_model("llama-2-7b"), get_hardware("a800-80gb")), EngineConfig(), 1_000_000,
                            StaticConfig(zero3_gather=gather), params)
    core.add(Req(0, 100, response))
    return core.plan()


def test_hf_generate_host_time_and_zero3_gather():
    bare = StaticCostParams(call_overhead_s=0.0, host_op_s=0.0)
    base = _one_call(bare)
    forwards = 1 + base.decode_iters  # the prefill, then one forward per further token
    # the host issues (50 ops x 32 layers + 46) ops a forward; at 100 us an op (165 ms) every forward of a 7B at
    # batch 1 is host-bound: it costs the decode op's fixed overhead plus the host's time, not the GPU's
    host = (HF_OPS_PER_LAYER * 32 + HF_STEP_OPS) * 100e-6
    hf = _one_call(replace(bare, host_op_s=100e-6))
    overhead = get_hardware("a800-80gb").params.decode.overhead_s
    assert hf.seconds == pytest.approx(forwards * (overhead + host), rel=1e-9) and host > base.seconds / forwards
    assert _one_call(replace(bare, host_op_s=1e-9)).seconds == pytest.approx(base.seconds, rel=1e-12)  # the GPU's hides it
    # a ZeRO-3 trainer generating: gathered once per call (TRL, DeepSpeed's hybrid engine) ...
    once = _one_call(replace(bare, gather_s=0.07))
    assert once.seconds - base.seconds == pytest.approx(0.07, rel=1e-9)
    # ... or every forward (generate on a ZeRO-3 module), prefetched: a forward costs the larger of the two
    each = _one_call(replace(bare, gather_s=0.07), gather="forward")
    assert each.seconds == pytest.approx(forwards * 0.07, rel=1e-9)  # a 7B decode at batch 1 is < 70 ms
    tiny = _one_call(replace(bare, gather_s=1e-6), gather="forward")
    assert tiny.seconds == pytest.approx(base.seconds, rel=1e-9)  # the work hides a small gather
    with pytest.raises(ConfigError, match="zero3_gather"):
        StaticConfig(zero3_gather="never")


def test_sleep_and_wake_from_the_measured_copy_rates():
    w, state, bw = 15 * GiB, 40 * GiB, 64e9
    sw = SleepWake("main", 1, engine_bytes=w, state_bytes=state, host_bw=bw)
    to_host, from_host = 24.43 * GiB / 32e9 * bw, 23.54 * GiB / 32e9 * bw  # the pinned copy's fractions of the link
    assert sw.sleep_s == pytest.approx(2 * 0.05 + w / to_host + state / from_host, rel=1e-12)
    assert sw.wake_s == pytest.approx(2 * 0.05 + w / from_host + state / to_host, rel=1e-12)
    assert sw.step_s == pytest.approx(sw.sleep_s + sw.wake_s) and sw.switch_s == pytest.approx(sw.step_s / 2)
    saver = replace(sw, engine_copy=MEMORY_SAVER_COPY)  # torch_memory_saver's backup: 2.41 / 5.32 GiB/s
    assert saver.legs()["sleep_engine"] == pytest.approx(0.05 + w / (2.41 * GiB), rel=1e-12)
    assert saver.legs()["wake_engine"] == pytest.approx(0.05 + w / (5.32 * GiB), rel=1e-12)
    assert MEMORY_SAVER_COPY.rate("to_host", 1e9) == pytest.approx(PINNED_COPY.rate("to_host", 1e9))  # capped
    level2 = replace(sw, level=2, engine_bytes=0.0)
    assert level2.legs()["sleep_engine"] == 0.05 and sw.step_s - level2.step_s == pytest.approx(
        w / to_host + w / from_host, rel=1e-12)
    with pytest.raises(ConfigError, match="exactly one"):
        HostCopy("bad", "none", to_host_fraction=0.5, to_host_bps=1e9, from_host_fraction=0.5)
    assert math.isclose(PINNED_COPY.to_host_fraction, 0.8197, rel_tol=1e-3)


@pytest.mark.parametrize("zero_stage", [2, 3])
def test_the_pipeline_gathers_a_zero3_trainers_weights_for_the_static_engine(zero_stage):
    from oppo_sim.core.placement import colocated_placement
    from oppo_sim.engine.request import EngineConfig
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
    from oppo_sim.pipeline.driver import Pipeline
    from oppo_sim.pipeline.fit_check import check_fits
    from oppo_sim.traces.trace import Trace

    cfg = SimConfig(steps=1, batch=4, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu="h100-sxm",
                    placement=colocated_placement(4), engine_kind="static", colocate="resident", max_response=256,
                    train_memory=TrainMemoryConfig(zero_stage=zero_stage, recompute="none"),
                    engine=EngineConfig(gpu_memory_utilization=0.5))  # a share the resident trainer fits beside
    trace = Trace.from_arrays([64] * 8, [100] * 8, name="z3")
    p = Pipeline(cfg, trace, make_policy("baseline"), memory=check_fits(cfg, 64 + 256, 256))
    gather = p.replicas[0].core.params.gather_s
    w = get_model("qwen2.5-0.5b").weight_bytes()
    if zero_stage == 3:  # the whole model gathered over the 4 training GPUs, as a ZeRO-3 forward does
        assert gather == pytest.approx(p.cost_of["main"].param_gather(w, 4), rel=1e-12) and gather > 0
    else:
        assert gather == 0.0


def test_cost_model_tells_collectives_the_nodes_they_span():
    """The latency by path reaches the cost model: a TP16 replica on 8-GPU nodes spans 2 nodes, a pool over
    domains all-reduces its gradients across them (network hops), one inside a node does not."""
    from oppo_sim.hw.costs.costmodel import CostModel
    from oppo_sim.hw.devices.hardware import collective_latency, get_hardware
    from oppo_sim.hw.models.lookup import get_model

    h100, m = get_hardware("h100-sxm"), get_model("qwen2.5-7b")
    assert CostModel(h100, domain=8).decode(m, 16).nodes == 2
    assert CostModel(h100, domain=8).decode(m, 8).nodes == 1
    op = h100.params.collective
    inside = CostModel(h100, zero_stage=2).gradient_sync(0.0, 16)
    across = CostModel(h100, zero_stage=2, cross_node=True, domain=8).gradient_sync(0.0, 16)
    assert inside == pytest.approx(collective_latency(op, "all-reduce", 16, 1))
    assert across == pytest.approx(collective_latency(op, "all-reduce", 16, 2)) and across > inside
