"""``oppo-sim check --policies …``: what each policy would buy on the checked run, with a range.

Every policy is simulated on the run's checked steps (their logged lengths, the run's config) with the
calibrated model (``--calibrate K``; else the hardware given, uncalibrated) and its fixed step cost added.
Its **step time** is the mean simulated step time (``SimResult.summary["step_time_s"]``: between consecutive
step ends, so an asynchronous policy's overlap counts) and its **speedup** the baseline's step time over
its own, both taken at the same parameters and lengths.

**The range** is the smallest and largest value over these variants of the model (:data:`VARIANTS`):

* ``fit-slow`` / ``fit-fast`` -- what the calibration does not pin down: every fitted efficiency factor one
  standard deviation lower (higher), every fitted fixed cost one higher (lower), the standard deviations from
  the fit's residuals (:func:`~oppo_sim.frameworks.check_fit.fit_spread`); only after ``--calibrate``;
* ``spread-low`` / ``spread-high`` -- what the log does not pin down: the shape of each step's length
  distribution. The log gives a step's mean, max and clip ratio; the trace draws the rest from a lognormal
  (:mod:`oppo_sim.traces.metrics_import`). Here every unclipped response's distance from its step's mean is
  scaled by :data:`SPREAD` (0.7: a narrower distribution, 1.3: a wider one; clipped to ``[1, cap - 1]``, the
  responses at the cap kept), the same row for every policy.

**The run's own noise** is then added (:func:`step_noise`): a speedup read off two real runs is a ratio of two
runs' mean step times, and every step scatters around what its lengths explain (a shared machine's load, the
engine's warm-up, the scheduler). That scatter is measured on the checked run itself: ``s``, the robust
standard deviation (``1.4826 x`` the median absolute deviation, so a warm-up step does not set it) of
``ln(measured / predicted)`` of the step timer over the checked steps -- the held-out ones included, which the
fit never saw; centring on the median takes out the model's bias. The steps of one run are *not* taken as
independent: the load of the moment persists over a run (other jobs start and stop on a scale of minutes),
so a run's mean can move as far as one step does. A speedup of two runs thus carries ``s * sqrt(2)``, a step
time ``s``. (Measured here: on a shared 2-core machine, five baseline/oppo pairs gave speedups with a standard
deviation of 13 %, with ``s`` 6--18 % per run; independent steps would have given 4--5 %.)
Each side of the range is the variants' deviation and this one added in quadrature (independent sources):
``lo = c * exp(-sqrt(ln(c / lo_variants)^2 + sigma^2))``, likewise ``hi``. Baseline's speedup stays 1.

Every source enters at one standard deviation, so the range is about a one-sigma band: a measured speedup
falls outside it about one time in three when the model is right. The central value is the optimum's at the
trace as drawn. ``5 x policies`` simulations in all (3 without a fit).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.check_fit import Fit, fit_spread, hardware_at
from oppo_sim.frameworks.check_run import CheckRun, run_trace
from oppo_sim.frameworks.stages import FRAMEWORK_TIMERS, STEP
from oppo_sim.hw.devices.hardware import Hardware
from oppo_sim.traces.trace import Trace

SPREAD: tuple[float, float] = (0.7, 1.3)
"""Factors on the unclipped responses' distance from their step's mean: the length spread's low and high."""
VARIANTS = ("fit", "fit-slow", "fit-fast", "spread-low", "spread-high")
COLUMNS = ["policy", "step_time_s", "step_time_lo", "step_time_hi", "speedup", "speedup_lo", "speedup_hi"]


def stretched(trace: Trace, factor: float, cap: int | None) -> Trace:
    """``trace`` with each step's unclipped responses moved ``factor`` times as far from their mean (rounded,
    clipped to ``[1, cap - 1]``); responses at the cap and prompts unchanged."""
    frame = trace.to_frame()
    resp = frame["response_tokens"].to_numpy(np.int64).copy()
    steps = frame["step"].to_numpy() if "step" in frame.columns else np.zeros(len(frame), dtype=np.int64)
    top = int(cap) if cap else int(resp.max()) + 1
    for s in np.unique(steps):
        idx = np.flatnonzero((steps == s) & (resp < top))
        if len(idx) < 2:
            continue
        r = resp[idx].astype(float)
        m = r.mean()
        resp[idx] = np.clip(np.rint(m + factor * (r - m)), 1, max(1, top - 1)).astype(np.int64)
    optional = {"step": trace.step, "reward": trace.reward} if trace.reward is not None else {"step": trace.step}
    return Trace.from_arrays(frame["prompt_tokens"].to_numpy(np.int64), resp, name=trace.name,
                             source=f"{trace.source}, spread x{factor:g}", **optional)


def _step_time(run: CheckRun, hw: Hardware, policy: str, trace: Trace, step_s: float) -> float:
    from oppo_sim.core.policies import make_policy
    from oppo_sim.pipeline.simulate import simulate

    cfg = replace(run.cfg, gpu=hw, steps=len(run.steps))
    res = simulate(trace, make_policy(policy, **dict(run.policy_options)), cfg)
    return float(res.summary["step_time_s"]) + step_s


def variants(run: CheckRun, base: Hardware, f: Fit | None) -> dict[str, tuple[Hardware, float, Trace]]:
    """The model variants a range is made of: name -> (hardware, fixed step cost, trace)."""
    trace = run_trace(run)
    if f is None:
        central = (base, 0.0)
        out = {"fit": (base, 0.0, trace)}
    else:
        sets = fit_spread(f)
        central = (hardware_at(base, sets["fit"][0]), sets["fit"][1])
        out = {name: (hardware_at(base, theta), step_s, trace) for name, (theta, step_s) in sets.items()}
    for name, factor in zip(("spread-low", "spread-high"), SPREAD):
        out[name] = (*central, stretched(trace, factor, run.cfg.max_response))
    return out


MAD_TO_SD = 1.4826
"""The median absolute deviation of a normal sample times this is its standard deviation."""


def step_noise(table: pd.DataFrame, framework: str) -> tuple[float, int]:
    """(``s``: the robust standard deviation of ``ln(measured / predicted)`` of ``framework``'s step timer over the
    steps of ``table`` (``check_run.compare``'s long table), ``n``: those steps); ``(0.0, n)`` with fewer than
    three steps or no step timer logged."""
    timer = next((t.name for t in FRAMEWORK_TIMERS[framework] if t.covers == (STEP,)), None)
    rows = table[(table["stage"] == timer) & (table["measured_s"] > 0) & (table["predicted_s"] > 0)]
    if len(rows) < 3:
        return 0.0, len(rows)
    r = np.log(rows["measured_s"].to_numpy(float) / rows["predicted_s"].to_numpy(float))
    return float(MAD_TO_SD * np.median(np.abs(r - np.median(r)))), len(rows)


def widened(c: float, lo: float, hi: float, sigma: float) -> tuple[float, float]:
    """``(lo, hi)`` around ``c`` with a relative standard deviation ``sigma`` added in quadrature on each side."""
    if sigma <= 0 or c <= 0:
        return lo, hi
    return (c * float(np.exp(-np.hypot(np.log(c / lo), sigma))), c * float(np.exp(np.hypot(np.log(hi / c), sigma))))


def what_if(run: CheckRun, base: Hardware, f: Fit | None, policies: list[str],
            tick: Callable[[], None] = lambda: None, noise: float = 0.0) -> pd.DataFrame:
    """One row per policy (baseline first): step time and speedup vs baseline, central and range (see the module
    docstring; ``noise``: :func:`step_noise`'s ``s``, over the run's steps); ``attrs["variants"]``: the variants
    the range spans, ``attrs["noise"]``: ``s``, ``attrs["steps"]``: the steps a policy's mean is taken over."""
    names = [p.strip().lower() for p in policies if p.strip()]
    if not names:
        raise ConfigError("--policies: give at least one policy")
    if "baseline" not in names:
        names.insert(0, "baseline")
    var = variants(run, base, f)
    times = {(p, v): _timed(run, hw, p, trace, step_s, tick) for p in names for v, (hw, step_s, trace) in var.items()}
    n = max(1, len(run.steps))
    rows = []
    for p in names:
        t = np.array([times[(p, v)] for v in var])
        sp = np.array([times[("baseline", v)] / times[(p, v)] for v in var])
        sp_sigma = 0.0 if p == "baseline" else noise * np.sqrt(2.0)  # two runs, each as uncertain as a step
        rows.append((p, t[0], *widened(t[0], t.min(), t.max(), noise),
                     sp[0], *widened(sp[0], sp.min(), sp.max(), sp_sigma)))
    out = pd.DataFrame(rows, columns=COLUMNS)
    out.attrs.update(variants=list(var), noise=float(noise), steps=n)
    return out


def _timed(run: CheckRun, hw: Hardware, policy: str, trace: Trace, step_s: float, tick: Callable[[], None]) -> float:
    t = _step_time(run, hw, policy, trace, step_s)
    tick()
    return t


def range_note(out: pd.DataFrame) -> str:
    """One line saying how the range was made."""
    v = out.attrs.get("variants", [])
    fit_part = "the fit's parameters one standard deviation slower and faster, " if "fit-slow" in v else \
        "no calibration (--calibrate K adds the fit's uncertainty), "
    noise, n = out.attrs.get("noise", 0.0), out.attrs.get("steps", 0)
    noise_part = (f"; with the run's step-to-step noise in quadrature (step timer's robust sd {100 * noise:.1f}% over "
                  f"{n} steps: +-{100 * noise * np.sqrt(2.0):.1f}% on a speedup measured from two runs)"
                  if noise > 0 else "; no step-to-step noise added (fewer than 3 steps with a step timer)")
    return (f"range: smallest to largest over {len(v)} variants: {fit_part}and each step's length spread narrower "
            f"and wider (unclipped responses' distance from the step mean x{SPREAD[0]:g} and x{SPREAD[1]:g})"
            + noise_part)


__all__ = ["COLUMNS", "MAD_TO_SD", "SPREAD", "VARIANTS", "range_note", "step_noise", "stretched", "variants", "what_if",
           "widened"]
