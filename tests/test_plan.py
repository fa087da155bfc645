"""The planner: its space (symmetries, tp rules), that a tiny exhaustive search equals brute force, that
the best is never worse than the default placement, refusals with reasons, the staleness bound,
determinism of the Optuna search, the Pareto front, the figure, and the CLI end to end."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import paper_placement
from oppo_sim.explore.plan import PlanRequest, pareto_front, run_plan
from oppo_sim.explore.space import Candidate, PlacementSpec, PlanSpace, PolicySpec, default_candidate, space_for
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits
from oppo_sim.pipeline.memory_plan import longest
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.catalog import load_trace
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

matplotlib.use("Agg")

SMALL = dict(batch=16, steps=3, gpu="h100-sxm", actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", max_response=2048)


def base(devices: int = 4, **kw) -> SimConfig:
    return SimConfig(**{**SMALL, **kw}, placement=paper_placement(devices))


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("traces") / "plan_small.csv"
    generate_longtail(LongTailSpec(cap=2048), 300, seed=5, name="plan_small").to_frame().to_csv(path, index=False)
    return str(path)


def tiny_space(b: SimConfig, **kw) -> PlanSpace:
    opts = dict(layouts=("shared", "split"), policies=("baseline", "intra", "inter", "async"), chunks=(256,),
                deltas=(8,), stalenesses=(1,))
    return space_for(b, 4, **{**opts, **kw})


# -- the space ------------------------------------------------------------------------------------------


def test_knobs_only_multiply_the_policies_that_have_them():
    s = PlanSpace(devices=8, policies=("baseline", "intra", "oppo", "partial-rollout", "async"), chunks=(256, 512),
                  deltas=(4, 8, 16), rules=("step", "proportional"), budgets=(1024,), stalenesses=(1, 2, 3))
    names = pd.Series([p.name for p in s.policy_specs()]).value_counts()
    assert names["baseline"] == 1 and names["intra"] == 2 and names["oppo"] == 2 * 3 * 2
    assert names["partial-rollout"] == 1 and names["async"] == 3
    assert {p.name for p in s.policy_specs(streams=False)} == {"baseline", "partial-rollout", "async"}
    assert len(set(s.candidates())) == len(s.candidates()) == len(s)


def test_async_candidates_refit_in_flight_where_the_space_says_so():
    s = PlanSpace(devices=8, policies=("baseline", "async"), stalenesses=(1, 2), in_flight=True)
    labels = sorted(p.label() for p in s.policy_specs())
    assert labels == ["async(k=1, in-flight)", "async(k=2, in-flight)", "baseline"]
    assert all(p.make().label() == "async(k=1)" for p in PlanSpace(devices=8, policies=("async",), stalenesses=(1,)).policy_specs())


def test_placements_use_every_gpu_and_tp_suits_heads_and_nodes():
    s = space_for(base(8), 8, nodes=2)  # 4 GPUs a node; qwen2.5-0.5b has 14 heads, 2 KV heads
    assert {p.layout for p in s.placements()} == {"colocated", "shared", "split", "gen-apart"}
    for p in s.placements():
        assert p.devices == 8 and p.placement().total_devices == 8
        assert p.gen % p.tp == 0 and 14 % p.tp == 0 and p.tp <= 4
    assert s.tp_choices(8) == (1, 2) and s.tp_choices(6) == (1, 2)
    assert PlanSpace(devices=16, nodes=2, heads=(40, 8)).tp_choices(12) == (1, 2, 4)  # a tp 8 group would cross nodes


def test_streaming_policies_are_folded_where_nothing_streams(trace_path):
    col = PlacementSpec("colocated", 4, 4, 0, 1)
    assert not col.streams and PlacementSpec("gen-apart", 2, 2, 0, 1).streams
    assert Candidate(col, PolicySpec("intra", chunk=256)).canonical().policy == PolicySpec("baseline")
    assert Candidate(col, PolicySpec("oppo", 256, 8, "step")).canonical().policy == PolicySpec("dynamic-delta", delta=8, rule="step")
    b, trace = base(), load_trace(trace_path)
    cfg = Candidate(col, PolicySpec("baseline")).config(b)
    for folded, kept in ((PolicySpec("intra", chunk=256), PolicySpec("baseline")),
                         (PolicySpec("oppo", 256, 8, "step"), PolicySpec("dynamic-delta", delta=8, rule="step"))):
        assert simulate(trace, folded.make(), cfg).summary["samples_per_s"] == simulate(trace, kept.make(), cfg).summary["samples_per_s"]


def test_only_keeps_the_named_device_splits():
    s = PlanSpace(devices=8, only=("shared 7+1", "colocated  8"))
    assert {p.label() for p in s.placements()} == {"shared 7+1", "colocated 8"}
    with pytest.raises(ConfigError, match="no placement of 8 GPUs"):
        PlanSpace(devices=8, only=("shared 9+1",))


def test_bad_spaces_are_config_errors():
    with pytest.raises(ConfigError, match="policies: 'nope'"):
        PlanSpace(devices=8, policies=("nope",))
    with pytest.raises(ConfigError, match="evenly"):
        PlanSpace(devices=8, nodes=3)
    with pytest.raises(ConfigError, match="chunks"):
        PlanSpace(devices=8, chunks=(0,))


def test_reference_on_host_searches_only_layouts_that_keep_the_reference_with_the_trainer():
    from oppo_sim.core.placement import colocated_placement

    b = SimConfig(**SMALL, placement=colocated_placement(4), reference_on_host=True, refit_buffers=2)
    s = space_for(b, 4)
    assert s.layouts == ("colocated", "gen-apart") and {p.layout for p in s.placements()} == {"colocated", "gen-apart"}
    for p in s.placements():  # each is a configuration the simulator takes (the reference on the trainer's pool)
        cfg = Candidate(p, PolicySpec("baseline")).config(b)
        assert cfg.placement.pool_of("reference") == cfg.placement.train and cfg.refit_buffers == 2
    ref = default_candidate(4, b)
    assert ref.placement.label() == "colocated 4" and ref.policy == PolicySpec("baseline")
    assert default_candidate(4, base()).placement.label() == "shared 3+1"  # without it: the paper's placement
    assert space_for(b, 4, layouts=("shared", "gen-apart")).layouts == ("gen-apart",)
    with pytest.raises(ConfigError, match="layouts: shared, split run the reference off the trainer's GPUs"):
        space_for(b, 4, layouts=("shared", "split"))
    with pytest.raises(ConfigError, match="only: 'split 2\\+1\\+1' runs the reference off"):
        space_for(b, 4, only=("split 2+1+1",))


# -- search ---------------------------------------------------------------------------------------------


def brute_force(space: PlanSpace, b: SimConfig, trace_path: str) -> dict[str, float]:
    """samples/s of every candidate that fits, simulated directly."""
    trace = load_trace(trace_path, max_response=b.max_response)
    out = {}
    for c in space.candidates():
        try:
            cfg = c.config(b)
            check_fits(cfg, *longest(trace, cfg.max_response))
        except ConfigError:
            continue
        out[c.label()] = simulate(trace, c.policy.make(), cfg).summary["samples_per_s"]
    return out


@pytest.fixture(scope="module")
def exhaustive(trace_path):
    b = base()
    return b, run_plan(PlanRequest(tiny_space(b), b, trace_path, search="exhaustive"), processes=1, progress=False)


def test_tiny_exhaustive_search_equals_brute_force(exhaustive, trace_path):
    b, res = exhaustive
    brute = brute_force(res.request.space, b, trace_path)
    assert brute and res.search == "exhaustive" and res.space_size == len(res.request.space)
    ok = res.ranked().set_index("config")["samples_per_s"]
    assert ok.to_dict() == pytest.approx(brute)
    best = max(brute, key=brute.get)
    assert res.best["config"] == best and res.best["samples_per_s"] == brute[best]
    assert list(res.ranked()["rank"]) == list(range(1, len(brute) + 1))


@pytest.mark.parametrize("objective", ["samples-per-s", "time-to-steps"])
@pytest.mark.parametrize("search", ["exhaustive", "tpe"])
def test_best_is_never_worse_than_the_default_placement(trace_path, objective, search):
    b = base()
    res = run_plan(PlanRequest(tiny_space(b), b, trace_path, objective, search, trials=6, seed=1), processes=1,
                   progress=False)
    ref = res.reference
    assert ref is not None and ref["config"] == default_candidate(4, b).label() and ref["speedup"] == 1.0
    if objective == "samples-per-s":
        assert res.best["samples_per_s"] >= ref["samples_per_s"]
    else:
        assert res.best["time_to_steps_s"] <= ref["time_to_steps_s"]
    assert res.best["speedup"] >= 1.0


def test_refused_configurations_carry_a_reason(trace_path):
    b = base(actor="qwen2.5-7b", reward="qwen2.5-7b", steps=2, batch=8)
    res = run_plan(PlanRequest(tiny_space(b, policies=("baseline",)), b, trace_path), processes=1, progress=False)
    refused = res.table[res.table["status"] == "refused"]
    assert len(refused) > 0
    assert refused["reason"].str.startswith("does not fit: ").all()
    assert refused["samples_per_s"].isna().all() and refused["rank"].isna().all()
    assert (res.table.loc[res.table["status"] == "ok", "reason"] == "").all()


def test_max_staleness_keeps_over_stale_configurations_out_of_the_ranking(trace_path):
    b = base()
    res = run_plan(PlanRequest(tiny_space(b, max_staleness=0, stalenesses=(1, 2)), b, trace_path), processes=1,
                   progress=False)
    t = res.table
    assert "async" not in set(t["policy"])  # its bound k >= 1 exceeds 0: never enumerated
    stale = t[t["status"] == "over-stale"]
    assert len(stale) > 0 and (stale["staleness_max"] > 0).all() and stale["reason"].str.contains("--max-staleness 0").all()
    assert (res.ranked()["staleness_max"] == 0).all()


def test_optuna_search_is_deterministic_and_counts_distinct_configurations(trace_path):
    b = base()
    space = tiny_space(b, policies=("baseline", "inter", "intra"), deltas=(4, 8), chunks=(256, 512))
    req = PlanRequest(space, b, trace_path, search="tpe", trials=9, seed=3)
    one = run_plan(req, processes=1, progress=False).table.drop(columns=["wall_clock_s", "cpu_s"])
    two = run_plan(req, processes=2, progress=False).table.drop(columns=["wall_clock_s", "cpu_s"])
    pd.testing.assert_frame_equal(one, two)
    assert len(one) == 9 and one["config"].is_unique
    nsga = run_plan(PlanRequest(space, b, trace_path, search="nsga2", trials=9, seed=3), processes=1, progress=False)
    assert len(nsga.table) == 9 and nsga.table["is_reference"].sum() == 1


def test_auto_search_is_exhaustive_for_small_spaces_only(trace_path):
    b = base()
    space = tiny_space(b)
    assert PlanRequest(space, b, trace_path).resolved_search(len(space)) == "exhaustive"
    assert PlanRequest(space, b, trace_path, trials=5).resolved_search(len(space)) == "tpe"
    with pytest.raises(ConfigError, match="objective"):
        PlanRequest(space, b, trace_path, objective="fastest")


def test_ray_gives_the_same_table(exhaustive):
    ray = pytest.importorskip("ray")
    b, res = exhaustive
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_plan(res.request, use_ray=True, progress=False)
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(remote.table.drop(columns=["wall_clock_s", "cpu_s"]), res.table.drop(columns=["wall_clock_s", "cpu_s"]))


def test_sequence_parallelism_is_a_placement_knob():
    s = PlanSpace(devices=8, layouts=("split",), sps=(1, 2))
    sp2 = [p for p in s.placements() if p.sp == 2]
    assert sp2 and all(p.train % 2 == 0 for p in sp2)
    c = Candidate(sp2[0], PolicySpec("baseline"))
    assert c.config(base(8)).train_memory.sequence_parallel == 2 and " sp2 " in c.label()


def test_reference_falls_back_to_the_fastest_fitting_baseline():
    from oppo_sim.explore.plan import plan_table

    ref = default_candidate(4)
    rows = [{"config": ref.label(), "policy": "baseline", "status": "refused", "reason": "does not fit: ..."},
            {"config": "a", "policy": "baseline", "status": "ok", "reason": "", "samples_per_s": 1.0, "staleness_mean": 0.0},
            {"config": "b", "policy": "baseline", "status": "ok", "reason": "", "samples_per_s": 2.0, "staleness_mean": 0.0},
            {"config": "c", "policy": "inter", "status": "ok", "reason": "", "samples_per_s": 3.0, "staleness_mean": 0.2}]
    t = plan_table(rows, "samples-per-s", ref).set_index("config")
    assert t["is_reference"].sum() == 1 and t.loc["b", "is_reference"] and t.loc["b", "speedup"] == 1.0
    assert t.loc["c", "speedup"] == 1.5 and t.loc["c", "rank"] == 1 and pd.isna(t.loc[ref.label(), "rank"])


# -- Pareto front and figure -----------------------------------------------------------------------


def test_pareto_front_on_a_hand_made_table():
    t = pd.DataFrame({
        "samples_per_s": [1.0, 2.0, 1.5, 3.0, 3.0, 2.5, 0.5, np.nan],
        "staleness_mean": [0.0, 0.5, 0.5, 1.0, 1.0, 2.0, 0.0, 0.1],
    }, index=list("abcdefgh"))
    front = pareto_front(t)
    assert list(front[front].index) == ["a", "b", "d", "e"]  # c and g dominated, f dominated by d, h has no value


def test_plot_pareto_draws_the_table(exhaustive):
    from matplotlib.figure import Figure

    from oppo_sim.explore.plan_plots import plot_pareto

    fig = plot_pareto(exhaustive[1].table)
    assert isinstance(fig, Figure) and "x the reference" in fig.axes[0].get_title()


# -- the command line --------------------------------------------------------------------------------


def test_cli_plan_end_to_end(trace_path, tmp_path, capsys):
    from oppo_sim.cli import main

    out = tmp_path / "plan"
    rc = main(["plan", "--trace", trace_path, "--actor", "qwen2.5-0.5b", "--reward", "qwen2.5-0.5b", "--gpus",
               "4xh100-sxm", "--steps", "2", "--batch", "8", "--max-response", "2048", "--layouts", "shared",
               "--policies", "baseline,inter", "--deltas", "8", "--top", "3", "--processes", "1", "--out", str(out),
               "--json", str(tmp_path / "plan.json"), "--train-backend", "fsdp"])  # the trainer's search: test_plan_backend.py
    text = capsys.readouterr().out
    assert rc == 0 and "best: " in text and "reference: shared 3+1 tp1 baseline" in text
    table = pd.read_csv(out / "plan.csv")
    assert (out / "pareto.png").stat().st_size > 0 and (tmp_path / "plan.json").exists()
    assert "samples_per_s" in table.columns and len(table) == 4 * 2  # 3+1, 2+2 (tp 1 and 2), 1+3 x (baseline, inter)
    assert table["config"].is_unique and not math.isnan(table["samples_per_s"].iloc[0])


def test_cli_plan_prices_the_reference_on_the_host_and_exports_it(trace_path, capsys):
    from oppo_sim.cli import main

    rc = main(["plan", "--trace", trace_path, "--actor", "qwen2.5-0.5b", "--gpus", "4xh100-sxm", "--steps", "2",
               "--batch", "8", "--n", "2", "--algorithm", "grpo", "--reward", "rule", "--max-response", "2048",
               "--policies", "baseline", "--processes", "1", "--train-backend", "fsdp", "--reference-on-host",
               "--refit-buffers", "2", "--placements", "colocated 4,gen-apart 2+2", "--export", "verl"])
    text = capsys.readouterr().out
    assert rc == 0 and "reference: colocated 4 tp1 baseline" in text
    assert "(--reference-on-host): layouts colocated, gen-apart only" in text
    assert "# the plan swaps the reference in from host memory" in text and "# the plan double-buffers the refit" in text


@pytest.mark.parametrize("args, match", [
    (["--gpus", "eight"], "COUNTxGPU"),
    (["--gpus", "8xtpu-v9"], "unknown GPU"),
    (["--gpus", "8xh100-sxm", "--nodes", "3"], "evenly"),
    (["--gpus", "8xh100-sxm", "--objective", "fastest"], "invalid choice"),
    (["--gpus", "8xh100-sxm", "--reference-on-host", "--layouts", "shared"], "does not allow"),
])
def test_cli_plan_bad_input_exits_2_with_one_line(args, match, capsys):
    from oppo_sim.cli import main

    try:
        code = main(["plan", *args])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_cli_plan_where_nothing_fits_says_so(trace_path, capsys):
    from oppo_sim.cli import main

    rc = main(["plan", "--trace", trace_path, "--actor", "qwen2.5-72b", "--reward", "qwen2.5-72b", "--gpus",
               "2xrtx-4090", "--steps", "2", "--batch", "8", "--layouts", "shared", "--policies", "baseline",
               "--processes", "1"])
    text = capsys.readouterr().out
    assert rc == 0 and "no configuration tried fits these GPUs" in text and "does not fit" in text
    assert "Index: []" not in text and "best: " not in text
