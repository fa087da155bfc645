"""The op-cost layer: which source prices each kernel class on a GPU, between the engines/trainer and the
roofline (docs/op_costs.md).

Sources, first found wins: (1) the user's calibrated profile (``--profile``; its fitted efficiencies price
everything, no table is applied over them); (2) the measured table shipped for that GPU
(:mod:`oppo_sim.hw.costs.op_tables`); (3) the datasheet roofline — under ``--op-costs tables+arch`` with the
fractions of the measured GPUs of the same architecture where there are some (H20, H800, GH200 borrow Hopper's from
the H100 and H200 tables; A800 Ampere's from A100's), else (and under ``tables``, the command line's default) with
the default per-operation efficiencies. ``--op-costs roofline`` skips (2) and the borrowing.

A borrowed fraction is read at the same arithmetic intensity *relative to the ridge point*: a GEMM of
``m`` tokens on a GPU of ridge ``r`` reads the measured GPU's curve at ``m * r_measured / r``, so an
H20 (ridge 37 FLOP/B) decoding 256 sequences is priced like an H100 (ridge 295) GEMM of ~2,000 tokens,
compute-bound on both. Several measured GPUs are averaged.

What the tables price (:class:`DecodeKernels`, used by ``costmodel.DecodeCost``): a generation
iteration as the sum of its kernels — dense GEMMs at the iteration's tokens, grouped expert GEMMs at its
tokens per expert, paged decode attention (a fixed cost per layer call plus the KV reads), prefill
attention — plus the decode op's fixed per-iteration overhead. Scorer forwards and training keep the
roofline with their compute efficiency scaled by the GPU's measured large-GEMM fraction relative to the
H100's (the defaults are taken as H100 figures), and a MoE model's routed-expert FLOPs priced at the measured
grouped-GEMM fraction over the dense one (:func:`expert_flop_excess`); collectives take the measured in-node latency and bus
bandwidth. Elementwise kernels (norms, activations, rotary, sampling) are not in the tables.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import median

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.devices.hardware import NCCL_HOP_S, CostParams, Hardware, OpParams
from oppo_sim.hw.costs.op_tables import OpTable, shipped_table
from oppo_sim.hw.models.model_spec import ModelSpec

OP_COST_MODES: tuple[str, ...] = ("roofline", "tables", "tables+arch")
"""``roofline``: datasheet x default efficiencies; ``tables``: the GPU's own shipped table where there is one, else
the roofline; ``tables+arch``: its own table, else its architecture's borrowed at its ridge point, else the roofline."""
DEFAULT_OP_COSTS = "tables"
"""The default of ``--op-costs`` on a command line: a GPU's own table where one ships, since the tables priced the
one GPU measured with a kernel-bound engine (an H200, 2026-11-26) closer than the roofline; borrowing another
GPU's table (``tables+arch``) has no such check and stays opt-in (docs/op_costs.md, "Does it help?"). A library
caller's ``Hardware`` stays as built (roofline) unless :func:`with_op_costs` is applied."""

ARCH: dict[str, str] = {"h100-sxm": "hopper", "h200": "hopper", "gh200": "hopper", "h20": "hopper", "h800": "hopper",
                        "a100-40gb": "ampere", "a100-80gb": "ampere", "a800-80gb": "ampere",
                        "b200": "blackwell", "gb200": "blackwell", "b300": "blackwell", "gb300": "blackwell",
                        "l40s": "ada", "rtx-4090": "ada",
                        "rtx-pro-6000": "blackwell-gddr"}
"""GPU-table id -> architecture, for borrowing fractions. GPUs not listed (MI300X) keep the defaults."""

REFERENCE_GPU = "h100-sxm"
"""The GPU whose measured large-GEMM fraction the default compute efficiencies stand for."""

MOE_BLOCK_TOKENS = 16
"""The smallest token tile vLLM's fused-MoE kernel computes per expert (``BLOCK_SIZE_M`` 16 in its tuned
configs for small batches, e.g. ``E=128,N=192,device_name=NVIDIA_H20.json``): an expert touched by fewer
tokens still costs a tile's FLOPs."""

_LARGE_M = 8192.0  # tokens of a "large" GEMM (a scorer/trainer micro-batch)


@dataclass(frozen=True)
class OpCosts:
    """The measured fractions that price one GPU: its own table (``kind`` "tables") or its
    architecture's (``kind`` "derived"), taken to the GPU's ridge point ``ridge``."""

    tables: tuple[OpTable, ...]
    kind: str
    ridge: float
    label: str

    def _mean(self, values) -> float | None:
        got = [v for v in values if v is not None]
        return sum(got) / len(got) if got else None

    def gemm(self, m: float) -> float:
        return self._mean(t.gemm(m * t.ridge / self.ridge) for t in self.tables)

    def moe(self, tokens_per_expert: float, width: float) -> float | None:
        return self._mean(t.moe(tokens_per_expert * t.ridge / self.ridge, width) for t in self.tables)

    def decode_attention(self, batch: float) -> tuple[float, float] | None:
        got = [d for d in (t.decode_attention(batch) for t in self.tables) if d is not None]
        return (sum(g[0] for g in got) / len(got), sum(g[1] for g in got) / len(got)) if got else None

    def mla_decode(self, batch: float) -> float | None:
        return self._mean(t.mla_decode(batch) for t in self.tables)

    def prefill_attention(self, tokens: float) -> float | None:
        return self._mean(t.prefill_attention(tokens) for t in self.tables)

    def collective(self, kind: str, ranks: int) -> tuple[float, float] | None:
        got = [c for c in (t.collective(kind, ranks) for t in self.tables) if c is not None]
        return (sum(g[0] for g in got) / len(got), sum(g[1] for g in got) / len(got)) if got else None


def find_op_costs(hw: Hardware, *, borrow: bool = False) -> OpCosts | None:
    """The measured fractions for ``hw``'s GPU: its own table, else (``borrow``) its architecture's, else None."""
    gpu = hw.gpu
    ridge = gpu.peak_flops / gpu.mem_bw
    own = shipped_table(gpu.id)
    if own is not None:
        return OpCosts((own,), "tables", ridge, f"tables ({own.label})")
    if not borrow:
        return None
    arch = ARCH.get(gpu.id)
    peers = tuple(t for t in (shipped_table(g) for g, a in sorted(ARCH.items()) if a == arch and arch) if t is not None)
    if not peers:
        return None
    return OpCosts(peers, "derived", ridge, f"roofline with {arch} fractions from the {', '.join(t.gpu for t in peers)} tables")


def _collective_params(ops: OpCosts, base: OpParams) -> OpParams:
    """NCCL's base latency and bus efficiency from the measured in-node all-reduces: the efficiency is the
    median bus fraction over the measured rank counts, the base latency the 8-rank (or largest) latency
    less the ring's NVLink hops (``hardware.collective_latency``)."""
    rows = [r for t in ops.tables for (k, *r) in t.collectives if k == "all-reduce"]
    if not rows:
        return base
    ranks, lat, _ = max(rows, key=lambda r: (r[0], r[1]))
    eff = min(1.0, median(r[2] for r in rows))
    return OpParams(base.eff_compute, eff, max(1e-6, lat - 2 * (ranks - 1) * NCCL_HOP_S["nvlink"]))


def _scaled(op: OpParams, scale: float) -> OpParams:
    return OpParams(min(1.0, op.eff_compute * scale), op.eff_memory, op.overhead_s)


def compute_scale(ops: OpCosts) -> float:
    """The GPU's measured large-GEMM fraction over the reference GPU's (1 without a reference table)."""
    ref = shipped_table(REFERENCE_GPU)
    return ops.gemm(_LARGE_M) / ref.gemm(_LARGE_M) if ref is not None else 1.0


def expert_flop_excess(ops: OpCosts | None, model: ModelSpec, tokens_per_expert: float, width: float,
                       scalar_head: bool = False) -> float:
    """The extra matmul FLOPs, as a fraction of a MoE model's matmul FLOPs, that price its routed experts' grouped
    GEMMs at the measured grouped fraction (``tokens_per_expert``, per-GPU expert ``width``) where the dense
    large-GEMM fraction prices the rest: ``share x (dense / grouped - 1)``, ``share`` the routed experts' part of
    the matmul FLOPs per token. 0 for a dense model, without tables, or where grouped GEMMs measure no slower."""
    if ops is None or not model.moe:
        return 0.0
    grouped = ops.moe(tokens_per_expert, width)
    if not grouped:
        return 0.0
    share = model.moe_layers * model.experts_per_token * model.expert_params / (model.flop_coeffs(scalar_head)[0] / 2.0)
    return share * max(0.0, ops.gemm(_LARGE_M) / grouped - 1.0)


def with_op_costs(hw: Hardware, mode: str = DEFAULT_OP_COSTS) -> Hardware:
    """``hw`` priced by ``mode``: "roofline" leaves it as it is; "tables" attaches the measured fractions of its
    own table, "tables+arch" its own or its architecture's, unless its parameters come from a calibrated profile,
    which wins.
    The result's ``params_source`` says what priced it (:func:`priced_by` per stage)."""
    if mode not in OP_COST_MODES:
        raise ConfigError(f"--op-costs must be one of {', '.join(OP_COST_MODES)}, got {mode!r}")
    if mode == "roofline" or hw.ops is not None or hw.params_source.startswith("calibrated profile"):
        return hw
    ops = find_op_costs(hw, borrow=mode == "tables+arch")
    if ops is None:
        return hw
    p, s = hw.params, compute_scale(ops)
    params = CostParams(decode=p.decode, prefill=_scaled(p.prefill, s), train=_scaled(p.train, s), sync=p.sync,
                        collective=_collective_params(ops, p.collective))
    return replace(hw, params=params, params_source=f"{hw.params_source}; op costs: {ops.label}", ops=ops)


def add_op_costs_arg(parser) -> None:
    """The ``--op-costs`` option of every command that prices a GPU."""
    parser.add_argument("--op-costs", dest="op_costs", choices=OP_COST_MODES, default=DEFAULT_OP_COSTS,
                        help="what prices the kernels: 'tables' (the measured table shipped for the GPU, else the "
                             "roofline), 'tables+arch' (else its architecture's table too, at its ridge point) or "
                             "'roofline' (datasheet x default efficiencies); a --profile wins over the tables; see "
                             "docs/op_costs.md (default %(default)s)")


def hardware_for(text, op_costs: str = DEFAULT_OP_COSTS) -> Hardware:
    """A command line's ``--gpu``/``--profile`` text resolved (``profiles.resolve_hardware``) and priced by ``op_costs``."""
    from oppo_sim.hw.fitting.profiles import resolve_hardware

    return with_op_costs(resolve_hardware(text), op_costs)


def priced_by(hw: Hardware) -> dict[str, str]:
    """Which source priced each stage's kernels on ``hw`` — decode, prefill (scorer forwards), train, collectives —
    and its host work (``host``: the x86-measured constants, stretched on a slower host CPU)."""
    return {**_kernels_priced_by(hw), "host": host_priced_by(hw)}


def host_priced_by(hw: Hardware) -> str:
    """What priced ``hw``'s host work: the x86-measured constants, times ``hw.host_scale`` where it is not 1."""
    if hw.host_scale == 1.0:
        return "x86-measured host constants"
    return f"x86-measured host constants x{hw.host_scale:.2f} (its host CPU: NVIDIA/TransformerEngine#2053's Grace ratio)"


def _kernels_priced_by(hw: Hardware) -> dict[str, str]:
    if hw.params_source.startswith("calibrated profile"):
        return dict.fromkeys(("decode", "prefill", "train", "collectives"), hw.params_source)
    ops = hw.ops
    if ops is None:
        return dict.fromkeys(("decode", "prefill", "train", "collectives"), f"roofline ({hw.params_source})")
    scaled = (f"roofline, compute efficiency x{compute_scale(ops):.2f} by the measured GEMMs, a MoE's experts at the "
              f"measured grouped GEMMs ({ops.label})")
    return {"decode": ops.label, "prefill": scaled, "train": scaled,
            "collectives": ops.label if any(t.collectives for t in ops.tables) else f"roofline ({hw.params_source})"}


def priced_line(hw: Hardware) -> str:
    """One echo line: ``priced by: decode: ...; prefill: ...; train: ...; collectives: ...``."""
    return "priced by: " + "; ".join(f"{k}: {v}" for k, v in priced_by(hw).items())
