"""The RL algorithm setting: names (verl/OpenRLHF aliases too), what each needs, bad values one line."""

from __future__ import annotations

import pytest

from oppo_sim.core.algorithms import ALGORITHM_NAMES, Algorithm
from oppo_sim.core.errors import ConfigError


def test_ppo_is_the_default_and_needs_every_scorer():
    a = Algorithm()
    assert a.name == "ppo" and a.critic and not a.grouped and a.group_size == 1
    assert a.scoring_roles() == ("reward", "reference", "critic", "logprob")


@pytest.mark.parametrize("name", [n for n in ALGORITHM_NAMES if n != "ppo"])
def test_critic_free_algorithms_group_their_samples(name):
    a = Algorithm(name, n=8)
    assert not a.critic and a.grouped and a.group_size == 8
    assert [a.group_of(s) for s in (0, 7, 8, 15, 16)] == [0, 0, 1, 1, 2]
    assert "critic" not in a.scoring_roles()


def test_rule_reward_and_no_reference_leave_only_the_actors_logprobs():
    a = Algorithm("grpo", n=4, reward="rule", kl=False)
    assert a.scoring_roles() == ("logprob",) and a.label() == "grpo n=4 rule reward no KL"


def test_framework_names_are_accepted():
    assert Algorithm("gae").name == "ppo"
    assert Algorithm("reinforce_plus_plus_baseline", n=4).name == "reinforce++"
    assert Algorithm(" GRPO ", n=2).name == "grpo"


@pytest.mark.parametrize("kw,msg", [
    (dict(name="ppo2"), "unknown algorithm 'ppo2'"),
    (dict(name="grpo", n=0), "n (responses per prompt) must be >= 1"),
    (dict(name="dapo", n=1), "dapo drops groups"),
    (dict(reward="verifier"), "reward must be one of model, rule"),
    (dict(reward_cost_ms=-1), "reward_cost_ms must be >= 0"),
    (dict(name="dapo", n=4, informative=0), "must be in (0, 1]"),
    (dict(name="grpo", n=4, informative=0.5), "informative applies to dapo only"),
])
def test_bad_settings_are_one_line(kw, msg):
    with pytest.raises(ConfigError) as e:
        Algorithm(**kw)
    assert msg in str(e.value) and "\n" not in str(e.value)
