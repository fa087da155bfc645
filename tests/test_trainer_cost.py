"""The trainer priced as its backend runs it (oppo_sim.hw.costs.trainer_cost, oppo_sim.hw.memory.trainer_memory): Megatron
memory and time per rank against hand-computed values for a dense and a MoE model, the data-parallel
imbalance, and frozen models that never gather under Megatron."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import colocated_placement
from functools import partial

from oppo_sim.hw.costs.costmodel import CostModel as _CostModel
from oppo_sim.hw.devices.hardware import CostParams, OpParams, allreduce_seconds, get_hardware
from oppo_sim.hw.memory.train_memory import ADAM_BYTES, head_activation_bytes, layer_activation_bytes_per_token
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.hw.costs.links import alltoall_share
from oppo_sim.hw.costs.trainer_cost import dp_partition, rank_loads
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.hw.costs.micro_batches import MicroBatch
from oppo_sim.hw.memory.trainer_memory import inflight_layers, megatron_activation_bytes, megatron_state_bytes
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.pipeline.memory_plan import frozen_shards
from oppo_sim.core.policies import Baseline
from oppo_sim.traces.trace import Trace

CostModel = partial(_CostModel, host_op_s=0.0)  # Megatron's host time off: the hand computations isolate the GPU's
#                                                 work; the host's has its own test (test_megatron_host_time_*)
DENSE, MOE = get_model("llama-3.1-8b"), get_model("qwen3-30b-a3b")
H100 = get_hardware("h100-sxm")
FREE = OpParams(1.0, 1.0, 0.0)  # collectives: no base latency, the link's full bandwidth


@pytest.fixture(autouse=True)
def _no_hop_latency(monkeypatch):
    """NCCL's per-hop latencies (``hardware.collective_latency``) off too: the hand computations here isolate the
    collectives' bytes; latency by path and ranks has its own tests (tests/test_fixed_costs.py)."""
    import oppo_sim.hw.devices.hardware as hardware

    monkeypatch.setattr(hardware, "NCCL_HOP_S", {k: 0.0 for k in hardware.NCCL_HOP_S})
    monkeypatch.setattr(hardware, "NCCL_TREE_NET_HOP_S", 0.0)


def hw(link=1e30, net=1e30, train_overhead=0.0):
    """H100 numbers with the links and the fixed costs a test isolates."""
    p = H100.params
    return replace(H100, gpu=replace(H100.gpu, link_bw=link, net_bw=net),
                   params=CostParams(p.decode, p.prefill, replace(p.train, overhead_s=train_overhead), p.sync, FREE))


def megatron(**kw):
    return TrainerLayout("megatron", **kw)


# -- data-parallel imbalance -------------------------------------------------------------------------------
def test_dp_partition_contiguous_and_balanced():
    lengths = np.array([10, 9, 1, 1, 1, 1, 1, 1])
    plain = dp_partition(lengths, 4, balance=False)
    assert plain.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]  # contiguous chunks: rank 0 holds 19 tokens
    bal = dp_partition(lengths, 4, balance=True)
    loads = np.bincount(bal, weights=lengths, minlength=4)
    assert np.bincount(bal).tolist() == [2, 2, 2, 2]  # equal counts
    assert loads.tolist() == [11, 10, 2, 2]  # LPT by hand: 10|9|1|1, then 1 -> r2, 1 -> r3, 1 -> r1 (9 < 10), 1 -> r0


def test_slowest_rank_sets_each_optimizer_step():
    lengths = np.array([10, 9, 1, 1, 1, 1, 1, 1], dtype=float)
    flops = lengths * 2.0
    for balance, slowest in ((False, 19.0), (True, 11.0)):
        loads = rank_loads(lengths, flops, flops, 4, 1, balance, MicroBatch())
        assert loads.tokens.tolist() == [slowest]
        assert loads.flops.tolist() == [2.0 * slowest]
        assert loads.micro_batches.tolist() == [2.0]  # 19 (or 11) tokens in micro-batches of the longest, 10
    two = rank_loads(lengths, flops, flops, 4, 2, False, MicroBatch())  # each rank's share split in order: one sequence each
    assert two.tokens.tolist() == [10.0, 9.0]


def test_balanced_shares_are_split_into_mini_batches_in_verls_order():
    # LPT with equal counts by hand: r0 = {8, 5, 4, 1}, r1 = {7, 6, 3, 2}; verl orders a share ascending, then the
    # even places followed by the odd ones reversed: r0 1, 5 | 8, 4 and r1 2, 6 | 7, 3 (ray_trainer._balance_batch)
    lengths = np.array([3, 8, 1, 6, 4, 7, 2, 5], dtype=float)  # any batch order: the order within a share is verl's
    loads = rank_loads(lengths, lengths, lengths, 2, 2, True, MicroBatch())
    assert loads.tokens.tolist() == [8.0, 12.0]  # per mini-batch, the slowest rank: max(1+5, 2+6), max(8+4, 7+3)
    plain = rank_loads(lengths, lengths, lengths, 2, 2, False, MicroBatch())  # contiguous in batch order: 3 8 | 1 6, 4 7 | 2 5
    assert plain.tokens.tolist() == [11.0, 7.0]
    # verl before 0.6.1 (--balance-order batch): the same partition, each share in batch order: 8 1 | 4 5, 3 6 | 7 2
    assert rank_loads(lengths, lengths, lengths, 2, 2, True, MicroBatch(), by_length=False).tokens.tolist() == [9.0, 9.0]
    with pytest.raises(ConfigError, match="balance order"):
        TrainerLayout(balance_order="random")


def test_fsdp_equal_lengths_is_flops_over_devices_and_imbalance_costs_more():
    cost = CostModel(hw())
    eq = np.full(16, 1000.0)
    t = cost.train(DENSE, 8, eq, 1)
    op = H100.params.train
    flops = 3.0 * 16 * DENSE.forward_flops(1000.0)
    nbytes = 3.0 * DENSE.weight_bytes() + 16 * DENSE.params / 8
    assert t == pytest.approx(max(flops / (8 * H100.gpu.peak_flops * op.eff_compute),
                                  nbytes / (H100.gpu.mem_bw * op.eff_memory)))
    skew = np.array([8000.0] + [1000.0 / 15 * 8] * 15)  # same total tokens, one long sequence
    assert cost.train(DENSE, 8, skew, 1) > t
    plain = replace(cost, layout=TrainerLayout(balance_batch=False))
    assert plain.train(DENSE, 8, skew, 1) >= cost.train(DENSE, 8, skew, 1)


def test_overhead_per_micro_batch_and_optimizer_step():
    base, ovh = CostModel(hw()), CostModel(hw(train_overhead=0.01))
    seqs = np.full(32, 1000.0)  # 8 ranks x 4 sequences, micro-batches of one sequence (the longest): 4 per rank
    assert ovh.train(DENSE, 8, seqs, 2) - base.train(DENSE, 8, seqs, 2) == pytest.approx(0.01 * (4 + 2))


# -- Megatron memory per rank ---------------------------------------------------------------------------------
def test_megatron_state_dense_by_hand():
    lay = megatron(tp=4, pp=2)  # 16 devices: dp 2
    emb = DENSE.vocab * DENSE.hidden  # llama-3.1-8b: untied head
    layers = DENSE.params - 2 * emb
    rank = (layers / 2 + emb) / 4  # a stage's layers plus its end (embedding or head), over TP
    s = megatron_state_bytes(DENSE, lay, 1, 16)
    assert s.weights == pytest.approx(2 * rank)
    assert s.grads == pytest.approx(4 * rank)  # fp32 main grads
    assert s.optimizer == pytest.approx(ADAM_BYTES * rank / 2)  # distributed optimizer over dp 2
    assert megatron_state_bytes(DENSE, replace(lay, distributed_optimizer=False), 1, 16).optimizer == pytest.approx(12 * rank)
    # 6 + 12/d bytes per parameter held (Megatron's distributed-optimizer table)
    assert s.total == pytest.approx(rank * (6 + 12 / 2))


def test_megatron_state_moe_experts_by_ep():
    lay = megatron(tp=2, etp=1)  # 16 devices, ep 8: experts over 8 ranks (expert TP 1), the rest over TP 2
    routed = MOE.routed_expert_params
    emb = MOE.vocab * MOE.hidden
    head = 0 if MOE.tied_embeddings else emb
    dense = MOE.params - routed  # pp 1: every layer, embedding and head on the one stage
    s = megatron_state_bytes(MOE, lay, 8, 16)
    assert s.weights == pytest.approx(2 * (dense / 2 + routed / 8))
    assert s.optimizer == pytest.approx(12 * (dense / 2 / 8 + routed / 8 / 2))  # dp 8; expert dp 16 / 8 = 2
    assert dense == MOE.params - routed and emb + head > 0
    # expert_tensor_parallel_size unset: Megatron-Core takes tp, each expert split over 2 more ranks, expert dp 1
    s2 = megatron_state_bytes(MOE, megatron(tp=2), 8, 16)
    assert s2.weights == pytest.approx(2 * (dense / 2 + routed / 16))
    assert s2.optimizer == pytest.approx(12 * (dense / 2 / 8 + routed / 16 / 1))


def test_inflight_layers_1f1b_and_interleaved():
    assert inflight_layers(32, 4, 1, 100) == 32  # pp micro-batches of L/pp layers
    assert inflight_layers(32, 4, 1, 2) == 16  # only 2 micro-batches in the step
    assert inflight_layers(32, 4, 2, 100) == pytest.approx(32 * (1 + 3 / 8))  # Korthikanti: L(1 + (p-1)/(pv))


def test_megatron_activations_divided_by_tp_cp_and_held_in_flight():
    tokens, L = 4096, DENSE.layers
    per_layer = layer_activation_bytes_per_token(DENSE, tokens, "flash")
    head = head_activation_bytes(DENSE, tokens, tokens)
    one = megatron_activation_bytes(DENSE, megatron(tp=4, cp=2), tokens, tokens, "none", 8)
    assert one == pytest.approx((tokens * L * per_layer + head) / 8)
    pp = megatron_activation_bytes(DENSE, megatron(tp=4, pp=2), tokens, tokens, "none", 8)
    first = tokens * L * per_layer / 4  # 2 in flight x L/2 layers
    last = (tokens * L / 2 * per_layer + head) / 4
    assert pp == pytest.approx(max(first, last))
    full = megatron_activation_bytes(DENSE, megatron(tp=4), tokens, tokens, "full", 8)
    assert full == pytest.approx((tokens * (L * 2 * DENSE.hidden + per_layer) + head) / 4)


def test_memory_plan_megatron_tp_fits_where_fsdp_needs_recompute():
    trace_len = 8192
    fsdp = SimConfig(batch=64, actor="qwen2.5-7b", reward="qwen2.5-7b", placement=colocated_placement(8),
                     algorithm=Algorithm(name="grpo", n=4, reward="rule", kl=False), max_response=trace_len)
    from oppo_sim.pipeline.memory_plan import memory_report
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
    t = TrainMemoryConfig(zero_stage=3, recompute="none")
    a = memory_report(fsdp, trace_len + 1024, trace_len, t).pool("main")
    m = memory_report(replace(fsdp, trainer=megatron(tp=4)), trace_len + 1024, trace_len, t).pool("main")
    act = {r.role: r.activations for r in a.roles if r.activations}, {r.role: r.activations for r in m.roles if r.activations}
    assert act[1]["train"] == pytest.approx(act[0]["train"] / 4)


# -- Megatron time per rank -------------------------------------------------------------------------------------
SEQS = np.full(64, 2048.0)  # 16 devices, tp 2 pp 2: dp 4, 16 sequences per rank, 16 micro-batches of one


def _compute(model, per_rank_seqs, split):
    op = H100.params.train
    return per_rank_seqs * 3 * model.forward_flops(2048.0) / (split * H100.gpu.peak_flops * op.eff_compute)


def _last_stage(model, per_rank_seqs, pp, passes=3):
    """The last of ``pp`` even stages: its share of the decoder layers and the whole output layer (Megatron-Core)."""
    head = 2.0 * model.head_params() * 2048.0
    op = H100.params.train if passes == 3 else H100.params.prefill
    body = model.forward_flops(2048.0) - head
    return per_rank_seqs * passes * (body / pp + head) / (H100.gpu.peak_flops * op.eff_compute)


def test_megatron_pipeline_bubble_by_hand():
    t = CostModel(hw(), layout=megatron(pp=2)).train(DENSE, 16, SEQS, 1)  # dp 8: 8 micro-batches per rank
    # the last stage paces it: half the layers and Llama's 128,256 x 4,096 output layer (until 2026-11-27 the output
    # layer was spread over the stages: _compute(DENSE, 8, 2))
    assert t == pytest.approx(_last_stage(DENSE, 8, 2) * (1 + 1 / 8))
    v = CostModel(hw(), layout=megatron(pp=2, vpp=2)).train(DENSE, 16, SEQS, 1)
    assert v == pytest.approx(_last_stage(DENSE, 8, 2) * (1 + 1 / 16))
    assert _last_stage(DENSE, 8, 2) > _compute(DENSE, 8, 2)


def test_megatron_tp_collectives_by_hand():
    link = 400e9
    t = CostModel(hw(link=link), layout=megatron(tp=2), domain=8).train(DENSE, 8, SEQS, 1)  # dp 4, 16 micro-batches
    tp_bytes = 8 * DENSE.layers * 16 * 0.5 * 2048 * DENSE.hidden * 2  # 4 collectives fwd + 4 bwd per layer per micro-batch
    dp_sync = 2 * 3 / 4 * DENSE.weight_bytes() / 2 / link  # the rank's half of the weights, all-reduced over dp 4
    assert t == pytest.approx(_compute(DENSE, 16, 2) + tp_bytes / link + dp_sync)
    across = CostModel(hw(link=link, net=link / 10), layout=megatron(tp=16), domain=8).train(DENSE, 16, SEQS, 1)
    inside = CostModel(hw(link=link, net=link / 10), layout=megatron(tp=16), domain=16).train(DENSE, 16, SEQS, 1)
    assert across > inside  # a TP group larger than the domain runs at the network's bandwidth


def test_megatron_ep_all_to_all_inside_or_across_the_domain():
    link, net = 400e9, 40e9
    def cost(domain):  # 4 of the pool's GPUs a domain either way: the data-parallel rings take the same NICs
        return CostModel(hw(link=link, net=net), layout=megatron(), expert_parallel=8, domain=domain, cross_node=True,
                         pool_domain_gpus=4)
    inside, across = cost(8).train(MOE, 16, SEQS, 1), cost(4).train(MOE, 16, SEQS, 1)
    # dp 16: 4 sequences per rank, 4 micro-batches; each sends k * hidden * 2 bytes * 7/8 per token, 4 calls per MoE layer
    sent = 4 * MOE.moe_layers * 4 * 2048 * MOE.experts_per_token * MOE.hidden * 2 * 7 / 8
    a2a = alltoall_share(link, net, 8, 4)  # EP8 over two domains of 4: 4 of the 7 peers far, 3 near
    assert across - inside == pytest.approx(sent / a2a - sent / link)
    # the fsdp path prices it the same way: over the link when the EP group fits in the domain
    fs_in = CostModel(hw(link=link, net=net), expert_parallel=8, domain=8, cross_node=True,
                      pool_domain_gpus=4).train(MOE, 16, SEQS, 1)
    fs_out = CostModel(hw(link=link, net=net), expert_parallel=8, domain=4, cross_node=True,
                       pool_domain_gpus=4).train(MOE, 16, SEQS, 1)
    assert fs_out - fs_in == pytest.approx(sent / a2a - sent / link)


def test_megatron_allgather_dispatcher_moves_ep_minus_one_tokens():
    link = 400e9
    def cost(how):
        return CostModel(hw(link=link), layout=megatron(moe_dispatcher=how), expert_parallel=16, domain=16)
    a2a, ag = cost("alltoall").train(MOE, 16, SEQS, 1), cost("allgather").train(MOE, 16, SEQS, 1)
    assert cost("flex").train(MOE, 16, SEQS, 1) == pytest.approx(a2a)  # DeepEP: priced as the all-to-all
    # dp 16, 4 micro-batches of 2,048 tokens a rank; per token the all-to-all sends k (8) x 15/16 hidden vectors,
    # the all-gather (and the reduce-scatter) 15 -- twice as many at ep 16, 4 calls per MoE layer and micro-batch
    per_token = (15 - MOE.experts_per_token * 15 / 16) * MOE.hidden * 2
    assert ag - a2a == pytest.approx(4 * MOE.moe_layers * 4 * 2048 * per_token / link)
    # NeMo RL's fp64 router: the allgather dispatcher's combine (forward reduce-scatter, backward all-gather) moves
    # 8-byte elements, three times the bf16 bytes more on half of the four calls
    def fp64(how):
        return CostModel(hw(link=link), layout=megatron(moe_dispatcher=how, moe_router_dtype="fp64"), expert_parallel=16,
                         domain=16).train(MOE, 16, SEQS, 1)
    assert fp64("allgather") - ag == pytest.approx(2 * MOE.moe_layers * 4 * 2048 * 3 * 15 * MOE.hidden * 2 / link)
    assert fp64("alltoall") == pytest.approx(a2a)  # the all-to-all combines in the model's dtype
    with pytest.raises(ConfigError, match="dispatcher"):
        megatron(moe_dispatcher="deepep")
    with pytest.raises(ConfigError, match="router dtype"):
        megatron(moe_router_dtype="fp8")


def test_moe_forward_pays_dispatch_and_combine_per_micro_batch():
    link = 400e9
    seqs, ctx = [2048] * 16, [0] * 16
    def fwd(ep, layout):
        return CostModel(hw(link=link), layout=layout, expert_parallel=ep, domain=16).prefill_cost(MOE, 16, seqs, ctx)[0]
    sent = 2 * MOE.moe_layers * 2048 * MOE.experts_per_token * MOE.hidden * 2 * 7 / 8  # one sequence a rank
    assert fwd(8, megatron()) - fwd(1, megatron()) == pytest.approx(sent / link)
    assert fwd(8, TrainerLayout()) - fwd(1, TrainerLayout()) == pytest.approx(sent / link)


def test_megatron_cp_ring_hidden_under_attention_unless_slower():
    fast = CostModel(hw(), layout=megatron(cp=2)).train(DENSE, 16, SEQS, 1)  # dp 8, 8 sequences per rank
    assert fast == pytest.approx(_compute(DENSE, 8, 2))  # the ring hides under the attention core
    slow = CostModel(hw(link=1e9), layout=megatron(cp=2), domain=8).train(DENSE, 16, SEQS, 1)  # DP spans 2 domains
    kv = 1 * 1024 * 2 * DENSE.kv_width * 2  # one pass of the rank's 1,024-token K and V blocks per layer
    ring = DENSE.layers * 8 * 3 * kv / 1e9
    op = H100.params.train
    attn = 8 * 3 * DENSE.pair_flops * 2048 * 2049 / 2 / (2 * H100.gpu.peak_flops * op.eff_compute)
    assert ring > attn
    dp_sync = allreduce_seconds(FREE, DENSE.weight_bytes(), 16, 1e9, 2)  # a ring across domains: at most the link
    assert slow == pytest.approx(_compute(DENSE, 8, 2) + ring - attn + dp_sync)


# -- frozen models under Megatron --------------------------------------------------------------------------------
def test_frozen_reference_under_megatron_costs_no_gather():
    trace = Trace.from_arrays(np.full(64, 200), np.full(64, 300), name="t")
    base = SimConfig(batch=16, steps=1, actor="qwen2.5-7b", reward="qwen2.5-7b", placement=colocated_placement(8),
                     algorithm=Algorithm(name="grpo", n=4, reward="rule", kl=True))
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
    z3 = replace(base, train_memory=TrainMemoryConfig(zero_stage=3, recompute="none"))
    assert frozen_shards(z3, "reference", 3) == 8
    assert Pipeline(z3, trace, Baseline()).scorers["reference"].gather_s > 0
    mg = replace(z3, trainer=megatron(tp=2, pp=2))
    assert frozen_shards(mg, "reference", 3) == 4  # its tp x pp shard
    p = Pipeline(mg, trace, Baseline())
    assert p.scorers["reference"].gather_s == 0.0
    ref = next(r for r in p.memory.pool("main").roles if r.role == "reference")
    assert ref.weights == pytest.approx(get_model("qwen2.5-7b").weight_bytes() / 4)


def test_megatron_ep_must_divide_a_stage():
    with pytest.raises(ConfigError, match="pipeline stage"):
        SimConfig(actor="qwen3-30b-a3b", reward="qwen3-30b-a3b", placement=colocated_placement(16), expert_parallel=16,
                  trainer=megatron(pp=2), algorithm=Algorithm(name="grpo", n=4, reward="rule", kl=False))


def test_frozen_moe_reference_under_megatron_holds_its_expert_shard():
    from oppo_sim.pipeline.memory_plan import memory_report
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
    cfg = SimConfig(actor="qwen3-30b-a3b", reward="qwen3-30b-a3b", gpu="h100-sxm", placement=colocated_placement(16),
                    expert_parallel=8, trainer=megatron(tp=2, etp=1), batch=16,
                    algorithm=Algorithm(name="grpo", n=4, reward="rule", kl=True))
    rep = memory_report(cfg, 4096, 3072, TrainMemoryConfig(zero_stage=2, recompute="full"))
    ref = next(r for r in rep.pool("main").roles if r.role == "reference")
    assert ref.weights == pytest.approx(2 * ((MOE.params - MOE.routed_expert_params) / 2 + MOE.routed_expert_params / 8))


def test_megatron_forward_pays_tp_and_bubble_but_no_gather():
    seqs, ctx = [2048] * 16, [0] * 16
    plain = CostModel(hw()).prefill_cost(DENSE, 16, seqs, ctx)[0]  # 16 ranks, one sequence each
    pp = CostModel(hw(), layout=megatron(pp=2)).prefill_cost(DENSE, 16, seqs, ctx)[0]  # dp 8: 2 sequences per rank
    op = H100.params.prefill
    one = DENSE.forward_flops(2048.0) / (H100.gpu.peak_flops * op.eff_compute)
    assert plain == pytest.approx(op.overhead_s + one)
    # 2 micro-batches: bubble (pp-1)/m; the last stage runs half the layers and the whole output layer
    assert pp == pytest.approx((2 * op.overhead_s + _last_stage(DENSE, 2, 2, passes=1)) * (1 + 1 / 2))


def test_megatron_refuses_ulysses_sp():
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
    with pytest.raises(ConfigError, match="--cp"):
        SimConfig(placement=colocated_placement(8), trainer=megatron(tp=2), train_memory=TrainMemoryConfig(sequence_parallel=2))


# -- Megatron's host time ------------------------------------------------------------------------------------------
def test_megatron_host_time_layer_ops_by_hand():
    from oppo_sim.hw.costs.megatron_host import host_seconds, layer_ops
    # Qwen3-30B-A3B at EP 8: 16 local experts; a layer: attention 10 + q/k norms 3, MoE block 51 + 2 x 16 forward;
    # backward 19 + 6 and 36 + 6 x 16 (the numbers counted from Megatron-Core's source, module notes)
    assert layer_ops(MOE, 1, 16) == (48 * 96, 48 * 157)
    assert layer_ops(DENSE) == (32 * 18, 32 * 34)  # Llama: attention and MLP
    assert layer_ops(DENSE, tp=2) == (32 * 22, 32 * 40)  # TP with SP: 4 and 6 collectives a layer
    f, b = host_seconds(MOE, 1e-5, share=0.5, local_experts=16, recompute="full")
    assert (f, b) == pytest.approx((48 * 96 * 1e-5 / 2, 48 * (96 + 157) * 1e-5 / 2))  # recompute: the forward again


def test_megatron_host_time_bounds_a_fast_gpu_only():
    from oppo_sim.hw.costs.megatron_host import host_seconds
    def train(peak, host):
        h = hw()
        h = replace(h, gpu=replace(h.gpu, peak_flops=peak, mem_bw=1e30))
        return _CostModel(h, layout=megatron(), expert_parallel=8, host_op_s=host).train(MOE, 16, SEQS, 1)
    slow, fast = H100.gpu.peak_flops / 10, 1e30
    assert train(slow, 22e-6) == pytest.approx(train(slow, 0.0))  # a GPU a tenth of an H100's: the slower of the two
    f, b = host_seconds(MOE, 22e-6, local_experts=16)
    assert train(fast, 22e-6) == pytest.approx(4 * (f + b))  # dp 16: 4 micro-batches a rank, each the host's time
    assert train(fast, 0.0) == pytest.approx(0.0, abs=1e-9)
    seqs, ctx = [2048] * 16, [0] * 16
    h = replace(hw(), gpu=replace(hw().gpu, peak_flops=fast, mem_bw=1e30))
    fwd = _CostModel(h, layout=megatron(), expert_parallel=8).prefill_cost(MOE, 16, seqs, ctx)[0]
    assert fwd == pytest.approx(f + H100.params.prefill.overhead_s)  # one sequence a rank: one forward's host time
    assert _CostModel(h, expert_parallel=8).prefill_cost(MOE, 16, seqs, ctx)[0] == pytest.approx(
        H100.params.prefill.overhead_s)  # fsdp: not priced (its host is not counted)


def test_the_log_prob_budget_sets_a_forwards_micro_batches_and_not_trainings():
    seqs, ctx = [1000] * 32, [0] * 32  # 8 ranks x 4 sequences
    base = CostModel(hw(train_overhead=0.0), micro=MicroBatch(1000))
    fwd = lambda c: c.prefill_cost(DENSE, 8, seqs, ctx)[0]  # noqa: E731
    # the forward's fixed cost (prefill.overhead_s) is per micro-batch: 4 of 1000 tokens a rank, or 1 of 4000 (or of 4
    # sequences)
    op = H100.params.prefill.overhead_s
    assert fwd(base) - fwd(replace(base, forward_micro=MicroBatch(4000))) == pytest.approx(3 * op)
    assert fwd(replace(base, forward_micro=MicroBatch(sequences=4))) == pytest.approx(fwd(replace(base, forward_micro=MicroBatch(4000))))
    assert base.micro_batch(True) == MicroBatch(1000)  # none of its own: the training's
    # training keeps its own: 4 micro-batches a rank and 1 optimizer step
    ovh = replace(base, hw=hw(train_overhead=0.01), forward_micro=MicroBatch(4000))
    train = lambda c: c.train(DENSE, 8, np.asarray(seqs, float), 1)  # noqa: E731
    assert train(ovh) - train(replace(base, forward_micro=MicroBatch(4000))) == pytest.approx(0.01 * (4 + 1))


@pytest.mark.parametrize("micro, count", [(MicroBatch(), 4), (MicroBatch(sequences=2), 2), (MicroBatch(sequences=3), 2),
                                          (MicroBatch(2500), 2), (MicroBatch(500), 4)])
def test_a_ranks_micro_batches_by_budget_by_count_or_one_sequence_each(micro, count):
    base = CostModel(hw(), micro=micro)
    seqs = np.full(32, 1000.0)  # 8 ranks x 4 sequences: their overhead per micro-batch and optimizer step
    assert replace(base, hw=hw(train_overhead=0.01)).train(DENSE, 8, seqs, 1) - base.train(DENSE, 8, seqs, 1) == \
        pytest.approx(0.01 * (count + 1))


def test_a_micro_batch_is_tokens_or_sequences_and_the_memory_plan_holds_the_worst():
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
    with pytest.raises(ConfigError, match="logprob_micro_batch"):
        TrainMemoryConfig(logprob_micro_batch_tokens=0)
    with pytest.raises(ConfigError, match="not both"):
        TrainMemoryConfig(micro_batch_tokens=4096, micro_batch_size=2)
    assert [MicroBatch(*r).worst_tokens(3000) for r in ((None, None), (8192, None), (1024, None), (None, 4))] == \
        [3000, 8192, 3000, 12000]
