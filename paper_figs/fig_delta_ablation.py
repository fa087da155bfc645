"""Figure: the over-commit Δ ablation — fixed Δ vs dynamic Δ, throughput and staleness, reasoning trace.

``inter`` keeps B+Δ prompts in flight, trains the first B to finish and defers the rest with their partial
generations. This script compares fixed Δ = 0 (= the synchronous baseline), 4, 8 (and 16, 32, the range
the dynamic rule moves in) with the reward-slope rule (``dynamic-delta``, Δ0=8, Δ in [0, 32], ±1 per step;
and the paper-pseudocode variant with proportional steps max(1, Δ//4)) and with ``oppo`` (C=500 + the
±1 rule), on ``servegen_deepseek_r1_sampled`` at the paper's setup, 200 steps (``--quick``: 12).

Rewards come from the simulator's synthetic curve (``RewardCurve``: r_max - (r_max - r0)·exp(-t/τ) +
noise, τ=150 steps by default, so still rising over 200 steps). Because Δ depends only on the reward
history, a converging curve (τ=30) is also run for the two dynamic rules to show Δ falling back.

Panels: samples/s (speedup over Δ=0), staleness of the trained samples (policy versions behind: mean and
max), and Δ over the steps with the mean reward.

Writes ``out/fig_delta_ablation.png``, ``out/fig_delta_ablation.csv`` (one row per run) and
``out/fig_delta_ablation_steps.csv`` (Δ, reward and staleness per step of the dynamic runs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from oppo_sim.core.policies import DeltaRule, DynamicDelta, Inter, Oppo, Policy
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.traces.synthetic import RewardCurve

try:
    from common import (
        REASONING_TRACE,
        parse_args,
        print_table,
        require_trace,
        save,
        simulate_many,
    )
except ImportError:  # imported as paper_figs.fig_delta_ablation
    from paper_figs.common import (
        REASONING_TRACE,
        parse_args,
        print_table,
        require_trace,
        save,
        simulate_many,
    )

NAME = "fig_delta_ablation"
FIXED = (0, 4, 8, 16, 32)
DELTA0, DELTA_MAX = 8, 32
CHUNK = 500
FAST_TAU = 30.0
COLUMNS = ("run", "policy", "label", "kind", "reward_tau", "steps", "step_time_s", "samples_per_s", "speedup",
           "staleness_mean", "staleness_max", "delta_mean", "delta_final", "utilization_overall")
STEP_COLUMNS = ("run", "step", "delta", "reward", "staleness_mean", "staleness_max", "step_time_s")


def runs(steps: int) -> list[tuple[str, str, Policy, SimConfig]]:
    """(run name, kind, policy, config) of every simulation."""
    base = SimConfig(steps=steps)
    fast = replace(base, reward_curve=RewardCurve(tau_steps=FAST_TAU))
    pm1 = DeltaRule(delta0=DELTA0, delta_max=DELTA_MAX)
    prop = replace(pm1, proportional=True)
    out: list[tuple[str, str, Policy, SimConfig]] = [
        (f"Δ={d}" + (" (baseline)" if d == 0 else ""), "fixed", Inter(delta=d), base) for d in FIXED
    ]
    out += [
        ("dynamic ±1", "dynamic", DynamicDelta(rule=pm1), base),
        ("dynamic prop.", "dynamic", DynamicDelta(rule=prop), base),
        (f"oppo (C={CHUNK}, ±1)", "oppo", Oppo(chunk=CHUNK, rule=pm1), base),
        (f"dynamic ±1, τ={FAST_TAU:g}", "dynamic, converging reward", DynamicDelta(rule=pm1), fast),
        (f"dynamic prop., τ={FAST_TAU:g}", "dynamic, converging reward", DynamicDelta(rule=prop), fast),
    ]
    return out


def compute(steps: int, processes: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    spec = runs(steps)
    results = simulate_many([(REASONING_TRACE, p, c) for _, _, p, c in spec], processes)
    rows, per_step = [], []
    for (name, kind, pol, cfg), (s, st) in zip(spec, results):
        rows.append({
            "run": name, "policy": pol.name, "label": pol.label(), "kind": kind,
            "reward_tau": cfg.reward_curve.tau_steps, "steps": s["steps"], "step_time_s": s["step_time_s"],
            "samples_per_s": s["samples_per_s"], "staleness_mean": s["staleness_mean"],
            "staleness_max": s["staleness_max"], "delta_mean": float(st["delta"].mean()),
            "delta_final": int(st["delta"].iloc[-1]), "utilization_overall": s["utilization_overall"],
        })
        if kind != "fixed":
            per_step.append(pd.DataFrame({"run": name, **{c: st[c] for c in STEP_COLUMNS[1:]}}))
    df = pd.DataFrame(rows)
    df["speedup"] = df["samples_per_s"] / float(df.loc[df["run"].str.startswith("Δ=0"), "samples_per_s"].iloc[0])
    return df[list(COLUMNS)], pd.concat(per_step, ignore_index=True)[list(STEP_COLUMNS)]


COLORS = {"fixed": "#8C8C8C", "dynamic": "#4C72B0", "oppo": "#C44E52", "dynamic, converging reward": "#4C72B0"}


def figure(df: pd.DataFrame, per_step: pd.DataFrame, steps: int) -> Figure:
    fig = Figure(figsize=(13, 8.2), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.0])
    ax_t, ax_s = top.subplots(1, 2)
    y = np.arange(len(df))
    colors = [COLORS[k] for k in df["kind"]]
    hatch = ["//" if "converging" in k else "" for k in df["kind"]]
    # fixed-Δ bars shaded light -> dark by Δ
    for i, (k, run) in enumerate(zip(df["kind"], df["run"])):
        if k == "fixed":
            d = int(run.split("=")[1].split()[0])
            colors[i] = str(0.8 - 0.5 * d / max(FIXED))
        elif "prop." in run:
            colors[i] = "#55A868"
    bars = ax_t.barh(y, df["samples_per_s"], color=colors, hatch=hatch, edgecolor="white")
    for b, sp, v in zip(bars, df["speedup"], df["samples_per_s"]):
        ax_t.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {v:.2f}  ({sp:.2f}×)", va="center", fontsize=7)
    ax_t.set_yticks(y, df["run"], fontsize=8)
    ax_t.set_ylim(len(df) - 0.5, -0.5)
    ax_t.set_xlim(0, df["samples_per_s"].max() * 1.3)
    ax_t.set_xlabel("samples/s (speedup over Δ=0)")
    ax_t.set_title("throughput", loc="left", fontsize=10)
    ax_t.grid(axis="x", alpha=0.2)
    ax_t.set_axisbelow(True)
    bars = ax_s.barh(y, df["staleness_mean"], color=colors, hatch=hatch, edgecolor="white")
    for b, m, mx in zip(bars, df["staleness_mean"], df["staleness_max"]):
        ax_s.text(b.get_width(), b.get_y() + b.get_height() / 2, f" mean {m:.3f}, max {mx}", va="center", fontsize=7)
    ax_s.set_yticks(y, [""] * len(df))
    ax_s.set_ylim(len(df) - 0.5, -0.5)
    ax_s.set_xlim(0, max(df["staleness_mean"].max(), 1e-3) * 1.6)
    ax_s.set_xlabel("staleness of trained samples (policy versions behind), mean per sample")
    ax_s.set_title("staleness", loc="left", fontsize=10)
    ax_s.grid(axis="x", alpha=0.2)
    ax_s.set_axisbelow(True)
    # Δ over steps
    ax = bottom.subplots()
    rax = ax.twinx()
    styles = {"dynamic ±1": ("#4C72B0", "-"), "dynamic prop.": ("#55A868", "-")}
    for run, d in per_step.groupby("run", sort=False):
        if run.startswith("oppo"):
            continue  # same Δ trajectory as "dynamic ±1": Δ depends only on the reward history
        key = run.split(",")[0]
        color, _ = styles.get(key, ("#C44E52", "-"))
        ls = "--" if "τ=" in run else "-"
        ax.step(d["step"], d["delta"], where="post", color=color, linestyle=ls, linewidth=1.3, label=f"Δ: {run}")
    for tau, ls in ((None, "-"), (FAST_TAU, "--")):
        name = "dynamic ±1" if tau is None else f"dynamic ±1, τ={FAST_TAU:g}"
        d = per_step[per_step["run"] == name]
        tau_lbl = f"τ={tau:g}" if tau else "τ=150 (default)"
        rax.plot(d["step"], d["reward"], color="0.55", linestyle=ls, linewidth=0.8, alpha=0.8,
                 label=f"mean reward, {tau_lbl}")
    ax.set_xlabel("training step")
    ax.set_ylabel("Δ (extra prompts in flight)")
    ax.set_ylim(-1, DELTA_MAX + 3)
    rax.set_ylabel("mean reward (synthetic curve)", color="0.4")
    ax.set_title(f"Δ over training (oppo follows 'dynamic ±1' exactly: Δ depends only on the rewards); "
                 f"Δ0={DELTA0}, Δ∈[0, {DELTA_MAX}], window 5", loc="left", fontsize=10)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = rax.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7.5, frameon=False, loc="lower right", ncols=2)
    ax.grid(alpha=0.2)
    fig.suptitle(f"Δ ablation on {REASONING_TRACE} — 8×H200, Qwen2.5-7B actor + 7B reward, B=112, {steps} steps "
                 f"(hatched: converging reward curve τ={FAST_TAU:g})", fontsize=10, x=0.01, ha="left")
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    require_trace(REASONING_TRACE)
    steps = 12 if args.quick else 200
    df, per_step = compute(steps, args.processes)
    print_table(df.drop(columns=["label"]), f"Δ ablation on {REASONING_TRACE}, {steps} steps")
    save(figure(df, per_step, steps), df, NAME, args.out)
    path = args.out / f"{NAME}_steps.csv"
    per_step.to_csv(path, index=False, float_format="%.6g")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
