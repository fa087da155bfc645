"""Scoring passes that wait for the previous step (``SimConfig.after_update``): the trainer's own passes (oppo's train
worker computes the old log-probs and values as the first phase of its update), or every pass of a framework's
training loop — under an async schedule they start only once the previous step's update and weight sync are done."""

from __future__ import annotations

import argparse

import pytest

from oppo_sim.cli_scoring import after_update
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import SCORING_ROLES, TRAINER_PASSES, Placement, Pool
from oppo_sim.core.policies import Async, Baseline
from oppo_sim.frameworks.export import Chosen, export
from oppo_sim.frameworks.nemo_rl import translate_nemo_rl
from oppo_sim.frameworks.openrlhf import translate_openrlhf
from oppo_sim.frameworks.verl import translate_verl
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

from framework_helpers import config_of, pairs
from test_nemo_rl_reader import LLM
from test_openrlhf_reader import ASYNC

GRPO = Algorithm("grpo", n=4, reward="rule", kl=True)


def _cfg(**kw) -> SimConfig:
    # generation apart, the reference and the actor's log-probs beside the trainer (as NeMo RL and verl place them)
    # and a trainer slower than generation, so that the next step's batch is ready while the update runs
    pl = Placement((Pool("gen", 6), Pool("train", 2)), generate="gen", reward="train", reference="train",
                   critic="train", logprob="train", train="train")
    return SimConfig(batch=16, steps=5, gpu="h100-sxm", actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", max_response=256,
                     placement=pl, algorithm=GRPO, ppo_epochs=8, **kw)


def _trace():
    return generate_longtail(LongTailSpec(cap=256), 400, seed=5, name="after_update")


def _early_starts(res, roles: tuple[str, ...]) -> int:
    """Score jobs of ``roles`` for step t that start before step t - 1 has ended."""
    ends = dict(zip(res.steps["step"], res.steps["end"]))
    tl = res.timeline
    rows = tl[(tl["activity"] == "score") & tl["role"].isin(roles) & (tl["step"] > 0)]
    return int(sum(r.start < ends[r.step - 1] - 1e-9 for r in rows.itertuples()))


def test_the_default_is_the_train_workers_own_passes_and_roles_are_checked():
    assert SimConfig().after_update == TRAINER_PASSES == ("critic", "logprob")
    assert SimConfig(after_update="critic, reward").after_update == ("reward", "critic")  # SCORING_ROLES order
    assert SimConfig(after_update=()).after_update == ()
    with pytest.raises(ConfigError, match="unknown scoring role.*actor.*known: reward, reference, critic, logprob"):
        SimConfig(after_update=("actor",))
    assert after_update("all") == SCORING_ROLES and after_update("none") == () and after_update("logprob") == ("logprob",)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown scoring role"):
        after_update("ref")


def test_an_async_step_scores_beside_the_update_unless_the_pass_waits_for_it():
    free = simulate(_trace(), Async(), _cfg(after_update=()))
    assert _early_starts(free, ("logprob", "reference")) > 0  # the next step's passes share the GPUs with the update
    loop = simulate(_trace(), Async(), _cfg(after_update=SCORING_ROLES))
    assert _early_starts(loop, ("logprob", "reference")) == 0
    assert loop.summary["in_flight_end"] == 0 and len(loop.steps) == 5  # nothing held back is lost
    # the default holds the trainer's own pass, not the reference
    own = simulate(_trace(), Async(), _cfg())
    assert _early_starts(own, ("logprob",)) == 0 and _early_starts(own, ("reference",)) > 0
    again = simulate(_trace(), Async(), _cfg(after_update=SCORING_ROLES))
    assert again.steps.equals(loop.steps)  # deterministic


def test_a_synchronous_schedule_is_unchanged():
    a = simulate(_trace(), Baseline(), _cfg(after_update=()))
    b = simulate(_trace(), Baseline(), _cfg(after_update=SCORING_ROLES))
    assert a.steps.equals(b.steps)


def test_the_framework_readers_run_every_pass_in_the_loop():
    verl = translate_verl("data.train_batch_size=64")
    nemo = translate_nemo_rl([str(LLM / "grpo-llama3.2-1b-instruct-1n8g-megatron.yaml")])
    openrlhf = translate_openrlhf(ASYNC)
    for t in (verl, nemo, openrlhf):
        assert pairs(t.args)["--after-update"] == "all"
        assert any(u.key == "training loop" and u.default for u in t.used)
    assert config_of(*verl.args).after_update == SCORING_ROLES
    assert config_of(*verl.args, "--after-update", "logprob").after_update == ("logprob",)  # typed wins


def test_an_async_export_says_where_the_plan_differs_from_the_framework_loop():
    cfg = _cfg(after_update=TRAINER_PASSES)
    text = export(cfg, "verl", Chosen("async(k=1)"))
    assert "plan with --after-update all to price it so" in text and "the plan starts reference of a step" in text
    assert "--after-update" not in export(_cfg(after_update=SCORING_ROLES), "verl", Chosen("async(k=1)"))
    assert "--after-update" not in export(cfg, "verl", Chosen("baseline"))


def test_the_loops_passes_on_one_pool_run_one_after_the_other():
    from oppo_sim.core.placement import colocated_placement

    def windows(after):
        cfg = SimConfig(batch=16, steps=2, gpu="h100-sxm", actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", max_response=256,
                        placement=colocated_placement(4), algorithm=GRPO, after_update=after)
        res = simulate(_trace(), Baseline(), cfg)
        tl = res.timeline[(res.timeline["activity"] == "score") & (res.timeline["step"] == 1)
                          & res.timeline["role"].isin(("logprob", "reference"))]
        return {r: (g["start"].min(), g["end"].max()) for r, g in tl.groupby("role")}, res

    apart, res_apart = windows(SCORING_ROLES)  # verl's and NeMo RL's loops: one pass, then the other
    (a0, a1), (b0, b1) = sorted(apart.values())
    assert a1 <= b0 + 1e-9  # one after the other
    side, res_side = windows(("critic",))  # not loop passes: they share the pool side by side
    (c0, c1), (d0, d1) = sorted(side.values())
    assert d0 < c1 - 1e-9
    # the same work either way: the step does not move where both passes were compute-bound together
    assert abs(res_apart.steps["step_time_s"].sum() - res_side.steps["step_time_s"].sum()) < 0.02 * res_side.steps[
        "step_time_s"].sum()
