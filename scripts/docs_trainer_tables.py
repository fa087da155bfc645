"""The trainer check's table in the docs (``docs/published.md``), rendered from its committed output
(``paper_figs/out/pretrain_check.csv``, written by ``paper_figs/pretrain_check.py``). ``scripts/make_docs.py``
merges it with ``docs_tables.TABLES``."""

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


TRAINER_TABLES: dict[str, Callable[[], str]] = {"pretrain-check": pretrain_check}
