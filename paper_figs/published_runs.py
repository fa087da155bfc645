"""Table: published RL training runs, side by side with oppo-sim's prediction of their step time.

Each run of ``published_runs_data.RUNS`` (NeMo RL's performance summary, verl's colocated baselines and
DeepSeek benchmark, OpenRLHF's benchmark with DeepSpeed-Chat beside it, the OPPO paper's TRL baseline; every
one with its source URL and commit) is expressed as its framework ran it — model, GPU, devices, nodes,
placement, prompts per step, n, prompt/response caps, algorithm, reward, KL, tensor parallelism, epochs and
mini-batches, the engine's memory fraction, recomputation — and simulated with the **baseline** policy (the
framework's own synchronous schedule) at the simulator's **default, uncalibrated** cost parameters. Nothing
is fitted to a published time.

Response lengths are rarely published in full: a run with a published mean gets a synthetic trace whose
mean matches it (lognormal lengths, capped at the run's max response, the median solved so the *capped* mean
is the published one); a run without one uses the assumed mean its record states. Prompt lengths are
lognormal around the stated (or derived) mean, capped at the prompt limit. Every assumption is in the CSV's
``assumptions`` column.

Columns: the run's setup (``framework`` .. ``sp``), ``mean_prompt``, ``mean_response``,
``mean_response_published``, ``status`` (``ok``; ``needs model X`` / ``needs GPU Y`` where the tables lack
an id; ``refused: ...`` where the memory check refuses the configuration), ``published_step_s``,
``predicted_step_s``, ``error_pct`` (predicted / published - 1, in %); the step time at the low and high end
of an assumed mean response length (``predicted_step_low_s`` / ``_high_s``, ``error_low_pct`` / ``_high_pct``) and
of the synthetic lengths' spread (``predicted_step_spread_*``, ``error_spread_*``); the share of the GPUs' peak
the published training / scoring stage would need for the assumed lengths (``implied_*_peak_pct``) and
``contradicted`` (over 100%: ``published_runs_checks.py``); the same errors for ``generation``, ``scoring`` and
``training`` where the source publishes them, each predicted as the framework's own timers time it
(``stage_timers``: ``oppo_sim.frameworks.stages``), ``stage_definition``, ``assumptions``, ``source``,
``version``, ``steps``; then a calibration check kept apart from the uncalibrated numbers:
``calibration`` (``fit`` for the NeMo RL runs one step-time scale factor is fitted on, ``held out`` for every
other simulated run), ``calibration_factor``, and ``calibrated_step_s`` / ``calibrated_error_pct`` for the
held-out runs only.

How a run becomes a simulation (trace, configuration, the memory check): ``published_runs_sim.py``.

Writes ``out/published_runs.csv`` and ``out/published_runs.png`` (predicted vs published, and the error per
run). ``--quick``: 1 step per run; ``--only KEY,KEY``: a subset.
"""

from __future__ import annotations

import math
import sys
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oppo_sim.core.errors import OppoError
from oppo_sim.frameworks.stages import stage_groups

try:
    from common import parse_args, print_table, save
    from published_runs_checks import PEAK_LIMIT_PCT, RANGE_FACTORS, assumed_range, implied_peak_pct, spread_range
    from published_runs_data import RUNS, PublishedRun
    from published_runs_sim import (capped_lognormal_mean, derived_prompt_mean, median_for_mean, missing_ids,
                                    response_cap, run_policy, run_trace, sim_config, sim_steps, simulate_record,
                                    step_seconds, trace_name, use_op_costs)
except ImportError:  # imported as paper_figs.published_runs
    from paper_figs.common import parse_args, print_table, save
    from paper_figs.published_runs_checks import PEAK_LIMIT_PCT, RANGE_FACTORS, assumed_range, implied_peak_pct, spread_range
    from paper_figs.published_runs_data import RUNS, PublishedRun
    from paper_figs.published_runs_sim import (capped_lognormal_mean, derived_prompt_mean, median_for_mean,
                                               missing_ids, response_cap, run_policy, run_trace, sim_config, sim_steps,
                                               simulate_record, step_seconds, trace_name, use_op_costs)

NAME = "published_runs"
__all__ = ["capped_lognormal_mean", "median_for_mean", "derived_prompt_mean", "response_cap", "run_trace", "sim_config",
           "run_policy", "sim_steps",
           "simulate_run", "calibrate", "summary", "main"]
STAGES = ("generation", "scoring", "training")
COLUMNS: tuple[str, ...] = (
    "key", "framework", "model", "hf_model", "gpu", "devices", "nodes", "placement", "batch", "n", "max_prompt",
    "max_response", "algorithm", "reward", "kl", "tp", "ppo_epochs", "minibatches", "gpu_memory_utilization",
    "engine", "colocate", "sleep_level", "recompute", "sp", "ep", "trace", "mean_prompt", "mean_response", "mean_response_published", "status",
    "published_step_s", "predicted_step_s", "error_pct", "predicted_step_low_s", "predicted_step_high_s",
    "error_low_pct", "error_high_pct", "predicted_step_spread_low_s", "predicted_step_spread_high_s",
    "error_spread_low_pct", "error_spread_high_pct", "implied_training_peak_pct", "implied_scoring_peak_pct",
    "contradicted",
    *(c for k in STAGES for c in (f"published_{k}_s", f"predicted_{k}_s", f"{k}_error_pct")), "stage_timers",
    "predicted_sync_s", "memory", "memory_check", "stage_definition", "assumptions", "source", "version", "steps",
)
"""The CSV's columns, in order."""


def assumptions(run: PublishedRun) -> str:
    prompts = "prompts" if run.trace is not None else f"prompts (mean {derived_prompt_mean(run):.0f})"
    return (f"responses: {run.response_note}; {prompts}: {run.prompt_note}; "
            f"not modelled / translated: {run.notes}; default (uncalibrated) cost parameters, baseline policy")


def _err(pred: float | None, pub: float | None) -> float:
    return float("nan") if pred is None or pub is None or not np.isfinite(pred) else 100.0 * (pred / pub - 1.0)


def simulate_run(run: PublishedRun, steps: int) -> dict:
    """One row of the table: the run's setup, the published times, the prediction and its error."""
    row = {"key": run.key, "framework": run.framework, "model": run.model, "hf_model": run.hf_model, "gpu": run.gpu,
           "devices": run.devices, "nodes": run.nodes, "placement": run.placement, "policy": run.policy, "batch": run.batch, "n": run.n,
           "max_prompt": run.max_prompt, "max_response": run.max_response, "algorithm": run.algorithm,
           "reward": run.reward, "kl": run.kl, "tp": run.tp, "ppo_epochs": run.ppo_epochs,
           "minibatches": run.minibatches, "gpu_memory_utilization": run.gpu_memory_utilization,
           "engine": run.engine, "colocate": run.colocate, "sleep_level": run.sleep_level,
           "recompute": run.recompute or "auto", "sp": run.sp, "ep": run.ep,
           "mean_prompt": derived_prompt_mean(run) if run.trace is None else float("nan"),
           "mean_response": run.mean_response if run.mean_response is not None else run.assumed_mean_response,
           "mean_response_published": run.mean_response is not None, "status": "ok", "trace": "synthetic",
           "memory_check": "fits", "contradicted": False,
           "published_step_s": run.published_step_s, "predicted_step_s": float("nan")}
    pub = {"generation": run.stages.generation_s, "scoring": run.stages.scoring_s, "training": run.stages.training_s}
    pred: dict[str, float | None] = dict.fromkeys(STAGES)
    missing = missing_ids(run)
    if missing:
        row["status"] = "needs " + ", ".join(missing)
    else:
        try:
            cfg, trace, res, memory = simulate_record(run, steps)
            s = res.steps
        except OppoError as e:
            row["status"] = f"refused: {e}"
        else:
            if memory.startswith("refused"):
                row["status"], row["memory_check"] = "ok, past the memory check", memory
            row["predicted_step_s"] = step_seconds(run, s["step_time_s"])
            row["predicted_sync_s"] = float(s["sync_s"].median())
            row["memory"] = memory.removeprefix("refused; timed with ")
            peak = implied_peak_pct(run, trace.prompt_tokens + trace.response_tokens, cfg.scoring_roles(), cfg.steps)
            row.update(implied_training_peak_pct=peak["training"], implied_scoring_peak_pct=peak["scoring"],
                       contradicted=bool(max(peak.values(), default=math.nan) > PEAK_LIMIT_PCT))
            row["predicted_step_low_s"], row["predicted_step_high_s"] = assumed_range(run, steps)
            row["predicted_step_spread_low_s"], row["predicted_step_spread_high_s"] = spread_range(run, steps)
            groups = stage_groups(res, run.stages.timers)  # the stages as the framework's own timers time them
            pred = {k: float(groups[k].median()) for k in STAGES}
            if run.trace is not None:
                row["mean_prompt"], row["mean_response"] = float(s["prompt_tokens"].sum() / s["samples"].sum()), \
                    float((s["tokens"] - s["prompt_tokens"]).sum() / s["samples"].sum())
                row["trace"] = trace_name(run)
    row["error_pct"] = _err(row["predicted_step_s"], run.published_step_s)
    row["error_low_pct"] = _err(row.get("predicted_step_low_s"), run.published_step_s)
    row["error_high_pct"] = _err(row.get("predicted_step_high_s"), run.published_step_s)
    row["error_spread_low_pct"] = _err(row.get("predicted_step_spread_low_s"), run.published_step_s)
    row["error_spread_high_pct"] = _err(row.get("predicted_step_spread_high_s"), run.published_step_s)
    for k in STAGES:
        row[f"published_{k}_s"] = pub[k]
        row[f"predicted_{k}_s"] = pred[k]
        row[f"{k}_error_pct"] = _err(pred[k], pub[k])
    row.update(stage_timers=run.stages.timers, stage_definition=run.stages.definition, assumptions=assumptions(run), source=run.source,
               version=run.version, steps=steps)
    return row


def compute(runs: Sequence[PublishedRun], steps: int) -> pd.DataFrame:
    return calibrate(pd.DataFrame([simulate_run(r, steps) for r in runs]).reindex(columns=list(COLUMNS)))


FIT_FRAMEWORK = "NeMo RL"
"""The calibration check fits on the runs of this framework only and reports the error on every other run."""


def calibrate(df: pd.DataFrame) -> pd.DataFrame:
    """One step-time scale factor, the median of published / predicted over the simulated ``FIT_FRAMEWORK``
    runs, applied to every *other* simulated run (``calibrated_step_s``, ``calibrated_error_pct``); the runs it
    was fitted on get ``fit`` in ``calibration`` and no calibrated error."""
    ok = df["status"].str.startswith("ok")
    fit = ok & df["framework"].str.startswith(FIT_FRAMEWORK)
    factor = float((df.loc[fit, "published_step_s"] / df.loc[fit, "predicted_step_s"]).median()) if fit.any() else math.nan
    out = df.assign(calibration=np.where(fit, "fit", np.where(ok, "held out", "")), calibration_factor=factor)
    held = ok & ~fit
    out["calibrated_step_s"] = np.where(held, out["predicted_step_s"] * factor, np.nan)
    out["calibrated_error_pct"] = 100.0 * (out["calibrated_step_s"] / out["published_step_s"] - 1.0)
    return out


def _median_at(ok: pd.DataFrame, column: str) -> float:
    """Median |step error| with each assumed-length run's error taken at one end of its range (``column``)."""
    err = ok[column].where(ok[column].notna(), ok["error_pct"]).abs()
    return float(err.median()) if len(ok) else math.nan


def summary(df: pd.DataFrame) -> dict[str, float | int]:
    """Median and worst |step-time error| over the simulated runs (and over those with a published mean
    response length)."""
    ok = df[df["status"].str.startswith("ok")]
    stated = ok[ok["mean_response_published"].astype(bool)]
    err, err_stated = ok["error_pct"].abs(), stated["error_pct"].abs()
    held = ok[ok["calibration"] == "held out"] if "calibration" in ok else ok.iloc[:0]
    return {"runs": len(df), "simulated": len(ok), "median_abs_error_pct": float(err.median()) if len(ok) else math.nan,
            "held_out": len(held),
            "median_abs_calibrated_error_pct": float(held["calibrated_error_pct"].abs().median()) if len(held) else math.nan,
            "median_abs_uncalibrated_error_pct_held_out": float(held["error_pct"].abs().median()) if len(held) else math.nan,
            "worst_abs_error_pct": float(err.max()) if len(ok) else math.nan,
            "past_memory_check": int((ok["memory_check"] != "fits").sum()),
            "consistent_runs": int((~ok["contradicted"].astype(bool)).sum()),
            "median_abs_error_pct_consistent": float(ok.loc[~ok["contradicted"].astype(bool), "error_pct"].abs().median())
            if len(ok) else math.nan,
            "median_abs_error_pct_low": _median_at(ok, "error_low_pct"),
            "median_abs_error_pct_high": _median_at(ok, "error_high_pct"),
            "median_abs_error_pct_spread_low": _median_at(ok, "error_spread_low_pct"),
            "median_abs_error_pct_spread_high": _median_at(ok, "error_spread_high_pct"),
            "stated_runs": len(stated),
            "median_abs_error_pct_stated": float(err_stated.median()) if len(stated) else math.nan,
            "worst_abs_error_pct_stated": float(err_stated.max()) if len(stated) else math.nan}


# --------------------------------------------------------------------------------------------------
# Figure and command line


def figure(df: pd.DataFrame, steps: int) -> Figure:
    fig = Figure(figsize=(12, 6.8))
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    ok = df[df["status"].str.startswith("ok")]
    for i, (fw, g) in enumerate(ok.groupby("framework")):
        color, fits = f"C{i}", g["memory_check"] == "fits"
        ax.scatter(g.loc[fits, "published_step_s"], g.loc[fits, "predicted_step_s"], label=fw, s=40, color=color)
        ax.scatter(g.loc[~fits, "published_step_s"], g.loc[~fits, "predicted_step_s"], s=40, facecolors="none",
                   edgecolors=color, label=f"{fw} (past the memory check)" if (~fits).any() else None)
    if len(ok):
        lo = 0.5 * min(ok["published_step_s"].min(), ok["predicted_step_s"].min())
        hi = 2.0 * max(ok["published_step_s"].max(), ok["predicted_step_s"].max())
        xs = np.array([lo, hi])
        ax.plot(xs, xs, "k-", lw=1, label="predicted = published")
        ax.fill_between(xs, xs * 0.75, xs * 1.25, color="grey", alpha=0.15, label="±25%")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("published step time (s)")
    ax.set_ylabel("predicted step time (s), uncalibrated")
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    ax.set_title(f"{len(ok)} of {len(df)} published runs simulated")
    order = ok.sort_values("error_pct")
    colors = ["tab:red" if abs(e) > 50 else "tab:orange" if abs(e) > 25 else "tab:green" for e in order["error_pct"]]
    bx.barh(order["key"], order["error_pct"], color=colors)
    bx.axvline(0, color="k", lw=1)
    bx.set_xlabel("step-time error, predicted / published - 1 (%)")
    bx.tick_params(axis="y", labelsize=7)
    s = summary(df)
    bx.set_title(f"median |error| {s['median_abs_error_pct']:.0f}%, worst {s['worst_abs_error_pct']:.0f}% "
                 f"(baseline policy, {steps} step(s) each)", fontsize=9)
    fig.tight_layout()
    return fig


def select(only: str) -> list[PublishedRun]:
    keys = [k.strip() for k in only.split(",") if k.strip()]
    if not keys:
        return list(RUNS)
    known = {r.key: r for r in RUNS}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise SystemExit(f"error: unknown run(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[k] for k in keys]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = ""
    if "--only" in argv:  # the common parser has no --only; take it out before parsing the rest
        i = argv.index("--only")
        only = argv[i + 1] if i + 1 < len(argv) else ""
        del argv[i:i + 2]
    if "--op-costs" in argv:  # roofline, tables (the default) or tables+arch: what prices the kernels (docs/op_costs.md)
        i = argv.index("--op-costs")
        use_op_costs(argv[i + 1] if i + 1 < len(argv) else "")
        del argv[i:i + 2]
    args = parse_args(__doc__.splitlines()[0], argv)
    steps = 1 if args.quick else 3
    df = compute(select(only), steps)
    show = df[["key", "gpu", "devices", "status", "published_step_s", "predicted_step_s", "error_pct"]]
    print_table(show.assign(status=show["status"].str.slice(0, 40)),
                f"published runs vs oppo-sim (baseline policy, uncalibrated, {steps} step(s) each)",
                floatfmt="{:.1f}")
    s = summary(df)
    print(f"simulated {s['simulated']} of {s['runs']} runs ({s['past_memory_check']} timed past the memory check): "
          f"median |error| {s['median_abs_error_pct']:.1f}%, worst "
          f"{s['worst_abs_error_pct']:.1f}%; with a published mean response ({s['stated_runs']} runs): median "
          f"{s['median_abs_error_pct_stated']:.1f}%, worst {s['worst_abs_error_pct_stated']:.1f}%; without the runs "
          f"whose assumption the source contradicts ({s['consistent_runs']} runs): median "
          f"{s['median_abs_error_pct_consistent']:.1f}%; assumed lengths at x{RANGE_FACTORS[0]:g} / x{RANGE_FACTORS[1]:g}: "
          f"median {s['median_abs_error_pct_low']:.1f}% / {s['median_abs_error_pct_high']:.1f}%; length spread at "
          f"x{RANGE_FACTORS[0]:g} / x{RANGE_FACTORS[1]:g}: median {s['median_abs_error_pct_spread_low']:.1f}% / "
          f"{s['median_abs_error_pct_spread_high']:.1f}%")
    if s["held_out"]:
        print(f"calibration check: one scale factor {df['calibration_factor'].iloc[0]:.3f} fitted on the {FIT_FRAMEWORK} "
              f"runs; on the {s['held_out']} other runs median |error| {s['median_abs_uncalibrated_error_pct_held_out']:.1f}% "
              f"uncalibrated -> {s['median_abs_calibrated_error_pct']:.1f}% calibrated")
    waiting = df[df["status"].str.startswith("needs")]
    for _, r in waiting.iterrows():
        print(f"- {r['key']}: {r['status']}")
    save(figure(df, steps), df, NAME, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
