"""Tensor parallelism over attention heads: which degrees a model's heads allow, one rule for the engine (vLLM
refuses a tensor-parallel size its heads do not divide: "Total number of attention heads must be divisible by tensor
parallel size") and for Megatron's trainer, for the runs a user gives and the ones the planner tries."""

from __future__ import annotations

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.models.model_spec import ModelSpec

__all__ = ["heads_split", "check_heads_split"]


def heads_split(heads: int, kv_heads: int, tp: int) -> bool:
    """The query heads divide over ``tp`` GPUs, and the KV heads either divide over them or are replicated (``tp`` a
    multiple of them: vLLM's and Megatron's grouped-query attention). ``heads`` 0: unknown, anything goes."""
    return not heads or (heads % tp == 0 and (kv_heads % tp == 0 or tp % kv_heads == 0))


def check_heads_split(model: ModelSpec, tp: int, what: str) -> None:
    """One line where ``tp`` does not split ``model``'s heads (:func:`heads_split`)."""
    if not heads_split(model.heads, model.kv_heads, tp):
        raise ConfigError(f"{what} {tp} does not split {model.id}'s {model.heads} attention heads ({model.kv_heads} KV "
                          f"heads): vLLM and Megatron need the heads divisible by it, and the KV heads divisible by it or "
                          f"it by them")
