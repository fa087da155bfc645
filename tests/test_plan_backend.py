"""The planner searches the trainer's backend and layout (explore/trainer_space.py, explore/trainer_rank.py):
Megatron TP where FSDP's state does not fit and a TP layout does (by hand), FSDP for a small model where it
is cheaper, layouts that do not fit counted and never simulated, the backend pinned when asked, the same
plan from the same inputs, CP raised only where sequences need it, and --export carrying the layout the
planner picked back through the framework's reader."""

from __future__ import annotations

from dataclasses import replace

import pytest

from oppo_sim.cli import main
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import paper_placement
from oppo_sim.explore.plan import PlanRequest, run_plan
from oppo_sim.explore.space import Candidate, PlacementSpec, PolicySpec, space_for
from oppo_sim.explore.trainer_rank import fitted, phase_seconds, representative_batch
from oppo_sim.frameworks.export import export_best
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits
from oppo_sim.pipeline.memory_plan import longest
from oppo_sim.traces.catalog import load_trace
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

from framework_helpers import config_of

GIB = 2 ** 30
BOTH = ("fsdp", "megatron")


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("traces") / "backend_small.csv"
    generate_longtail(LongTailSpec(cap=256), 200, seed=5, name="backend_small").to_frame().to_csv(path, index=False)
    return str(path)


def base(actor: str, **kw) -> SimConfig:
    return SimConfig(**{"batch": 4, "steps": 2, "gpu": "h100-sxm", "actor": actor, "max_response": 256,
                        "placement": paper_placement(4), "algorithm": Algorithm("grpo", n=2, reward="rule", kl=False), **kw})


# Qwen2.5-14B with the ZeRO stage pinned to 1 (OpenRLHF's --zero_stage 1) on one pool of 4 H100s: FSDP/ZeRO-1
# keeps 2 + 2 bytes of weights and gradients per parameter and 12 / 4 of Adam, 7 bytes; Megatron without
# pipeline parallelism keeps (2 + 4) / tp of weights and fp32 gradients and 12 / 4 of Adam (the distributed
# optimizer over tp x dp = 4 ranks): 9 at tp1, 6 at tp2, 4.5 at tp4. 14.8e9 parameters: 96, 124, 83 and
# 62 GiB, and 71.7 GiB is usable (79.6 x 0.9): only tp4 fits.
BIG = dict(actor="qwen2.5-14b", train_memory=TrainMemoryConfig(zero_stage=1))


def big_space(b: SimConfig, **kw):
    return space_for(b, 4, **{"only": ("colocated 4",), "policies": ("baseline",), "backends": BOTH,
                              "train_tps": (1, 2, 4), "pps": (1,), "tps": (4,), **kw})


def test_the_hand_computed_bytes_say_only_tp4_fits():
    params = get_model("qwen2.5-14b").params
    per_param = {"fsdp zero-1": 2 + 2 + 12 / 4, "megatron tp1": 6 + 12 / 4, "megatron tp2": 6 / 2 + 12 / 4,
                 "megatron tp4": 6 / 4 + 12 / 4}
    usable = 79.6 * 0.9
    assert {k: v * params / GIB > usable for k, v in per_param.items()} == {
        "fsdp zero-1": True, "megatron tp1": True, "megatron tp2": True, "megatron tp4": False}


def test_megatron_tp_is_picked_where_fsdp_state_does_not_fit(trace_path):
    b = base(**BIG)
    res = run_plan(PlanRequest(big_space(b), b, trace_path, search="exhaustive"), processes=1, progress=False)
    best = res.best
    assert (best["train_backend"], best["train_tp"], best["pp"]) == ("megatron", 4, 1)
    pr = res.trainers
    assert (pr.considered, pr.refused, pr.ranked_out, pr.kept) == (4, 3, 0, 1)  # fsdp, tp1, tp2 pruned by memory
    assert res.simulated_layouts == 1
    assert "3 do not fit memory (never simulated)" in pr.line()
    simulated = res.table[res.table["status"] == "ok"]
    assert set(simulated["trainer"]) == {"megatron tp4 pp1"}  # the refused layouts were never simulated


def test_fsdp_is_picked_for_a_small_model_where_it_is_cheaper(trace_path):
    b = base("qwen2.5-0.5b")
    space = space_for(b, 4, only=("colocated 4",), policies=("baseline",), backends=BOTH, tps=(1,))
    res = run_plan(PlanRequest(space, b, trace_path, search="exhaustive", trainer_keep=9), processes=1, progress=False)
    assert res.best["train_backend"] == "fsdp"
    est = res.table.dropna(subset=["train_phase_s"]).set_index("trainer")["train_phase_s"]
    assert len(est) == 6 and est["fsdp"] == est.min()  # fsdp and megatron tp1/tp2 x pp1/pp2/pp4 that divide 4
    assert (est.drop("fsdp") >= est["fsdp"]).all()
    # the default keeps the best two by that estimate: fsdp is one of them
    kept = run_plan(PlanRequest(space, b, trace_path, search="exhaustive"), processes=1, progress=False)
    assert kept.trainers.kept == 2 and kept.trainers.ranked_out == 4 and "fsdp" in set(kept.table["trainer"])


def test_the_estimate_is_the_trainer_phase_of_a_representative_step(trace_path):
    b = base("qwen2.5-0.5b")
    trace = load_trace(trace_path, **b.trace_limits())
    seqs = representative_batch(b, trace)
    assert len(seqs) == b.sequences and (seqs == representative_batch(b, trace)).all()
    spec = PlacementSpec("colocated", 4, 4, 0, 1)
    cfg = Candidate(spec, PolicySpec("baseline")).config(b)
    one = phase_seconds(cfg, check_fits(cfg, *longest(trace, b.max_response)), seqs)
    two = phase_seconds(replace(cfg, ppo_epochs=2 * cfg.ppo_epochs), check_fits(cfg, *longest(trace, b.max_response)), seqs)
    assert 0 < one < two  # the update's epochs are in it


def test_a_pinned_backend_is_the_only_one_searched(trace_path):
    b = base("qwen2.5-0.5b")
    for backend in BOTH:
        pinned = replace(b, trainer=TrainerLayout(backend))
        space = space_for(pinned, 4, layouts=("colocated", "gen-apart"), policies=("baseline",))
        res = run_plan(PlanRequest(space, pinned, trace_path, search="tpe", trials=6), processes=1, progress=False)
        assert set(res.table["train_backend"]) == {backend}


def test_the_cli_pins_the_backend_and_reports_the_pruning(trace_path, capsys, tmp_path):
    argv = ["plan", "--trace", trace_path, "--gpus", "4xh100-sxm", "--actor", "qwen2.5-0.5b", "--algorithm", "grpo",
            "--n", "2", "--batch", "4", "--reward", "rule", "--steps", "2", "--max-response", "256", "--policies",
            "baseline", "--layouts", "colocated", "--processes", "1", "--out", str(tmp_path)]
    assert main([*argv, "--train-backend", "megatron"]) == 0
    out = capsys.readouterr().out
    # colocated 4 with generation tp 1 or 2 (14 heads): megatron tp1/tp2 x pp1/pp2/pp4 that divide 4, on each
    assert "trainer layouts: 10 considered on 2 placements" in out and "simulated" in out
    import pandas as pd
    table = pd.read_csv(tmp_path / "plan.csv")
    assert set(table["train_backend"]) == {"megatron"}
    assert main([*argv, "--train-backend", "auto"]) == 0
    assert "trainer layouts: 12 considered on 2 placements" in capsys.readouterr().out  # + fsdp on each


def test_same_inputs_give_the_same_plan(trace_path):
    b = base("qwen2.5-0.5b")
    space = space_for(b, 4, layouts=("colocated", "shared", "gen-apart"), policies=("baseline", "inter"),
                      deltas=(8,), backends=BOTH)

    def plan():
        res = run_plan(PlanRequest(space, b, trace_path, search="tpe", trials=8, seed=3), processes=1, progress=False)
        return res.table.drop(columns=["wall_clock_s", "cpu_s"]), res.trainers

    (t1, p1), (t2, p2) = plan(), plan()
    assert t1.equals(t2) and p1 == p2
    assert {"fsdp", "megatron"} <= set(t1["train_backend"])


def test_context_parallelism_is_raised_only_where_a_layout_does_not_fit_without_it(tmp_path):
    path = tmp_path / "long.csv"
    generate_longtail(LongTailSpec(cap=256), 50, seed=1, name="long").to_frame().assign(prompt_tokens=60_000).to_csv(
        path, index=False)
    b = replace(base("qwen2.5-7b", batch=2), algorithm=Algorithm("grpo", n=2, reward="rule", kl=False))
    trace = load_trace(str(path), **b.trace_limits())
    lengths = longest(trace, b.max_response)
    mega = TrainerLayout("megatron")
    short = fitted(PlacementSpec("colocated", 4, 4, 0, 1, 1, replace(mega, tp=4)), b, (4096, 256), False)
    assert short is not None and short[0].trainer.cp == 1  # short sequences: no CP
    long = fitted(PlacementSpec("colocated", 4, 4, 0, 1, 1, mega), b, lengths, False)
    assert long is not None and long[0].trainer.cp > 1  # 60k-token prompts: CP where tp1 does not fit alone
    with pytest.raises(ConfigError):
        check_fits(Candidate(PlacementSpec("colocated", 4, 4, 0, 1, 1, mega), PolicySpec("baseline")).config(b), *lengths)
    smaller = replace(long[0], trainer=replace(long[0].trainer, cp=long[0].trainer.cp // 2))
    with pytest.raises(ConfigError):  # the smallest that fits
        check_fits(Candidate(smaller, PolicySpec("baseline")).config(b), *lengths)


@pytest.mark.parametrize("framework", ["verl", "nemo-rl"])
def test_export_carries_the_layout_the_planner_picked(trace_path, tmp_path, framework):
    import shutil
    from pathlib import Path

    b = base(**BIG)
    res = run_plan(PlanRequest(big_space(b), b, trace_path, search="exhaustive"), processes=1, progress=False)
    text = export_best(res, framework)
    path = tmp_path / ("recipe.yaml" if framework == "nemo-rl" else "exported.verl")
    if framework == "nemo-rl":
        recipe = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl" / "grpo_math_1B.yaml"
        shutil.copy(recipe, tmp_path / "grpo_math_1B.yaml")
    path.write_text(text)
    back = config_of({"verl": "--from-verl", "nemo-rl": "--from-nemo-rl"}[framework], str(path))
    t, best = back.trainer, res.best
    assert (t.backend, t.tp, t.pp, t.vpp, t.cp, t.distributed_optimizer, back.expert_parallel) == (
        best["train_backend"], best["train_tp"], best["pp"], best["vpp"], best["cp"], best["distributed_optimizer"],
        best["ep"]) == ("megatron", 4, 1, 1, 1, True, 1)


def test_expert_parallelism_is_searched_for_a_moe_actor_under_megatron():
    from oppo_sim.explore.trainer_space import TrainerOptions, trainer_layouts

    o = TrainerOptions(backends=BOTH, heads=(32, 4), layers=48, experts=128)
    pairs = trainer_layouts(o, 16, 8)
    assert pairs[0] == (TrainerLayout(), 1)  # fsdp first, its EP the user's
    assert pairs[1] == (TrainerLayout(fsdp_size=8), 1)  # then hybrid sharding by node: the pool spans two
    assert not any(t.fsdp_size for t, _ in trainer_layouts(o, 8, 8))  # one node: nothing to split
    mega = [(t.tp, t.pp, ep) for t, ep in pairs if t.megatron]
    assert (1, 1, 16) in mega and (4, 2, 8) in mega and (8, 2, 8) in mega and (2, 4, 2) in mega
    assert all(16 // pp % ep == 0 and 128 % ep == 0 and 16 % (tp * pp) == 0 for tp, pp, ep in mega)
    assert len(set(mega)) == len(mega)
    only = trainer_layouts(replace(o, eps=(8,)), 16, 8)
    assert {ep for t, ep in only if t.megatron} == {8}


def test_a_placement_that_needs_sequence_parallelism_is_tried_once(tmp_path):
    path = tmp_path / "long.csv"
    generate_longtail(LongTailSpec(cap=256), 50, seed=1, name="long").to_frame().assign(prompt_tokens=120_000).to_csv(
        path, index=False)
    b = base("qwen2.5-7b", batch=2)
    space = space_for(b, 4, only=("shared 3+1",), policies=("baseline",), tps=(1,), backends=BOTH)
    res = run_plan(PlanRequest(space, b, str(path), search="exhaustive"), processes=1, progress=False)
    t = res.table
    assert t["config"].is_unique
    fsdp = t[t["train_backend"] == "fsdp"]
    assert len(fsdp) == 1 and fsdp["sp"].iloc[0] > 1 and fsdp["is_reference"].iloc[0]  # raised once, as the reference
