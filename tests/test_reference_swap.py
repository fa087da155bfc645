"""NeMo RL's reference held in pinned host memory and swapped with the policy's weights for its pass
(``SimConfig.reference_on_host``, ``--reference-on-host``; NeMo RL's ``use_reference_model``): no GPU memory of
its own, one copy to the host and two from it once a step, checked against hand arithmetic; where it may be
set; the NeMo RL reader and the command line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from oppo_sim.cli import build_parser
from oppo_sim.cli_setup import sim_config
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import Placement, Pool, colocated_placement
from oppo_sim.hw.costs.sleepwake import PINNED_COPY, SWITCH_FIXED_S, swap_seconds
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.hw.devices.hardware import GiB, get_hardware
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.memory_plan import memory_report
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.trace import Trace

from framework_helpers import pairs

FIX = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl"
TRACE = Trace.from_arrays([200, 300, 150, 400] * 4, [120, 900, 60, 300] * 4, name="swap")
GRPO = Algorithm("grpo", n=2, reward="rule")  # a reference (KL), no reward model, no critic
MEGATRON = SimConfig(actor="qwen2.5-1.5b", placement=colocated_placement(4), algorithm=GRPO, steps=3, batch=4,
                     gpu="h100-sxm", max_response=1024, trainer=TrainerLayout("megatron", 2, 1),
                     train_memory=TrainMemoryConfig(zero_stage=1, recompute="none"))
ON_HOST = replace(MEGATRON, reference_on_host=True)


def _reference(cfg: SimConfig):
    return next(r for r in memory_report(cfg).pool("main").roles if r.role == "reference")


def test_swap_is_one_copy_to_the_host_and_two_back():
    bw, n = 64e9, 3 * GiB  # PCIe Gen5 x16 each way; a 3 GiB shard
    to_host, from_host = PINNED_COPY.to_host_fraction * bw, PINNED_COPY.from_host_fraction * bw
    expected = (SWITCH_FIXED_S + n / to_host) + 2 * (SWITCH_FIXED_S + n / from_host)
    assert swap_seconds(n, bw) == pytest.approx(expected)
    assert swap_seconds(0.0, bw) == 0.0


def test_the_reference_takes_no_gpu_memory_when_held_on_the_host():
    held = _reference(MEGATRON)
    shard = get_model("qwen2.5-1.5b").weight_bytes() / 2  # megatron tp2: half the weights on each GPU
    assert held.weights == pytest.approx(shard, rel=0.05)
    on_host = _reference(ON_HOST)
    assert on_host.weights == 0.0 and "on the host" in on_host.note
    free = memory_report(ON_HOST).pool("main").headroom - memory_report(MEGATRON).pool("main").headroom
    assert free == pytest.approx(held.weights)


def test_the_swap_is_charged_once_a_step_on_the_reference_pass():
    base, swapped = simulate(TRACE, "baseline", MEGATRON), simulate(TRACE, "baseline", ON_HOST)
    h100 = get_hardware("h100-sxm")
    swap = swap_seconds(_reference(MEGATRON).weights, h100.gpu.host_bw)
    assert swapped.summary["reference_swap_s"] == pytest.approx(swap) and base.summary["reference_swap_s"] == 0.0

    def reference_seconds(res):
        t = res.timeline
        ref = t[(t.role == "reference") & (t.activity == "score")]
        return float((ref.end - ref.start).sum())

    assert reference_seconds(swapped) - reference_seconds(base) == pytest.approx(MEGATRON.steps * swap, rel=1e-6)
    assert swapped.summary["step_time_s"] > base.summary["step_time_s"]


def test_only_a_reference_on_the_training_pool_can_be_swapped_there():
    apart = Placement((Pool("gen", 2), Pool("train", 2), Pool("score", 2)), generate="gen", reward="score",
                      reference="score", critic="train", logprob="train", train="train")
    with pytest.raises(ConfigError, match="reference must run on the training pool"):
        replace(ON_HOST, placement=apart, trainer=TrainerLayout())


def test_nemo_rl_recipes_hold_the_reference_on_the_host():
    name = FIX / "recipes" / "llm" / "performance" / "grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml"
    from oppo_sim.frameworks.nemo_rl import translate_nemo_rl

    got = pairs(translate_nemo_rl([str(name)]).args)
    assert "--reference-on-host" in got and got["--refit-buffers"] == "2"  # NeMo RL's double-buffered refit too
    no_kl = pairs(translate_nemo_rl([str(name), "loss_fn.reference_policy_kl_penalty=0"]).args)
    assert "--no-reference" in no_kl and "--reference-on-host" not in no_kl


def test_the_command_line_flag_sets_it():
    parser = build_parser()
    a = parser.parse_args(["run", "--actor", "qwen2.5-1.5b", "--devices", "4", "--placement", "colocated",
                              "--reference-on-host"])
    assert sim_config(a).reference_on_host
    assert not sim_config(parser.parse_args(["run", "--actor", "qwen2.5-1.5b", "--devices", "4"])).reference_on_host
