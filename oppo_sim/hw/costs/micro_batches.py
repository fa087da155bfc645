"""How a trainer rank splits its share of a step into micro-batches: packed to a token budget (verl's dynamic batch
size, NeMo RL's sequence packing, OpenRLHF's dynamic batch), a fixed count of sequences (verl's
``ppo_micro_batch_size_per_gpu``, OpenRLHF's ``micro_train_batch_size``, NeMo RL's ``train_micro_batch_size`` without
packing), or — neither given — one longest sequence each. A sequence is never split: a budget below the longest
sequence holds that one sequence.

The count sets the fixed costs paid per micro-batch and the pipeline bubble (``trainer_cost``); the size sets the
tokens each expert's grouped GEMM sees (``trainer_cost.expert_excess``) and the activations the memory plan holds
(the worst micro-batch: the budget, or that many sequences of the longest length).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oppo_sim.core.errors import ConfigError


@dataclass(frozen=True)
class MicroBatch:
    """A micro-batch: up to ``tokens`` tokens packed, or ``sequences`` sequences; neither: one longest sequence."""

    tokens: int | None = None
    sequences: int | None = None

    def __post_init__(self) -> None:
        for name in ("tokens", "sequences"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"a micro-batch's {name} must be an integer >= 1 (or None), got {v!r}")
        if self.tokens is not None and self.sequences is not None:
            raise ConfigError(f"a micro-batch is packed to a token budget ({self.tokens}) or counted in sequences "
                              f"({self.sequences}), not both")

    @property
    def given(self) -> bool:
        return self.tokens is not None or self.sequences is not None

    def count(self, tokens: np.ndarray, sequences, longest: float) -> np.ndarray:
        """Micro-batches of shares holding ``tokens`` in ``sequences`` sequences (arrays of the same shape;
        ``sequences`` may be a callable giving them, called only where the rule counts sequences)."""
        if self.sequences is not None:
            counts = sequences() if callable(sequences) else sequences
            return np.ceil(np.asarray(counts, dtype=np.float64) / self.sequences)
        return np.ceil(np.asarray(tokens, dtype=np.float64) / max(float(self.tokens or 0), longest, 1.0))

    def typical_tokens(self, lengths: np.ndarray) -> float:
        """Tokens of a typical micro-batch of sequences of these ``lengths``: the budget (at least the longest
        sequence), ``sequences`` of the mean length, or the longest."""
        n = np.asarray(lengths, dtype=np.float64)
        longest = float(n.max()) if len(n) else 0.0
        if self.sequences is not None:
            return self.sequences * (float(n.mean()) if len(n) else 0.0)
        return max(float(self.tokens or 0), longest)

    def worst_tokens(self, longest: int) -> int:
        """Tokens of the largest micro-batch when no sequence exceeds ``longest`` (what its activations peak at)."""
        if self.sequences is not None:
            return self.sequences * longest
        return max(self.tokens or longest, longest)

    def label(self) -> str:
        if self.sequences is not None:
            return f"{self.sequences} sequence{'s' if self.sequences > 1 else ''}"
        return f"{self.tokens:,} tokens" if self.tokens is not None else "one longest sequence"


__all__ = ["MicroBatch"]
