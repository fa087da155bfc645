"""``validate``: profile -> calibrate -> simulate -> run for real -> compare, with a number on it.

Each policy runs ``repeat`` times, interleaved across policies (p1 p2 p3, p1 p2 p3, ...) so a slow spell
of a shared machine does not land on one policy; each real run is mirrored by a simulation of the very
same requests (and, for reward-driven controllers, the same rewards). The table reports per policy the
predicted and measured median step time (the median over runs of each run's median), the measured
spread over runs as a noise band (an error inside it is reported as such), utilization per pool,
samples/s, the speedup over the baseline predicted and measured, and the fraction of steps whose
decisions agreed; a second table splits step time into components.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from oppo_real.config import RealConfig
from oppo_real.executor.real_result import RealResult
from oppo_real.executor.runner import run_real
from oppo_real.validation.mirror import mirror_config, mirror_trace
from oppo_real.validation.run_metrics import (
    COMPONENTS,
    decision_agreement,
    explain,
    measure,
)
from oppo_sim.core.policies import Policy
from oppo_sim.core.results import SimResult
from oppo_sim.engine.static_params import StaticCostParams
from oppo_sim.hw.fitting.calibration import with_sync_seconds
from oppo_sim.hw.devices.hardware import Hardware
from oppo_sim.hw.fitting.overheads import ExecutorOverheads
from oppo_sim.pipeline.fit_check import check_fits
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.pipeline.topology import sync_payload, sync_terms
from oppo_sim.traces.trace import Trace

VALIDATION_COLUMNS = [
    "policy", "runs", "pred_step_s", "meas_step_s", "meas_step_min_s", "meas_step_max_s", "noise_pct", "step_err_pct",
    "step_err_in_noise", "pred_util_main", "meas_util_main", "util_err_main_pp", "pred_util_score", "meas_util_score",
    "util_err_score_pp", "util_noise_pp", "pred_speedup", "meas_speedup", "speedup_err_pct",
    "pred_samples_per_s", "meas_samples_per_s", "decision_agreement", "decision_diff",
]
COMPONENT_COLUMNS = ["policy", "component", "pred_s", "meas_s", "err_s", "err_pct"]


@dataclass(frozen=True)
class Validation:
    table: pd.DataFrame
    components: pd.DataFrame
    predicted: dict[str, list[SimResult]] = field(default_factory=dict)  # per policy name, one per run
    measured: dict[str, list[RealResult]] = field(default_factory=dict)

    def runs_table(self, what: str) -> pd.DataFrame:
        """Every run's ``steps`` or ``timeline`` table, predicted and measured, with ``policy``, ``run`` (0-based
        within the policy) and ``side`` (predicted / measured) columns."""
        frames = [getattr(r, what).assign(policy=name, run=i, side=side)
                  for side, runs in (("predicted", self.predicted), ("measured", self.measured))
                  for name, rs in runs.items() for i, r in enumerate(rs)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def headline(self) -> dict[str, float]:
        t = self.table
        utils = pd.concat([t["util_err_main_pp"].abs(), t["util_err_score_pp"].abs()])
        sp = t["speedup_err_pct"].abs().dropna()
        return {"median_abs_step_err_pct": float(t["step_err_pct"].abs().median()),
                "median_abs_util_err_pp": float(utils.median()),
                "max_abs_step_err_pct": float(t["step_err_pct"].abs().max()),
                "median_abs_speedup_err_pct": float(sp.median()) if len(sp) else float("nan"),
                "min_decision_agreement": float(t["decision_agreement"].min())}


def _row(name: str, pol: Policy, preds: list[dict], meas: list[dict], agree: list) -> dict:
    p = preds[0] if len(preds) == 1 else {k: float(np.median([x[k] for x in preds])) for k in preds[0]}
    ms = np.array([m["step_s"] for m in meas])
    med = lambda k: float(np.median([m[k] for m in meas]))  # noqa: E731
    lo, hi, mstep = float(ms.min()), float(ms.max()), float(np.median(ms))
    util_noise = max((max(m[k] for m in meas) - min(m[k] for m in meas)) / 2 for k in ("util_main", "util_score"))
    frac = float(np.mean([a.fraction for a in agree]))
    fields = tuple(dict.fromkeys(f for a in agree for f in a.fields))
    return {
        "policy": pol.label(), "runs": len(meas), "pred_step_s": p["step_s"], "meas_step_s": mstep,
        "meas_step_min_s": lo, "meas_step_max_s": hi,
        "noise_pct": 100.0 * (hi - lo) / (2 * mstep) if len(meas) > 1 else float("nan"),
        "step_err_pct": 100.0 * (p["step_s"] - mstep) / mstep,
        "step_err_in_noise": bool(len(meas) > 1 and lo <= p["step_s"] <= hi),
        "pred_util_main": p["util_main"], "meas_util_main": med("util_main"),
        "util_err_main_pp": 100.0 * (p["util_main"] - med("util_main")),
        "pred_util_score": p["util_score"], "meas_util_score": med("util_score"),
        "util_err_score_pp": 100.0 * (p["util_score"] - med("util_score")),
        "util_noise_pp": 100.0 * util_noise if len(meas) > 1 else float("nan"),
        "pred_samples_per_s": p["samples_per_s"], "meas_samples_per_s": med("samples_per_s"),
        "decision_agreement": frac, "decision_diff": explain(name, type(agree[0])(frac, fields)),
    }


def _speedups(table: pd.DataFrame, names: list[str]) -> None:
    if "baseline" not in names:
        table[["pred_speedup", "meas_speedup", "speedup_err_pct"]] = float("nan")
        return
    base = table.iloc[names.index("baseline")]
    table["pred_speedup"] = base["pred_step_s"] / table["pred_step_s"]
    table["meas_speedup"] = base["meas_step_s"] / table["meas_step_s"]
    table["speedup_err_pct"] = 100.0 * (table["pred_speedup"] / table["meas_speedup"] - 1.0)


def _components(names: list[str], labels: list[str], preds: dict, meas: dict) -> pd.DataFrame:
    rows = []
    for name, label in zip(names, labels):
        for c in COMPONENTS:
            p = float(np.median([x[c] for x in preds[name]]))
            m = float(np.median([x[c] for x in meas[name]]))
            rows.append({"policy": label, "component": c.removesuffix("_s"), "pred_s": p, "meas_s": m,
                         "err_s": p - m, "err_pct": 100.0 * (p - m) / m if m > 0 else float("nan")})
    return pd.DataFrame(rows, columns=COMPONENT_COLUMNS)


def validate(cfg: RealConfig, policies: dict[str, Policy], hw: Hardware, trace: Trace | None, warmup: int = 2,
             repeat: int = 1, log: Callable[[str], None] = print, out_dir: Path | None = None,
             overheads: ExecutorOverheads | None = None, static_cost: StaticCostParams | None = None,
             sync_s: float | None = None) -> Validation:
    """Profile-fitted ``hw`` (and, for the static decoder, its per-call ``static_cost``) -> simulate and run
    every policy ``repeat`` times -> the predicted-vs-measured table (see the module docstring).
    ``overheads``: the driver's measured costs and ``sync_s`` the end-to-end weight sync (both measured here,
    on the run's kind of workers, when None). The real runs keep no per-step checkpoint: writing one is not a
    part of the step the simulator models."""
    from oppo_real.executor.session import build_run_models
    from oppo_real.profiling.driver_overheads import measure_overheads

    paths = build_run_models(cfg)
    if overheads is None:
        overheads, rep, _ = measure_overheads(cfg, trace, log=lambda _m: None)
        log(f"driver overheads: {1e3 * overheads.call_s:.2f} ms per round trip, {1e3 * overheads.step_s:.1f} ms per step, "
            f"{1e3 * overheads.sample_s:.2f} ms per sample, {1e6 * overheads.token_s:.1f} us per token "
            f"(fit MAPE {100 * rep['mape']:.0f}%)")
    if sync_s is None:
        from oppo_real.profiling.driver_overheads import measure_sync

        sync_s = measure_sync(cfg)
        log(f"weight sync end to end (export, transfer, load): {1e3 * sync_s:.1f} ms")
    base = mirror_config(cfg, hw, paths)
    nbytes, bw, mechanism, export = sync_terms(base, check_fits(base))  # fitted in the terms it is predicted in
    hw = with_sync_seconds(hw, nbytes, bw, sync_s, sync_payload(base).tensors, mechanism, export)
    sim_cfg = mirror_config(cfg, hw, paths, overheads=overheads, static_cost=static_cost)
    rows = len(trace) if trace is not None else 4096
    names = list(policies)
    pred: dict[str, list[SimResult]] = {n: [] for n in names}
    real: dict[str, list[RealResult]] = {n: [] for n in names}
    for r in range(repeat):
        for name in names:
            pol = policies[name]
            log(f"[{name}] run {r + 1}/{repeat}: {cfg.steps} steps for real ...")
            out = (out_dir / name / f"run{r}") if out_dir else None
            real[name].append(run_real(cfg, pol, trace, out_dir=out, overwrite=True, checkpoint_steps=False))
            pred[name].append(simulate(mirror_trace(cfg, trace, rows, real[name][-1].rollouts, real[name][-1].decisions), pol, sim_cfg))
            p, m = measure(pred[name][-1], warmup), measure(real[name][-1], warmup)
            log(f"[{name}] predicted {p['step_s']:.3f} s/step, measured {m['step_s']:.3f} s/step")
    mp = {n: [measure(x, warmup) for x in pred[n]] for n in names}
    mm = {n: [measure(x, warmup) for x in real[n]] for n in names}
    agree = {n: [decision_agreement(p.decisions, m.decisions) for p, m in zip(pred[n], real[n])] for n in names}
    table = pd.DataFrame([_row(n, policies[n], mp[n], mm[n], agree[n]) for n in names])
    _speedups(table, names)
    comps = _components(names, [policies[n].label() for n in names], mp, mm)
    return Validation(table[VALIDATION_COLUMNS], comps, pred, real)
