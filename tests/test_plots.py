"""Plots: each function returns a Figure with the expected structure (axes, lanes, bars, legend entries),
never touches pyplot, and saves to PNG."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from oppo_sim import plots
from oppo_sim.core.errors import ConfigError
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.synthetic import LongTailSpec, generate_longtail

SMALL = SimConfig(batch=16, steps=3)


@pytest.fixture(scope="module")
def trace():
    return generate_longtail(LongTailSpec(cap=2048), 200, seed=5, name="small")


@pytest.fixture(scope="module")
def results(trace):
    return {p: simulate(trace, p, SMALL) for p in ("baseline", "oppo", "async")}


def _lanes(result):
    return sorted({(str(p), str(d)) for p, d in zip(result.timeline["pool"], result.timeline["devices"])})


def _keys(timeline):
    return {plots.activity_key(a, r) for a, r in zip(timeline["activity"], timeline["role"])}


def _legend_labels(legend):
    return [t.get_text() for t in legend.get_texts()]


def _bars(ax):
    return [p for c in ax.containers if isinstance(c, BarContainer) for p in c.patches]


def _png_ok(fig: Figure, path) -> None:
    fig.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_import_selects_no_backend():
    code = "import sys, oppo_sim.explore.plots; assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# -- timelines -------------------------------------------------------------------------------------


def test_timeline_has_one_lane_per_device_group_and_a_legend_per_activity(results, tmp_path):
    r = results["baseline"]
    fig = plots.plot_timeline(r)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(lanes) == sorted(f"{p}/{d}" for p, d in _lanes(r))
    assert lanes[0] == "main/0" and lanes.index("main/all") > lanes.index("main/1")  # devices, then the whole pool
    legend = _legend_labels(ax.get_legend())
    assert set(legend) == _keys(r.timeline) >= {"generate", "score:reward", "score:reference", "train:actor", "sync"}
    # every timeline row is drawn as one bar
    drawn = sum(len(c.get_paths()) for c in ax.collections if isinstance(c, PolyCollection))
    assert drawn == len(r.timeline)
    # one labelled boundary per step
    labels = [t.get_text().strip() for t in ax.texts]
    assert labels == [f"step {s}" for s in r.steps["step"]]
    assert ax.get_xlabel() == "time (s)"
    _png_ok(fig, tmp_path / "timeline.png")


def test_timeline_step_range(results):
    r = results["oppo"]
    fig = plots.plot_timeline(r, steps=(1, 2), title="two steps")
    ax = fig.axes[0]
    sel = r.timeline[r.timeline["step"].between(1, 2)]
    assert sum(len(c.get_paths()) for c in ax.collections if isinstance(c, PolyCollection)) == len(sel)
    assert [t.get_text().strip() for t in ax.texts] == ["step 1", "step 2"]
    lo, hi = ax.get_xlim()
    st = r.steps.set_index("step")
    assert lo <= st.loc[1, "start"] and hi >= st.loc[2, "end"]
    assert lo > st.loc[0, "start"] - 1e-9 and hi < st.loc[2, "end"] + 0.05 * (st.loc[2, "end"] - st.loc[1, "start"])
    assert ax.get_title(loc="left") == "two steps"


@pytest.mark.parametrize("steps", [(2, 1), (7, 9), ("a", "b")])
def test_timeline_bad_step_range(results, steps):
    with pytest.raises(ConfigError):
        plots.plot_timeline(results["baseline"], steps=steps)


def test_timeline_into_given_axes(results):
    fig = Figure()
    ax = fig.add_subplot()
    assert plots.plot_timeline(results["baseline"], ax=ax) is fig
    assert len(fig.axes) == 1


def test_overlapping_bars_in_a_lane_are_stacked_not_hidden(results):
    # reward and reference run at the same time on the scoring GPU: two tracks in its lane
    ax = plots.plot_timeline(results["baseline"]).axes[0]
    lane = [t.get_text() for t in ax.get_yticklabels()].index("score/all")
    heights = set()
    for c in ax.collections:
        for path in c.get_paths():
            ys = path.vertices[:, 1]
            if lane - 0.5 < ys.mean() < lane + 0.5:
                heights.add(round(float(ys.max() - ys.min()), 6))
    assert heights == {0.4}


def test_timelines_are_stacked_on_a_shared_axis(results, tmp_path):
    fig = plots.plot_timelines(results, steps=(0, 1))
    axes = fig.axes
    assert len(axes) == 3
    assert all(axes[0].get_shared_x_axes().joined(axes[0], a) for a in axes[1:])
    assert len(fig.legends) == 1 and all(a.get_legend() is None for a in axes)
    keys = set().union(*(_keys(r.timeline[r.timeline["step"].between(0, 1)]) for r in results.values()))
    assert set(_legend_labels(fig.legends[0])) == keys
    assert [a.get_title(loc="left").split(" ")[0] for a in axes] == ["baseline", "oppo", "async"]
    assert axes[0].get_xlim()[0] <= 0 <= axes[0].get_xlim()[0] + 1  # relative time: each run starts at 0
    _png_ok(fig, tmp_path / "timelines.png")


def test_timelines_need_results():
    with pytest.raises(ConfigError):
        plots.plot_timelines({})


# -- bars, lines, heatmap --------------------------------------------------------------------------


def test_utilization_grouped_bars(results, tmp_path):
    fig = plots.plot_utilization(results)
    ax = fig.axes[0]
    pools = list(results["baseline"].summary["utilization"])
    cats = len(pools) + 2  # pools + overall + FLOP
    bars = _bars(ax)
    assert len(bars) == len(results) * cats
    assert _legend_labels(ax.get_legend()) == list(results)
    assert len([t for t in ax.get_xticklabels()]) == cats
    # first policy's bars carry its numbers, in %
    s = results["baseline"].summary
    expected = [100 * s["utilization"][p] for p in pools] + [100 * s["utilization_overall"], 100 * s["flop_utilization"]]
    np.testing.assert_allclose([b.get_height() for b in bars[:cats]], expected)
    annotations = [t for t in ax.texts]
    assert len(annotations) == len(bars)
    _png_ok(fig, tmp_path / "util.png")


def _sweep_like(results) -> pd.DataFrame:
    rows = []
    for trace in ("t1", "t2"):
        for k, (name, r) in enumerate(results.items()):
            rows.append({"policy": name, "label": r.summary["policy"], "trace": trace, "gpu": "h200",
                         "samples_per_s": r.summary["samples_per_s"] * (1 + 0.1 * (trace == "t2"))})
    return pd.DataFrame(rows)


def test_speedup_bars(results, tmp_path):
    df = _sweep_like(results)
    one = df[df.trace == "t1"]
    fig = plots.plot_speedup(one)
    ax = fig.axes[0]
    bars = _bars(ax)
    assert len(bars) == len(one)
    widths = {t.get_text(): b.get_width() for t, b in zip(ax.get_yticklabels(), bars)}
    assert widths["baseline"] == pytest.approx(1.0)
    assert widths[results["oppo"].summary["policy"]] == pytest.approx(
        results["oppo"].summary["samples_per_s"] / results["baseline"].summary["samples_per_s"])
    assert ax.get_legend() is None  # a single trace needs no legend
    _png_ok(fig, tmp_path / "speedup.png")

    fig2 = plots.plot_speedup(df)  # two traces: grouped, one legend entry each
    ax2 = fig2.axes[0]
    assert len(_bars(ax2)) == len(df)
    assert _legend_labels(ax2.get_legend()) == ["t1", "t2"]


def test_speedup_needs_the_baseline(results):
    with pytest.raises(ConfigError, match="baseline 'sync' is not in the table"):
        plots.plot_speedup(_sweep_like(results), baseline="sync")


def test_heatmap_cells_are_annotated(tmp_path):
    rows = [{"policy": "baseline", "chunk": pd.NA, "delta": pd.NA, "samples_per_s": 1.0}]
    rows += [{"policy": "oppo", "chunk": c, "delta": d, "samples_per_s": c / 100 + d}
             for c in (128, 256, 512) for d in (0, 8)]
    df = pd.DataFrame(rows).astype({"chunk": "Int64", "delta": "Int64"})
    fig = plots.plot_sweep_heatmap(df, x="chunk", y="delta")
    ax = fig.axes[0]
    assert len(fig.axes) == 2  # heatmap + colorbar
    assert len(ax.texts) == 6  # the baseline row (no chunk, no delta) is left out
    assert [t.get_text() for t in ax.get_xticklabels()] == ["128", "256", "512"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "8"]
    assert ax.get_xlabel() == "chunk" and ax.get_ylabel() == "delta"
    assert "9.28" in {t.get_text() for t in ax.texts}
    _png_ok(fig, tmp_path / "heat.png")

    with pytest.raises(ConfigError, match="several rows"):
        plots.plot_sweep_heatmap(pd.concat([df, df]), x="chunk", y="delta")
    with pytest.raises(ConfigError, match="not in the table"):
        plots.plot_sweep_heatmap(df, x="chunk", y="budget")


def test_step_times_one_line_per_policy(results, tmp_path):
    fig = plots.plot_step_times(results)
    ax = fig.axes[0]
    labelled = [l for l in ax.get_lines() if not l.get_label().startswith("_")]
    assert len(labelled) == len(results)
    for line, r in zip(labelled, results.values()):
        np.testing.assert_allclose(line.get_ydata(), r.steps["step_time_s"])
    assert len(_legend_labels(ax.get_legend())) == len(results)
    _png_ok(fig, tmp_path / "steps.png")


def test_lanes_follow_the_placement_order(trace):
    from oppo_sim.core.placement import disaggregated_placement

    r = simulate(trace, "async", SMALL, placement=disaggregated_placement())
    lanes = [t.get_text() for t in plots.plot_timeline(r).axes[0].get_yticklabels()]
    pools = list(dict.fromkeys(lane.split("/")[0] for lane in lanes))
    assert pools == [p for p in ("gen", "train", "score") if p in pools]
    assert lanes[:4] == ["gen/0", "gen/1", "gen/2", "gen/3"]
