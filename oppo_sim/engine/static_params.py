"""Parameters of the TRL-style static generation engine (``oppo_sim.engine.static``): its behaviour
(:class:`StaticConfig`: call size, mini-batch size, KV carried across calls) and its cost terms beyond
the roofline (:class:`StaticCostParams`: the per-call overhead). Kept apart from the engine so configs
and profiles can name them without importing the engine."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from oppo_sim.core.errors import ConfigError

__all__ = ["StaticConfig", "StaticCostParams", "DEFAULT_CALL_OVERHEAD_S"]

DEFAULT_CALL_OVERHEAD_S = 0.02
"""Default seconds per ``generate`` call beyond its forwards (HF ``generate`` set-up, the host-side
hand-over of the chunk to the reward model). A placeholder until a profile is fitted on a real static
decoder (``oppo_real.profiling.static_decoder``); the real number depends on the framework and the machine."""


@dataclass(frozen=True)
class StaticConfig:
    """Behaviour of a TRL-style static generation engine.

    ``call_tokens``: tokens per ``generate`` call (C); None: follow the driver (see the module docstring).
    ``gen_batch``: rows per mini-batch (TRL's ``local_rollout_forward_batch_size``); None: one batch.
    ``carry_kv``: keep the KV cache across calls (True) or re-prefill every row's whole context at every
    call (False: ``generate`` called again on the concatenated ids without ``past_key_values``)."""

    call_tokens: int | None = None
    gen_batch: int | None = None
    carry_kv: bool = True

    def __post_init__(self) -> None:
        for name in ("call_tokens", "gen_batch"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"static engine {name} must be None or an integer >= 1, got {v!r}")


@dataclass(frozen=True)
class StaticCostParams:
    """Cost terms of the static engine that the roofline's per-op parameters do not hold: the fixed
    seconds of one ``generate`` call beyond its forwards. Fitted by ``oppo_real.profiling.static_decoder.fit_static``
    and kept in a profile's ``meta["static"]`` (:meth:`to_meta` / :meth:`from_meta`)."""

    call_overhead_s: float = DEFAULT_CALL_OVERHEAD_S

    def __post_init__(self) -> None:
        v = self.call_overhead_s
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ConfigError(f"static call_overhead_s must be a finite number >= 0, got {v!r}")

    def to_meta(self) -> dict[str, float]:
        return {"call_overhead_s": float(self.call_overhead_s)}

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> "StaticCostParams":
        """From a profile's ``meta`` (its ``"static"`` section); defaults where absent."""
        sec = (meta or {}).get("static") or {}
        if not isinstance(sec, dict):
            raise ConfigError("profile meta 'static' must be an object")
        unknown = set(sec) - {"call_overhead_s"}
        if unknown:
            raise ConfigError(f"profile meta 'static': unknown field(s) {', '.join(sorted(unknown))}")
        return cls(**sec)
