"""Tests for oppo_sim.traces.synthetic and the shipped default trace generator."""

from __future__ import annotations

import gzip
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oppo_sim.core.errors import ConfigError
from oppo_sim.traces.catalog import load_trace
from oppo_sim.traces.synthetic import (
    DriftSpec,
    LongTailSpec,
    RewardCurve,
    apply_drift,
    generate_longtail,
    heavier_tail,
)
from oppo_sim.traces.trace import DEFAULT_TRACE, Trace

REPO = Path(__file__).resolve().parents[1]


def same(a: Trace, b: Trace) -> bool:
    return all(np.array_equal(x, y) for x, y in [(a.prompt_tokens, b.prompt_tokens),
                                                  (a.response_tokens, b.response_tokens)])


# --------------------------------------------------------------------------------------------------
# generate_longtail
# --------------------------------------------------------------------------------------------------


def test_longtail_deterministic() -> None:
    spec = LongTailSpec()
    a, b = generate_longtail(spec, 2000, seed=7), generate_longtail(spec, 2000, seed=7)
    assert same(a, b)
    assert not same(a, generate_longtail(spec, 2000, seed=8))
    assert a.source.startswith("synthetic:") and a.name == "longtail-n2000-s7"
    assert generate_longtail(spec, 10, name="x").name == "x"


def test_longtail_shape() -> None:
    spec = LongTailSpec()
    trace = generate_longtail(spec, 20_000, seed=0)
    d = trace.describe()
    assert len(trace) == 20_000
    assert 250 <= d["resp_p50"] <= 400           # body median 300, pulled up a little by the tail
    assert d["p99_over_p50"] > 8                 # a long tail
    assert d["resp_max"] <= spec.cap and trace.response_tokens.min() >= spec.min_response
    assert 200 <= d["prompt_p50"] <= 310
    assert trace.max_response == spec.cap
    assert trace.n_clipped == int(np.sum(trace.clipped)) and trace.n_clipped > 0
    assert np.all(trace.response_tokens[trace.clipped] == spec.cap)


def test_longtail_without_tail_is_lognormal() -> None:
    trace = generate_longtail(LongTailSpec(tail_fraction=0.0, body_sigma=0.6), 20_000, seed=1)
    d = trace.describe()
    assert d["resp_p50"] == pytest.approx(300, rel=0.05)
    assert d["p99_over_p50"] == pytest.approx(math.exp(2.326 * 0.6), rel=0.1)


def test_tail_fraction_only_changes_tail_rows() -> None:
    """Draws are made in a fixed order, so raising the tail fraction only moves rows into the tail."""
    light = generate_longtail(LongTailSpec(tail_fraction=0.02), 5000, seed=3)
    heavy = generate_longtail(LongTailSpec(tail_fraction=0.10), 5000, seed=3)
    assert np.array_equal(light.prompt_tokens, heavy.prompt_tokens)
    changed = light.response_tokens != heavy.response_tokens
    assert 0.05 < changed.mean() < 0.12


@pytest.mark.parametrize("kwargs", [
    dict(prompt_median=0), dict(body_sigma=-0.1), dict(tail_fraction=1.5), dict(tail_alpha=0.0),
    dict(cap=0), dict(min_response=0), dict(min_response=10, cap=5), dict(tail_scale=0),
])
def test_longtail_spec_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        LongTailSpec(**kwargs)


def test_longtail_bad_arguments() -> None:
    with pytest.raises(ConfigError):
        generate_longtail(LongTailSpec(), 0)
    with pytest.raises(ConfigError):
        generate_longtail(LongTailSpec(), 10, seed=-1)


# --------------------------------------------------------------------------------------------------
# apply_drift
# --------------------------------------------------------------------------------------------------


def test_drift_grows_lengths_and_fills_step() -> None:
    base = Trace.from_arrays([5] * 1000, [100] * 1000, name="flat")
    drift = DriftSpec(growth_per_step=0.01, batch=100, cap=8192)
    out = apply_drift(base, drift)
    assert out.step.tolist() == [i // 100 for i in range(1000)]
    assert np.array_equal(out.prompt_tokens, base.prompt_tokens)
    assert out.response_tokens[0] == 100
    assert out.response_tokens[-1] == round(100 * 1.01**9)
    assert np.all(np.diff(out.response_tokens) >= 0)
    assert apply_drift(base, drift).response_tokens.tolist() == out.response_tokens.tolist()


def test_drift_cap_counts_clipped() -> None:
    base = Trace.from_arrays([1] * 10, [1000] * 10)
    out = apply_drift(base, DriftSpec(growth_per_step=1.0, batch=1, cap=5000))
    # factors 1, 2, 4, 8, ... -> 1000, 2000, 4000, then capped
    assert out.response_tokens[:3].tolist() == [1000, 2000, 4000]
    assert out.n_clipped == 7 and out.max_response == 5000
    assert out.response_tokens.max() == 5000


def test_drift_zero_growth_is_identity_on_lengths() -> None:
    base = generate_longtail(LongTailSpec(), 500, seed=2)
    out = apply_drift(base, DriftSpec(growth_per_step=0.0, batch=7))
    assert np.array_equal(out.response_tokens, base.response_tokens)
    assert out.step[-1] == 499 // 7


@pytest.mark.parametrize("kwargs", [dict(batch=0), dict(cap=0), dict(growth_per_step=-1.0),
                                    dict(growth_per_step=float("nan"))])
def test_drift_spec_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        DriftSpec(**kwargs)


# --------------------------------------------------------------------------------------------------
# RewardCurve
# --------------------------------------------------------------------------------------------------


def test_reward_curve_deterministic_and_saturating() -> None:
    curve = RewardCurve(r0=-0.5, r_max=1.0, tau_steps=50, noise=0.02, seed=3)
    values = [curve.mean_reward(s) for s in range(400)]
    assert values == [curve.mean_reward(s) for s in range(400)]
    assert curve.mean_reward(10) == RewardCurve(r0=-0.5, r_max=1.0, tau_steps=50, noise=0.02,
                                                seed=3).mean_reward(10)
    assert abs(values[0] - (-0.5)) < 0.1 and abs(values[-1] - 1.0) < 0.1
    assert np.mean(values[:20]) < np.mean(values[100:120]) < np.mean(values[300:])
    assert values != [RewardCurve(r0=-0.5, r_max=1.0, tau_steps=50, noise=0.02, seed=4).mean_reward(s)
                      for s in range(400)]


def test_reward_curve_without_noise_is_exact() -> None:
    curve = RewardCurve(noise=0.0, tau_steps=100)
    assert curve.mean_reward(0) == 0.0
    assert curve.mean_reward(100) == pytest.approx(1 - math.exp(-1))


@pytest.mark.parametrize("kwargs", [dict(tau_steps=0), dict(noise=-1), dict(seed=-1), dict(r_max=float("inf"))])
def test_reward_curve_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RewardCurve(**kwargs)


def test_reward_curve_bad_step() -> None:
    with pytest.raises(ConfigError):
        RewardCurve().mean_reward(-1)


# --------------------------------------------------------------------------------------------------
# heavier_tail
# --------------------------------------------------------------------------------------------------


@given(st.lists(st.integers(1, 100_000), min_size=1, max_size=200),
       st.floats(1.0, 20.0), st.floats(0.001, 1.0))
@settings(max_examples=100, deadline=None)
def test_heavier_tail_only_increases(responses: list[int], factor: float, top: float) -> None:
    trace = Trace.from_arrays(list(range(1, len(responses) + 1)), responses)
    out = heavier_tail(trace, factor, top)
    assert np.array_equal(out.prompt_tokens, trace.prompt_tokens)
    assert np.all(out.response_tokens >= trace.response_tokens)
    changed = int(np.sum(out.response_tokens != trace.response_tokens))
    assert changed <= math.ceil(top * len(responses))
    assert out.response_tokens.max() >= trace.response_tokens.max()


def test_heavier_tail_scales_the_longest() -> None:
    trace = Trace.from_arrays([1] * 10, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    out = heavier_tail(trace, 3.0, top_fraction=0.2)
    assert out.response_tokens.tolist() == [10, 20, 30, 40, 50, 60, 70, 80, 270, 300]
    assert heavier_tail(trace, 1.0).response_tokens.tolist() == trace.response_tokens.tolist()


def test_heavier_tail_cap_handling() -> None:
    trace = Trace.from_arrays([1] * 4, [10, 20, 30, 40]).capped(50)
    assert heavier_tail(trace, 1.2, 0.25).max_response == 50     # 48 still fits
    assert heavier_tail(trace, 2.0, 0.25).max_response is None   # 80 does not: uncapped


@pytest.mark.parametrize("factor,top", [(0.5, 0.1), (2.0, 0.0), (2.0, 1.5), (float("nan"), 0.1)])
def test_heavier_tail_validation(factor: float, top: float) -> None:
    trace = Trace.from_arrays([1], [1])
    with pytest.raises(ConfigError):
        heavier_tail(trace, factor, top)


# --------------------------------------------------------------------------------------------------
# Shipped default trace
# --------------------------------------------------------------------------------------------------


def load_script():
    spec = importlib.util.spec_from_file_location("make_default_trace", REPO / "scripts" / "make_default_trace.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_shipped_default_trace_matches_generator(tmp_path: Path) -> None:
    script = load_script()
    shipped = REPO / "oppo_sim" / "data" / f"{DEFAULT_TRACE}.csv.gz"
    assert shipped.is_file() and shipped.stat().st_size < 60_000
    built = script.build_default_trace()
    loaded = load_trace(DEFAULT_TRACE)
    assert same(built, loaded)
    assert np.array_equal(built.step, loaded.step)
    out = tmp_path / "regen.csv.gz"
    assert script.main(["--out", str(out)]) == 0
    assert gzip.decompress(out.read_bytes()) == gzip.decompress(shipped.read_bytes())
    assert out.read_bytes() == script.to_csv_gz(built)  # byte-identical between runs
    header = gzip.decompress(shipped.read_bytes()).split(b"\n", 1)[0]
    assert header == b"prompt_tokens,response_tokens,step,source"
