"""Figure: timelines (Gantt) of the synchronous baseline vs OPPO's overlapped steps on the same trace.

Simulates ``baseline`` and ``oppo`` (C=500, dynamic Δ from Δ0=8) on ``servegen_deepseek_r1_sampled`` at
the paper's setup (8xH200: 7 GPUs generate and train, 1 GPU scores; Qwen2.5-7B actor and reward,
B=112) and draws a few steady-state steps of each on a shared time axis with
``oppo_sim.explore.plots.plot_timelines``: one lane per generation replica / pool, bars coloured by activity.
Steps 3-5 of an 8-step run (``--quick``: steps 1-2 of a 3-step run), after OPPO's deferred requests have
built up.

Writes ``out/fig_timelines.png`` and ``out/fig_timelines.csv`` (the timeline rows shown, per policy, plus
each shown step's start/end/generation/exposed-scoring/training time).
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from oppo_sim import plots
from oppo_sim.core.policies import Baseline, DeltaRule, Oppo
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.catalog import load_trace

try:
    from common import REASONING_TRACE, parse_args, print_table, require_trace, save
except ImportError:  # imported as paper_figs.fig_timelines
    from paper_figs.common import (
        REASONING_TRACE,
        parse_args,
        print_table,
        require_trace,
        save,
    )

NAME = "fig_timelines"
CHUNK, DELTA0 = 500, 8
COLUMNS = ("policy", "kind", "pool", "devices", "activity", "role", "step", "start", "end", "duration_s", "tokens")


def compute(steps: int, shown: tuple[int, int]):
    cfg = SimConfig(steps=steps)
    trace = load_trace(REASONING_TRACE, max_response=cfg.max_response)
    results = {
        "baseline": simulate(trace, Baseline(), cfg),
        "oppo": simulate(trace, Oppo(chunk=CHUNK, rule=DeltaRule(delta0=DELTA0)), cfg),
    }
    a, b = shown
    frames, summary = [], []
    for name, r in results.items():
        tl = r.timeline[(r.timeline["step"] >= a) & (r.timeline["step"] <= b)]
        st = r.steps[(r.steps["step"] >= a) & (r.steps["step"] <= b)]
        t0 = float(min(st["start"].min(), tl["start"].min()))
        frames.append(pd.DataFrame({
            "policy": name, "kind": "activity", "pool": tl["pool"], "devices": tl["devices"].astype(str),
            "activity": tl["activity"], "role": tl["role"], "step": tl["step"], "start": tl["start"] - t0,
            "end": tl["end"] - t0, "duration_s": tl["end"] - tl["start"], "tokens": tl["tokens"],
        }))
        frames.append(pd.DataFrame({
            "policy": name, "kind": "step", "pool": "", "devices": "", "activity": "step", "role": "",
            "step": st["step"], "start": st["start"] - t0, "end": st["end"] - t0, "duration_s": st["step_time_s"],
            "tokens": st["tokens"],
        }))
        summary.append({
            "policy": r.summary["policy"], "steps shown": f"{a}-{b}",
            "mean step time (s)": float(st["step_time_s"].mean()),
            "generation (s)": float(st["generation_s"].mean()), "exposed scoring (s)": float(st["scoring_s"].mean()),
            "training (s)": float(st["training_s"].mean()), "deferred": float(st["deferred"].mean()),
            "util overall (run)": r.summary["utilization_overall"],
        })
    table = pd.concat(frames, ignore_index=True)[list(COLUMNS)]
    return results, table, pd.DataFrame(summary)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(__doc__.splitlines()[0], argv)
    require_trace(REASONING_TRACE)
    steps, shown = (3, (1, 2)) if args.quick else (8, (3, 5))
    results, table, summary = compute(steps, shown)
    print_table(summary, f"baseline vs oppo on {REASONING_TRACE}, steps {shown[0]}-{shown[1]}", "{:.2f}")
    fig = plots.plot_timelines({r.summary["policy"]: r for r in results.values()}, steps=shown)
    fig.suptitle(f"{REASONING_TRACE}, 8×H200 (main: 7 GPUs generate+train, score: 1 GPU reward+ref), Qwen2.5-7B, "
                 f"B=112 — steps {shown[0]}–{shown[1]} on a shared time axis", fontsize=10, x=0.01, ha="left")
    save(fig, table, NAME, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
