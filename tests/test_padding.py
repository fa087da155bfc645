"""Passes on padding (oppo_sim.pipeline.padding): a padded role computes rows of max_prompt + max_response tokens,
as verl runs a model without use_remove_padding; the verl reader sets it from each model's switch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import colocated_placement
from oppo_sim.frameworks.export import export
from oppo_sim.frameworks.verl import translate_verl
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.memory_plan import lengths
from oppo_sim.pipeline.padding import check_padded_roles, micro_widths, pass_tokens
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.trace import Trace

from framework_helpers import pairs

TRACE = Trace.from_arrays([100] * 64, [50, 80, 120, 400] * 16, name="pad")
BASE = SimConfig(steps=2, batch=16, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu="h100-sxm",
                 placement=colocated_placement(2), max_response=512, max_prompt=256, ppo_epochs=2)
WIDTH = 256 + 512


def _tokens(res) -> dict[tuple[str, str], int]:
    return res.timeline.groupby(["activity", "role"])["tokens"].sum().to_dict()


def test_roles_are_checked_and_kept_in_a_fixed_order():
    assert check_padded_roles("reward, critic") == ("critic", "reward")
    assert check_padded_roles(["actor"]) == ("actor",)
    with pytest.raises(ConfigError, match="unknown role 'values'; known: actor, reference, critic, reward"):
        check_padded_roles("critic,values")
    with pytest.raises(ConfigError) as e:  # the default prompt cap stands for none: padding to it would be nonsense
        SimConfig(padded_roles=("critic",))
    assert "\n" not in str(e.value) and "--max-prompt" in str(e.value)


def test_a_pass_is_padded_to_the_caps_to_the_batch_or_not_at_all():
    prompts, responses = np.array([10, 30]), np.array([5, 100])
    assert pass_tokens(BASE, "critic", prompts, responses).tolist() == [15, 130]
    padded = replace(BASE, padded_roles=("actor", "critic"))
    assert pass_tokens(padded, "critic", prompts, responses).tolist() == [WIDTH, WIDTH]
    assert pass_tokens(padded, "logprob", prompts, responses).tolist() == [WIDTH, WIDTH]  # the actor's log-probs
    assert pass_tokens(padded, "reward", prompts, responses).tolist() == [15, 130]
    assert pass_tokens(replace(BASE, padded_batches=True), "reward", prompts, responses).tolist() == [130, 130]
    no_cap = replace(BASE, max_prompt=None, padded_roles=("critic",))  # no prompt cap: the batch's longest prompt
    assert pass_tokens(no_cap, "critic", prompts, responses).tolist() == [30 + 512] * 2


def test_a_padded_critic_scores_and_trains_rows_of_the_padded_width_and_the_rest_does_not_move():
    plain = simulate(TRACE, "baseline", BASE)
    padded = simulate(TRACE, "baseline", replace(BASE, padded_roles=("critic",)))
    rows = BASE.batch * BASE.algorithm.n * BASE.steps
    a, b = _tokens(plain), _tokens(padded)
    assert b[("score", "critic")] == rows * WIDTH and a[("score", "critic")] < rows * WIDTH
    assert b[("train", "critic")] == BASE.ppo_epochs * rows * WIDTH
    for unmoved in (("score", "reward"), ("score", "logprob"), ("train", "actor"), ("generate", "generate")):
        assert b[unmoved] == a[unmoved]
    assert padded.summary["step_time_s"] > plain.summary["step_time_s"]


def test_a_padded_role_shares_no_group_prompt():
    """GRPO's n responses share a prompt a scorer prefills once; a padded row is computed whole, prompt included."""
    grpo = replace(BASE, batch=4, algorithm=replace(BASE.algorithm, name="grpo", n=4, reward="rule", kl=True))
    rows = grpo.batch * grpo.algorithm.n * grpo.steps
    shared = _tokens(simulate(TRACE, "baseline", grpo))[("score", "reference")]
    padded = _tokens(simulate(TRACE, "baseline", replace(grpo, padded_roles=("reference",))))[("score", "reference")]
    assert shared < rows * (100 + 512) and padded == rows * WIDTH


def test_the_memory_plan_takes_the_padded_width_as_the_longest_sequence():
    assert lengths(BASE, 300, 200) == (300, 200)
    assert lengths(replace(BASE, padded_roles=("critic",)), 300, 200) == (WIDTH, 512)


def test_the_option_reaches_the_run(capsys, tmp_path):
    out = tmp_path / "run.json"
    assert main(["run", "--steps", "2", "--max-prompt", "1024", "--padded-roles", "critic,reward", "--json", str(out)]) == 0
    with pytest.raises(SystemExit):
        main(["run", "--steps", "2", "--max-prompt", "1024", "--padded-roles", "values"])
    assert "unknown role 'values'" in capsys.readouterr().err


@pytest.mark.parametrize("overrides, roles", [
    ("algorithm.adv_estimator=gae", "critic"),  # v0.7.0: the critic keeps its padding by default
    ("algorithm.adv_estimator=gae critic.model.use_remove_padding=True", None),
    ("algorithm.adv_estimator=grpo", None),  # no critic; the actor removes padding by default
    ("algorithm.adv_estimator=grpo actor_rollout_ref.model.use_remove_padding=False", "actor,reference"),
    ("algorithm.adv_estimator=grpo reward_model.enable=True reward_model.model.path=/x/Qwen2.5-7B-RM", "reward"),
    ("algorithm.adv_estimator=gae actor_rollout_ref.actor.strategy=megatron", None),  # Megatron's switches: on
    ("algorithm.adv_estimator=gae actor_rollout_ref.actor.strategy=megatron "
     "actor_rollout_ref.actor.megatron.use_remove_padding=False reward_model.enable=True "
     "reward_model.model.path=/x/Qwen2.5-7B-RM", "actor,reference,reward"),  # the reward model follows the actor
])
def test_verl_use_remove_padding_becomes_the_padded_roles(overrides, roles):
    got = pairs(translate_verl(overrides).args)
    assert got.get("--padded-roles") == roles


def test_a_verl_export_writes_every_models_switch_and_reads_back_to_the_same_roles():
    for roles in ((), ("critic",), ("actor", "reference", "reward")):
        cfg = replace(BASE, max_prompt=1024, padded_roles=roles)
        lines = [line for line in export(cfg, "verl").splitlines() if line and not line.startswith("#")]
        assert sum("use_remove_padding" in line for line in lines) == 3  # actor, critic, reward model (PPO)
        got = pairs(translate_verl(" ".join(lines)).args)
        assert got.get("--padded-roles") == (",".join(roles) or None)


def test_micro_batches_pad_to_their_own_longest():
    assert micro_widths(np.array([1, 5, 2, 3, 9, 1, 4]), 3).tolist() == [5, 5, 5, 9, 9, 9, 4]
    assert micro_widths(np.array([3, 1]), 1).tolist() == [3, 1]  # one sequence a micro-batch: nothing to pad
    # cut in admission order, whatever order the batch finished in: ids 0,1 and 2,3 share micro-batches
    assert micro_widths(np.array([9, 1, 2, 3]), 2, ids=np.array([2, 0, 3, 1])).tolist() == [9, 3, 9, 3]
    cfg = replace(BASE, padded_micro_batches=True, train_memory=replace(BASE.train_memory, micro_batch_size=2))
    prompts, responses = np.array([10, 30, 20, 5]), np.array([5, 100, 50, 60])
    assert pass_tokens(cfg, "actor", prompts, responses, micro=2).tolist() == [130, 130, 70, 70]  # an update: longest sequence
    assert pass_tokens(replace(cfg, padded_micro_batches=False), "actor", prompts, responses).tolist() == [15, 130, 70, 65]


def test_padded_micro_batches_cost_the_updates_and_forwards_their_padding():
    micro = replace(BASE.train_memory, micro_batch_size=4, logprob_micro_batch_size=8)
    plain = simulate(TRACE, "baseline", replace(BASE, train_memory=micro))
    padded = simulate(TRACE, "baseline", replace(BASE, train_memory=micro, padded_micro_batches=True))
    a, b = _tokens(plain), _tokens(padded)
    for role in ("actor", "critic"):
        assert b[("train", role)] > a[("train", role)]
    for role in ("logprob", "reward", "critic"):  # the experience forwards, micro-batches of 8
        assert b[("score", role)] > a[("score", role)]
    assert b[("generate", "generate")] == a[("generate", "generate")]


@pytest.mark.parametrize("flags, padded", [
    ("--micro_train_batch_size 4", True),  # OpenRLHF's default: no packing, each micro-batch padded
    ("--micro_train_batch_size 4 --packing_samples", False),
    ("--micro_train_batch_size 4 --ring_attn_size 2", False),  # ring attention turns packing on
])
def test_openrlhf_packing_decides_the_micro_batch_padding(flags, padded):
    from oppo_sim.frameworks.openrlhf import translate_openrlhf
    args = translate_openrlhf(f"--pretrain meta-llama/Llama-2-7b-hf --rollout_batch_size 64 {flags}").args
    assert ("--padded-micro-batches" in args) == padded


def test_an_openrlhf_export_packs_unless_the_plan_padded_its_micro_batches():
    from oppo_sim.frameworks.openrlhf import translate_openrlhf
    for padded in (False, True):
        cfg = replace(BASE, padded_micro_batches=padded, train_memory=replace(BASE.train_memory, micro_batch_size=4))
        text = export(cfg, "openrlhf")
        assert ("--ds.packing_samples" in text) != padded
        assert ("--padded-micro-batches" in translate_openrlhf(text).args) == padded
