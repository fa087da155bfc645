"""Write oppo's compact per-GPU kernel-cost tables (``oppo_sim/data/op_tables/<gpu>.json``) from NVIDIA's
AIConfigurator database (the ``aiconfigurator-core`` wheel, Apache-2.0; an optional extra, never a runtime
dependency of oppo).

    python scripts/export_op_tables.py                      # the database of the installed package
    python scripts/export_op_tables.py --db PATH/systems/data --out oppo_sim/data/op_tables

What is written is *derived*: for every kernel class, the fraction of the GPU's datasheet roofline
(``oppo_sim.hw.devices.gpu_table``: dense bf16 peak, memory bandwidth) the measured kernel reached, as medians
over the database's shapes in buckets, and straight-line fits (decode attention against the context,
collectives against the message size). ``oppo_sim.hw.costs.op_tables`` reads the result; docs/op_costs.md
says what each table holds. Needs pandas and pyarrow (``pip install aiconfigurator-core pandas pyarrow``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from oppo_sim.hw.devices.gpu_table import GPUS  # noqa: E402
from oppo_sim.hw.costs.op_cost import MOE_BLOCK_TOKENS  # noqa: E402

FORMAT = "oppo-op-table/1"
GPU_MAP = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200", "gb200": "gb200", "b300_sxm": "b300",
           "gb300": "gb300",
           "a100_sxm": "a100-80gb", "l40s": "l40s", "rtx_pro_6000_server": "rtx-pro-6000"}
"""AIConfigurator's system directory -> oppo's GPU-table id (the datasheet the fractions are taken against)."""
FRAMEWORK = "vllm"
REF_ATTN = (32, 8, 128)  # (heads, kv_heads, head_dim) of the reference attention shape (Llama-3-8B's)
BF16 = 2


def _pd():
    try:
        import pandas as pd
    except ImportError:
        sys.exit("export_op_tables: needs pandas and pyarrow (pip install pandas pyarrow)")
    return pd


def find_db(path: str | None) -> Path:
    """The database root (``.../aiconfigurator_core/systems/data``): ``path``, or the installed package's."""
    if path:
        p = Path(path)
    else:
        spec = importlib.util.find_spec("aiconfigurator_core")
        if spec is None or not spec.submodule_search_locations:
            sys.exit("export_op_tables: aiconfigurator-core is not installed; pass --db PATH/systems/data")
        p = Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"
    if not p.is_dir():
        sys.exit(f"export_op_tables: no database folder at {p}")
    return p


def _vkey(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in v.replace("rc", ".").replace("post", ".").split("."))


def latest(folder: Path, name: str) -> tuple[Path, str] | None:
    """(parquet, version) of the newest version folder under ``folder`` that holds ``name``."""
    if not folder.is_dir():
        return None
    for v in sorted((d.name for d in folder.iterdir() if d.is_dir()), key=_vkey, reverse=True):
        if (folder / v / name).is_file():
            return folder / v / name, v
    return None


def _median_by(keys, values) -> tuple[list, list]:
    groups: dict = {}
    for k, v in zip(keys, values):
        groups.setdefault(k, []).append(v)
    ks = sorted(groups)
    return ks, [sorted(groups[k])[len(groups[k]) // 2] for k in ks]


def _r(x: float, nd: int = 4) -> float:
    return float(f"{x:.{nd}g}")


def gemm_table(df, peak: float, bw: float) -> dict:
    """Dense bf16 GEMM (torch linear): median roofline fraction per M over weight shapes of 1M+ elements."""
    d = df[df.gemm_dtype == "bfloat16"]
    linear = "torch.nn.functional.linear"  # vLLM's bf16 GEMM; older collections name one other source
    d = d[d.kernel_source == (linear if (d.kernel_source == linear).any() else d.kernel_source.iloc[0])]
    d = d[(d.m <= 16) | (d.m % 16 == 0)]  # the sweep's off-by-one sizes (2^k + 1) add jitter, not information
    d = d[(d.n * d.k >= 2 ** 20) & (d.n <= 16384) & (d.k <= 16384)]
    m, n, k = d.m.astype(float), d.n.astype(float), d.k.astype(float)
    ideal = [max(2 * a * b * c / peak, BF16 * (a * c + b * c + a * b) / bw) for a, b, c in zip(m, n, k)]
    frac = [min(1.0, i / (t * 1e-3)) for i, t in zip(ideal, d.latency)]
    ms, fr = _median_by(list(d.m.astype(int)), frac)
    return {"m": ms, "frac": [_r(f) for f in fr]}


def _touched(tokens: float, topk: int, experts: int) -> float:
    return experts * (1.0 - (1.0 - topk / experts) ** tokens)


def moe_table(df, peak: float, bw: float) -> dict:
    """Grouped bf16 MoE GEMMs (balanced routing, no expert parallelism): median roofline fraction per
    (tokens-per-expert, per-GPU expert width) log2 bucket; the roofline reads every touched expert and
    computes at least a tile of ``MOE_BLOCK_TOKENS`` tokens in each, as ``oppo_sim.hw.costs.decode_kernels`` prices it."""
    d = df[(df.moe_dtype == "bfloat16") & (df.moe_ep_size == 1)]
    if "distribution" in d:
        d = d[d.distribution == "balanced"]
    d = d[d.kernel_source.str.contains("unquantized|fused_moe")]
    keys, frac = [], []
    for row in d.itertuples():
        width = row.inter_size / row.moe_tp_size
        expert = 3.0 * row.hidden_size * width
        touched = _touched(row.num_tokens, row.topk, row.num_experts)
        flops = 2.0 * touched * max(row.num_tokens * row.topk / touched, MOE_BLOCK_TOKENS) * expert
        nbytes = BF16 * touched * expert
        ideal = max(flops / peak, nbytes / bw)
        tpe = row.num_tokens * row.topk / row.num_experts
        keys.append((round(math.log2(max(tpe, 1 / 64))), round(math.log2(width))))
        frac.append(min(1.0, ideal / (row.latency * 1e-3)))
    ks, fr = _median_by(keys, frac)
    widths = sorted({w for _, w in ks})
    tpes = sorted({t for t, _ in ks})
    grid = {f"{w}": [_r(dict(zip(ks, fr)).get((t, w), float("nan"))) for t in tpes] for w in widths}
    return {"log2_tokens_per_expert": tpes, "log2_width": widths, "frac": _fill(grid)}


def _fill(grid: dict) -> dict:
    """NaN holes (a width without that token count) take the nearest measured neighbour in the row."""
    out = {}
    for w, row in grid.items():
        good = [i for i, v in enumerate(row) if v == v]
        out[w] = [row[i] if row[i] == row[i] else row[min(good, key=lambda j: abs(j - i))] for i in range(len(row))] if good else row
    return {w: r for w, r in out.items() if all(v == v for v in r)}


def _fit(xs, ys) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    s = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    return my - s * mx, s


def _attn_rows(df, dtype_col: str = "kv_cache_dtype"):
    h, kvh, hd = REF_ATTN
    d = df[(df.attn_dtype == "bfloat16") & (df[dtype_col] == "bfloat16")]
    if "window_size" in d:
        d = d[d.window_size == 0]
    d = d[(d.num_heads == h) & (d.num_key_value_heads == kvh) & (d.head_dim == hd)]
    src = d.kernel_source.value_counts().index[0] if len(d) else None
    return d[d.kernel_source == src], src


def decode_attention_table(df, bw: float) -> dict:
    """Paged decode attention of the reference shape: per batch size, a straight line in the context
    length (``step``) — intercept (seconds per layer call) and the fraction of ``mem_bw`` its KV reads reach."""
    d, src = _attn_rows(df)
    _, kvh, hd = REF_ATTN
    out = {"kernel": src, "shape": list(REF_ATTN), "batch": [], "intercept_s": [], "kv_frac": []}
    for b, g in sorted(d.groupby("batch_size")):
        g = g[g.step >= 255]
        if len(g) < 3:
            continue
        a, s = _fit(list(g.step.astype(float)), list(g.latency * 1e-3))
        if s <= 0:
            continue
        kv_bytes = b * 2 * kvh * hd * BF16  # K and V of one context position of every sequence
        out["batch"].append(int(b))
        out["intercept_s"].append(_r(max(a, 0.0)))
        out["kv_frac"].append(_r(min(1.0, kv_bytes / (s * bw))))
    return out


def prefill_attention_table(df, peak: float) -> dict:
    """Causal prefill attention of the reference shape: median fraction of peak per sequence length."""
    d, src = _attn_rows(df)
    h, _, hd = REF_ATTN
    d = d[d.isl >= 256]
    flops = 4.0 * d.batch_size * h * hd * d.isl * (d.isl + 1) / 2.0
    frac = [min(1.0, f / (t * 1e-3 * peak)) for f, t in zip(flops, d.latency)]
    ks, fr = _median_by(list(d.isl.astype(int)), frac)
    return {"kernel": src, "shape": list(REF_ATTN), "tokens": ks, "frac": [_r(f) for f in fr]}


MLA_LATENT = (512, 64)  # DeepSeek-V3's kv_lora_rank and rope dims, the shape the database measured


def mla_decode_table(df, peak: float, bw: float) -> dict:
    """MLA decode (DeepSeek-V3's absorbed attention, bf16): per batch size, the slope in the context of the
    fastest kernel as a fraction of its roofline per cached token — ``2·heads·(2·kv_lora + rope)`` FLOPs and
    the latent's bytes per sequence — median over 8 or more heads per GPU. The module's fixed part (it
    holds the projections, priced as GEMMs) is left out."""
    lora, rope = MLA_LATENT
    d = df[(df.kv_cache_dtype == "bfloat16") & (df.gemm_type == "bfloat16") & (df.num_heads >= 8) & (df.step >= 1024)]
    d = d.groupby(["num_heads", "batch_size", "step"], as_index=False).latency.min()
    keys, frac = [], []
    for (h, b), g in d.groupby(["num_heads", "batch_size"]):
        if len(g) < 3:
            continue
        _, s = _fit(list(g.step.astype(float)), list(g.latency * 1e-3))
        if s > 0:
            keys.append(int(b))
            frac.append(min(1.0, max(2.0 * h * (2 * lora + rope) * b / peak, BF16 * (lora + rope) * b / bw) / s))
    ks, fr = _median_by(keys, frac)
    return {"batch": ks, "frac": [_r(f) for f in fr], "latent": list(MLA_LATENT)}


COLLECTIVES = {"all_reduce": ("all-reduce", 2.0), "all_gather": ("all-gather", 1.0),
               "reduce_scatter": ("reduce-scatter", 1.0), "alltoall": ("all-to-all", 1.0)}


def collective_table(df, link_bw: float) -> dict:
    """NCCL collectives inside one node (fp16, sizes in elements): per op and rank count, the latency
    (the median of the messages of 64 KiB or less) and the bus bandwidth of the largest messages as a
    fraction of the GPU's one-direction link bandwidth (nccl-tests' busbw convention)."""
    out: dict = {}
    d = df[df.nccl_dtype == "half"]
    for name, (ours, factor) in COLLECTIVES.items():
        per = {}
        for n, g in sorted(d[d.op_name == name].groupby("num_gpus")):
            nbytes = g.message_size.astype(float) * BF16
            small = sorted(g.latency[nbytes <= 65536] * 1e-3)
            big = g[nbytes >= nbytes.max() / 4]
            bus = [factor * (n - 1) / n * s * BF16 / (t * 1e-3) for s, t in zip(big.message_size, big.latency)]
            if small and bus:
                per[str(int(n))] = {"latency_s": _r(small[len(small) // 2]),
                                    "bus_frac": _r(min(1.0, max(bus) / link_bw))}
        if per:
            out[ours] = per
    return out


def _read(pd, folder: Path, name: str):
    hit = latest(folder, name)
    return (None, None) if hit is None else (pd.read_parquet(hit[0]), hit[1])


def export_gpu(db: Path, sysname: str) -> dict | None:
    """The table of one AIConfigurator system (None where it has no vLLM GEMM data)."""
    pd, g = _pd(), GPUS[GPU_MAP[sysname]]
    root = db / sysname
    gemm, v_gemm = _read(pd, root / "gemm" / FRAMEWORK, "gemm_perf.parquet")
    if gemm is None:
        return None
    doc = {"format": FORMAT, "gpu": g.id, "source_system": sysname, "device": str(gemm.device.iloc[0]),
           "datasheet": {"peak_flops": g.peak_flops, "mem_bw": g.mem_bw, "link_bw": g.link_bw},
           "versions": {"gemm": f"{FRAMEWORK} {v_gemm}"}, "gemm": gemm_table(gemm, g.peak_flops, g.mem_bw)}
    moe, v = _read(pd, root / "moe" / FRAMEWORK, "moe_perf.parquet")
    if moe is not None and len(moe[(moe.moe_dtype == "bfloat16")]):
        doc["moe"], doc["versions"]["moe"] = moe_table(moe, g.peak_flops, g.mem_bw), f"{FRAMEWORK} {v}"
    dec, v = _read(pd, root / "attention" / FRAMEWORK, "generation_attention_perf.parquet")
    if dec is not None:
        doc["attention_decode"], doc["versions"]["attention_decode"] = decode_attention_table(dec, g.mem_bw), f"{FRAMEWORK} {v}"
    pre, v = _read(pd, root / "attention" / FRAMEWORK, "context_attention_perf.parquet")
    if pre is not None:
        doc["attention_prefill"], doc["versions"]["attention_prefill"] = prefill_attention_table(pre, g.peak_flops), f"{FRAMEWORK} {v}"
    mla, v = _read(pd, root / "mla" / FRAMEWORK, "mla_generation_module_perf.parquet")
    if mla is not None and len(mla_decode_table(mla, g.peak_flops, g.mem_bw)["batch"]):
        doc["mla_decode"], doc["versions"]["mla_decode"] = mla_decode_table(mla, g.peak_flops, g.mem_bw), f"{FRAMEWORK} {v}"
    nccl, v = _read(pd, root / "comm" / "nccl", "nccl_perf.parquet")
    if nccl is not None:
        doc["collectives"], doc["versions"]["collectives"] = collective_table(nccl, g.link_bw), f"nccl {v}"
    return doc


def package_version(db: Path) -> str:
    """The aiconfigurator-core version the database came with ('unknown' when not found beside it)."""
    for p in db.parents[2].glob("aiconfigurator_core-*.dist-info"):
        return p.name.removesuffix(".dist-info").split("-")[1]
    try:
        from importlib.metadata import version
        return version("aiconfigurator-core")
    except Exception:  # noqa: BLE001 -- a path given by hand need not be installed
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=None, help="AIConfigurator systems/data folder (default: the installed package's)")
    ap.add_argument("--out", default=str(ROOT / "oppo_sim" / "data" / "op_tables"), help="output folder (default: oppo_sim/data/op_tables)")
    ap.add_argument("--package-version", default=None, help="aiconfigurator-core version to record (default: read beside the database)")
    a = ap.parse_args(argv)
    db, out = find_db(a.db), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    ver = a.package_version or package_version(db)
    for sysname in sorted(GPU_MAP):
        if not (db / sysname).is_dir():
            continue
        doc = export_gpu(db, sysname)
        if doc is None:
            print(f"{sysname}: no {FRAMEWORK} GEMM data, skipped")
            continue
        doc["source"] = {"package": "aiconfigurator-core", "version": ver, "license": "Apache-2.0",
                         "note": "measured on NVIDIA's machines with the framework versions listed, not yours"}
        path = out / f"{doc['gpu']}.json"
        path.write_text(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
        print(f"{sysname} -> {path} ({path.stat().st_size // 1024} KiB; {', '.join(sorted(doc['versions']))})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
