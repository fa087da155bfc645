"""The simulator prices what the algorithm computes: no critic forward, training or memory without a
critic, no reference without KL, no reward model with a rule reward; a step trains B x n sequences; the
CLI's algorithm options reach ``SimConfig.algorithm`` and refuse what the algorithm does not use."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oppo_sim.cli import build_parser, main
from oppo_sim.cli_setup import sim_config
from oppo_sim.core.algorithms import DEFAULT_RULE_COST_MS, Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import paper_placement
from oppo_sim.hw.costs.costmodel import CostModel, rule_reward_seconds, train_jobs
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig, state_bytes
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.memory_plan import memory_report

T2 = TrainMemoryConfig(zero_stage=2, recompute="none")
PPO = SimConfig()
GRPO1 = SimConfig(algorithm=Algorithm("grpo", n=1))
SEQS = np.array([1500.0, 900.0, 4000.0, 2200.0])


def _roles(report, pool):
    return {r.role: r for r in report.pool(pool).roles}


def test_trained_models_follow_the_critic():
    assert [r for r, _, _ in PPO.trained()] == ["actor", "critic"]
    assert [r for r, _, _ in GRPO1.trained()] == ["actor"]
    assert PPO.trained()[1][2] is True  # the critic has a scalar head


def test_grpo_n1_training_differs_from_ppo_by_the_critic_job_only():
    cost = CostModel(get_hardware("h200"))
    ppo = train_jobs(cost, PPO.trained(), 7, SEQS, 4, 2)
    grpo = train_jobs(cost, GRPO1.trained(), 7, SEQS, 4, 2)
    assert [j.role for j in ppo] == ["actor", "critic"] and [j.role for j in grpo] == ["actor"]
    assert grpo[0] == ppo[0]  # the actor's seconds, FLOPs and tokens are the same
    critic = PPO.models()["critic"]
    assert ppo[1].seconds == 4 * cost.train(critic, 7, SEQS, 2, scalar_head=True)  # FLOPs, Adam traffic, all-reduce
    assert ppo[1].flops == 4 * cost.train_flops(critic, SEQS, True) > 0
    assert sum(j.seconds for j in ppo) - sum(j.seconds for j in grpo) == pytest.approx(ppo[1].seconds)


def test_memory_without_a_critic_drops_exactly_its_weights_grads_and_adam():
    ppo, grpo = memory_report(PPO, 9216, 8192, T2), memory_report(GRPO1, 9216, 8192, T2)
    tp, tg = _roles(ppo, "main")["train"], _roles(grpo, "main")["train"]
    crit = state_bytes(PPO.models()["critic"].params_scalar_head, 7, 2)
    assert tp.weights - tg.weights == pytest.approx(crit.weights)
    assert tp.grads - tg.grads == pytest.approx(crit.grads)
    assert tp.optimizer - tg.optimizer == pytest.approx(crit.optimizer)
    assert tg.activations <= tp.activations  # the critic's scalar head stores less than the actor's logits
    assert "critic" not in tg.label and "critic" in tp.label
    assert grpo.pool("main").headroom > ppo.pool("main").headroom


def test_frozen_weights_follow_reward_and_kl():
    # paper placement: the "score" GPU holds the reward model and the reference
    assert set(_roles(memory_report(PPO, 9216, 8192, T2), "score")) == {"reward", "reference"}
    rule = SimConfig(algorithm=Algorithm("grpo", n=4, reward="rule"))
    assert set(_roles(memory_report(rule, 9216, 8192, T2), "score")) == {"reference"}
    none = SimConfig(algorithm=Algorithm("grpo", n=4, reward="rule", kl=False))
    assert set(_roles(memory_report(none, 9216, 8192, T2), "score")) == set()
    assert none.scoring_roles() == ("logprob",)


def test_a_step_trains_b_times_n_sequences_and_minibatches_split_them():
    cfg = SimConfig(batch=4, algorithm=Algorithm("grpo", n=8), minibatches=32)
    assert cfg.sequences == 32
    with pytest.raises(ConfigError, match=r"batch x n = 32"):
        SimConfig(batch=4, algorithm=Algorithm("grpo", n=8), minibatches=33)
    with pytest.raises(ConfigError, match="minibatches"):
        SimConfig(batch=4, minibatches=5)  # ppo, n=1: unchanged rule


def test_rule_reward_seconds():
    assert DEFAULT_RULE_COST_MS == 5.0
    assert rule_reward_seconds(64, 5.0) == pytest.approx(0.32)
    assert rule_reward_seconds(65, 5.0, workers=8) == pytest.approx(9 * 0.005)  # whole calls per worker
    assert rule_reward_seconds(0, 5.0) == 0.0
    with pytest.raises(ConfigError):
        rule_reward_seconds(3, -1.0)


# -- the CLI -------------------------------------------------------------------------------------------


def _cfg(*args: str) -> SimConfig:
    return sim_config(build_parser().parse_args(["run", *args]))


@pytest.mark.parametrize("args, want", [
    ([], Algorithm()),
    (["--algorithm", "grpo", "--n", "8"], Algorithm("grpo", n=8)),
    (["--algorithm", "reinforce_plus_plus_baseline", "--n", "4"], Algorithm("reinforce++", n=4)),
    (["--algorithm", "gae"], Algorithm("ppo")),
    (["--algorithm", "rloo", "--n", "4", "--reward", "rule"], Algorithm("rloo", n=4, reward="rule")),
    (["--algorithm", "grpo", "--n", "2", "--reward", "rule", "--reward-cost-ms", "250"],
     Algorithm("grpo", n=2, reward="rule", reward_cost_ms=250.0)),
    (["--algorithm", "grpo", "--n", "2", "--no-reference"], Algorithm("grpo", n=2, kl=False)),
    (["--algorithm", "dapo", "--n", "8", "--informative", "0.6"], Algorithm("dapo", n=8, informative=0.6)),
])
def test_algorithm_flags_reach_the_config(args, want):
    assert _cfg(*args).algorithm == want


def test_reward_model_or_rule():
    assert _cfg("--reward", "qwen2.5-0.5b").models()["reward"].id == "qwen2.5-0.5b"
    rule = _cfg("--reward", "rule")
    assert rule.algorithm.reward == "rule" and rule.reward == SimConfig.reward  # the model field keeps its default
    assert dataclasses.replace(rule, algorithm=Algorithm()).algorithm.reward == "model"


@pytest.mark.parametrize("args, msg", [
    (["--reward-cost-ms", "10"], "--reward-cost-ms is the CPU cost of a rule reward"),
    (["--algorithm", "ppo", "--informative", "0.5"], "informative applies to dapo only"),
    (["--algorithm", "dapo", "--n", "1"], "dapo"),
    (["--algorithm", "a2c"], "unknown algorithm 'a2c'"),
    (["--algorithm", "grpo", "--n", "8", "--informative", "1.5"], "informative"),
])
def test_algorithm_flags_not_used_or_invalid_are_one_line_errors(capsys, args, msg):
    code = main(["run", "--steps", "1", "--batch", "4", "--actor", "qwen2.5-0.5b", *args])
    err = capsys.readouterr().err
    assert code == 2 and msg in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_plan_takes_the_algorithm():
    from oppo_sim.plan_cli import _request

    req = _request(build_parser().parse_args(
        ["plan", "--algorithm", "grpo", "--n", "4", "--reward", "rule", "--gpus", "4xh100-sxm", "--layouts", "shared"]))
    assert req.base.algorithm == Algorithm("grpo", n=4, reward="rule")


def test_batch_help_says_prompts():
    run = {a.dest: a for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions}
    assert "prompts per step" in run["batch"].help
    assert "rollout.n" in run["n"].help and "n_samples_per_prompt" in run["n"].help
    assert "gae" in run["algorithm"].help and "reinforce_plus_plus_baseline" in run["algorithm"].help


def test_paper_placement_keeps_its_score_pool_valid_without_scorers():
    cfg = SimConfig(placement=paper_placement(8), algorithm=Algorithm("grpo", n=4, reward="rule", kl=False))
    assert cfg.models()["reward"].id == "qwen2.5-7b"  # every placed role still resolves


def test_a_group_forward_computes_its_prompt_once():
    cost, m = CostModel(get_hardware("h200")), PPO.models()["reference"]
    prompt, resp = 1000, [300, 800, 50, 1200]
    shared_s, shared_f = cost.group_prefill_cost(m, 1, prompt, resp)
    alone_s, alone_f = cost.prefill_cost(m, 1, [prompt + r for r in resp], [0] * len(resp))
    lin, _ = m.flop_coeffs(False)
    assert alone_f - shared_f > lin * prompt * (len(resp) - 1) * 0.99  # n-1 prompts' linear FLOPs saved, at least
    assert shared_s < alone_s
    assert cost.group_prefill_cost(m, 1, prompt, [300]) == cost.prefill_cost(m, 1, [prompt, 300], [0, prompt])


def test_compare_with_grpo_prints_the_algorithm_and_the_policy_table(capsys):
    code = main(["compare", "--algorithm", "grpo", "--n", "8", "--reward", "rule", "--batch", "2", "--steps", "2",
                 "--actor", "qwen2.5-0.5b", "--policies", "baseline,oppo"])
    out = capsys.readouterr().out
    assert code == 0
    assert "B=2 prompts x n=8" in out and "algorithm grpo n=8 rule reward" in out
    assert "baseline" in out and "oppo" in out and "speedup" in out
