"""Figures of a validation: predicted against measured (parity), and the two timelines side by side."""

from __future__ import annotations

from oppo_real.validation.validate import Validation


def plot_parity(v: Validation):
    """Predicted vs measured step time and utilization, one point per policy (and pool)."""
    from matplotlib.figure import Figure

    t = v.table
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    a, b = fig.subplots(1, 2)
    a.errorbar(t["meas_step_s"], t["pred_step_s"], fmt="o", ms=6, capsize=3, label="measured median, min-max of the runs",
               xerr=[t["meas_step_s"] - t["meas_step_min_s"], t["meas_step_max_s"] - t["meas_step_s"]])
    for _, r in t.iterrows():
        a.annotate(r["policy"], (r["meas_step_s"], r["pred_step_s"]), fontsize=8, xytext=(4, 4), textcoords="offset points")
    lo = 0.8 * min(t["meas_step_min_s"].min(), t["pred_step_s"].min())
    hi = 1.2 * max(t["meas_step_max_s"].max(), t["pred_step_s"].max())
    a.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    a.fill_between([lo, hi], [lo * 0.95, hi * 0.95], [lo * 1.05, hi * 1.05], color="0.85", label="±5%")
    a.set_xlim(lo, hi)
    a.set_ylim(lo, hi)
    a.set_xlabel("measured median step time (s)")
    a.set_ylabel("predicted median step time (s)")
    a.legend(fontsize=8)
    for pool, mk in (("main", "o"), ("score", "s")):
        b.scatter(100 * t[f"meas_util_{pool}"], 100 * t[f"pred_util_{pool}"], marker=mk, s=40, label=f"pool {pool}")
    b.plot([0, 100], [0, 100], "k--", lw=0.8)
    b.fill_between([0, 100], [-5, 95], [5, 105], color="0.85", label="±5 pp")
    b.set_xlim(0, 100)
    b.set_ylim(0, 100)
    b.set_xlabel("measured utilization (%)")
    b.set_ylabel("predicted utilization (%)")
    b.legend(fontsize=8)
    h = v.headline()
    fig.suptitle(f"predicted vs measured: median |step error| {h['median_abs_step_err_pct']:.1f}%, "
                 f"median |utilization error| {h['median_abs_util_err_pp']:.1f} pp")
    return fig


def plot_pred_vs_meas_timelines(v: Validation, steps: tuple[int, int] = (2, 4)):
    from oppo_sim.explore.plots import plot_timelines

    results = {}
    for name in v.predicted:
        pred, meas = v.predicted[name][0], v.measured[name][0]
        last = min(len(pred.steps), len(meas.steps)) - 1
        results[f"{name}: predicted"] = pred
        results[f"{name}: measured"] = meas
    steps = (min(steps[0], last), min(steps[1], last))
    return plot_timelines(results, steps=steps)

