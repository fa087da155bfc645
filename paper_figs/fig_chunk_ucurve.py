"""Figure: throughput vs the streaming chunk size C (the paper's chunk-size "U-curve") under both generation
engines, reasoning trace.

OPPO streams every C generated tokens of a response to the frozen scorers (reward, reference), which
prefill it incrementally. The paper reports a U: with a 7B actor and a 7B reward C=500 beat C=100 and
C=3000. This script sweeps C ∈ {16, 32, ..., 4096} for ``intra`` and ``oppo`` (dynamic Δ from Δ0=8) on
``servegen_deepseek_r1_sampled`` at the paper's setup, plus "C = ∞" (C larger than any response), under
**both generation engines**:

- ``static`` (``oppo_sim/engine/static.py``): TRL-style ``generate`` on static padded mini-batches
  (``gen_batch`` 64), cut into calls of C tokens with the KV cache carried; the rows of finished
  responses stay in the batch until the call ends, each call pays a fixed overhead. This is what the paper
  measured, and it has a U: small C pays ``calls x overhead``, large C keeps finished rows decoding padding
  and the scorers waiting. With C = ∞ a step is one unchunked ``generate`` (no overlap at all);
- ``continuous`` (``oppo_sim/engine/continuous.py``): vLLM-style continuous batching; a finished response
  leaves at once whatever C is, so the engine's time does not depend on C and large C converges to
  per-sample streaming instead of back to the baseline: no U, only a left arm.

Variants (labelled knobs that legitimately move the arms): static -- ``paper`` (20 ms per call, the
engine's placeholder), ``100ms/call`` (a heavier ``generate`` call: how the left arm depends on the
unmeasured per-call cost), ``score GPU A100``, ``colocated`` (control: nothing is streamed to scorers on the
generators' own GPUs); continuous -- ``paper``, ``scorer+30ms`` (a Python/HF-style scorer: 30 ms per scorer
forward), ``contention 0.5``, ``reward 32B``, ``score GPU A100``, ``colocated``.

Y axis: samples/s over the same engine's and variant's synchronous ``baseline``. 40 steps (``--quick``: 4
steps, three C values, the two ``paper`` variants and one more). The CSV also holds each point's mean
generation time, the *exposed* scoring time after generation ends and the scoring GPU's busy fraction;
``best_for_variant`` marks the fastest C of each engine, variant and policy (the star in the figure) and
``knee_for_variant`` the smallest C within 1% of it.

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
from oppo_sim.engine.static_params import StaticConfig, StaticCostParams
from oppo_sim.hw.devices.hardware import DEFAULT_COST_PARAMS, Hardware, OpParams, get_gpu
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
GEN_BATCH = 64  # TRL's local_rollout_forward_batch_size default
ENGINES = ("static", "continuous")
COLUMNS = ("engine", "variant", "description", "policy", "label", "chunk", "steps", "step_time_s", "samples_per_s", "speedup",
           "generation_s", "exposed_scoring_s", "training_s", "utilization_main", "utilization_score",
           "best_for_variant", "knee_for_variant")


@dataclass(frozen=True)
class Variant:
    engine: str
    key: str
    description: str
    config: SimConfig
    color: str


def _continuous_variants(base: SimConfig) -> list[Variant]:
    prefill = DEFAULT_COST_PARAMS.prefill
    slow_scorer = Hardware(get_gpu("h200"), params=replace(
        DEFAULT_COST_PARAMS, prefill=OpParams(prefill.eff_compute, prefill.eff_memory, 0.030)))
    a100 = Placement((Pool("main", 7), Pool("score", 1, gpu="a100-80gb")), reference="score")
    return [
        Variant("continuous", "paper", "paper setup: 1×H200 scores (7B reward + 7B ref)", base, "#C44E52"),
        Variant("continuous", "scorer+30ms", "+30 ms fixed cost per scorer forward", replace(base, gpu=slow_scorer),
                "#4C72B0"),
        Variant("continuous", "contention 0.5", "contention 0.5 (shared GPU runs 1.5× slower)",
                replace(base, contention=0.5), "#55A868"),
        Variant("continuous", "reward 32B", "Qwen2.5-32B reward on the scoring GPU (critic 7B)",
                replace(base, reward="qwen2.5-32b", critic="qwen2.5-7b"), "#8172B2"),
        Variant("continuous", "score GPU A100", "scoring GPU is an A100-80GB", replace(base, placement=a100), "#DD8452"),
        Variant("continuous", "colocated", "colocated on 8 GPUs: nothing streamed (control)",
                replace(base, placement=colocated_placement()), "#8C8C8C"),
    ]


def _static_variants(base: SimConfig) -> list[Variant]:
    st = replace(base, engine_kind="static", static=StaticConfig(gen_batch=GEN_BATCH))
    a100 = Placement((Pool("main", 7), Pool("score", 1, gpu="a100-80gb")), reference="score")
    ovh = st.static_cost.call_overhead_s
    return [
        Variant("static", "paper", f"paper setup, TRL generate ({1000 * ovh:.0f} ms per call)", st, "#C44E52"),
        Variant("static", "100ms/call", "100 ms per generate call", replace(st, static_cost=StaticCostParams(0.1)),
                "#4C72B0"),
        Variant("static", "score GPU A100", "scoring GPU is an A100-80GB", replace(st, placement=a100), "#DD8452"),
        Variant("static", "colocated", "colocated on 8 GPUs: nothing streamed (control)",
                replace(st, placement=colocated_placement()), "#8C8C8C"),
    ]


def variants(steps: int) -> list[Variant]:
    base = SimConfig(steps=steps)
    return _static_variants(base) + _continuous_variants(base)


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
            "engine": v.engine, "variant": v.key, "description": v.description, "policy": pol,
            "label": label if not inf else f"{pol}(C=∞)", "chunk": math.inf if inf else (np.nan if c is None else c),
            "steps": s["steps"], "step_time_s": s["step_time_s"], "samples_per_s": s["samples_per_s"],
            "generation_s": float(st["generation_s"].mean()), "exposed_scoring_s": float(st["scoring_s"].mean()),
            "training_s": float(st["training_s"].mean()),
            "utilization_main": s["utilization"].get("main", np.nan),
            "utilization_score": s["utilization"].get("score", np.nan),
        })
    df = pd.DataFrame(rows)
    base = df[df["policy"] == "baseline"].set_index(["engine", "variant"])["samples_per_s"]
    df["speedup"] = df["samples_per_s"] / [base[(e, v)] for e, v in zip(df["engine"], df["variant"])]
    # best: the fastest C; knee: the smallest C within KNEE_TOL of it (neither where C makes no difference)
    finite = df[np.isfinite(df["chunk"].astype(float))]
    best, knees = [], []
    for _, g in finite.groupby(["engine", "variant", "policy"]):
        top, low = g["samples_per_s"].max(), g["samples_per_s"].min()
        if top - low > 1e-9 * top:
            best.append(g["samples_per_s"].idxmax())
        if top - low > KNEE_TOL * top:
            knees.append(g[g["samples_per_s"] >= (1 - KNEE_TOL) * top]["chunk"].astype(float).idxmin())
    df["best_for_variant"] = df.index.isin(best)
    df["knee_for_variant"] = df.index.isin(knees)
    return df[list(COLUMNS)]


def _panel(ax, sub: pd.DataFrame, vs: Sequence[Variant]) -> None:
    for v in vs:
        d = sub[sub["variant"] == v.key]
        fin = d[np.isfinite(d["chunk"].astype(float))].sort_values("chunk")
        inf = d[~np.isfinite(d["chunk"].astype(float))]
        bold = v.key == "paper"
        ax.plot(fin["chunk"].astype(float), fin["speedup"], marker="o", markersize=4 if bold else 3, color=v.color,
                label=v.description, linewidth=2.0 if bold else 1.1, zorder=3 if bold else 2)
        if len(inf):
            ax.axhline(float(inf["speedup"].iloc[0]), color=v.color, linestyle=":", linewidth=1.0, alpha=0.9)
        b = fin[fin["best_for_variant"]]
        ax.scatter(b["chunk"].astype(float), b["speedup"], marker="*", s=130 if bold else 80, color=v.color, zorder=5,
                   edgecolor="black", linewidth=0.5)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axvline(500, color="0.5", linewidth=0.8, linestyle="--")
    ax.text(500, 0.02, " C=500 (paper's best)", transform=ax.get_xaxis_transform(), fontsize=7, color="0.35")
    ax.set_xscale("log", base=2)
    cs = sorted(set(sub["chunk"].astype(float)) - {math.inf})
    ax.set_xticks(cs, [str(int(c)) for c in cs])
    ax.minorticks_off()
    ax.grid(alpha=0.2)


def _best_note(df: pd.DataFrame, engine: str, pol: str) -> str:
    """'best C=.. (..×), within 1% from C=..' (on a second line) for the engine's paper variant."""
    d = df[(df["engine"] == engine) & (df["policy"] == pol) & (df["variant"] == "paper")]
    b, k = d[d["best_for_variant"]], d[d["knee_for_variant"]]
    if not len(b):
        return ""
    note = f"\nbest C={int(b['chunk'].iloc[0])} ({b['speedup'].iloc[0]:.2f}×)"
    return note + (f", within {KNEE_TOL:.0%} from C={int(k['chunk'].iloc[0])}" if len(k) else "")


def figure(df: pd.DataFrame, vs: Sequence[Variant], steps: int) -> Figure:
    engines = [e for e in ENGINES if (df["engine"] == e).any()]
    fig = Figure(figsize=(13, 4.2 * len(engines) + 1.2), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(engines), 2, sharey="row"))
    what = {"static": "static batching (TRL generate, calls of C)", "continuous": "continuous batching (vLLM)"}
    for row, engine in zip(axes, engines):
        evs = [v for v in vs if v.engine == engine]
        for ax, pol in zip(row, ("intra", "oppo")):
            _panel(ax, df[(df["engine"] == engine) & (df["policy"] == pol)], evs)
            name = "intra" if pol == "intra" else f"oppo (Δ0={DELTA0})"
            ax.set_title(f"{what[engine]}: {name}{_best_note(df, engine, pol)}", loc="left", fontsize=10)
        row[0].set_ylabel(f"{engine}: speedup over its baseline")
        row[0].legend(fontsize=7, loc="best", frameon=True, framealpha=0.85, ncols=1)
    for ax in axes[-1]:
        ax.set_xlabel("chunk size C (tokens), log scale")
    handles = [Line2D([], [], color="0.3", linestyle=":"),
               Line2D([], [], marker="*", color="0.3", linestyle="", markersize=10, markeredgecolor="black")]
    fig.legend(handles, ["C = ∞ (static: one unchunked generate; continuous: per-sample streaming)",
                         "best C of each engine and variant"], loc="outside lower center", ncols=2, fontsize=8,
               frameon=False)
    fig.suptitle(f"Chunk size C on {REASONING_TRACE} — 8×H200, Qwen2.5-7B actor + 7B reward, B=112, {steps} steps: "
                 "static batching has a U, continuous batching has none", fontsize=10, x=0.01, ha="left")
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    require_trace(REASONING_TRACE)
    steps = 4 if args.quick else 40
    chunks = QUICK_CHUNKS if args.quick else CHUNKS
    vs = variants(steps)
    if args.quick:
        vs = [v for v in vs if v.key == "paper" or (v.engine, v.key) == ("continuous", "score GPU A100")]
    df = compute(chunks, vs, args.processes)
    show = df.drop(columns=["description"])
    print_table(show, f"chunk-size sweep on {REASONING_TRACE}, {steps} steps (speedup over each engine's and variant's baseline)")
    save(figure(df, vs, steps), df, NAME, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
