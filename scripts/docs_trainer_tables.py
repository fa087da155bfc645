"""The trainer checks' tables in the docs (``docs/published.md``), rendered from their committed outputs
(``paper_figs/out/pretrain_check.csv``, written by ``paper_figs/pretrain_check.py``; ``published_implied.csv``, by
``paper_figs/published_implied.py``; ``aic_decode_check.csv``, by ``paper_figs/aic_decode_check.py``). ``scripts/make_docs.py`` merges them with ``docs_tables.TABLES``."""

from __future__ import annotations

from typing import Callable

import pandas as pd

from docs_tables import OUT, _md


def pretrain_check() -> str:
    """Megatron-Bridge's BF16 pre-training throughput beside the simulator's trainer, row by row, then per GPU."""
    d = pd.read_csv(OUT / "pretrain_check.csv")
    rows = [{"release": f"[{r.release}]({r.source})", "GPUs": f"{r.gpus}× {r.gpu}", "model": r.model,
             "layout (TP/PP/VP/EP, MBS × seq)": f"{r.tp}/{r.pp}/{r.vp}/{r.ep}, {r.mbs} × {r.seq:,}",
             "tokens/s/GPU published": f"{r.published_tokens_per_s_per_gpu:,.0f}",
             "predicted": f"{r.predicted_tokens_per_s_per_gpu:,.0f}", "predicted / published": f"{r.ratio:.2f}×"}
            for r in d.itertuples()]
    per = "; ".join(f"{g} {x.median():.2f}× ({x.min():.2f}–{x.max():.2f}, {len(x)} rows)"
                    for g, x in d.groupby("gpu", sort=False)["ratio"])
    return (_md(pd.DataFrame(rows)) + f"\n\nPredicted / published over the {len(d)} rows: median "
            f"{d.ratio.median():.2f}×, {d.ratio.min():.2f}–{d.ratio.max():.2f}× (per GPU: {per}).")


def published_implied() -> str:
    """Each run with an assumed mean response and a published scoring stage, at the mean that stage implies."""
    d = pd.read_csv(OUT / "published_implied.csv")
    pct = lambda v: "" if pd.isna(v) else f"{v:+.0f}%"  # noqa: E731
    rows = [{"run": f"[{r.key}]({r.source})", "assumed mean response": f"{r.assumed_mean_response:,.0f}",
             "implied by the scoring stage": f"{r.implied_mean_response:,.0f}", "scoring": pct(r.scoring_error_pct),
             "generation": pct(r.generation_error_pct), "training": pct(r.training_error_pct),
             "step": pct(r.step_error_pct)} for r in d.itertuples()]
    return (_md(pd.DataFrame(rows)) + f"\n\nAt the implied means ({len(d)} runs): generation "
            f"{d.generation_error_pct.min():+.0f}% to {d.generation_error_pct.max():+.0f}%, training "
            f"{d.training_error_pct.min():+.0f}% to {d.training_error_pct.max():+.0f}% (median "
            f"{d.training_error_pct.median():+.0f}%), the step {d.step_error_pct.min():+.0f}% to "
            f"{d.step_error_pct.max():+.0f}%.")


def aic_decode_check() -> str:
    """The published runs' decode iterations priced by the simulator and by AIConfigurator's engine model."""
    d = pd.read_csv(OUT / "aic_decode_check.csv")
    rows = [{"model": r.model, "GPU": r.gpu, "vLLM TP": r.tp, "batch": r.batch,
             "AIConfigurator, ms": f"{r.aiconfigurator_ms:.1f}", "simulator kernels, ms": f"{r.sim_kernels_ms:.1f}",
             "kernels / AIConfigurator": f"{r.kernels_ratio:.2f}×", "simulator iteration, ms": f"{r.sim_iteration_ms:.1f}"}
            for r in d.itertuples()]
    per = "; ".join(f"{m} on {g} {x.min():.2f}–{x.max():.2f}×" for (m, g), x in
                    d.groupby(["model", "gpu"], sort=False)["kernels_ratio"])
    return (_md(pd.DataFrame(rows)) + f"\n\nSimulator kernels / AIConfigurator over the {len(d)} points: median "
            f"{d.kernels_ratio.median():.2f}× ({per}); context {int(d.context.iloc[0]):,} tokens a sequence.")


TRAINER_TABLES: dict[str, Callable[[], str]] = {"pretrain-check": pretrain_check, "published-implied": published_implied,
                                                 "aic-decode-check": aic_decode_check}
