"""The optimizer on the host CPU (DeepSpeed ``offload_optimizer`` / OpenRLHF ``--adam_offload``, Megatron's hybrid
optimizer): its Adam state leaves the GPUs (a job the GPUs alone cannot hold fits), its step is timed on the node's
CPU and the host links (by hand), and the frameworks' settings are read and written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from oppo_sim.cli import main
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.placement import colocated_placement
from oppo_sim.engine.request import EngineConfig
from oppo_sim.frameworks.nemo_rl import translate_nemo_rl
from oppo_sim.frameworks.openrlhf import translate_openrlhf
from oppo_sim.frameworks.verl import translate_verl
from oppo_sim.hw.costs.costmodel import CostModel
from oppo_sim.hw.costs.trainer_cost import CPU_ADAM_PARAMS_PER_S, cpu_optimizer_seconds
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.memory_plan import memory_report

from framework_helpers import pairs

FIX = Path(__file__).parent / "fixtures" / "frameworks"
H100 = get_hardware("h100-sxm")
L70 = get_model("llama-3.1-70b")


def _cfg(offload: float, backend: str = "fsdp", **kw) -> SimConfig:
    trainer = TrainerLayout(backend, optimizer_offload=offload, **kw)
    return SimConfig(batch=8, steps=1, gpu="h100-sxm", actor="llama-3.1-70b", placement=colocated_placement(8),
                     trainer=trainer, engine=EngineConfig(tp=8), algorithm=Algorithm(name="grpo", n=4, reward="rule", kl=False),
                     train_memory=TrainMemoryConfig(zero_stage=3, recompute="full"), max_response=1024)


def _train(report):
    return next(r for p in report.pools for r in p.roles if r.role == "train")


@pytest.mark.parametrize("backend, kw", [("fsdp", {}), ("megatron", {"tp": 8})])
def test_the_offloaded_share_of_the_adam_state_leaves_the_gpus(backend, kw):
    gpu, half, cpu = (_train(memory_report(_cfg(f, backend, **kw))) for f in (0.0, 0.5, 1.0))
    assert gpu.optimizer > 0 and cpu.optimizer == 0
    assert half.optimizer == pytest.approx(gpu.optimizer / 2)
    assert cpu.weights == gpu.weights
    # DeepSpeed's ZeRO-Offload and FSDP2's CPU offload move the gradient shards to the host with the Adam state;
    # Megatron's hybrid optimizer keeps its gradient buffers on the GPUs
    assert (cpu.grads, half.grads) == ((0.0, gpu.grads / 2) if backend == "fsdp" else (gpu.grads, gpu.grads))


def test_a_trainer_the_gpus_cannot_hold_fits_with_adam_on_the_cpu():
    # Llama-3.1-70B, ZeRO-3 on 8 H100: 1/8 of the bf16 weights and gradients (16 GiB each) fit in the 72 GiB a GPU
    # gives the trainer; with 1/8 of the fp32 Adam state (98 GiB) they do not
    cfg = _cfg(0.0)
    assert memory_report(cfg).error() is not None
    off = replace(cfg, trainer=TrainerLayout(optimizer_offload=1.0))
    assert memory_report(off).error() is None, memory_report(off).error()


def test_cpu_step_by_hand():
    # ZeRO-3 on 16 GPUs over 2 nodes of 8: a rank holds 1/16 of the parameters; its node's CPU steps 8 ranks' shares
    cost = CostModel(H100, zero_stage=3, cross_node=True, domain=8, host_gpus=8, layout=TrainerLayout(optimizer_offload=1.0))
    rank = L70.params / 16
    want = rank * 8 / CPU_ADAM_PARAMS_PER_S + rank * 4 / H100.gpu.host_bw
    assert cpu_optimizer_seconds(cost, rank, 16) == pytest.approx(want)
    half = replace(cost, layout=TrainerLayout(optimizer_offload=0.5))
    assert cpu_optimizer_seconds(half, rank, 16) == pytest.approx(want / 2)
    assert cpu_optimizer_seconds(replace(cost, layout=TrainerLayout()), rank, 16) == 0.0
    # per optimizer step: an epoch of 4 mini-batches pays it 4 times, less the GPU's Adam traffic it no longer has
    seq = np.full(64, 2048)
    gpu_only = CostModel(H100, zero_stage=3, cross_node=True, domain=8, host_gpus=8).train(L70, 16, seq, 4)
    assert cost.train(L70, 16, seq, 4) == pytest.approx(gpu_only + 4 * want, rel=0.02)


def test_settings_are_read_from_the_frameworks():
    flat = "train_ppo_ray.py --pretrain meta-llama/Llama-2-7b-hf --adam_offload --zero_stage 3"
    dotted = "train_ppo_ray.py --actor.model_name_or_path meta-llama/Llama-2-7b-hf --ds.adam_offload --ds.zero_stage 3"
    for text in (flat, dotted):
        assert pairs(translate_openrlhf(text).args).get("--optimizer-offload") == "1"
    o = "+actor_rollout_ref.actor.optim.override_optimizer_config."
    mega = f"actor_rollout_ref.actor.strategy=megatron {o}optimizer_cpu_offload=True {o}optimizer_offload_fraction=0.5"
    assert pairs(translate_verl(mega).args).get("--optimizer-offload") == "0.5"
    alone = f"actor_rollout_ref.actor.strategy=megatron {o}optimizer_cpu_offload=True"  # Megatron's default fraction: 0
    assert float(pairs(translate_verl(alone).args).get("--optimizer-offload")) == 0.0
    fsdp = translate_verl(f"{o}optimizer_cpu_offload=True data.train_batch_size=8")
    assert "--optimizer-offload" not in pairs(fsdp.args)
    assert any("offload_policy" in i.why for i in fsdp.ignored)
    fsdp2 = translate_verl("actor_rollout_ref.actor.fsdp_config.offload_policy=True data.train_batch_size=8")
    assert pairs(fsdp2.args).get("--optimizer-offload") == "1"
    dpsk = translate_verl(str(FIX / "verl" / "grpo_deepseek671b_math_megatron_96gb.sh"))
    assert pairs(dpsk.args).get("--optimizer-offload") == "1.0"
    recipe = FIX / "nemo_rl" / "recipes" / "llm" / "performance" / "grpo-llama3.1-8b-instruct-2n8g.yaml"
    assert "--optimizer-offload" not in pairs(translate_nemo_rl([str(recipe)]).args)  # Adam on the GPUs


def test_nemo_rl_cpu_optimizer(tmp_path):
    base = FIX / "nemo_rl" / "grpo_math_1B.yaml"
    (tmp_path / "grpo_math_1B.yaml").write_text(base.read_text())
    (tmp_path / "r.yaml").write_text(
        "defaults: grpo_math_1B.yaml\npolicy:\n  dtensor_cfg:\n    enabled: false\n  megatron_cfg:\n    enabled: true\n"
        "    optimizer:\n      optimizer_cpu_offload: true\n      optimizer_offload_fraction: 0.25\n")
    assert pairs(translate_nemo_rl([str(tmp_path / "r.yaml")]).args).get("--optimizer-offload") == "0.25"


def test_a_fraction_outside_0_1_is_one_line(capsys):
    assert main(["run", "--optimizer-offload", "1.5", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optimizer offload" in err[0] and "[0, 1]" in err[0]
