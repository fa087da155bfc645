"""Measured kernel-cost tables, one per GPU (``oppo_sim/data/op_tables/<gpu>.json``, format
``oppo-op-table/1``), and their lookups. ``scripts/export_op_tables.py`` writes them from NVIDIA's
AIConfigurator database; docs/op_costs.md says what each holds and where it comes from.

Every number is a *fraction of the GPU's datasheet roofline* (``datasheet``: the peak and bandwidths of
``oppo_sim.hw.devices.gpu_table`` it was taken against) or a latency in seconds, so that a GPU of the same
architecture without a table can borrow it (``oppo_sim.hw.costs.op_cost``). Lookups interpolate linearly in
log2 of the size and hold the end values outside the measured range. Tables are read once per process
(:func:`shipped_table` is cached); nothing here runs per engine iteration.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from oppo_sim.core.errors import ConfigError

FORMAT = "oppo-op-table/1"
TABLE_DIR = Path(__file__).resolve().parents[2] / "data" / "op_tables"


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear ``ys`` at ``x`` over increasing ``xs``; the end values outside them."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_left(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


def _log2(x: float) -> float:
    return math.log2(max(float(x), 1e-9))


@dataclass(frozen=True)
class OpTable:
    """One GPU's kernel classes (tuples, so the table is hashable and compares by value)."""

    gpu: str  # oppo's GPU-table id
    label: str  # where it comes from, e.g. "aiconfigurator-core 0.12.0, vllm 0.24.0, h100_sxm"
    peak_flops: float  # the datasheet figures the fractions were taken against
    mem_bw: float
    gemm_log2_m: tuple[float, ...]  # dense bf16 GEMM: roofline fraction against log2(M tokens)
    gemm_frac: tuple[float, ...]
    moe_log2_tpe: tuple[float, ...] = ()  # grouped bf16 MoE GEMM: fraction against log2(tokens per expert),
    moe_log2_width: tuple[float, ...] = ()  # one row per log2(per-GPU expert width)
    moe_frac: tuple[tuple[float, ...], ...] = ()
    dec_batch: tuple[float, ...] = ()  # paged decode attention: per log2(batch), the fixed seconds of a
    dec_intercept_s: tuple[float, ...] = ()  # layer's call and the fraction of mem_bw its KV reads reach
    dec_kv_frac: tuple[float, ...] = ()
    mla_batch: tuple[float, ...] = ()  # MLA decode (absorbed): roofline fraction per cached token against log2(batch)
    mla_frac: tuple[float, ...] = ()
    pre_log2_tokens: tuple[float, ...] = ()  # causal prefill attention: fraction of peak against log2(length)
    pre_frac: tuple[float, ...] = ()
    collectives: tuple[tuple[str, int, float, float], ...] = ()  # (kind, ranks, latency_s, bus_frac of link_bw)

    @property
    def ridge(self) -> float:
        """FLOPs per byte where the datasheet roofline turns from memory- to compute-bound."""
        return self.peak_flops / self.mem_bw

    def gemm(self, m: float) -> float:
        """Roofline fraction a dense GEMM over ``m`` tokens reached (median over weight shapes)."""
        return _interp(self.gemm_log2_m, self.gemm_frac, _log2(m))

    def moe(self, tokens_per_expert: float, width: float) -> float | None:
        """Roofline fraction of a grouped expert GEMM at ``tokens_per_expert`` with experts ``width`` wide
        on each GPU (the nearest measured width); None without MoE data."""
        if not self.moe_frac:
            return None
        w = _log2(width)
        row = min(range(len(self.moe_log2_width)), key=lambda i: abs(self.moe_log2_width[i] - w))
        return _interp(self.moe_log2_tpe, self.moe_frac[row], _log2(tokens_per_expert))

    def decode_attention(self, batch: float) -> tuple[float, float] | None:
        """(seconds per layer call, fraction of mem_bw on the KV reads) of paged decode attention."""
        if not self.dec_batch:
            return None
        x = _log2(max(batch, 1))
        return _interp(self.dec_batch, self.dec_intercept_s, x), _interp(self.dec_batch, self.dec_kv_frac, x)

    def mla_decode(self, batch: float) -> float | None:
        """Roofline fraction of MLA's absorbed decode attention per cached token at ``batch`` sequences."""
        return _interp(self.mla_batch, self.mla_frac, _log2(max(batch, 1))) if self.mla_frac else None

    def prefill_attention(self, tokens: float) -> float | None:
        """Fraction of peak a causal prefill attention over sequences of ``tokens`` reached."""
        if not self.pre_frac:
            return None
        return _interp(self.pre_log2_tokens, self.pre_frac, _log2(tokens))

    def collective(self, kind: str, ranks: int) -> tuple[float, float] | None:
        """(latency seconds, bus fraction of link_bw) of one in-node collective at the nearest measured
        rank count not above ``ranks`` (the largest measured for more); None when unmeasured."""
        rows = sorted((r, lat, bus) for k, r, lat, bus in self.collectives if k == kind)
        if not rows:
            return None
        below = [row for row in rows if row[0] <= ranks]
        _, lat, bus = below[-1] if below else rows[0]
        return lat, bus


def _tuple(doc: dict, key: str, where: str) -> tuple[float, ...]:
    v = doc.get(key)
    if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise ConfigError(f"{where}: '{key}' must be a non-empty list of numbers")
    return tuple(float(x) for x in v)


def _label(doc: dict) -> str:
    src = doc.get("source", {})
    versions = sorted(set(doc.get("versions", {}).values()))
    return f"{src.get('package', 'unknown source')} {src.get('version', '')}".strip() + \
        f", {' / '.join(versions)}, {doc.get('source_system', doc.get('gpu'))}"


def _sections(doc: dict, where: str) -> dict:
    kw: dict = {}
    moe = doc.get("moe")
    if moe and moe.get("frac"):
        widths = sorted(moe["frac"], key=float)
        kw.update(moe_log2_tpe=_tuple(moe, "log2_tokens_per_expert", where + " moe"),
                  moe_log2_width=tuple(float(w) for w in widths),
                  moe_frac=tuple(_tuple(moe["frac"], w, where + " moe.frac") for w in widths))
    dec = doc.get("attention_decode")
    if dec and dec.get("batch"):
        kw.update(dec_batch=tuple(_log2(b) for b in _tuple(dec, "batch", where)),
                  dec_intercept_s=_tuple(dec, "intercept_s", where), dec_kv_frac=_tuple(dec, "kv_frac", where))
    mla = doc.get("mla_decode")
    if mla and mla.get("batch"):
        kw.update(mla_batch=tuple(_log2(b) for b in _tuple(mla, "batch", where)), mla_frac=_tuple(mla, "frac", where))
    pre = doc.get("attention_prefill")
    if pre and pre.get("tokens"):
        kw.update(pre_log2_tokens=tuple(_log2(t) for t in _tuple(pre, "tokens", where)), pre_frac=_tuple(pre, "frac", where))
    coll = []
    for kind, per in sorted(doc.get("collectives", {}).items()):
        for ranks, v in sorted(per.items(), key=lambda kv: int(kv[0])):
            coll.append((kind, int(ranks), float(v["latency_s"]), float(v["bus_frac"])))
    kw["collectives"] = tuple(coll)
    return kw


def parse_table(doc: dict, where: str) -> OpTable:
    """An :class:`OpTable` from its JSON document; a malformed one -> one-line ``ConfigError``."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{where}: not an op-cost table (field 'format' must be '{FORMAT}')")
    try:
        gemm, sheet = doc["gemm"], doc["datasheet"]
        return OpTable(gpu=str(doc["gpu"]), label=_label(doc), peak_flops=float(sheet["peak_flops"]),
                       mem_bw=float(sheet["mem_bw"]), gemm_log2_m=tuple(_log2(m) for m in _tuple(gemm, "m", where)),
                       gemm_frac=_tuple(gemm, "frac", where), **_sections(doc, where))
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{where}: malformed op-cost table ({type(e).__name__}: {e})") from None


def read_table(path: str | Path) -> OpTable:
    """Read one table file (``oppo-op-table/1``)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"op-cost table '{path}': cannot read ({e.strerror or e})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"op-cost table '{path}': not valid JSON ({e.msg} at line {e.lineno})") from None
    return parse_table(doc, f"op-cost table '{path}'")


@lru_cache(maxsize=None)
def shipped_table(gpu_id: str) -> OpTable | None:
    """The table shipped for GPU-table id ``gpu_id`` (read once per process), or None."""
    path = TABLE_DIR / f"{gpu_id}.json"
    return read_table(path) if path.is_file() else None
