"""The trainer's export before a weight sync (oppo_sim.hw.costs.weight_export): every whole tensor gathered on every
trainer rank, by the trainer's layout, against hand-computed bytes and paths; and the sync in a simulated step is
the export plus the hand-off."""

from __future__ import annotations

from dataclasses import replace

import pytest

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import colocated_placement, disaggregated_placement
from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.hw.costs.weight_export import export_legs, export_seconds
from oppo_sim.hw.devices.hardware import CostParams, OpParams, collective_latency, get_hardware
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.pipeline.topology import cost_models
from oppo_sim.traces.trace import Trace

DENSE, MOE = get_model("llama-3.1-8b"), get_model("qwen3-30b-a3b")
H100 = get_hardware("h100-sxm")
LINK, NET = 400e9, 40e9


def hw(latency: bool = False):
    """H100 with round links, collectives at the full link (and, unless ``latency``, no base latency)."""
    p = H100.params
    coll = p.collective if latency else OpParams(1.0, 1.0, 0.0)
    return replace(H100, gpu=replace(H100.gpu, link_bw=LINK, net_bw=NET), params=CostParams(p.decode, p.prefill, p.train, p.sync, coll))


@pytest.fixture
def no_hops(monkeypatch):
    import oppo_sim.hw.devices.hardware as hardware

    monkeypatch.setattr(hardware, "NCCL_HOP_S", {k: 0.0 for k in hardware.NCCL_HOP_S})
    monkeypatch.setattr(hardware, "NCCL_TREE_NET_HOP_S", 0.0)


def test_whole_weights_on_every_rank_gather_nothing(no_hops):
    for zero in (0, 1, 2):
        assert export_legs(CostModel(hw(), zero_stage=zero), DENSE, 8) == {}
    assert export_seconds(CostModel(hw(), zero_stage=3), DENSE, 1) == 0.0  # one device holds it all


def test_zero3_gathers_every_tensor_over_the_sharded_group(no_hops):
    w = DENSE.weight_bytes()
    one_node = CostModel(hw(), zero_stage=3, domain=8)
    assert export_legs(one_node, DENSE, 8) == {"all-gather": pytest.approx(7 / 8 * w / LINK, rel=1e-12)}
    two_nodes = CostModel(hw(), zero_stage=3, domain=8, cross_node=True)  # the sharded group spans both: a ring
    assert export_seconds(two_nodes, DENSE, 16) == pytest.approx(15 / 16 * w / (8 * NET), rel=1e-12)  # 8 NICs a node
    half = CostModel(hw(), zero_stage=3, domain=8, cross_node=True, pool_domain_gpus=2)  # 2 of the pool's GPUs a node
    assert export_seconds(half, DENSE, 4) == pytest.approx(3 / 4 * w / (2 * NET), rel=1e-12)


def test_zero3_pays_one_all_gather_latency_a_tensor():
    cost = CostModel(hw(latency=True), zero_stage=3, domain=8)
    lat = collective_latency(cost.hw.params.collective, "all-gather", 8, 1)
    assert lat > 0
    eff = cost.hw.params.collective.eff_memory  # the collectives' measured 0.8 of the link
    assert export_seconds(cost, DENSE, 8) == pytest.approx(
        DENSE.param_tensors * lat + 7 / 8 * DENSE.weight_bytes() / (LINK * eff), rel=1e-12)


def test_megatron_dense_pipeline_broadcast_and_tensor_all_gather(no_hops):
    w = DENSE.weight_bytes()
    cost = CostModel(hw(), layout=TrainerLayout("megatron", tp=2, pp=2), domain=8)
    legs = export_legs(cost, DENSE, 8)
    # the other stage's TP shards arrive by broadcast (1/2 of W/2), then the TP shards by all-gather (1/2 of W)
    assert legs == {"pipeline broadcast": pytest.approx(0.5 * (w / 2) / LINK, rel=1e-12),
                    "tensor all-gather": pytest.approx(0.5 * w / LINK, rel=1e-12)}
    across = CostModel(hw(), layout=TrainerLayout("megatron", tp=2, pp=2), domain=4, cross_node=True)
    assert export_legs(across, DENSE, 8)["pipeline broadcast"] == pytest.approx(0.5 * (w / 2) / NET, rel=1e-12)
    assert export_legs(across, DENSE, 8)["tensor all-gather"] == pytest.approx(0.5 * w / LINK, rel=1e-12)


def test_megatron_moe_experts_gather_over_the_expert_group_where_it_sits(no_hops):
    w = MOE.weight_bytes()
    routed = MOE.routed_expert_params * MOE.dtype_bytes
    dense = w - routed
    lay = TrainerLayout("megatron", pp=2)
    inside = export_legs(CostModel(hw(), layout=lay, expert_parallel=8, domain=8, cross_node=True), MOE, 32)
    assert inside["expert all-gather"] == pytest.approx(7 / 8 * routed / LINK, rel=1e-12)  # EP8 in one node
    assert inside["pipeline broadcast"] == pytest.approx(0.5 * (dense + routed / 8) / NET, rel=1e-12)
    assert "tensor all-gather" not in inside
    outside = export_legs(CostModel(hw(), layout=lay, expert_parallel=8, domain=4, cross_node=True), MOE, 32)
    # EP8 over two nodes of 4: a ring leaving each node through its 4 GPUs' NICs
    assert outside["expert all-gather"] == pytest.approx(7 / 8 * routed / (4 * NET), rel=1e-12)
    # the whole model still arrives on every rank: ~ 7/8 of it by the experts' gather, the rest by broadcast
    assert sum(inside.values()) > 0 and outside["expert all-gather"] == pytest.approx(2.5 * inside["expert all-gather"])


def test_megatron_loops_over_its_own_tensors_one_expert_gather_for_ep_of_them():
    cost = CostModel(hw(latency=True), layout=TrainerLayout("megatron"), expert_parallel=8, domain=8)
    coll = cost.hw.params.collective
    routed_tensors = MOE.moe_layers * 3 * MOE.experts
    lat = collective_latency(coll, "all-gather", 8, 1)
    routed = MOE.routed_expert_params * MOE.dtype_bytes
    expected = routed_tensors / 8 * lat + 7 / 8 * routed / (LINK * coll.eff_memory)
    assert export_legs(cost, MOE, 8) == {"expert all-gather": pytest.approx(expected, rel=1e-12)}


def test_a_simulated_sync_is_the_export_plus_the_hand_off():
    trace = Trace.from_arrays([200] * 16, [300] * 16)
    for placement, mech in ((colocated_placement(8), "ipc"), (disaggregated_placement(4, 3, 1), "nvlink")):
        cfg = SimConfig(batch=8, steps=2, actor="qwen2.5-1.5b", reward="qwen2.5-0.5b", gpu="h100-sxm",
                        placement=placement, trainer=TrainerLayout("megatron", tp=2) if mech == "ipc" else TrainerLayout())
        res = simulate(trace, "baseline", cfg)
        assert res.summary["sync_mechanism"] == mech
        costs = cost_models(cfg, check_fits(cfg))
        tcost, gcost = costs[placement.train], costs[placement.generate]
        actor = get_model("qwen2.5-1.5b")
        export = export_seconds(tcost, actor, placement.pool(placement.train).devices)
        if mech == "ipc":
            assert export > 0  # Megatron TP2: the tensor shards gathered
        assert res.steps["sync_s"].iloc[0] == pytest.approx(export + gcost.weight_sync(actor), rel=1e-9)
        legs = res.summary["sync_legs_s"]  # what the run's echo itemises: the export's collectives, then the hand-off's
        assert sum(legs.values()) == pytest.approx(res.steps["sync_s"].iloc[0], rel=1e-9)
        assert ("export tensor all-gather" in legs) is (mech == "ipc") and legs["hand-off per_tensor"] > 0


def test_a_double_buffered_refit_overlaps_the_export_with_the_hand_off():
    """NeMo RL's refit (``refit_buffers=2``): the sync takes the longer of the export and the hand-off's transfer,
    and the per-tensor NCCL latency becomes one a buffer; tensor by tensor (1) adds them."""
    from oppo_sim.hw.costs.sync import SYNC_PER_TENSOR_S
    from oppo_sim.pipeline.topology import weight_sync_legs

    cfg = SimConfig(batch=8, steps=1, actor="qwen2.5-1.5b", gpu="h100-sxm", placement=disaggregated_placement(4, 4, 1),
                    trainer=TrainerLayout("megatron", tp=2), algorithm=Algorithm("grpo", n=2, reward="rule"))
    one = weight_sync_legs(cfg, cost_models(cfg, check_fits(cfg)))
    two_cfg = replace(cfg, refit_buffers=2)
    two = weight_sync_legs(two_cfg, cost_models(two_cfg, check_fits(two_cfg)))
    export = sum(v for k, v in one.items() if k.startswith("export "))
    assert export > 0 and "overlap (double-buffered)" not in one
    assert two["overlap (double-buffered)"] == pytest.approx(-min(export, one["hand-off transfer"]))
    assert two["hand-off per_tensor"] == pytest.approx(get_model("qwen2.5-1.5b").param_tensors * SYNC_PER_TENSOR_S)
    assert one["hand-off per_tensor"] > two["hand-off per_tensor"]  # each tensor's NCCL call latency, gone
    total = max(export, one["hand-off transfer"]) + two["hand-off overhead"] + two["hand-off per_tensor"]
    assert sum(two.values()) == pytest.approx(total)
    with pytest.raises(ConfigError, match="refit_buffers must be 1"):
        replace(cfg, refit_buffers=3)
