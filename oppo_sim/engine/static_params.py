"""Parameters of the TRL-style static generation engine (``oppo_sim.engine.static``): its behaviour
(:class:`StaticConfig`: call size, mini-batch size, KV carried across calls, when a ZeRO-3 trainer's
weights are gathered) and its cost terms beyond the roofline (:class:`StaticCostParams`: the per-call
overhead, Hugging Face ``generate``'s host time per forward, the gather's seconds). Kept apart from the
engine so configs and profiles can name them without importing the engine.

**HF ``generate``'s host time per forward.** ``generate`` runs the model eagerly: every op of every layer
is a Python call, a dispatch and a kernel launch, and the loop synchronises once per token (its stopping
checks read the device), so the host issues a forward's ops while the GPU runs the earlier ones and a forward
costs the *larger* of the host's issue time and the GPU's — the rule vLLM's eager mode is priced with
(``oppo_sim.hw.costs.eager``; the engine's ``DecodeCost`` carries the host's time as its floor). The host's
time is ``(ops_per_layer x layers +`` :data:`HF_STEP_OPS` ``) x`` :data:`HF_HOST_OP_S`: the ops counted with
``oppo_real.profiling.eager_ops.count_ops`` on transformers 4.38.2's Llama (SDPA), the release OpenRLHF's and
DeepSpeed-Chat's benchmark ran — 49 a decoder layer on the CPU, one more on a GPU (the query's contiguous copy
before SDPA's memory-efficient kernel), and 46 a token outside the layers (the embedding, the rotary tables'
gather, the mask, the final norm and head, ``generate``'s sampling and stopping checks). The seconds per op are
measured (eager PyTorch on an H200 host); the CPU profiles' fitted decode already includes the host, so a
profile sets this term to 0.

**The ZeRO-3 gather.** Where the generating model is a ZeRO-3 trainer's (``gather_s`` > 0, set by the
pipeline from the trainer's layout), its weights are sharded and must be gathered to generate:
``zero3_gather = "call"`` gathers them once per ``generate`` call — TRL's ``unwrap_model_for_generation``
(``gather_deepspeed3_params=True``) and DeepSpeed's hybrid engine with ``pin_parameters`` (its default,
DeepSpeed-Chat's unless ``--unpin_actor_parameters``: ``DeepSpeedHybridEngine.generate`` gathers all
layers in one ``GatheredParameters`` around ``generate``, ``deepspeed/runtime/hybrid_engine.py``);
``"forward"`` gathers every layer in every forward — ``generate`` on a ZeRO-3 module without the hybrid
engine (OpenRLHF without vLLM; the hybrid engine with ``pin_parameters`` off), where DeepSpeed prefetches
the next layers while the current one computes, so a forward costs the larger of the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.eager import EAGER_HOST_OP_S

__all__ = ["StaticConfig", "StaticCostParams", "DEFAULT_CALL_OVERHEAD_S", "HF_HOST_OP_S", "HF_OPS_PER_LAYER",
           "HF_STEP_OPS", "ZERO3_GATHER"]

DEFAULT_CALL_OVERHEAD_S = 0.02
"""Default seconds per ``generate`` call beyond its forwards (HF ``generate`` set-up, the host-side
hand-over of the chunk to the reward model). A placeholder until a profile is fitted on a real static
decoder (``oppo_real.profiling.static_decoder``); the real number depends on the framework and the machine."""


HF_HOST_OP_S = EAGER_HOST_OP_S
"""Host seconds of one eager PyTorch op on a GPU (the Python module call, the dispatcher, the kernel launch): the
one constant vLLM's eager mode is priced with too (``oppo_sim.hw.costs.eager``, where it is measured)."""

HF_OPS_PER_LAYER = 50
"""Ops one eager decoder layer issues per forward (transformers 4.38.2's ``LlamaDecoderLayer`` with SDPA, counted;
see the module docstring)."""

HF_STEP_OPS = 46
"""Ops one ``generate`` token issues outside the layers (counted with the layers', same release)."""

ZERO3_GATHER: tuple[str, ...] = ("call", "forward")
"""When a ZeRO-3 trainer's weights are gathered to generate: once per ``generate`` call, or every forward."""


@dataclass(frozen=True)
class StaticConfig:
    """Behaviour of a TRL-style static generation engine.

    ``call_tokens``: tokens per ``generate`` call (C); None: follow the driver (see the module docstring).
    ``gen_batch``: rows per mini-batch (TRL's ``local_rollout_forward_batch_size``); None: one batch.
    ``carry_kv``: keep the KV cache across calls (True) or re-prefill every row's whole context at every
    call (False: ``generate`` called again on the concatenated ids without ``past_key_values``).
    ``zero3_gather``: where the generating model is a ZeRO-3 trainer's, gather its weights once per call
    (``"call"``: TRL, DeepSpeed's hybrid engine) or every forward (``"forward"``: ``generate`` on a ZeRO-3
    module, OpenRLHF without vLLM); see the module docstring."""

    call_tokens: int | None = None
    gen_batch: int | None = None
    carry_kv: bool = True
    zero3_gather: str = "call"

    def __post_init__(self) -> None:
        for name in ("call_tokens", "gen_batch"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"static engine {name} must be None or an integer >= 1, got {v!r}")
        if self.zero3_gather not in ZERO3_GATHER:
            raise ConfigError(f"static engine zero3_gather must be one of {', '.join(ZERO3_GATHER)}, got {self.zero3_gather!r}")


@dataclass(frozen=True)
class StaticCostParams:
    """Cost terms of the static engine that the roofline's per-op parameters do not hold: the fixed seconds
    of one ``generate`` call beyond its forwards; HF ``generate``'s host seconds per op
    (``host_op_s``) over the ``ops_per_layer`` ops of each layer and :data:`HF_STEP_OPS`, every forward; the seconds of one
    gather of a ZeRO-3 trainer's weights (``gather_s``, 0 where the weights are not sharded: the pipeline
    sets it). The call overhead is fitted by ``oppo_real.profiling.static_decoder.fit_static`` and kept in a
    profile's ``meta["static"]`` (:meth:`to_meta` / :meth:`from_meta`)."""

    call_overhead_s: float = DEFAULT_CALL_OVERHEAD_S
    host_op_s: float = HF_HOST_OP_S
    ops_per_layer: int = HF_OPS_PER_LAYER
    gather_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("call_overhead_s", "host_op_s", "gather_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"static {name} must be a finite number >= 0, got {v!r}")
        v = self.ops_per_layer
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"static ops_per_layer must be an integer >= 0, got {v!r}")

    def on_host(self, scale: float) -> "StaticCostParams":
        """The x86-measured defaults on a host ``scale`` times slower (``Hardware.host_scale``): the call's overhead and
        the host time per op, both host work, that much longer. Values given (a profile's fit, ``--call-overhead``,
        ``--host-op-us``) are their own host's: kept."""
        if scale == 1.0 or self != StaticCostParams(gather_s=self.gather_s):
            return self
        return replace(self, call_overhead_s=self.call_overhead_s * scale, host_op_s=self.host_op_s * scale)

    def host_forward_s(self, layers: int) -> float:
        """Host seconds one forward's ops take to issue: ``(ops_per_layer x layers + HF_STEP_OPS) x host_op_s``,
        the floor under the forward's GPU time."""
        return (self.ops_per_layer * layers + HF_STEP_OPS) * self.host_op_s

    def to_meta(self) -> dict[str, float]:
        return {"call_overhead_s": float(self.call_overhead_s), "host_op_s": float(self.host_op_s),
                "ops_per_layer": int(self.ops_per_layer)}

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> "StaticCostParams":
        """From a profile's ``meta`` (its ``"static"`` section): the fitted call overhead (default where
        absent); the host time per op is 0 unless the section states it — a profile's fitted decode op
        already holds the host's time."""
        sec = (meta or {}).get("static") or {}
        if not isinstance(sec, dict):
            raise ConfigError("profile meta 'static' must be an object")
        unknown = set(sec) - {"call_overhead_s", "host_op_s", "ops_per_layer"}
        if unknown:
            raise ConfigError(f"profile meta 'static': unknown field(s) {', '.join(sorted(unknown))}")
        return cls(**{"host_op_s": 0.0, **sec})
