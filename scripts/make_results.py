"""Run the simulator's headline experiments and commit their outputs under ``docs/results/`` (the docs'
tables are rendered from these files by ``scripts/make_docs.py``; nothing is typed by hand).

    python scripts/make_results.py                 # everything (~10 min on 2 cores)
    python scripts/make_results.py --only predictions

- ``predictions.csv``: ``oppo-sim compare`` of baseline/intra/inter/oppo/async on each trace, the paper's
  setup (8×H200, Qwen2.5-7B actor and reward, B=112), 100 steps, the default knobs;
- ``plan_paper.csv`` (+ ``plan_paper.png``): ``oppo-sim plan`` on the paper's setup and the reasoning
  trace (TPE, 120 configurations, 50 steps), and ``plan_paper_7p1.csv``: every policy and knob on the
  paper's own 7+1 split (exhaustive);
- ``plan_32b.csv`` (+ ``plan_32b.png``): a Qwen2.5-32B actor with a 7B reward on 16×H200 over 2 nodes
  (TPE, 120 configurations, 30 steps, sequence parallelism searched).

- ``algorithms.csv``: OPPO's speedup for GRPO (14 prompts × 8, rule reward) against PPO (112 prompts) at
  the same 112 responses per step, on the two long-tail traces, 50 steps.

Each row keeps the command that made it; the traces ship with the project (``oppo_sim/data``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
TRACES = ("servegen_deepseek_r1_sampled", "oppo-longtail-default", "azure2023_conv", "azure2023_code",
          "mooncake_conversation")
POLICIES = "baseline,intra,inter,oppo,async"
PLANS = {
    "plan_paper": ["--trace", "servegen_deepseek_r1_sampled", "--actor", "qwen2.5-7b", "--reward", "qwen2.5-7b",
                   "--gpus", "8xh200", "--steps", "50", "--trials", "120", "--train-backend", "fsdp"],
    "plan_paper_7p1": ["--trace", "servegen_deepseek_r1_sampled", "--actor", "qwen2.5-7b", "--reward", "qwen2.5-7b",
                       "--gpus", "8xh200", "--steps", "50", "--placements", "shared 7+1", "--search", "exhaustive",
                       "--train-backend", "fsdp"],
    "plan_32b": ["--trace", "servegen_deepseek_r1_sampled", "--actor", "qwen2.5-32b", "--reward", "qwen2.5-7b",
                 "--gpus", "16xh200", "--nodes", "2", "--steps", "30", "--trials", "120", "--sps", "1,2,4,8",
                 "--train-backend", "fsdp"],
}


def _oppo_sim(*args: str) -> None:
    cmd = [sys.executable, "-m", "oppo_sim.cli", *args]
    print("$ oppo-sim " + shlex.join(args), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def predictions() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for trace in TRACES:
            args = ["compare", "--trace", trace, "--policies", POLICIES, "--steps", "100", "--json", f"{tmp}/{trace}.json"]
            _oppo_sim(*args)
            doc = json.loads(Path(f"{tmp}/{trace}.json").read_text())
            for name, res in doc["policies"].items():
                s = res
                rows.append({"trace": trace, "policy": name, "label": s["policy"], "steps": doc["steps"],
                             "step_time_s": s["step_time_s"], "samples_per_s": s["samples_per_s"],
                             "speedup": doc["speedup"][name], "utilization_overall": s["utilization_overall"],
                             "zero_stage": s["zero_stage"], "recompute": s["recompute"],
                             "max_seq_tokens": s["max_seq_tokens"], "command": "oppo-sim " + shlex.join(args[:-2])})
    pd.DataFrame(rows).to_csv(RESULTS / "predictions.csv", index=False)


def plans() -> None:
    for name, args in PLANS.items():
        with tempfile.TemporaryDirectory() as tmp:
            _oppo_sim("plan", *args, "--out", tmp)
            plan = pd.read_csv(Path(tmp) / "plan.csv")
            plan.insert(0, "command", "oppo-sim plan " + shlex.join(args))
            plan.to_csv(RESULTS / f"{name}.csv", index=False)
            Path(tmp, "pareto.png").replace(RESULTS / f"{name}.png")


ALGORITHM_RUNS = {  # the same 112 responses per step: PPO's 112 prompts, GRPO's 14 prompts x 8 with a rule reward
    "ppo": ["--batch", "112"],
    "grpo": ["--algorithm", "grpo", "--n", "8", "--batch", "14", "--reward", "rule"],
}


def algorithms() -> None:
    """OPPO's speedup for GRPO against PPO on the long-tail traces (``algorithms.csv``)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for trace in TRACES[:2]:
            for alg, extra in ALGORITHM_RUNS.items():
                args = ["compare", "--trace", trace, *extra, "--policies", "baseline,intra,inter,oppo", "--steps", "50",
                        "--json", f"{tmp}/{trace}-{alg}.json"]
                _oppo_sim(*args)
                doc = json.loads(Path(f"{tmp}/{trace}-{alg}.json").read_text())
                for name, s in doc["policies"].items():
                    rows.append({"trace": trace, "algorithm": alg, "policy": name, "label": s["policy"],
                                 "step_time_s": s["step_time_s"], "speedup": doc["speedup"][name],
                                 "utilization_overall": s["utilization_overall"],
                                 "command": "oppo-sim " + shlex.join(args[:-2])})
    pd.DataFrame(rows).to_csv(RESULTS / "algorithms.csv", index=False)


STAGES = {"predictions": predictions, "plans": plans, "algorithms": algorithms}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=tuple(STAGES), default=None, help="run one stage (default: all)")
    a = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    for name, stage in STAGES.items():
        if a.only in (None, name):
            stage()
    print("now: python scripts/make_docs.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
