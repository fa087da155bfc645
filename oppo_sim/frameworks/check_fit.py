"""``oppo-sim check --calibrate K``: the run's profile fitted on its first ``K`` logged steps.

**The parameters and the stages that pin them** (each fitted only where a logged timer covers its work;
:data:`PARAMS`):

=============  =====================================================  =============================================
parameter      what it scales (the profile field it writes)           fitted on (verl / NeMo RL / OpenRLHF timers)
=============  =====================================================  =============================================
``decode``     generation's kernels: ``params.decode.eff_compute``    ``timing_s/gen``; ``timing/train/generation``;
               and ``eff_memory``, times one factor                   ``generation``
``prefill``    the scorers' forwards (log-probs, reference, reward    ``timing_s/old_log_prob``, ``ref``, ``reward``,
               model, values): ``params.prefill`` effs, one factor    ``values``; ``policy_and_reference_logprobs``
``train``      the updates (forward + backward + optimizer):          ``timing_s/update_actor``, ``update_critic``;
               ``params.train`` effs, one factor                      ``timing/train/policy_training``; ``training``
``sync_s``     the fixed seconds of one weight sync:                  ``timing_s/update_weights``;
               ``params.sync.overhead_s``                             ``prepare_for_generation/total``
``*_call_s``   the fixed seconds of one call of a class               that class's timers, only where its factor
               (``decode_call_s``: one engine iteration; ``prefill_``   stops at its bound: the run is faster than
               ``call_s``, ``train_call_s``): ``params.<op>.overhead_s``  efficiency 1 allows (tiny models, a CPU)
``step_s``     a fixed cost per step outside every stage timer        the step timer (``timing_s/step``,
               (verl's ``adv``, the driver's bookkeeping):            ``total_step_time``, ``e2e``), after the others
               ``meta.overheads.step_s``
=============  =====================================================  =============================================

Bounds keep them physical: a factor keeps both efficiencies of its op in ``(0, 1]`` (from 1/1000 of the
start up to where the larger reaches 1), the fixed costs (``*_call_s``, ``sync_s``, ``step_s``) are ``>= 0``. ``sync_s`` is fitted only
where a timer covers the sync without the generation or the update (verl's ``update_weights``, NeMo RL's
``prepare_for_generation``, OpenRLHF's ``train/timing/broadcast``); inside verl-0.7's ``gen`` or the OpenRLHF
benchmark's ``training`` it could not be told apart. OpenRLHF's own timers (``openrlhf-timing``) pin ``decode``
by ``train/timing/generation``, ``prefill`` by ``make_experience``, ``train`` by ``ppo_train``, ``step_s`` by
``step_total`` -- the map is by what each timer covers (:mod:`~oppo_sim.frameworks.stages`), not by name.

**The fit.** Residuals are the relative errors ``(predicted - measured) / measured`` of every (step, stage)
of the first ``K`` steps whose timer one of the parameters moves. Two fixed-point passes first (a stage's time
is close to inversely proportional to its factor: factor x predicted / measured; a factor that stops at its
bound brings its class's per-call cost in, moved by measured / predicted in two more passes), then
``scipy.optimize.least_squares`` (bounded, trust-region reflective, finite differences of 3 %) from there;
every simulation is cached by its parameters. ``step_s`` then is the median of (measured - predicted) step
times, floored at 0 (it adds to the step and nothing else); its standard deviation the gaps' over sqrt(K). The parameters' standard deviations come from the
Jacobian at the optimum, ``s^2 (J^T J)^+`` with ``s^2`` the residuals' variance, over the parameters inside
their bounds (one at a bound is reported as such and not varied); :func:`fit_spread` gives the
parameter sets one standard deviation slower and faster (at most half the value) that :mod:`~oppo_sim.frameworks.check_policies` ranges over.

The profile (:func:`write_profile`) is the hardware with the fitted parameters (``oppo-profile/2``): ``run``,
``compare`` and ``plan --profile P.json`` take it. Its ``meta.check`` says what was fitted, on which log and
steps, and the held-out error; ``meta.overheads`` keeps the driver costs the run was simulated with (a ``--gpu`` profile's), its
``step_s`` raised by the fitted fixed cost per step, which ``check`` adds to every predicted step (``run``/``compare --profile`` charge it as the driver's per-step cost, ``SimConfig.overheads``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Callable

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.check_run import CheckRun, compare, predicted_timers, run_trace
from oppo_sim.frameworks.stages import (ACTOR, CRITIC, EXPOSED, FRAMEWORK_TIMERS, GEN, LOGPROB, REF, REWARD, RULE, STEP, SYNC,
                                        VALUES)
from oppo_sim.hw.devices.hardware import CostParams, Hardware
from oppo_sim.hw.fitting.profiles import save_profile

PARAMS: dict[str, tuple[str, tuple]] = {  # parameter -> (op kind, the timeline pieces whose timers pin it)
    "decode": ("decode", (GEN, EXPOSED)),  # (an async trainer's wait for generation follows the decode too)
    "prefill": ("prefill", (LOGPROB, REF, VALUES, REWARD)),
    "train": ("train", (ACTOR, CRITIC)),
    "sync_s": ("sync", (SYNC,)),
}
CALLS: dict[str, str] = {"decode": "decode_call_s", "prefill": "prefill_call_s", "train": "train_call_s"}
"""A factor at its upper bound -> the per-call fixed cost (``params.<op>.overhead_s``) fitted beside it."""
KIND: dict[str, str] = {**{k: v[0] for k, v in PARAMS.items()}, **{v: k for k, v in CALLS.items()}}
SCALE_MIN = 1e-3
FD_STEP = 0.03


def _sync_alone(covers: tuple) -> bool:
    return SYNC in covers and GEN not in covers and not any(c[0] == "train" for c in covers)


def fitted_stages(run: CheckRun, logged: list[str]) -> dict[str, list[str]]:
    """Parameter -> the logged timers that pin it (parameters no logged timer pins are left out)."""
    out: dict[str, list[str]] = {}
    for timer in FRAMEWORK_TIMERS[run.framework]:
        if timer.name not in logged or timer.covers == (STEP,):
            continue
        for name, (_, pieces) in PARAMS.items():
            hit = any(c in timer.covers or (c == REWARD and RULE in timer.covers) for c in pieces)
            if name == "sync_s" and not _sync_alone(timer.covers):
                hit = False
            if hit:
                out.setdefault(name, []).append(timer.name)
    return out


def seconds(name: str) -> bool:
    """True for a fixed cost (seconds, >= 0), False for an efficiency factor."""
    return name.endswith("_s")


def upper(base: Hardware, name: str) -> float:
    """The largest value of parameter ``name`` the bounds allow (a factor: where the larger eff reaches 1)."""
    if seconds(name):
        return math.inf
    op = base.params.op(KIND[name])
    return 1.0 / max(op.eff_compute, op.eff_memory)


def lower(name: str) -> float:
    return 0.0 if seconds(name) else SCALE_MIN


def start(base: Hardware, name: str) -> float:
    return base.params.op(KIND[name]).overhead_s if seconds(name) else 1.0


def unit(base: Hardware, name: str) -> float:
    """The parameter's scale in the solver (its start, so every solver variable starts at 1)."""
    return max(start(base, name), 1e-4) if seconds(name) else 1.0


def hardware_at(base: Hardware, theta: dict[str, float], source: str = "check fit") -> Hardware:
    """``base`` with the parameters ``theta`` applied (factors on an op's efficiencies, the sync's seconds)."""
    ops = {k: base.params.op(k) for k in ("decode", "prefill", "train", "sync", "collective")}
    for name, v in theta.items():
        kind = KIND[name]
        op = ops[kind]
        if seconds(name):
            ops[kind] = replace(op, overhead_s=float(max(0.0, v)))
        else:
            ops[kind] = replace(op, eff_compute=min(1.0, op.eff_compute * v), eff_memory=min(1.0, op.eff_memory * v))
    return Hardware(base.gpu, CostParams(**ops), source, host_scale=base.host_scale,  # the roofline's factors fitted;
                    sync_tensor_s=base.sync_tensor_s)  # the per-op host time and a measured per-tensor sync are not


@dataclass(frozen=True)
class Fit:
    """A fitted run: the parameters, their standard deviations, the fixed step cost and its spread, the fit's
    stage map, the calibration table (per step and stage) and the simulations it took."""

    base: Hardware
    theta: dict[str, float]
    sigma: dict[str, float]
    step_s: float
    step_s_sigma: float
    stages: dict[str, list[str]]
    calibration: pd.DataFrame
    simulations: int
    at_bound: tuple[str, ...]

    def hardware(self, theta: dict[str, float] | None = None) -> Hardware:
        return hardware_at(self.base, self.theta if theta is None else theta,
                           f"fitted by oppo-sim check on {len(set(self.calibration['step']))} logged steps")


class Simulations:
    """Simulations of one run at parameter sets, cached by the parameters (rounded to 1e-9)."""

    def __init__(self, run: CheckRun, base: Hardware, names: list[str], tick: Callable[[], None] = lambda: None):
        self.run, self.base, self.names, self.tick = run, base, names, tick
        self.trace = run_trace(run)
        self.cache: dict[tuple, pd.DataFrame] = {}

    def __call__(self, x: np.ndarray) -> pd.DataFrame:
        key = tuple(round(float(v), 9) for v in x)
        if key not in self.cache:
            self.cache[key] = predicted_timers(self.run, hardware_at(self.base, dict(zip(self.names, key))),
                                               trace=self.trace)
            self.tick()
        return self.cache[key]


def _residuals(sims: Simulations, measured: pd.DataFrame, stages: list[str], x: np.ndarray) -> np.ndarray:
    table, _ = compare(measured, sims(x))
    table = table[table["stage"].isin(stages)]
    return table["error_pct"].to_numpy(float) / 100.0


def _fixed_point(sims: Simulations, measured: pd.DataFrame, pins: dict[str, list[str]], x: np.ndarray,
                 hi: np.ndarray, only: tuple[str, ...] | None = None) -> np.ndarray:
    """Two passes of: each parameter (of ``only``, else all) moved so its stages' median ratio becomes 1 (a factor
    times predicted / measured; a per-call cost times measured / predicted; the sync's seconds by the gap)."""
    for _ in range(2):
        table, _ = compare(measured, sims(x))
        new = x.copy()
        for i, name in enumerate(sims.names):
            rows = table[table["stage"].isin(pins[name])]
            if rows.empty or (only is not None and name not in only):
                continue
            if name in CALLS.values():
                new[i] = x[i] * float(np.median(rows["measured_s"] / rows["predicted_s"]))
            elif seconds(name):
                new[i] = x[i] + float(np.median(rows["measured_s"] - rows["predicted_s"]))
            else:
                new[i] = x[i] * float(np.median(rows["predicted_s"] / rows["measured_s"]))
        new = np.clip(new, [lower(n) for n in sims.names], hi)
        if np.allclose(new, x, rtol=0.01, atol=1e-6):
            return new
        x = new
    return x


def _solve(sims: Simulations, measured: pd.DataFrame, stages: list[str], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``least_squares`` from ``x`` in units of each parameter's start (see :func:`unit`): (the optimum, its sd)."""
    from scipy.optimize import least_squares

    u = np.array([unit(sims.base, n) for n in sims.names])
    lo = np.array([lower(n) for n in sims.names]) / u
    hi = np.array([upper(sims.base, n) for n in sims.names]) / u
    sol = least_squares(lambda v: _residuals(sims, measured, stages, v * u), np.clip(x / u, lo, hi), bounds=(lo, hi),
                        method="trf", diff_step=FD_STEP, max_nfev=6)
    x = sol.x * u
    free = np.array([not (math.isfinite(h) and v >= h * (1 - 1e-6)) and v > lo_ + 1e-12
                     for v, h, lo_ in zip(sol.x, hi, lo)])  # a parameter at a bound is not varied
    sd = np.zeros(len(x))
    jac = sol.jac[:, free]
    if jac.size:
        m, p = jac.shape
        s2 = float(np.sum(sol.fun ** 2)) / max(1, m - p)
        sd[free] = np.sqrt(np.clip(np.diag(s2 * np.linalg.pinv(jac.T @ jac)), 0.0, None))
    return x, sd * u


def fit(run: CheckRun, base: Hardware, k: int, tick: Callable[[], None] = lambda: None) -> Fit:
    """The run's parameters fitted on its first ``k`` logged steps (see the module docstring)."""
    n = len(run.steps)
    if not 1 <= k < n:
        raise ConfigError(f"--calibrate {k}: needs 1 <= K < the {n} logged steps checked (the steps after K are "
                          f"the held-out ones)")
    calib = run.head(k)
    measured = calib.measured()
    pins = fitted_stages(run, [c for c in measured.columns if c != "step"])
    names = list(pins)
    sims = Simulations(calib, base, names, tick)
    hi = np.array([upper(base, n_) for n_ in names])
    x = np.array([start(base, n_) for n_ in names])
    sigma = np.zeros(len(names))
    if names:
        x = _fixed_point(sims, measured, pins, x, hi)
        capped = [n_ for n_, v, h in zip(names, x, hi) if n_ in CALLS and v >= h * (1 - 1e-6)]
        for n_ in capped:  # faster than efficiency 1 allows: the per-call fixed cost is fitted too
            pins[CALLS[n_]] = pins[n_]
        names = list(pins)
        sims.names = names
        x = np.concatenate([x, [start(base, CALLS[n_]) for n_ in capped]])
        if capped:
            x = _fixed_point(sims, measured, pins, x, np.array([upper(base, n_) for n_ in names]),
                             tuple(CALLS[n_] for n_ in capped))
        x, sigma = _solve(sims, measured, sorted({s for v in pins.values() for s in v}), x)
    step_s, step_sd = _step_cost(calib, sims(x), measured)
    theta = dict(zip(names, map(float, x)))
    table, _ = compare(measured, _with_step(sims(x), run.framework, step_s))
    bound = tuple(n_ for n_, v in theta.items() if math.isfinite(upper(base, n_)) and v >= upper(base, n_) * (1 - 1e-6))
    return Fit(base, theta, dict(zip(names, map(float, sigma))), step_s, step_sd, pins, table, len(sims.cache), bound)


def _step_name(framework: str) -> str:
    return next(t.name for t in FRAMEWORK_TIMERS[framework] if t.covers == (STEP,))


def _with_step(pred: pd.DataFrame, framework: str, step_s: float) -> pd.DataFrame:
    out = pred.copy()
    name = _step_name(framework)
    out[name] = out[name] + step_s
    return out


def _step_cost(run: CheckRun, pred: pd.DataFrame, measured: pd.DataFrame) -> tuple[float, float]:
    name = _step_name(run.framework)
    if name not in measured.columns:
        return 0.0, 0.0
    both = measured[["step", name]].merge(pred[["step", name]], on="step", suffixes=("", "#p")).dropna()
    if both.empty:
        return 0.0, 0.0
    gap = (both[name] - both[name + "#p"]).to_numpy(float)
    return max(0.0, float(np.median(gap))), float(np.std(gap)) / math.sqrt(len(gap))  # the constant's standard error


def fit_spread(f: Fit) -> dict[str, tuple[dict[str, float], float]]:
    """The fit's parameter sets for a range: ``fit`` (the optimum), ``fit-slow`` (every factor one standard
    deviation lower, every fixed cost one higher) and ``fit-fast`` (the other way), each within the bounds;
    each with its fixed step cost. A parameter the steps pin poorly (its standard deviation over half its value:
    two parameters of one stage trading off) moves by half its value, not out to its bound."""
    def moved(sign: float) -> dict[str, float]:
        out = {}
        for name, v in f.theta.items():
            d = min(f.sigma.get(name, 0.0), 0.5 * abs(v))  # a parameter pinned poorly moves by half its value
            if seconds(name):
                out[name] = max(0.0, v - sign * d)
            else:
                out[name] = float(np.clip(v + sign * d, SCALE_MIN, upper(f.base, name)))
        return out
    return {"fit": (dict(f.theta), f.step_s),
            "fit-slow": (moved(-1.0), f.step_s + f.step_s_sigma),
            "fit-fast": (moved(+1.0), max(0.0, f.step_s - f.step_s_sigma))}


def params_table(f: Fit) -> pd.DataFrame:
    """One row per fitted parameter: value, standard deviation, the profile fields it sets, the stages that pin it."""
    hw = f.hardware()
    rows = []
    for name, v in f.theta.items():
        op = hw.params.op(KIND[name])
        field = (f"{KIND[name]}.overhead_s={op.overhead_s:.4g}" if seconds(name) else
                 f"{KIND[name]}.eff_compute={op.eff_compute:.4g}, eff_memory={op.eff_memory:.4g}")
        rows.append((name, v, f.sigma.get(name, 0.0), field, ", ".join(f.stages[name]),
                     "yes" if name in f.at_bound else ""))
    rows.append(("step_s", f.step_s, f.step_s_sigma, f"meta.overheads.step_s += {f.step_s:.4g}", "the step timer", ""))
    return pd.DataFrame(rows, columns=["parameter", "value", "sd", "profile", "fitted_on", "at_bound"])


def write_profile(f: Fit, path: str, run: CheckRun, held_out: dict, given: dict | None = None) -> None:
    """The fitted hardware as a profile ``run``/``compare``/``plan --profile`` take (see the module docstring);
    ``given``: the ``meta`` of the ``--gpu`` profile the fit started from (its ``driver`` entry is kept)."""
    meta = {"check": {"log": run.log.source, "framework": run.framework, "policy": run.policy,
                      "calibration_steps": [int(s) for s in sorted(set(f.calibration["step"]))],
                      "parameters": f.theta, "sd": f.sigma, "stages": f.stages, "at_bound": list(f.at_bound),
                      "held_out": held_out, "base": f.base.label},
            "overheads": _overheads(run, f.step_s)}
    if (given or {}).get("driver"):  # where the driver's costs were measured (oppo-real profile --driver)
        meta["driver"] = given["driver"]
    op_s = run.cfg.host_op_s(run.cfg.placement.generate)
    if run.cfg.engine.enforce_eager and op_s > 0:  # fitted with the eager host's floor: keep it
        meta["eager_host_op_s"] = op_s
    save_profile(f.hardware(), path, meta)


def _overheads(run: CheckRun, step_s: float) -> dict[str, float]:
    """The profile's driver costs: those the checked run was simulated with (a ``--gpu`` profile's
    ``meta.overheads``, e.g. an ``oppo-real`` driver's measured cost per round trip), its per-step cost raised
    by the fitted ``step_s``."""
    given = asdict(run.cfg.overheads)
    return {**given, "step_s": given["step_s"] + step_s}


__all__ = ["CALLS", "Fit", "KIND", "PARAMS", "Simulations", "fit", "fit_spread", "fitted_stages", "hardware_at", "params_table",
           "write_profile"]
