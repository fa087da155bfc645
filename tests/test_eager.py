"""vLLM's eager mode (``enforce_eager``): the ops a step issues, counted by hand from the architecture; a step
costs the larger of the host's issue time and the GPU's; closed-form spans equal step-by-step sums across the
point where the host stops being the slower; the frameworks' settings read and written; a profile prices no
extra host time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.request import EngineConfig
from oppo_sim.frameworks.nemo_rl import translate_nemo_rl
from oppo_sim.frameworks.openrlhf import translate_openrlhf
from oppo_sim.frameworks.verl import translate_verl
from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.costs.eager import EAGER_HOST_OP_S, eager_host_seconds, eager_ops_per_step
from oppo_sim.hw.costs.op_cost import hardware_for
from oppo_sim.hw.costs.spans import sum_max_lines_floor
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

from framework_helpers import config_of, pairs

FIX = Path(__file__).parent / "fixtures" / "frameworks"
H20 = get_hardware("h20")


@pytest.mark.parametrize("model, tp, ops", [
    # 30 per step; a GQA layer 7 (attention) + 4 (MLP); no all-reduce at tp 1
    ("llama-3.1-8b", 1, 30 + 32 * (7 + 4)),
    # Qwen3 MoE: attention 7 + q/k norms 4, the MoE block 11, two all-reduces a layer at tp 4
    ("qwen3-30b-a3b", 4, 30 + 48 * (7 + 4) + 48 * 11 + 48 * 2),
    # DeepSeek-V3: MLA 31 a layer; 3 dense layers (MLP 4), 58 MoE (11 + grouped top-k 2 + shared experts 3)
    ("deepseek-v3", 32, 30 + 61 * 31 + 3 * 4 + 58 * (11 + 2 + 3) + 61 * 2),
])
def test_ops_per_step_by_hand(model, tp, ops):
    assert eager_ops_per_step(get_model(model), tp) == ops
    assert eager_host_seconds(get_model(model), tp) == pytest.approx(ops * EAGER_HOST_OP_S)


@pytest.mark.parametrize("model, tp, ops", [
    # vLLM 0.8.5: no zero fill (attention 6); Qwen3's q/k norms native (16); the MoE alignment's fill and zeros (13)
    ("llama-3.1-8b", 1, 30 + 32 * (6 + 4)),
    ("qwen3-30b-a3b", 4, 30 + 48 * (6 + 16) + 48 * 13 + 48 * 2),
    # DeepSeek-V3: MLA 32; grouped top-k compiled by Inductor (7)
    ("deepseek-v3", 32, 30 + 61 * 32 + 3 * 4 + 58 * (13 + 7 + 3) + 61 * 2),
])
def test_ops_per_step_of_vllm_0_8_5_by_hand(model, tp, ops):
    assert eager_ops_per_step(get_model(model), tp, "0.8.5") == ops


def test_the_vllm_release_reaches_the_engine_and_an_unknown_one_is_refused(capsys):
    trace = generate_longtail(LongTailSpec(cap=2048), 32, seed=2)
    base = SimConfig(batch=8, steps=1, gpu="h100-sxm", actor="qwen3-8b", reward="qwen3-8b")
    gen = {v: simulate(trace, "baseline", replace(base, engine=EngineConfig(enforce_eager=True, vllm_version=v)))
           .steps["generation_s"].sum() for v in ("0.11.0", "0.8.5")}
    assert gen["0.8.5"] > gen["0.11.0"]  # Qwen3's native q/k norms: 1,038 ops a step against 642
    with pytest.raises(ConfigError, match="engine vllm_version must be one of 0.11.0, 0.8.5"):
        EngineConfig(vllm_version="0.9")
    with pytest.raises(SystemExit):  # argparse's choices
        main(["run", "--steps", "1", "--batch", "8", "--vllm-version", "0.9"])
    assert "--vllm-version" in capsys.readouterr().err
    assert main(["run", "--engine", "static", "--vllm-version", "0.8.5", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--vllm-version" in err[0] and "continuous" in err[0]


@given(st.floats(0, 5), st.floats(0, 0.1), st.floats(0, 5), st.floats(0, 0.1), st.floats(-1, 8), st.integers(0, 300))
def test_sum_over_a_floor_closed_form(a1, s1, a2, s2, floor, n):
    brute = sum(max(floor, a1 + s1 * i, a2 + s2 * i) for i in range(n))
    assert sum_max_lines_floor(a1, s1, a2, s2, floor, n) == pytest.approx(brute, rel=1e-9, abs=1e-9)


def test_a_step_costs_the_larger_of_host_and_gpu():
    moe = get_model("qwen3-30b-a3b")
    graphs, eager = CostModel(H20).decode(moe, 4), CostModel(H20).decode(moe, 4, host_op_s=EAGER_HOST_OP_S)
    ovh = H20.params.decode.overhead_s
    host = eager_host_seconds(moe, 4)
    # one sequence: the GPU's part is shorter than the host's issue time, so the step is the host's
    assert graphs.iteration(1, 1000) - ovh < host
    assert eager.iteration(1, 1000) == pytest.approx(ovh + host)
    # a full batch over long contexts: the GPU is the slower, and eager costs nothing more
    assert graphs.iteration(1024, 1024 * 4000) - ovh > host
    assert eager.iteration(1024, 1024 * 4000) == pytest.approx(graphs.iteration(1024, 1024 * 4000))


@pytest.mark.parametrize("op_costs", ["roofline", "tables"])
@given(b=st.integers(1, 256), kv0=st.integers(0, 400_000), m=st.integers(1, 3000))
def test_eager_span_equals_iteration_sum(op_costs, b, kv0, m):
    hw = hardware_for("h100-sxm", op_costs)
    dc = CostModel(hw).decode(get_model("qwen3-30b-a3b"), 2, host_op_s=EAGER_HOST_OP_S)
    brute = sum(dc.iteration(b, kv0 + i * b) for i in range(m))
    assert dc.span(b, kv0, m) == pytest.approx(brute, rel=1e-9)
    k = dc.iters_within(b, kv0, dc.span(b, kv0, m // 2), m)
    assert dc.span(b, kv0, k) <= dc.span(b, kv0, m // 2) + 1e-12


def test_generation_is_slower_eager_and_a_profile_prices_no_host_time(tmp_path):
    trace = generate_longtail(LongTailSpec(cap=4096), 64, seed=1)
    base = SimConfig(batch=8, steps=2, gpu="h100-sxm", actor="qwen2.5-0.5b", reward="qwen2.5-0.5b")
    eager = replace(base, engine=EngineConfig(enforce_eager=True))
    free = replace(eager, eager_host_op_s=0.0)  # what a profile sets: its fitted decode holds the host's time
    gen = {k: simulate(trace, "baseline", c).steps["generation_s"].sum() for k, c in
           (("graphs", base), ("eager", eager), ("free", free))}
    assert gen["eager"] > gen["graphs"] and gen["free"] == gen["graphs"]


def test_static_engine_refuses_enforce_eager(capsys):
    assert main(["run", "--engine", "static", "--enforce-eager", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--enforce-eager" in err[0] and "continuous" in err[0]


def test_frameworks_settings_are_read():
    assert pairs(translate_verl("actor_rollout_ref.rollout.enforce_eager=True").args).get("--enforce-eager", 0) is None
    assert "--no-enforce-eager" in pairs(translate_verl("data.train_batch_size=8").args)  # verl >= 0.6's default
    assert "--enforce-eager" in pairs(translate_openrlhf(str(FIX / "openrlhf" / "train_ppo_ray_hybrid_engine.sh")).args)
    assert "--enforce-eager" in pairs(translate_openrlhf(str(FIX / "openrlhf" / "train_ppo_ray_hybrid_engine_flat.sh")).args)
    qwen3 = FIX / "nemo_rl" / "recipes" / "llm" / "grpo-math-qwen3-30ba3b-megatron-tp4-32k.yaml"
    assert "--enforce-eager" in pairs(translate_nemo_rl([str(qwen3)]).args)
    assert "--enforce-eager" not in pairs(translate_nemo_rl([str(FIX / "nemo_rl" / "grpo_math_1B.yaml")]).args)
    cfg = config_of("--from-verl", "actor_rollout_ref.rollout.enforce_eager=True data.train_batch_size=8")
    assert cfg.engine.enforce_eager


def test_a_profile_given_to_run_prices_no_eager_host_time(tmp_path):
    from oppo_sim.cli import build_parser
    from oppo_sim.cli_setup import sim_config
    from oppo_sim.hw.fitting.profiles import resolve_hardware, save_profile

    path = tmp_path / "p.json"
    save_profile(resolve_hardware("h200"), path)
    parse = build_parser().parse_args
    assert sim_config(parse(["run", "--enforce-eager", "--profile", str(path)])).eager_host_op_s == 0.0
    cfg = sim_config(parse(["run", "--enforce-eager"]))
    assert cfg.engine.enforce_eager and cfg.eager_host_op_s is None and cfg.host_op_s(cfg.placement.generate) == EAGER_HOST_OP_S
    fitted = tmp_path / "fitted.json"  # check --calibrate fitted it on an eager run with the host's floor: kept
    save_profile(resolve_hardware("h200"), fitted, meta={"eager_host_op_s": 7e-6})
    assert sim_config(parse(["run", "--enforce-eager", "--gpu", str(fitted)])).eager_host_op_s == 7e-6
    from oppo_sim.cli import _profile_eager

    assert _profile_eager(str(fitted)) == {"eager_host_op_s": 7e-6} and _profile_eager(str(path)) == {"eager_host_op_s": 0.0}
    assert _profile_eager("h200") == {}


def test_eager_engine_keeps_no_cuda_graph_memory():
    from oppo_sim.engine.request import kv_blocks_for
    from oppo_sim.hw.memory.engine_memory import engine_memory

    m = get_model("qwen2.5-7b")
    graphs, eager = engine_memory(m, 2, 256, 8192), engine_memory(m, 2, 256, 8192, enforce_eager=True)
    assert graphs.cuda_graphs > 0 and eager.cuda_graphs == 0
    assert eager.non_kv == pytest.approx(graphs.non_kv - graphs.cuda_graphs)
    mem = H20.gpu.mem_bytes
    assert kv_blocks_for(m, mem, EngineConfig(tp=2, enforce_eager=True), "h20") > kv_blocks_for(m, mem, EngineConfig(tp=2), "h20")


def test_python_config_refuses_eager_on_the_static_engine_and_openrlhf_without_vllm_ignores_it():
    from oppo_sim.core.errors import ConfigError

    with pytest.raises(ConfigError, match="continuous engine"):
        SimConfig(engine=EngineConfig(enforce_eager=True), engine_kind="static")
    static = translate_openrlhf("train_ppo_ray.py --pretrain meta-llama/Llama-2-7b-hf --enforce_eager")
    assert "--enforce-eager" not in pairs(static.args)
    assert any("no vLLM engines" in u.note for u in static.used)
