"""Frozen models sharded with a ZeRO-3 trainer (verl's FSDP reference/reward workers, OpenRLHF's ZeRO-3
engines) and the trainer's state kept on the GPUs while a sleeping engine generates
(``offload_train_state=False``, verl's default): memory, per-forward all-gather, KV cache and sleep/wake
charge, checked against hand arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from oppo_sim.cli import main
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import colocated_placement, paper_placement
from oppo_sim.core.policies import make_policy
from oppo_sim.hw.devices.hardware import collective_latency, get_hardware
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.hw.memory.engine_memory import engine_memory
from oppo_sim.hw.memory.pool_memory import ALWAYS, GENERATE, OTHER
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.hw.costs.sleepwake import PINNED_COPY, SWITCH_FIXED_S
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.pipeline.fit_check import check_fits, sleep_wake_of
from oppo_sim.pipeline.memory_plan import frozen_shards, memory_report
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.trace import Trace

TRACE = Trace.from_arrays([200, 300, 150, 400] * 4, [120, 900, 60, 300] * 4, name="fo")
GRPO = Algorithm("grpo", n=2, reward="rule")  # a reference (KL), no reward model, no critic
SMALL = SimConfig(actor="qwen2.5-1.5b", placement=colocated_placement(4), algorithm=GRPO, steps=2, batch=4,
                  max_response=1024, train_memory=TrainMemoryConfig(zero_stage=2, recompute="none"))
H200 = get_hardware("h200")


def _ref(report, pool="main"):
    return next(r for r in report.pool(pool).roles if r.role == "reference")


@pytest.mark.parametrize("zero, shards", [(2, 1), (3, 4)])
def test_reference_on_the_training_pool_is_sharded_only_under_zero_3(zero, shards):
    cfg = replace(SMALL, train_memory=replace(SMALL.train_memory, zero_stage=zero))
    ref = _ref(memory_report(cfg))
    w = get_model("qwen2.5-1.5b").weight_bytes()
    assert frozen_shards(cfg, "reference", zero) == shards
    assert ref.weights == pytest.approx(w / shards, rel=1e-12)
    assert ("sharded over 4" in ref.note) == (shards > 1) and ("sharded over 4" in ref.describe()) == (shards > 1)


def test_frozen_models_on_a_pool_of_their_own_stay_full_copies():
    cfg = SimConfig(placement=paper_placement(), train_memory=TrainMemoryConfig(zero_stage=3, recompute="none"))
    report = memory_report(cfg)
    w = get_model("qwen2.5-7b").weight_bytes(scalar_head=True)
    reward = next(r for r in report.pool("score").roles if r.role == "reward")
    assert reward.weights == pytest.approx(w, rel=1e-12) and reward.note == ""
    assert frozen_shards(cfg, "reward", 3) == frozen_shards(cfg, "reference", 3) == 1


def test_each_sharded_forward_pays_the_zero3_parameter_all_gather():
    z3 = replace(SMALL, train_memory=replace(SMALL.train_memory, zero_stage=3))
    pipe = Pipeline(z3, TRACE, make_policy("baseline"))
    cost, w = pipe.cost_of["main"], get_model("qwen2.5-1.5b").weight_bytes()
    op, bw = H200.params.collective, H200.gpu.link_bw
    gather = collective_latency(op, "all-gather", 4) + 3 / 4 * w / (bw * op.eff_memory)  # an all-gather's bus bytes, (n-1)/n
    assert pipe.scorers["reference"].gather_s == pytest.approx(gather, rel=1e-12)
    # the same all-gather ZeRO-3 training adds to each optimizer step (one formula)
    z2_cost = replace(cost, zero_stage=2)
    assert cost.gradient_sync(w, 4) - z2_cost.gradient_sync(w, 4) == pytest.approx(gather, rel=1e-12)
    assert Pipeline(SMALL, TRACE, make_policy("baseline")).scorers["reference"].gather_s == 0.0
    assert frozen_shards(z3, "logprob", 3) == 1  # the trainer's own weights serve log-probs: not a frozen copy


def test_a_sharded_forward_takes_a_micro_batch_per_rank_and_overlaps_its_gather():
    """Each rank forwards up to scorer_max_tokens of its own (FSDP/ZeRO-3 data parallel), and the layer-by-layer
    gather runs beside the compute: a forward's time is the longer of the two, not their sum."""
    z3 = replace(SMALL, train_memory=replace(SMALL.train_memory, zero_stage=3))
    sharded, full = Pipeline(z3, TRACE, make_policy("baseline")), Pipeline(SMALL, TRACE, make_policy("baseline"))
    assert sharded.scorers["reference"].budget == 4 * SMALL.scorer_max_tokens
    assert full.scorers["reference"].budget == 4 * SMALL.scorer_max_tokens  # a full copy per rank: data parallel too
    res = simulate(TRACE, make_policy("baseline"), z3)
    t = res.timeline
    ref = t[(t.role == "reference") & (t.activity == "score")]
    gather = sharded.scorers["reference"].gather_s
    assert len(ref) and ((ref.end - ref.start) >= gather - 1e-9).all()  # no forward is shorter than its gather
    assert ((ref.end - ref.start) < gather + 0.05).all()  # tiny forwards: the gather is the whole of it


def test_30b_moe_on_8_h100_fits_only_by_sharding_the_reference():
    cfg = SimConfig(actor="qwen3-30b-a3b", gpu="h100-sxm", placement=colocated_placement(8),
                    algorithm=Algorithm("grpo", n=4, reward="rule"), steps=3, batch=16)
    report = check_fits(cfg)
    assert report.train.zero_stage == 3
    assert _ref(report).weights == pytest.approx(get_model("qwen3-30b-a3b").weight_bytes() / 8, rel=1e-12)
    with pytest.raises(ConfigError, match=r"reference \(qwen3-30b-a3b, sharded over 8\)"):
        check_fits(replace(cfg, offload_train_state=False))


def test_kv_cache_and_switch_with_and_without_offloading_the_trainer_state():
    """1.5B actor, ZeRO-2 over 4 H200, full reference copy, engine at tp 1, vLLM sleep level 1."""
    m = get_model("qwen2.5-1.5b")
    w, psi = m.weight_bytes(), m.params
    state = 2 * psi + 2 * psi / 4 + 12 * psi / 4  # bf16 weights, sharded grads and Adam
    cap = H200.gpu.mem_bytes * SMALL.engine.gpu_memory_utilization
    to_host, from_host = (PINNED_COPY.rate(d, H200.gpu.host_bw) for d in ("to_host", "from_host"))
    per_byte = 1.0 / to_host + 1.0 / from_host  # each byte leaves and comes back once a step
    engine = engine_memory(m, 1, SMALL.engine.max_num_seqs, SMALL.engine.max_num_batched_tokens).non_kv
    on = check_fits(SMALL)
    with pytest.raises(ConfigError, match="the engine's share .* beside train .*fits with --offload-train-state"):
        check_fits(replace(SMALL, offload_train_state=False))  # vLLM at 0.9 leaves the resident state nothing
    half = replace(SMALL, engine=replace(SMALL.engine, gpu_memory_utilization=0.5))  # verl's default beside a trainer
    off = check_fits(replace(half, offload_train_state=False))
    assert on.pool("main").kv_cache == pytest.approx(cap - engine, rel=1e-12)
    # the engine's share is its own: the state and the reference resident beside it do not shrink its KV cache
    assert off.pool("main").kv_cache == pytest.approx(H200.gpu.mem_bytes * 0.5 - engine, rel=1e-12)
    assert off.pool("main").need(GENERATE) == pytest.approx(H200.gpu.mem_bytes * 0.5 + state + w, rel=1e-12)
    train = [r for r in off.pool("main").roles if r.role == "train"]
    assert [r.phase for r in train] == [ALWAYS, OTHER] and train[1].total == train[1].activations > 0
    assert _ref(off).phase == ALWAYS and _ref(on).phase == OTHER
    sw_on, sw_off = sleep_wake_of(SMALL, on), sleep_wake_of(replace(half, offload_train_state=False), off)
    assert sw_on.state_bytes == pytest.approx(state + w, rel=1e-12)
    assert sw_on.step_s == pytest.approx(4 * SWITCH_FIXED_S + (w + state + w) * per_byte, rel=1e-12)
    assert sw_off.state_bytes == 0.0 and sw_off.engine_bytes == pytest.approx(w, rel=1e-12)
    assert sw_off.step_s == pytest.approx(2 * SWITCH_FIXED_S + w * per_byte, rel=1e-12)  # the engine's legs alone
    res = simulate(TRACE, "baseline", replace(half, offload_train_state=False))
    assert res.steps["sleep_wake_s"].to_list() == pytest.approx([2 * sw_off.switch_s] * SMALL.steps, rel=1e-12)
    assert res.summary["kv_cache_gib"]["main"] == pytest.approx(off.pool("main").kv_cache / 2**30, rel=1e-12)


def test_cli_flag_and_config_check(capsys):
    with pytest.raises(ConfigError, match="offload_train_state must be a bool"):
        replace(SMALL, offload_train_state="no")
    args = ["run", "--actor", "qwen2.5-1.5b", "--placement", "colocated", "--devices", "4", "--algorithm", "grpo",
            "--n", "2", "--reward", "rule", "--steps", "1", "--batch", "4", "--max-response", "1024",
            "--policy", "baseline"]
    main(args)
    on = capsys.readouterr().out
    main(args + ["--no-offload-train-state", "--gpu-memory-utilization", "0.5"])
    off = capsys.readouterr().out
    assert "the engine sleeps" in on and "the engine sleeps" in off and on != off
