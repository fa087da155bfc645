"""FSDP's hybrid sharding (``--fsdp-size``, verl ``fsdp_config.fsdp_size``): the state sharded inside groups of N
ranks and replicated across them — memory per rank, the optimizer step's collectives, the ZeRO-3 export's gather,
the reader, the one-line refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import colocated_placement
from oppo_sim.frameworks.verl import translate_verl
from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.hw.costs.weight_export import export_legs
from oppo_sim.hw.devices.hardware import CostParams, OpParams, allreduce_seconds, get_hardware
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig, state_bytes
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits

M7 = get_model("qwen2.5-7b")
H100 = get_hardware("h100-sxm")
LINK, NET = 400e9, 40e9
HYBRID = TrainerLayout(fsdp_size=8)


@pytest.fixture(autouse=True)
def _no_hop_latency(monkeypatch):
    """NCCL's per-hop latencies off: the hand computations here isolate the bytes and the paths."""
    import oppo_sim.hw.devices.hardware as hardware

    monkeypatch.setattr(hardware, "NCCL_HOP_S", {k: 0.0 for k in hardware.NCCL_HOP_S})
    monkeypatch.setattr(hardware, "NCCL_TREE_NET_HOP_S", 0.0)


def hw():
    p = H100.params
    return replace(H100, gpu=replace(H100.gpu, link_bw=LINK, net_bw=NET),
                   params=CostParams(p.decode, p.prefill, p.train, p.sync, OpParams(1.0, 1.0, 0.0)))


def test_the_layout_takes_verls_minus_one_and_refuses_what_cannot_shard():
    assert TrainerLayout(fsdp_size=-1).fsdp_size == 0 and TrainerLayout().shard_ranks(16) == 16
    assert HYBRID.shard_ranks(32) == 8 and HYBRID.shard_ranks(8) == 8 and HYBRID.shard_ranks(4) == 4
    assert HYBRID.state(3) == "ZeRO-3 in groups of 8"
    with pytest.raises(ConfigError, match="--fsdp-size 8 is FSDP's shard group"):
        TrainerLayout("megatron", fsdp_size=8)
    with pytest.raises(ConfigError, match="fsdp_size must be an integer"):
        TrainerLayout(fsdp_size=-2)
    with pytest.raises(ConfigError, match="--fsdp-size 6 must divide the trainer's 16 devices"):
        SimConfig(placement=colocated_placement(16), trainer=TrainerLayout(fsdp_size=6))
    SimConfig(placement=colocated_placement(4), trainer=TrainerLayout(fsdp_size=6))  # at or over the pool: full shard


def test_state_per_rank_is_sharded_inside_the_group():
    cfg = SimConfig(placement=colocated_placement(32), nodes=4, trainer=HYBRID, actor="qwen2.5-7b", reward="qwen2.5-7b",
                    train_memory=TrainMemoryConfig(3, "full"))
    train = next(r for r in check_fits(cfg).pool("main").roles if r.role == "train")
    expected = state_bytes(M7.params, 8, 3)  # the actor's, and (PPO) the critic's below
    critic = state_bytes(cfg.models()["critic"].params_scalar_head, 8, 3)
    assert train.optimizer == pytest.approx(expected.optimizer + critic.optimizer, rel=1e-12)
    assert "ZeRO-3 over groups of 8 of 32 devices" in train.note


def test_the_optimizer_step_reduces_in_the_group_then_across_groups():
    w = float(M7.weight_bytes())
    coll = hw().params.collective
    for zero in (2, 3):
        cost = CostModel(hw(), zero_stage=zero, layout=HYBRID, domain=8, cross_node=True)
        inside = allreduce_seconds(coll, w, 8, LINK, 1)  # the group is one node: NVLink
        across = allreduce_seconds(coll, w / 8, 4, NET, 4)  # each rank's 1/8 of the gradients over the network
        gather = 7 / 8 * w / LINK if zero == 3 else 0.0
        assert cost.gradient_sync(w, 32) == pytest.approx(inside + across + gather, rel=1e-12)
    full = CostModel(hw(), zero_stage=3, domain=8, cross_node=True)  # one ring over 4 full nodes: their 8 NICs each
    ring = min(LINK, 8 * NET)
    assert full.gradient_sync(w, 32) == pytest.approx(allreduce_seconds(coll, w, 32, ring, 4) + 31 / 32 * w / ring, rel=1e-12)


def test_the_export_gathers_inside_the_group():
    w = float(M7.weight_bytes())
    legs = export_legs(CostModel(hw(), zero_stage=3, layout=HYBRID, domain=8, cross_node=True), M7, 32)
    assert legs == {"all-gather": pytest.approx(7 / 8 * w / LINK, rel=1e-12)}
    full = export_legs(CostModel(hw(), zero_stage=3, domain=8, cross_node=True), M7, 32)
    assert full["all-gather"] == pytest.approx(31 / 32 * w / (8 * NET), rel=1e-12)  # a ring on each node's 8 NICs


def test_verls_fsdp_size_is_read_and_the_run_says_so(capsys):
    cmd = ("actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.actor.fsdp_config.fsdp_size={} trainer.n_gpus_per_node=8 "
           "trainer.nnodes=4 actor_rollout_ref.model.path=Qwen/Qwen2.5-7B\n")
    args = translate_verl(cmd.format(8)).args
    assert args[args.index("--fsdp-size") + 1] == "8"
    whole = translate_verl(cmd.format(-1))
    assert "--fsdp-size" not in whole.args and not whole.ignored
    assert main(["run", "--steps", "1", "--batch", "8", "--placement", "colocated", "--devices", "16", "--nodes", "2",
                 "--zero", "3", "--fsdp-size", "8"]) == 0
    assert "trainer ZeRO-3 in groups of 8" in capsys.readouterr().out
