"""Does the simulator's kernel-sum decode iteration agree with AIConfigurator's own model of a vLLM iteration?

The measured tables (``--op-costs tables``, docs/op_costs.md) are fractions taken from AIConfigurator's database, but
the simulator assembles an iteration from them its own way (``hw/costs/decode_kernels.py``). AIConfigurator's engine
model (``aiconfigurator_core.sdk.engine.EngineHandle``: every op of a vLLM forward from its per-op data, norms, router
and all-reduces included, no framework CPU time) is an independent assembly of the same measurements. This prices the
published runs' single-node generation setups both ways, uncalibrated, at a few batch sizes and a 2,048-token context
per sequence: the simulator's kernels and tensor-parallel all-reduces (what AIConfigurator prices), and its whole
iteration (plus the engine's per-step overhead, stretched on a Grace host: ``Hardware.host_scale``).

Needs the optional extra (``pip install -e '.[op-tables]'``: aiconfigurator-core); without it the script says so and
stops. Writes ``paper_figs/out/aic_decode_check.csv``; ``scripts/make_docs.py`` renders it in docs/op_costs.md.

    python paper_figs/aic_decode_check.py
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oppo_sim.hw.costs.costmodel import DecodeCost  # noqa: E402
from oppo_sim.hw.costs.op_cost import with_op_costs  # noqa: E402
from oppo_sim.hw.devices.hardware import get_hardware  # noqa: E402
from oppo_sim.hw.models.lookup import get_model  # noqa: E402

OUT = ROOT / "paper_figs" / "out" / "aic_decode_check.csv"
CONTEXT = 2048  # cached tokens a sequence
BATCHES = (32, 64, 128, 256)
CASES = (  # (oppo model, Hugging Face id, oppo GPU, AIConfigurator system, vLLM TP): NeMo RL's generation setups
    ("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "h100-sxm", "h100_sxm", 1),
    ("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "gb200", "gb200", 1),
    ("qwen3-32b", "Qwen/Qwen3-32B", "h100-sxm", "h100_sxm", 4),
    ("qwen3-32b", "Qwen/Qwen3-32B", "gb200", "gb200", 1),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "h100-sxm", "h100_sxm", 2),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "gb200", "gb200", 1),
)


def _engine(hf_id: str, system: str, tp: int, moe: bool):
    from aiconfigurator_core.sdk.engine import EngineHandle

    kw = {"tp_size": tp, **({"moe_tp_size": tp, "moe_ep_size": 1} if moe else {})}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its loader's notes
        return EngineHandle.compile(hf_id, system, "vllm", **kw)


def rows() -> pd.DataFrame:
    """Every case and batch, priced both ways (ms an iteration)."""
    out = []
    for model, hf_id, gpu, system, tp in CASES:
        spec = get_model(model)
        engine = _engine(hf_id, system, tp, spec.moe)
        cost = DecodeCost(spec, with_op_costs(get_hardware(gpu), "tables"), tp=tp)
        overhead = cost.hw.params.decode.overhead_s
        for b in BATCHES:
            full = cost.iteration(b, b * CONTEXT)
            aic = engine.decode_step_latency(b, CONTEXT, 2) / 1e3
            out.append({"model": model, "gpu": gpu, "tp": tp, "batch": b, "context": CONTEXT,
                        "aiconfigurator_ms": aic * 1e3, "sim_kernels_ms": (full - overhead) * 1e3,
                        "sim_iteration_ms": full * 1e3, "kernels_ratio": (full - overhead) / aic})
    return pd.DataFrame(out)


def main() -> int:
    if importlib.util.find_spec("aiconfigurator_core") is None:
        print("aic_decode_check: aiconfigurator-core is not installed (pip install -e '.[op-tables]')", file=sys.stderr)
        return 2
    d = rows()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    d.to_csv(OUT, index=False, float_format="%.4f")
    print(d.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"simulator kernels / AIConfigurator: median {d.kernels_ratio.median():.2f}x "
          f"({d.kernels_ratio.min():.2f}-{d.kernels_ratio.max():.2f}) over {len(d)} points; wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
