"""Which link a group communicates over (oppo_sim.hw.costs.links): point-to-point and all-to-all traffic at each GPU's
NIC across the network, ring collectives at the NICs of the group's GPUs in a domain together (at most the scale-up
link), and the weight sync's broadcast by who joins it (``--refit-group``), read from the frameworks' files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import Placement, Pool
from oppo_sim.frameworks.nemo_rl import translate_nemo_rl
from oppo_sim.frameworks.openrlhf import translate_openrlhf
from oppo_sim.frameworks.verl import translate_verl
from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.costs.links import alltoall_bw, alltoall_share, group_bw, ring_bw
from oppo_sim.hw.costs.sync import SyncMechanism, SyncPlan, sync_legs
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.topology import fewest_per_domain, sync_plan

from framework_helpers import pairs

H100 = get_hardware("h100-sxm")  # NVLink 450 GB/s, one 400 Gb/s NIC (50 GB/s) a GPU, 8 GPUs a node
LINK, NET = H100.gpu.link_bw, H100.gpu.net_bw
NEMO = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl" / "recipes" / "llm" / "performance"


def cost(**kw) -> CostModel:
    return CostModel(H100, domain=8, **kw)


def test_inside_a_domain_every_collective_runs_over_the_scale_up_link():
    c = cost()
    assert ring_bw(c, 8, 16) == group_bw(c, 8, 16) == LINK


def test_a_ring_across_nodes_takes_the_nics_of_its_gpus_in_a_node_side_by_side():
    c = cost(cross_node=True)
    assert ring_bw(c, 16, 16) == pytest.approx(min(LINK, 8 * NET))  # 16 consecutive ranks: 8 NICs a node
    assert group_bw(c, 16, 16) == NET  # a pipeline send: each GPU's own NIC
    assert ring_bw(c, 16, 16, stride=4) == pytest.approx(2 * NET)  # every 4th rank: 2 of the group's GPUs a node
    assert ring_bw(c, 16, 16, stride=8) == NET  # one rank a node (a data-parallel group under TP8)
    assert ring_bw(cost(cross_node=True, pool_domain_gpus=2), 4, 4) == pytest.approx(2 * NET)  # a pool of 2 a node
    assert ring_bw(CostModel(H100, cross_node=True), 16, 16) == NET  # GPUs a domain unknown: one NIC


def test_the_ring_is_never_faster_than_the_scale_up_link():
    fast_nics = replace(H100, gpu=replace(H100.gpu, net_bw=LINK))
    assert ring_bw(CostModel(fast_nics, domain=8, cross_node=True), 16, 16) == LINK


def test_a_data_parallel_gradient_all_reduce_across_nodes_runs_on_every_nic():
    w = 1e10
    one_nic = CostModel(H100, cross_node=True).gradient_sync(w, 16)  # the old rule: a ring at one NIC
    eight = cost(cross_node=True).gradient_sync(w, 16)
    assert one_nic / eight == pytest.approx(8 * NET / NET, rel=0.05)  # bandwidth-bound: 8x (latency aside)


def test_an_all_to_all_across_nodes_sends_its_far_share_per_nic_beside_its_near_share_over_the_link():
    # 16 ranks over two nodes of 8: 8 of the 15 peers are far (the NIC), 7 near (NVLink), sent side by side
    far, near = 8 / 15 / NET, 7 / 15 / LINK
    assert alltoall_share(LINK, NET, 16, 8) == pytest.approx(1 / max(far, near))
    assert alltoall_share(LINK, NET, 16, 1) == pytest.approx(NET)  # one rank a node: everything over the NIC
    assert alltoall_share(LINK, NET, 8, 8) == pytest.approx(LINK)  # the whole group in one domain
    c = cost(cross_node=True)
    assert alltoall_bw(c, 16, 16) == pytest.approx(alltoall_share(LINK, NET, 16, 8)) and alltoall_bw(c, 8, 16) == LINK


def test_a_tensor_parallel_decode_group_across_nodes_all_reduces_as_a_ring_and_exchanges_experts_as_an_all_to_all():
    moe = get_model("qwen3-30b-a3b")
    dc = cost().decode(moe, tp=16, expert_parallel=True)
    assert dc.link_bw == pytest.approx(min(LINK, 8 * NET)) and dc.a2a_bw == pytest.approx(alltoall_share(LINK, NET, 16, 8))
    assert cost().decode(moe, tp=8).link_bw is None  # inside the node: the link


def test_the_sync_broadcast_across_nodes_depends_on_who_joins_it():
    model = get_model("qwen2.5-7b")
    w = float(model.weight_bytes())
    eff = H100.params.sync.eff_memory
    rank0 = sync_legs(model, H100, SyncPlan(SyncMechanism.NETWORK, 1))
    every = sync_legs(model, H100, SyncPlan(SyncMechanism.NETWORK, 1, per_domain=8))
    assert rank0["transfer"] == pytest.approx(w / (NET * eff))  # the root alone on its node: its one NIC
    assert every["transfer"] == pytest.approx(w / (min(LINK, 8 * NET) * eff))
    with pytest.raises(ConfigError, match="per_domain must be an integer >= 1"):
        SyncPlan(per_domain=0)


def apart(gen: int, train: int) -> Placement:
    return Placement((Pool("gen", gen), Pool("train", train)), generate="gen", reward="train", reference="train",
                     critic="train", logprob="train", train="train")


def test_the_refit_group_of_a_configuration_sets_the_rings_gpus_a_domain():
    base = SimConfig(batch=8, steps=1, actor="qwen2.5-1.5b", gpu="h100-sxm", nodes=2,
                     placement=apart(8, 8), algorithm=Algorithm("grpo", n=2, reward="rule"))
    assert sync_plan(base).mechanism is SyncMechanism.NETWORK and sync_plan(base).per_domain == 1
    assert sync_plan(replace(base, refit_group="all")).per_domain == 8
    uneven = replace(base, refit_group="all", placement=apart(4, 12))  # gen 4 | train 4 + 8 over two nodes
    assert fewest_per_domain(uneven)["train"] == 4 and sync_plan(uneven).per_domain == 4
    with pytest.raises(ConfigError, match="refit_group must be one of rank0, all"):
        replace(base, refit_group="everyone")


def test_the_readers_say_who_joins_the_refit():
    nemo = translate_nemo_rl([str(NEMO / "grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml")])
    assert pairs(nemo.args)["--refit-group"] == "all"
    verl = translate_verl("python -m verl.experimental.one_step_off_policy.main_ppo actor_rollout_ref.hybrid_engine=False "
                          "trainer.n_gpus_per_node=6 rollout.n_gpus_per_node=2 rollout.nnodes=1 trainer.nnodes=1")
    assert pairs(verl.args)["--refit-group"] == "all"
    sync_verl = translate_verl("python -m verl.trainer.main_ppo trainer.n_gpus_per_node=8")
    assert "--refit-group" not in sync_verl.args  # the hybrid engine refits in place
    orl = translate_openrlhf("python -m openrlhf.cli.train_ppo_ray --actor_num_gpus_per_node 4 --vllm_num_engines 4")
    assert "--refit-group" not in orl.args  # OpenRLHF's rank 0 and the engines: the default


def test_an_export_says_where_the_plans_refit_group_is_not_the_frameworks():
    from oppo_sim.frameworks.export_common import weight_move_notes

    cfg = SimConfig(batch=8, steps=1, actor="qwen2.5-1.5b", gpu="h100-sxm", nodes=2, placement=apart(8, 8),
                    algorithm=Algorithm("grpo", n=2, reward="rule"))
    assert any("--refit-group all" in n for n in weight_move_notes(cfg, "nemo-rl"))
    assert any("--refit-group all" in n for n in weight_move_notes(cfg, "verl"))
    assert not any("--refit-group" in n for n in weight_move_notes(cfg, "openrlhf"))
    every = replace(cfg, refit_group="all")
    assert not any("--refit-group" in n for n in weight_move_notes(every, "nemo-rl"))
    assert any("--refit-group rank0" in n for n in weight_move_notes(every, "openrlhf"))
