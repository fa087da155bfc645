"""Figure: throughput vs the streaming chunk size C (the paper's chunk-size "U-curve"), reasoning trace.

OPPO streams every C generated tokens of a response to the frozen scorers (reward, reference), which
prefill it incrementally. The paper argues for a U: too small a C costs per-chunk overhead and contention,
too large a C serialises scoring behind generation again. This script sweeps
C ∈ {16, 32, ..., 4096} for ``intra`` and ``oppo`` (dynamic Δ from Δ0=8) on
``servegen_deepseek_r1_sampled`` at the paper's setup, plus "C = ∞" (C larger than any response: every
response goes to the scorers whole, once it finishes = per-sample streaming), under labelled variants of
the knobs that legitimately move the two arms:

- ``paper``: the default setup (1×H200 scores with the 7B reward and the 7B reference);
- ``scorer+30ms``: every scorer forward pays a 30 ms fixed overhead (a Python/HF-transformers-style
  scorer rather than a tuned engine) -- makes many small forwards costly;
- ``contention 0.5``: two jobs sharing a GPU each run 1.5x slower than ideal time slicing;
- ``reward 32B``: a Qwen2.5-32B reward model on the scoring GPU (critic kept 7B) -- a heavier scorer;
- ``score GPU A100``: the scoring GPU is an A100-80GB instead of an H200 -- a slower scorer;
- ``colocated``: reward and reference on the same 8 GPUs as generation; the simulator streams only to
  scorers on another pool (their KV cache would otherwise compete with the generator's), so C has no
  effect there: shown as the control.

Y axis: samples/s over the same variant's synchronous ``baseline``. 40 steps (``--quick``: 4 steps, three
C values, two variants). The CSV also holds each point's mean generation time, the *exposed* scoring time
after generation ends (the serialisation the right arm of a U would come from) and the scoring GPU's
busy fraction (the per-chunk cost the left arm comes from); ``best_for_variant`` marks the fastest C
and ``knee_for_variant`` the smallest C within 1% of it (the star in the figure).

Writes ``out/fig_chunk_ucurve.png`` and ``out/fig_chunk_ucurve.csv``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from oppo_sim.core.placement import Placement, Pool, colocated_placement
from oppo_sim.core.policies import Baseline, DeltaRule, Intra, Oppo, Policy
from oppo_sim.hw.hardware import DEFAULT_COST_PARAMS, Hardware, OpParams, get_gpu
from oppo_sim.pipeline.config import SimConfig

try:
    from common import (
        REASONING_TRACE,
        parse_args,
        print_table,
        require_trace,
        save,
        simulate_many,
    )
except ImportError:  # imported as paper_figs.fig_chunk_ucurve
    from paper_figs.common import (
        REASONING_TRACE,
        parse_args,
        print_table,
        require_trace,
        save,
        simulate_many,
    )

NAME = "fig_chunk_ucurve"
CHUNKS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
QUICK_CHUNKS = (64, 512, 4096)
DELTA0 = 8
KNEE_TOL = 0.01
COLUMNS = ("variant", "description", "policy", "label", "chunk", "steps", "step_time_s", "samples_per_s", "speedup",
           "generation_s", "exposed_scoring_s", "training_s", "utilization_main", "utilization_score",
           "best_for_variant", "knee_for_variant")


@dataclass(frozen=True)
class Variant:
    key: str
    description: str
    config: SimConfig
    color: str


def variants(steps: int) -> list[Variant]:
    base = SimConfig(steps=steps)
    prefill = DEFAULT_COST_PARAMS.prefill
    slow_scorer = Hardware(get_gpu("h200"), params=replace(
        DEFAULT_COST_PARAMS, prefill=OpParams(prefill.eff_compute, prefill.eff_memory, 0.030)))
    return [
        Variant("paper", "paper setup: 1×H200 scores (7B reward + 7B ref)", base, "#C44E52"),
        Variant("scorer+30ms", "+30 ms fixed cost per scorer forward", replace(base, gpu=slow_scorer), "#4C72B0"),
        Variant("contention 0.5", "contention 0.5 (shared GPU runs 1.5× slower)", replace(base, contention=0.5),
                "#55A868"),
        Variant("reward 32B", "Qwen2.5-32B reward on the scoring GPU (critic 7B)",
                replace(base, reward="qwen2.5-32b", critic="qwen2.5-7b"), "#8172B2"),
        Variant("score GPU A100", "scoring GPU is an A100-80GB",
                replace(base, placement=Placement((Pool("main", 7), Pool("score", 1, gpu="a100-80gb")),
                                                  reference="score")), "#DD8452"),
        Variant("colocated", "colocated on 8 GPUs: nothing streamed (control)",
                replace(base, placement=colocated_placement()), "#8C8C8C"),
    ]


def _policies(chunks: Sequence[int], never: int) -> list[tuple[str, int | None, Policy]]:
    out: list[tuple[str, int | None, Policy]] = [("baseline", None, Baseline())]
    for c in (*chunks, never):
        out.append(("intra", c, Intra(chunk=c)))
        out.append(("oppo", c, Oppo(chunk=c, rule=DeltaRule(delta0=DELTA0))))
    return out


def compute(chunks: Sequence[int], vs: Sequence[Variant], processes: int = 1) -> pd.DataFrame:
    jobs, keys = [], []
    for v in vs:
        never = (v.config.max_response or 1 << 20) + 1  # no chunk boundary before a response ends
        for pol, c, policy in _policies(chunks, never):
            jobs.append((REASONING_TRACE, policy, v.config))
            keys.append((v, pol, c, c == never, policy.label()))
    rows = []
    for (v, pol, c, inf, label), (s, st) in zip(keys, simulate_many(jobs, processes)):
        rows.append({
            "variant": v.key, "description": v.description, "policy": pol,
            "label": label if not inf else f"{pol}(C=∞)", "chunk": math.inf if inf else (np.nan if c is None else c),
            "steps": s["steps"], "step_time_s": s["step_time_s"], "samples_per_s": s["samples_per_s"],
            "generation_s": float(st["generation_s"].mean()), "exposed_scoring_s": float(st["scoring_s"].mean()),
            "training_s": float(st["training_s"].mean()),
            "utilization_main": s["utilization"].get("main", np.nan),
            "utilization_score": s["utilization"].get("score", np.nan),
        })
    df = pd.DataFrame(rows)
    base = df[df["policy"] == "baseline"].set_index("variant")["samples_per_s"]
    df["speedup"] = df["samples_per_s"] / df["variant"].map(base)
    # best: the fastest C; knee: the smallest C within KNEE_TOL of it (neither where C makes no difference)
    finite = df[np.isfinite(df["chunk"].astype(float))]
    best, knees = [], []
    for _, g in finite.groupby(["variant", "policy"]):
        top, low = g["samples_per_s"].max(), g["samples_per_s"].min()
        if top - low > 1e-9 * top:
            best.append(g["samples_per_s"].idxmax())
        if top - low > KNEE_TOL * top:
            knees.append(g[g["samples_per_s"] >= (1 - KNEE_TOL) * top]["chunk"].astype(float).idxmin())
    df["best_for_variant"] = df.index.isin(best)
    df["knee_for_variant"] = df.index.isin(knees)
    return df[list(COLUMNS)]


def figure(df: pd.DataFrame, vs: Sequence[Variant], steps: int) -> Figure:
    fig = Figure(figsize=(13, 5.0), layout="constrained")
    axes = fig.subplots(1, 2, sharey=False)
    for ax, pol in zip(axes, ("intra", "oppo")):
        sub = df[df["policy"] == pol]
        for v in vs:
            d = sub[sub["variant"] == v.key]
            fin = d[np.isfinite(d["chunk"].astype(float))].sort_values("chunk")
            inf = d[~np.isfinite(d["chunk"].astype(float))]
            dashed = v.key == "scorer+30ms"  # lies on the paper line: dashed and hollow so both stay visible
            ax.plot(fin["chunk"].astype(float), fin["speedup"], marker="o", markersize=5 if dashed else 3.5,
                    color=v.color, label=v.description, linestyle="--" if dashed else "-",
                    markerfacecolor="none" if dashed else v.color, zorder=3 if dashed else 2)
            if len(inf):
                ax.axhline(float(inf["speedup"].iloc[0]), color=v.color, linestyle=":", linewidth=1.0, alpha=0.9)
            b = fin[fin["knee_for_variant"]]
            ax.scatter(b["chunk"].astype(float), b["speedup"], marker="*", s=90, color=v.color, zorder=5,
                       edgecolor="black", linewidth=0.4)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axvline(500, color="0.5", linewidth=0.8, linestyle="--")
        ax.text(500, 0.02, " C=500 (paper's best)", transform=ax.get_xaxis_transform(), fontsize=7, color="0.35")
        ax.set_xscale("log", base=2)
        cs = sorted(set(sub["chunk"].astype(float)) - {math.inf})
        ax.set_xticks(cs, [str(int(c)) for c in cs])
        ax.minorticks_off()
        ax.set_xlabel("chunk size C (tokens), log scale")
        ax.set_ylabel("speedup over the variant's baseline (samples/s)")
        title = "intra (chunked streaming only)" if pol == "intra" else f"oppo (chunked streaming + dynamic Δ, Δ0={DELTA0})"
        ax.set_title(title, loc="left", fontsize=10)
        ax.grid(alpha=0.2)
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [Line2D([], [], color="0.3", linestyle=":"), Line2D([], [], marker="*", color="0.3", linestyle="",
                                                                       markersize=9)]
    labels += ["C = ∞ (whole response once finished = per-sample streaming)", f"knee: smallest C within {KNEE_TOL:.0%} of the variant's best C"]
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=7.5, frameon=False)
    fig.suptitle(f"Chunk size C on {REASONING_TRACE} — 8×H200, Qwen2.5-7B actor, B=112, {steps} steps: "
                 "too small a C costs, too large a C does not (finished responses are streamed anyway)",
                 fontsize=10, x=0.01, ha="left")
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    require_trace(REASONING_TRACE)
    steps = 4 if args.quick else 40
    chunks = QUICK_CHUNKS if args.quick else CHUNKS
    vs = variants(steps)
    if args.quick:
        vs = [v for v in vs if v.key in ("paper", "score GPU A100")]
    df = compute(chunks, vs, args.processes)
    show = df.drop(columns=["description"])
    print_table(show, f"chunk-size sweep on {REASONING_TRACE}, {steps} steps (speedup over each variant's baseline)")
    save(figure(df, vs, steps), df, NAME, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
