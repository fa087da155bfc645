"""The host's seconds per eager op, measured: the H200's eager decode iterations (``gpu_decode_cut.csv``, stage
``decode-eager``: the project's decoder with CUDA graphs off, Qwen2.5-1.5B shape, 14 points of batch 1-128 and
128-2,048 cached tokens) over the ops one such iteration issues (``oppo_real.profiling.eager_ops``, counted here on
the CPU from the same code).

    python paper_figs/eager_host_op.py     # -> paper_figs/out/gpu_h200/eager_host_op.csv (+ _summary.csv)

The iterations are host-bound (the kernels ran 15-26% of the wall time), so wall seconds over ops is the host's
cost per op: the Python call, the dispatcher and the kernel launch, on that machine's host CPU. The simulator's
``EAGER_HOST_OP_S`` (vLLM's eager mode, Hugging Face ``generate``) is this summary's median.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oppo_real.models.shaped import hf_config, resolve_spec  # noqa: E402
from oppo_real.profiling.eager_ops import host_op_summary, profile_host_op  # noqa: E402

H200 = ROOT / "paper_figs" / "out" / "gpu_h200"
STAGE = "decode-eager"


def points(cut: pd.DataFrame) -> pd.DataFrame:
    """Per measured eager point: the ops of its iteration and the host microseconds per op (``eager_ops``)."""
    rows = cut[cut["stage"] == STAGE].rename(columns={"median_ms": "seconds"})
    if rows.empty:
        raise SystemExit(f"no '{STAGE}' rows in the decode cut table")
    out = []
    for model, group in rows.groupby("model", sort=True):
        got, _ = profile_host_op(group.assign(op="decode", seconds=group["seconds"] / 1e3), hf_config(resolve_spec(model)))
        out.append(got.assign(median_ms=got["seconds"] * 1e3))
    return pd.concat(out)[["model", "batch", "kv", "median_ms", "kernel_share", "ops", "host_us_per_op"]]


def main() -> None:
    table = points(pd.read_csv(H200 / "gpu_decode_cut.csv"))
    table.round(3).to_csv(H200 / "eager_host_op.csv", index=False)
    s = pd.DataFrame([host_op_summary(table)])
    s.to_csv(H200 / "eager_host_op_summary.csv", index=False)
    print(table.round(2).to_string(index=False))
    print(s.to_string(index=False))


if __name__ == "__main__":
    main()
