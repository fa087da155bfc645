"""Figure: reward curves of real PPO runs, ``baseline`` vs ``oppo``, against steps and against wall time.

Real runs, not simulations: the `oppo-real run` defaults (vLLM actor on Ray workers, tiny locally built
models, the toy "good tokens" task, B=8, response lengths forced from ``oppo-longtail-default`` x 0.1
capped at 256, C=16, Δ0=2) with PPO settings under which the rule reward measurably rises within 100
steps (lr 1e-3 for actor and critic, 2 epochs x 2 mini-batches, KL 0.01, truncated importance sampling
capped at 2 for OPPO's stale deferred samples). Both policies use the same seed, so they see the same
prompts in the same order.

The paper's claim is that OPPO leaves the reward-vs-step curve unchanged while each step is shorter,
so the reward-vs-time curve moves left. The left panel checks the first half, the right the second.

    python paper_figs/reward_curves.py                # 100 steps per policy, into paper_figs/out/
    python paper_figs/reward_curves.py --quick        # 6 steps (a smoke test)
    python paper_figs/reward_curves.py --steps 200 --out /tmp/figs

Writes ``out/reward_curves.png`` and ``out/reward_curves.csv`` (one row per policy and step).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "out"
NAME = "reward_curves"
POLICIES = ("baseline", "oppo")
COLORS = {"baseline": "#4C72B0", "oppo": "#C44E52"}
SMOOTH = 10  # steps in the rolling mean drawn over the raw per-step rewards
COLUMNS = ("policy", "label", "step", "wall_s", "step_time_s", "reward", "reward_smooth", "rm_score", "delta",
           "deferred", "staleness_mean", "policy_loss", "mean_kl")


def ppo_config():
    from oppo_real.ppo.algo import PPOConfig

    return PPOConfig(epochs=2, minibatches=2, lr_actor=1e-3, lr_critic=1e-3, kl_coef=0.01, tis_cap=2.0)


def run(steps: int, *, backend: str = "vllm", workers: str = "ray", cache: str | None = None, seed: int = 0,
        policies: Sequence[str] = POLICIES, log=print) -> tuple[pd.DataFrame, dict[str, float]]:
    """Run each policy for real; the per-step table and each run's wall time (start-up included)."""
    from oppo_real.commands.common import (
        CPU_RUN_LENGTH_SCALE,
        CPU_RUN_MAX_RESPONSE,
        DEFAULT_TRACE,
    )
    from oppo_real.config import RealConfig
    from oppo_real.executor.runner import run_real
    from oppo_sim.core.policies import make_policy
    from oppo_sim.traces.catalog import load_trace

    trace = load_trace(DEFAULT_TRACE, max_response=None)
    cfg = RealConfig(batch=8, steps=steps, seed=seed, backend=backend, workers=workers, cache_dir=cache,
                     max_response=CPU_RUN_MAX_RESPONSE, length_scale=CPU_RUN_LENGTH_SCALE, ppo=ppo_config())
    frames, walls = [], {}
    for name in policies:
        policy = make_policy(name, chunk=16, delta=2)
        log(f"{policy.label()}: {steps} steps ...")
        t0 = time.time()

        def progress(rec: dict) -> None:
            if rec["step"] % 10 == 9 or rec["step"] == steps - 1:
                log(f"  step {rec['step'] + 1:4d}  reward {rec['reward']:.3f}  step {rec['step_time_s']:.2f} s")

        res = run_real(cfg, policy, trace, on_step=progress)
        walls[name] = time.time() - t0
        st = res.steps
        frames.append(pd.DataFrame({
            "policy": name, "label": policy.label(), "step": st["step"], "wall_s": st["end"],
            "step_time_s": st["step_time_s"], "reward": st["reward"],
            "reward_smooth": st["reward"].rolling(SMOOTH, min_periods=1).mean(), "rm_score": st["rm_score"],
            "delta": st["delta"], "deferred": st["deferred"], "staleness_mean": st["staleness_mean"],
            "policy_loss": st["policy_loss"], "mean_kl": st["mean_kl"],
        }))
    return pd.concat(frames, ignore_index=True)[list(COLUMNS)], walls


def final_rewards(table: pd.DataFrame, last: int = 10) -> dict[str, float]:
    return {p: float(g.sort_values("step")["reward"].tail(last).mean()) for p, g in table.groupby("policy", sort=False)}


def time_to(table: pd.DataFrame, target: float) -> dict[str, float]:
    """Wall time (s, from the first step's start) at which each policy's smoothed reward first reaches ``target``."""
    out = {}
    for p, g in table.groupby("policy", sort=False):
        hit = g[g["reward_smooth"] >= target]
        out[p] = float(hit["wall_s"].iloc[0]) if len(hit) else float("nan")
    return out


def plot(table: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(11, 4.2))
    ax_step, ax_time = fig.subplots(1, 2, sharey=True)
    for p, g in table.groupby("policy", sort=False):
        color = COLORS.get(p)
        label = g["label"].iloc[0]
        for ax, x in ((ax_step, g["step"]), (ax_time, g["wall_s"])):
            ax.plot(x, g["reward"], color=color, alpha=0.25, lw=0.8)
            ax.plot(x, g["reward_smooth"], color=color, lw=2.0, label=f"{label} ({SMOOTH}-step mean)")
    ax_step.set_xlabel("PPO step")
    ax_time.set_xlabel("wall-clock time (s, from the first step)")
    ax_step.set_ylabel("rule reward (fraction of good tokens)")
    ax_step.set_title("reward vs step")
    ax_time.set_title("reward vs time")
    for ax in (ax_step, ax_time):
        ax.grid(alpha=0.3)
    ax_time.legend(loc="lower right", fontsize=8)
    fig.suptitle("Real PPO runs on this machine (vLLM + Ray, B=8, oppo-longtail-default x0.1)", fontsize=10)
    fig.tight_layout()
    return fig


def save(fig: Figure, table: pd.DataFrame, out: Path) -> tuple[Path, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    png, csv = out / f"{NAME}.png", out / f"{NAME}.csv"
    fig.savefig(png, dpi=120, bbox_inches="tight")
    table.to_csv(csv, index=False, float_format="%.6g")
    print(f"wrote {png} ({png.stat().st_size // 1024} KB) and {csv}")
    return png, csv


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="6 steps per policy (a smoke test)")
    ap.add_argument("--backend", default="vllm", choices=("vllm", "torch"))
    ap.add_argument("--workers", default="ray", choices=("ray", "local"))
    ap.add_argument("--cache", default=None, help="model cache (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT_DIR, help=f"output folder (default {OUT_DIR})")
    a = ap.parse_args(argv)
    steps = 6 if a.quick else a.steps
    if steps < 1:
        ap.error(f"--steps must be >= 1, got {steps}")
    from oppo_real.cli import quiet_libraries

    quiet_libraries()
    table, walls = run(steps, backend=a.backend, workers=a.workers, cache=a.cache, seed=a.seed)
    save(plot(table), table, a.out)
    finals = final_rewards(table)
    first = {p: float(g.sort_values("step")["reward"].head(10).mean()) for p, g in table.groupby("policy", sort=False)}
    target = first["baseline"] + 0.5 * (min(finals.values()) - first["baseline"]) if "baseline" in first else np.nan
    reach = time_to(table, target)
    rows = []
    for p in finals:
        g = table[table["policy"] == p]
        rows.append({"policy": p, "reward_first10": first[p], "reward_last10": finals[p],
                     "median_step_s": float(g["step_time_s"].median()), "run_s": float(g["wall_s"].max()),
                     "wall_with_startup_s": walls[p], f"time_to_{target:.3f}_s": reach[p]})
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(pd.DataFrame(rows).to_string(index=False, float_format="{:.3f}".format))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
