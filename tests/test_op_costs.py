"""The op-cost layer: profile > shipped tables > roofline (with a Hopper GPU borrowing Hopper's fractions),
the export round trip on a synthetic database, and MoE decode priced by tokens per expert."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.costmodel import CostModel, DecodeCost
from oppo_sim.hw.costs.decode_kernels import DecodeKernels
from oppo_sim.hw.devices.hardware import CostParams, Hardware, OpParams, get_hardware
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.hw.costs.op_cost import MOE_BLOCK_TOKENS, find_op_costs, hardware_for, priced_by, with_op_costs
from oppo_sim.hw.costs.op_tables import read_table, shipped_table
from oppo_sim.hw.fitting.profiles import save_profile

ROOT = Path(__file__).resolve().parents[1]
MOE = get_model("qwen3-30b-a3b")
DENSE = get_model("qwen2.5-7b")


def test_profile_wins_over_tables(tmp_path):
    p = OpParams(0.3, 0.6, 1e-3)
    save_profile(Hardware(get_hardware("h100-sxm").gpu, CostParams(p, p, p, p)), tmp_path / "h100.json")
    hw = hardware_for(str(tmp_path / "h100.json"), "tables")
    assert hw.ops is None and hw.params.decode == p
    by = priced_by(hw)
    assert by.pop("host") == "x86-measured host constants"
    assert set(by.values()) == {f"calibrated profile {tmp_path / 'h100.json'}"}


def test_tables_then_roofline_and_the_echo_says_which():
    hw = hardware_for("h100-sxm", "tables")
    assert hw.ops.kind == "tables" and hw.ops.tables == (shipped_table("h100-sxm"),)
    by = priced_by(hw)
    assert by["decode"].startswith("tables (aiconfigurator-core") and "h100_sxm" in by["decode"]
    assert "op costs: tables" in hw.label
    for hw in (hardware_for("h100-sxm", "roofline"), hardware_for("mi300x", "tables")):  # asked for, or no table at all
        by = priced_by(hw)
        assert hw.ops is None and by.pop("host") == "x86-measured host constants"
        assert all(v.startswith("roofline") for v in by.values())
    assert with_op_costs(hardware_for("h100-sxm", "tables"), "tables") == hardware_for("h100-sxm", "tables")
    with pytest.raises(ConfigError, match="--op-costs"):
        hardware_for("h100-sxm", "measured")


def test_the_command_line_default_is_a_gpus_own_table():
    from oppo_sim.hw.costs.op_cost import DEFAULT_OP_COSTS

    assert DEFAULT_OP_COSTS == "tables"
    assert hardware_for("h200").ops.kind == "tables" and hardware_for("h20").ops is None


@pytest.mark.parametrize("gpu, system", [("b300", "b300_sxm"), ("gb300", "gb300")])
def test_blackwell_ultra_is_priced_by_its_own_tables(gpu, system):
    hw = hardware_for(gpu)
    assert hw.ops.kind == "tables" and system in priced_by(hw)["decode"]
    table = shipped_table(gpu)
    assert table.peak_flops == hw.gpu.peak_flops and table.moe_frac and table.mla_frac  # MoE and MLA measured
    # the same weights read at the same fraction of a bandwidth no lower: a Blackwell Ultra decode iteration is no
    # slower than its Blackwell predecessor's by more than the tables' spread
    older = {"b300": "b200", "gb300": "gb200"}[gpu]
    new, old = (CostModel(hardware_for(g)).decode(DENSE).iteration(64, 64 * 2000) for g in (gpu, older))
    assert 0.8 < new / old < 1.2


def test_a_cpu_keeps_the_roofline():  # CPU validate is unaffected: no table, no architecture to borrow from
    from oppo_sim.hw.fitting.profiles import cpu_spec

    cpu = Hardware(cpu_spec())
    assert with_op_costs(cpu, "tables") == cpu and with_op_costs(cpu, "tables").ops is None


def test_hopper_without_a_table_borrows_hopper_fractions_at_its_ridge():
    h20 = get_hardware("h20")
    ops = find_op_costs(h20, borrow=True)
    assert ops.kind == "derived" and [t.gpu for t in ops.tables] == ["h100-sxm", "h200"]
    assert "hopper fractions" in priced_by(with_op_costs(h20, "tables+arch"))["decode"]
    assert with_op_costs(h20, "tables") == h20 and find_op_costs(h20) is None  # borrowing is opt-in
    ridge = h20.gpu.peak_flops / h20.gpu.mem_bw
    want = sum(t.gemm(256 * t.ridge / ridge) for t in ops.tables) / 2  # the same intensity relative to the ridge
    assert ops.gemm(256) == pytest.approx(want, rel=1e-12)
    assert find_op_costs(get_hardware("mi300x"), borrow=True) is None  # no measured GPU of its architecture


def test_span_equals_iteration_sum_with_tables():
    dc = DecodeCost(MOE, hardware_for("h20", "tables+arch"), 4)
    for b, kv0, m in ((1, 0.0, 7), (64, 90_000.0, 40), (256, 400_000.0, 123)):
        brute = sum(dc.iteration(b, kv0 + i * b) for i in range(m))
        assert dc.span(b, kv0, m) == pytest.approx(brute, rel=1e-9)


def test_moe_experts_priced_by_tokens_per_expert():
    hw = hardware_for("h100-sxm", "tables")
    k = DecodeKernels(hw.ops, MOE, 4, False, hw.gpu)
    times = [k.experts_s(t) for t in (1, 2, 8, 32, 128, 256, 1024, 4096)]
    assert all(a <= b for a, b in zip(times, times[1:]))  # monotone in the tokens
    # by hand at 256 tokens: all 128 experts touched (16 tokens each), memory-bound on an H100
    touched = 128 * (1 - (1 - 8 / 128) ** 256)
    expert = 3 * 2048 * 768
    nbytes = 48 * touched * expert * 2 / 4
    flops = 2 * 48 * touched * max(256 * 8 / touched, MOE_BLOCK_TOKENS) * expert / 4
    frac = shipped_table("h100-sxm").moe(256 * 8 / 128, 768 / 4)
    assert k.experts_s(256) == pytest.approx(max(flops / 989e12, nbytes / 3.35e12) / frac, rel=1e-9)
    # a few tokens still pay a whole tile of FLOPs in each touched expert
    assert k.experts_s(1) >= 2 * 48 * 8 * MOE_BLOCK_TOKENS * expert / 4 / 989e12


def test_moe_decode_on_h20_tp4_costs_more_than_a_dense_7b_with_tables():
    hw = hardware_for("h20", "tables+arch")
    moe, dense = CostModel(hw).decode(MOE, 4), CostModel(hw).decode(DENSE, 4)
    assert moe.iteration(256, 256 * 1500.0) > dense.iteration(256, 256 * 1500.0)


def _fixture_db(root: Path) -> None:
    """A tiny AIConfigurator-shaped database for one GPU (h100_sxm), numbers chosen to be checked by hand;
    modelled on the column layout of aiconfigurator-core 0.12.0's parquet tables, not a copy."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    base = root / "h100_sxm"
    peak, bw = 989e12, 3.35e12
    gemm = [{"kernel_source": "torch.nn.functional.linear", "gemm_dtype": "bfloat16", "m": m, "n": 4096, "k": 4096,
             "latency": max(2 * m * 4096 ** 2 / peak, 2 * (m * 4096 * 2 + 4096 ** 2) / bw) / f * 1e3, "device": "H100"}
            for m, f in ((1, 0.5), (64, 0.6), (4096, 0.8))]
    dec = [{"kernel_source": "fa3", "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "window_size": 0,
            "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "batch_size": 8, "step": s, "isl": 1,
            "latency": (2e-5 + s * 8 * 2 * 8 * 128 * 2 / (bw * 0.9)) * 1e3} for s in (255, 1023, 4095)]
    pre = [{"kernel_source": "fa3", "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "window_size": 0,
            "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "batch_size": 1, "step": 0, "isl": 4096,
            "latency": 4 * 32 * 128 * 4096 * 4097 / 2 / (peak * 0.5) * 1e3}]
    nccl = [{"nccl_dtype": "half", "op_name": "all_reduce", "num_gpus": 8, "message_size": s,
             "latency": (1.5e-5 + 2 * 7 / 8 * s * 2 / (450e9 * 0.8)) * 1e3} for s in (256, 1024, 2 ** 28)]
    for kind, name, rows, fw in (("gemm", "gemm_perf", gemm, "vllm"), ("attention", "generation_attention_perf", dec, "vllm"),
                                 ("attention", "context_attention_perf", pre, "vllm"), ("comm", "nccl_perf", nccl, "nccl")):
        d = base / kind / fw / ("2.0" if fw == "nccl" else "0.1.0")
        d.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(d / f"{name}.parquet")


def test_export_round_trip(tmp_path):
    _fixture_db(tmp_path / "db")
    spec = importlib.util.spec_from_file_location("export_op_tables", ROOT / "scripts" / "export_op_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--db", str(tmp_path / "db"), "--out", str(tmp_path / "out"), "--package-version", "9.9"]) == 0
    t = read_table(tmp_path / "out" / "h100-sxm.json")
    assert t.label == "aiconfigurator-core 9.9, nccl 2.0 / vllm 0.1.0, h100_sxm"
    assert (t.gemm(1), t.gemm(64), t.gemm(4096)) == pytest.approx((0.5, 0.6, 0.8), rel=1e-3)
    assert t.gemm(8) == pytest.approx(0.5 + 0.1 * math.log2(8) / math.log2(64), rel=1e-3)  # log-linear between
    intercept, kv_frac = t.decode_attention(8)
    assert intercept == pytest.approx(2e-5, rel=1e-3) and kv_frac == pytest.approx(0.9, rel=1e-3)
    assert t.prefill_attention(4096) == pytest.approx(0.5, rel=1e-3)
    lat, bus = t.collective("all-reduce", 8)
    assert lat == pytest.approx(1.5e-5, rel=0.01) and bus == pytest.approx(0.8, rel=0.01)
    assert t.moe(16, 192) is None  # the fixture has no MoE table


def test_malformed_table_is_one_line(tmp_path):
    (tmp_path / "x.json").write_text('{"format": "oppo-op-table/1", "gpu": "x"}')
    with pytest.raises(ConfigError, match="malformed op-cost table"):
        read_table(tmp_path / "x.json")


def test_tables_are_read_once_per_gpu(monkeypatch):
    import oppo_sim.hw.costs.op_tables as op_tables

    reads = []
    real = op_tables.read_table
    monkeypatch.setattr(op_tables, "read_table", lambda path: reads.append(Path(path).name) or real(path))
    op_tables.shipped_table.cache_clear()
    try:
        for _ in range(3):
            hw = hardware_for("h20", "tables+arch")
            dc = CostModel(hw).decode(MOE, 4)
            dc.span(64, 1000.0, 50)
            dc.iteration(8, 100.0, 256, 256 * 257 / 2.0)
        assert sorted(reads) == ["h100-sxm.json", "h200.json"]  # H20's borrowed tables, each read once
    finally:
        op_tables.shipped_table.cache_clear()


def test_mla_decode_attention_priced_absorbed():
    ds = get_model("deepseek-v3")
    hw = hardware_for("h100-sxm", "tables")
    k = DecodeKernels(hw.ops, ds, 8, False, hw.gpu)
    flops = 2.0 * ds.layers * ds.heads / 8 * (2 * ds.kv_lora_rank + ds.qk_rope_head_dim)  # per cached token
    latent = ds.layers * (ds.kv_lora_rank + ds.qk_rope_head_dim) * 2  # every GPU reads the whole latent
    want = max(flops / 989e12, latent / 3.35e12) / shipped_table("h100-sxm").mla_decode(64)
    assert k.attention(64)[1] == pytest.approx(want, rel=1e-9)
    gqa = DecodeKernels(hw.ops, DENSE, 1, False, hw.gpu).attention(64)[1]  # a GQA model keeps the paged-attention line
    assert gqa == pytest.approx(DENSE.kv_bytes_per_token() / (3.35e12 * shipped_table("h100-sxm").decode_attention(64)[1]))


def test_a_moes_routed_experts_train_and_score_at_the_measured_grouped_gemms():
    import numpy as np
    from dataclasses import replace

    from oppo_sim.hw.costs.op_cost import expert_flop_excess

    hw = hardware_for("h100-sxm", "tables")
    ops, table = hw.ops, shipped_table("h100-sxm")
    # by hand: the routed experts' share of the matmul FLOPs x (dense large-GEMM fraction / grouped fraction - 1)
    share = MOE.moe_layers * MOE.experts_per_token * MOE.expert_params / (MOE.flop_coeffs()[0] / 2)
    want = share * (table.gemm(8192) / table.moe(2048, MOE.moe_intermediate) - 1)
    assert 0.2 < share < 0.8 and want > 0.1
    assert expert_flop_excess(ops, MOE, 2048, MOE.moe_intermediate) == pytest.approx(want)
    assert expert_flop_excess(ops, DENSE, 2048, 1) == 0.0 and expert_flop_excess(None, MOE, 2048, 768) == 0.0
    seqs = np.full(64, 2048.0)
    for model, longer in ((MOE, True), (DENSE, False)):  # the same hardware without the tables' grouped GEMMs
        with_t, without = CostModel(hw, expert_parallel=8 if model.moe else 1), CostModel(replace(hw, ops=None), expert_parallel=8 if model.moe else 1)
        train = with_t.train(model, 8, seqs, 2), without.train(model, 8, seqs, 2)
        score = with_t.prefill(model, 8, seqs, np.zeros(64)), without.prefill(model, 8, seqs, np.zeros(64))
        assert (train[0] > train[1] and score[0] > score[1]) if longer else (train[0] == train[1] and score[0] == score[1])
    assert "grouped GEMMs" in priced_by(hw)["train"]
