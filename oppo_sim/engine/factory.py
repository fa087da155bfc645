"""Which generation engine a replica runs: :class:`EngineKind` and :func:`make_engine`.

Wiring into a pipeline (what a driver does with the static engine beyond the common protocol):
- build each replica's core with ``make_engine(cfg.engine_kind, dc, cfg.engine, blocks, cfg.static,
  static_cost)`` where it builds ``EngineCore`` today (same ``kv_blocks_for`` blocks);
- at each step start, ``core.set_call_tokens(plan.chunk)`` on static cores (``None`` falls back to
  ``StaticConfig.call_tokens``; with neither, calls follow the requests' ``emit_at`` marks, and run
  unchunked without marks) — so a chunked policy generates in calls of its C even when nothing streams;
- ``StaticCostParams`` (the per-call overhead) comes from a profile's ``meta["static"]``
  (``StaticCostParams.from_meta``), defaults otherwise.
"""

from __future__ import annotations

from enum import Enum

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.continuous import EngineCore
from oppo_sim.engine.protocol import GenerationEngine
from oppo_sim.engine.request import EngineConfig
from oppo_sim.engine.static import StaticConfig, StaticCostParams, StaticEngineCore
from oppo_sim.hw.costs.costmodel import DecodeCost


class EngineKind(str, Enum):
    """``continuous``: vLLM-style continuous batching (``engine/continuous.py``); ``static``: TRL-style
    static, padded batches generated in calls of C tokens (``engine/static.py``)."""

    CONTINUOUS = "continuous"
    STATIC = "static"

    @classmethod
    def parse(cls, kind: "str | EngineKind") -> "EngineKind":
        if isinstance(kind, EngineKind):
            return kind
        try:
            return cls(str(kind).strip().lower())
        except ValueError:
            raise ConfigError(f"unknown engine {kind!r}; known: {', '.join(k.value for k in cls)}") from None


def make_engine(
    kind: str | EngineKind,
    cost: DecodeCost,
    engine_cfg: EngineConfig,
    kv_blocks: int,
    static_cfg: StaticConfig | None = None,
    static_cost: StaticCostParams | None = None,
) -> GenerationEngine:
    """One engine replica of ``kind`` over ``cost`` with ``kv_blocks`` KV blocks of ``engine_cfg.block_size``
    tokens (``continuous.kv_blocks_for``). ``static_cfg`` / ``static_cost`` only apply to the static engine
    (defaults when None)."""
    k = EngineKind.parse(kind)
    if k is EngineKind.STATIC:
        return StaticEngineCore(cost, engine_cfg, kv_blocks, static_cfg, static_cost)
    return EngineCore(cost, engine_cfg, kv_blocks)
