"""Cost model: monotonicity, closed-form spans equal step-by-step sums, roofline regimes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oppo_sim.hw.costs.costmodel import CostModel, DecodeCost
from oppo_sim.hw.costs.spans import sum_max_lines as _sum_max_lines
from oppo_sim.hw.devices.hardware import GPUS, Hardware, OpParams, collective_latency, get_hardware
from oppo_sim.hw.models.lookup import MODELS, get_model

H100 = get_hardware("h100-sxm")
M7 = get_model("qwen2.5-7b")


@given(st.floats(-5, 5), st.floats(-1, 1), st.floats(-5, 5), st.floats(-1, 1), st.integers(0, 300))
def test_sum_of_max_lines_closed_form(a1, s1, a2, s2, n):
    brute = sum(max(a1 + s1 * i, a2 + s2 * i) for i in range(n))
    assert _sum_max_lines(a1, s1, a2, s2, n) == pytest.approx(brute, rel=1e-9, abs=1e-9)


@given(st.integers(1, 256), st.integers(0, 2_000_000), st.integers(1, 500), st.sampled_from([1, 2, 4]))
def test_span_equals_iteration_sum(b, kv0, m, tp):
    dc = DecodeCost(M7, H100, tp)
    brute = sum(dc.iteration(b, kv0 + i * b) for i in range(m))
    assert dc.span(b, kv0, m) == pytest.approx(brute, rel=1e-9)
    flops = sum(dc.flops(b, kv0 + i * b) for i in range(m))
    assert dc.span_flops(b, kv0, m) == pytest.approx(flops, rel=1e-9)


@given(st.integers(1, 128), st.integers(0, 100_000), st.integers(1, 400), st.floats(0, 10))
def test_iters_within_inverts_span(b, kv0, limit, secs):
    dc = DecodeCost(M7, H100)
    k = dc.iters_within(b, kv0, secs, limit)
    assert 0 <= k <= limit
    assert dc.span(b, kv0, k) <= secs + 1e-12
    if k < limit:
        assert dc.span(b, kv0, k + 1) > secs


@pytest.mark.parametrize("gpu", list(GPUS))
def test_decode_grows_with_batch_and_kv(gpu):
    dc = DecodeCost(get_model("llama-3.1-8b"), Hardware(GPUS[gpu]))
    for b in (1, 8, 64):
        assert dc.iteration(b * 2, 10_000) >= dc.iteration(b, 10_000)
        assert dc.iteration(b, 200_000) > dc.iteration(b, 10_000)
    # small batches are memory bound: doubling the batch costs far less than double
    assert dc.iteration(2, 1000) < 1.2 * dc.iteration(1, 1000)


@pytest.mark.parametrize("gpu", list(GPUS))
@pytest.mark.parametrize("model", ["qwen2.5-0.5b", "qwen2.5-7b", "llama-3.1-70b"])
def test_prefill_is_compute_bound_at_large_n(gpu, model):
    hw, m = Hardware(GPUS[gpu]), get_model(model)
    cm = CostModel(hw)
    n = np.array([16384.0])
    p = hw.params.prefill
    compute = m.forward_flops(n, 0).sum() / (hw.gpu.peak_flops * p.eff_compute)
    memory = (m.weight_bytes() + n.sum() * m.kv_bytes_per_token()) / (hw.gpu.mem_bw * p.eff_memory)
    assert compute > memory
    # and the time then scales ~linearly (or worse, attention) with n
    assert cm.prefill(m, 1, 2 * n, np.zeros(1)) > 1.9 * (cm.prefill(m, 1, n, np.zeros(1)) - p.overhead_s)


def test_incremental_prefill_costs_about_the_same_as_one_shot():
    cm = CostModel(H100)
    whole = cm.prefill_flops(M7, np.array([4096.0]), np.array([0.0]), False)
    chunks = cm.prefill_flops(M7, np.full(8, 512.0), np.arange(8) * 512.0, False)
    assert chunks == pytest.approx(whole, rel=1e-9)


def test_training_and_sync_scale():
    cm = CostModel(H100)
    seqs = np.full(112, 1000.0)
    t1 = cm.train(M7, 7, seqs, 1)
    assert cm.train(M7, 7, 2 * seqs, 1) > t1
    assert cm.train(M7, 14, seqs, 1) < t1
    assert cm.weight_sync(get_model("qwen2.5-72b")) > cm.weight_sync(M7)
    assert all(m.params > 0 for m in MODELS.values())


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 20000)), min_size=1, max_size=20), st.booleans())
def test_prefill_cost_flops_match_model_formula(rows, scalar):
    cm = CostModel(H100)
    new = [float(n) for n, _ in rows]
    ctx = [float(c) for _, c in rows]
    _, flops = cm.prefill_cost(M7, 1, new, ctx, scalar_head=scalar)
    assert flops == pytest.approx(cm.prefill_flops(M7, np.array(new), np.array(ctx), scalar), rel=1e-9)


def _with_collective(hw: Hardware, eff: float, latency: float) -> Hardware:
    return dataclasses.replace(hw, params=dataclasses.replace(hw.params, collective=OpParams(1.0, eff, latency)))


def test_tp_allreduce_is_a_ring_over_the_one_direction_link():
    dc = DecodeCost(M7, H100, 4)
    c = H100.params.collective
    # NCCL's latency of a 4-rank ring: the base + 2 x 3 NVLink hops (hardware.collective_latency)
    one = c.overhead_s + 6 * 0.6e-6 + 2 * 3 / 4 * 256 * M7.hidden * M7.dtype_bytes / (450e9 * c.eff_memory)
    assert dc.comm(256) == pytest.approx(2 * M7.layers * one, rel=1e-12)  # two all-reduces per layer
    assert DecodeCost(M7, H100, 1).comm(256) == 0.0


@pytest.mark.parametrize("tokens", [1, 256, 8192])
def test_tp_allreduce_time_scales_with_one_over_the_collective_efficiency(tokens):
    hops = 2 * M7.layers * 14 * 0.6e-6  # each all-reduce's 2 x 7 NVLink hops, whatever the base latency
    no_latency = {eff: DecodeCost(M7, _with_collective(H100, eff, 0.0), 8).comm(tokens) - hops for eff in (0.9, 0.45)}
    assert no_latency[0.45] == pytest.approx(2 * no_latency[0.9], rel=1e-9)
    assert DecodeCost(M7, _with_collective(H100, 0.9, 1e-5), 8).comm(tokens) == pytest.approx(
        no_latency[0.9] + hops + 2 * M7.layers * 1e-5, rel=1e-12)


@pytest.mark.parametrize("zero_stage, cross_node", [(2, False), (3, False), (2, True)])
def test_gradient_allreduce_uses_the_collective_efficiency(zero_stage, cross_node):
    seqs = np.full(16, 100.0)
    w = M7.weight_bytes()
    bw = H100.gpu.net_bw if cross_node else H100.gpu.link_bw
    bus = (3.0 if zero_stage == 3 else 2.0) * 7 / 8 * w  # all-reduce, plus ZeRO-3's parameter all-gather
    cms = {eff: CostModel(_with_collective(H100, eff, 0.0), zero_stage=zero_stage, cross_node=cross_node)
           for eff in (0.8, 0.4)}
    for eff, cm in cms.items():
        nodes = 2 if cross_node else 1  # a pool over domains spans at least two
        op = cm.hw.params.collective
        hops = collective_latency(op, "all-reduce", 8, nodes) + (
            collective_latency(op, "all-gather", 8, nodes) if zero_stage == 3 else 0.0)  # at a 0 base
        assert cm.gradient_sync(w, 8) == pytest.approx(bus / (bw * eff) + hops, rel=1e-12)
        assert cm.gradient_sync(w, 1) == 0.0
    # training pays it once per optimizer step (4 minibatches), and nothing else depends on the efficiency
    slower = cms[0.4].train(M7, 8, seqs, 4) - cms[0.8].train(M7, 8, seqs, 4)
    assert slower == pytest.approx(4 * bus / bw * (1 / 0.4 - 1 / 0.8), rel=1e-9)
