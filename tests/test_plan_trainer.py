"""The planner searches a Megatron trainer's tensor and pipeline parallelism (explore/space.py); an FSDP
trainer's space is unchanged."""

from __future__ import annotations

from dataclasses import replace

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.explore.plan_search import _Space
from oppo_sim.explore.space import PlacementSpec, space_for
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.pipeline.config import SimConfig

BASE = SimConfig(actor="qwen2.5-7b", reward="qwen2.5-7b", gpu="h100-sxm", algorithm=Algorithm("grpo", n=4, reward="rule"))


def test_fsdp_space_is_unchanged_by_the_trainer_dimension():
    space = space_for(BASE, 8, layouts=("colocated", "gen-apart"), policies=("baseline",))
    assert {p.trainer for p in space.placements()} == {TrainerLayout()}
    assert len(space) == len([p for p in space.placements()])


def test_megatron_space_tries_tp_and_pp_that_fit_the_training_gpus():
    from oppo_sim.core.placement import colocated_placement
    base = replace(BASE, placement=colocated_placement(8), trainer=TrainerLayout("megatron", tp=2))
    space = space_for(base, 8, layouts=("colocated", "gen-apart"), policies=("baseline",))
    colocated = {(p.trainer.tp, p.trainer.pp) for p in space.placements() if p.layout == "colocated" and p.tp == 1}
    # 28 layers: pp 1, 2, 4 divide them; qwen2.5-7b's 28 heads / 4 KV heads: tp 1, 2, 4 (not 8)
    assert colocated == {(tp, pp) for tp in (1, 2, 4) for pp in (1, 2, 4) if tp * pp <= 8}
    three = {(p.trainer.tp, p.trainer.pp) for p in space.placements() if p.label() == "gen-apart 5+3"}
    assert three == {(1, 1)}  # 3 training GPUs: only tp = pp = 1 divides them
    c = next(c for c in space.candidates() if c.placement.trainer.tp == 4 and c.placement.layout == "colocated")
    assert c.config(base).trainer == c.placement.trainer
    assert "megatron tp4" in c.label()
    keys = {_Space.placement_key(p) for p in space.placements()}
    assert len(keys) == len(space.placements())  # each layout its own Optuna choice


def test_placement_spec_refuses_a_trainer_that_does_not_divide_its_gpus():
    import pytest
    from oppo_sim.core.errors import ConfigError
    with pytest.raises(ConfigError):
        PlacementSpec("colocated", 6, 6, 0, 1, 1, TrainerLayout("megatron", tp=4))
