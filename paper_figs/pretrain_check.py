"""The trainer alone, against Megatron-Bridge's published pre-training throughput (``pretrain_rows.py``).

    python paper_figs/pretrain_check.py     # -> paper_figs/out/pretrain_check.csv, and the table printed

Each row is priced as one optimizer step of the simulator's Megatron-Core trainer, with the same cost models a
simulated run builds (``pipeline.topology.cost_models``: the GPU's kernel table, where its groups sit, the links
rule): the row's GPUs, nodes, TP/PP/VP/CP/EP and micro-batch, its global batch of sequences of its length, no
recomputation (the recipes recompute only layer norms and the MoE activation), the distributed optimizer, the
all-to-all token dispatcher (the recipes' HybridEP ``flex`` dispatcher is priced the same), uniform routing (the
rows force-balance it), the output layer on the last pipeline stage, and where a model's layers do not split evenly
over the pipeline's chunks but do with the embedding and the loss counted as layers, Megatron's
``account_for_embedding/loss_in_pipeline_split`` (Qwen3-235B's 94 layers over PP8 x VP3; its recipes set them;
DeepSeek-V3's explicit ``pipeline_model_parallel_layout`` by its ranks' layer counts, :data:`EXPLICIT_LAYOUTS`). Uncalibrated: nothing here is fitted, and no default was set from these rows. The
predicted tokens per second per GPU is the global batch's tokens over the step's seconds and the GPUs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "paper_figs"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from oppo_sim.core.algorithms import Algorithm  # noqa: E402
from oppo_sim.core.placement import colocated_placement  # noqa: E402
from oppo_sim.hw.costs.op_cost import hardware_for  # noqa: E402
from oppo_sim.hw.costs.trainer_layout import TrainerLayout  # noqa: E402
from oppo_sim.hw.models.lookup import get_model  # noqa: E402
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig  # noqa: E402
from oppo_sim.pipeline.config import SimConfig  # noqa: E402
from oppo_sim.pipeline.memory_plan import memory_report  # noqa: E402
from oppo_sim.pipeline.topology import cost_models  # noqa: E402
from pretrain_rows import ROWS, SOURCE, PretrainRow  # noqa: E402

OUT = ROOT / "paper_figs" / "out" / "pretrain_check.csv"


EXPLICIT_LAYOUTS: dict[tuple[str, int, int], tuple[int, int]] = {("deepseek-v3", 4, 4): (16, 13)}
"""(model, pp, vp) -> (first, last) pipeline rank's decoder layers of the explicit ``pipeline_model_parallel_layout``
Megatron-Bridge's recipe sets (``recipes/deepseek/h100/deepseek_v3.py`` ``_get_deepseek_v3_pipeline_layout`` at
:data:`~pretrain_rows.COMMIT`: for PP4 x VP4, sixteen chunks of four layers, the first with the embedding, the last of
one layer and the loss — ranks of 16, 16, 16 and 13 layers). Megatron-Core cannot split 61 layers evenly over 16
chunks; the busiest rank is what the simulator prices, and the first / last rank counts carry it."""


def _layout(row: PretrainRow) -> TrainerLayout:
    """``row``'s Megatron layout: the recipe's explicit split where it sets one, else even, with the embedding and the
    loss counted as layers where a model's layers split over the pipeline's chunks only so."""
    chunks, layers = row.pp * row.vp, get_model(row.model_id).layers
    first, last = EXPLICIT_LAYOUTS.get((row.model_id, row.pp, row.vp), (None, None))
    counted = first is None and row.pp > 1 and layers % chunks != 0 and (layers + 2) % chunks == 0
    return TrainerLayout("megatron", tp=row.tp, pp=row.pp, vpp=row.vp, cp=row.cp, moe_dispatcher="alltoall",
                         embedding_in_split=counted, loss_in_split=counted, first_stage_layers=first,
                         last_stage_layers=last)


def step_seconds(row: PretrainRow) -> float:
    """Seconds of one optimizer step of ``row`` on the simulator's Megatron trainer (module notes)."""
    layout = _layout(row)
    train = TrainMemoryConfig(zero_stage=1, recompute="none", micro_batch_size=row.mbs)
    cfg = SimConfig(batch=row.gbs, steps=1, gpu=hardware_for(row.gpu, "tables"), actor=row.model_id,
                    placement=colocated_placement(row.gpus), nodes=row.nodes, expert_parallel=row.ep, trainer=layout,
                    train_memory=train, max_response=row.seq, algorithm=Algorithm("grpo", n=1, reward="rule", kl=False))
    cost = cost_models(cfg, memory_report(cfg, seq_tokens=row.seq, response_tokens=row.seq))["main"]
    return cost.train(cfg.models()["train"], row.gpus, np.full(row.gbs, float(row.seq)), 1)


def check() -> pd.DataFrame:
    """Every row, predicted beside published."""
    out = []
    for r in ROWS:
        t = step_seconds(r)
        pred = r.gbs * r.seq / (t * r.gpus)
        out.append({"release": r.release, "system": r.system, "gpu": r.gpu, "model": r.model_id, "gpus": r.gpus,
                    "gbs": r.gbs, "mbs": r.mbs, "seq": r.seq, "tp": r.tp, "pp": r.pp, "cp": r.cp, "vp": r.vp, "ep": r.ep,
                    "published_tokens_per_s_per_gpu": r.tokens_per_s_per_gpu, "predicted_step_s": t,
                    "predicted_tokens_per_s_per_gpu": pred, "ratio": pred / r.tokens_per_s_per_gpu,
                    "source": f"{SOURCE}#L{r.line}"})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="accepted for make_all; the check takes a second either way")
    ap.parse_args(argv)
    df = check()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(OUT, index=False)
    show = df[["release", "system", "model", "gpus", "published_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu",
               "ratio"]]
    print(show.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    r = df["ratio"]
    print(f"\npredicted / published throughput over {len(df)} rows: median {r.median():.2f}, "
          f"{r.min():.2f}-{r.max():.2f}; wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
