"""The length a published scoring stage implies, and the other stages at it: a check kept apart from the table.

    python paper_figs/published_implied.py          # -> paper_figs/out/published_implied.csv, and the table printed
    python paper_figs/published_implied.py --quick  # one timed step a simulation (make_all --quick)

Where a run's mean response length is not published (the table's *assumed* means) but its framework times a
forward-only scoring stage (verl's ``old_log_prob``: one forward of the actor over every sequence), that stage pins
the step's tokens better than any assumption: its time follows the token count, with no generation tail, no
optimizer and no recomputation in it. This script solves for the mean response at which the simulator's scoring
stage equals the published one (a fixed-point iteration on the tokens a sequence, prompt + response, scaling them by
published / predicted scoring, :data:`ROUNDS` rounds), then simulates the run there and reports the *other* stages —
generation, training — and the step against their published times. The fit uses one published number per run; the
errors reported are on the numbers it did not use. It is a diagnostic of the model's stages relative to each other,
not a prediction: the uncalibrated table (``published_runs.py``) does not use it.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "paper_figs"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from common import parse_args  # noqa: E402
from oppo_sim.frameworks.stages import stage_groups  # noqa: E402
from published_runs_data import RUNS, PublishedRun  # noqa: E402
from published_runs_sim import derived_prompt_mean, response_cap, simulate_record, step_seconds  # noqa: E402

OUT = ROOT / "paper_figs" / "out" / "published_implied.csv"
STAGES = ("generation", "scoring", "training")
ROUNDS = 4
"""Fixed-point rounds: each scales the tokens a sequence by published / predicted scoring (linear in the tokens but
for attention's quadratic part; four rounds settle it within a percent on the records)."""
MIN_RESPONSE = 16.0


def candidates() -> list[PublishedRun]:
    """The runs with an assumed (not published) mean response and a published scoring stage."""
    return [r for r in RUNS if r.mean_response is None and r.trace is None and r.assumed_mean_response is not None
            and r.stages.scoring_s]


def _simulate(run: PublishedRun, steps: int) -> tuple[float, dict[str, float]]:
    res = simulate_record(run, steps)[2]
    groups = stage_groups(res, run.stages.timers)
    return step_seconds(run, res.steps["step_time_s"]), {k: float(groups[k].median()) for k in STAGES}


def implied(run: PublishedRun, steps: int = 3) -> dict:
    """One row: the assumed and the implied mean response, and at the implied one each stage and the step,
    predicted beside published (errors in %, predicted / published - 1)."""
    prompt, cap = derived_prompt_mean(run), 0.999 * response_cap(run)
    mean = float(run.assumed_mean_response)
    for _ in range(ROUNDS):
        _, pred = _simulate(replace(run, assumed_mean_response=mean), steps)
        mean = min(max((prompt + mean) * run.stages.scoring_s / pred["scoring"] - prompt, MIN_RESPONSE), cap)
    step, pred = _simulate(replace(run, assumed_mean_response=mean), steps)
    pub = {"generation": run.stages.generation_s, "scoring": run.stages.scoring_s, "training": run.stages.training_s}
    row = {"key": run.key, "source": run.source, "gpu": run.gpu, "devices": run.devices,
           "assumed_mean_response": run.assumed_mean_response, "implied_mean_response": mean,
           "published_step_s": run.published_step_s, "predicted_step_s": step,
           "step_error_pct": 100.0 * (step / run.published_step_s - 1.0)}
    for k in STAGES:
        row.update({f"published_{k}_s": pub[k], f"predicted_{k}_s": pred[k],
                    f"{k}_error_pct": 100.0 * (pred[k] / pub[k] - 1.0) if pub[k] else float("nan")})
    return row


def check(steps: int = 3) -> pd.DataFrame:
    return pd.DataFrame([implied(r, steps) for r in candidates()])


def main(argv: list[str] | None = None) -> int:
    a = parse_args(__doc__.splitlines()[0], argv)
    d = check(1 if a.quick else 3)
    out = Path(a.out) / OUT.name
    out.parent.mkdir(parents=True, exist_ok=True)
    d.to_csv(out, index=False)
    cols = ["key", "assumed_mean_response", "implied_mean_response", "scoring_error_pct", "generation_error_pct",
            "training_error_pct", "step_error_pct"]
    print(d[cols].round(1).to_string(index=False))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
