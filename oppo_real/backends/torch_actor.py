"""`TorchActor`: a batched, KV-cached transformers decoder implementing `ActorBackend` — continuous
batching at token granularity on one padded cache, as a GPU decoder must be.

All running requests share one left-padded transformers ``DynamicCache`` (rows = requests; an attention
mask and position ids skip the padding; :mod:`oppo_real.backends.padded_cache`). One `step()`:

1. drops the rows that finished or were aborted (their columns are trimmed from the cache);
2. one decode forward of every running row (one token each);
3. one left-padded prefill of waiting requests — new ones, or ones whose KV was dropped (weight sync,
   sleep) and are re-prefilled from their whole context — up to ``max_prefill_tokens`` padded tokens per
   step (vLLM's ``max_num_batched_tokens``); it samples their next token and merges their rows into the
   cache.

So every live request gets one token per step (a request prefilled in this step gets its first token),
requests can be added mid-flight and aborted at any time, and greedy output does not depend on the
other rows (each row sees exactly its own tokens at its own positions). Sampling draws every row at once
with noise keyed by (request seed from `SamplingConfig` and the request id, position) — so sampled output
does not depend on the other rows either (`backends.sampling`); temperature 0 = greedy, log-probs =
log-softmax of the raw logits of the sampled token — as `VLLMActor`. The only host
synchronisation is one per forward: the sampled tokens and their log-probs.

After `load_weights` every row's KV is stale: the rows are prefilled again from their whole context with
the new weights at the next step (what vLLM's prefix-cache reset does to running requests). `sleep()`
frees the KV cache the same way (the torch backend's counterpart of vLLM's sleep while training runs);
the weights stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from oppo_real.backends.api import Delta
from oppo_real.backends.padded_cache import kv_layers, merge_rows, select_rows
from oppo_real.backends.sampling import row_keys, sample
from oppo_real.backends.torch_base import ContinuousEngine, Live, TorchEngineConfig, left_padded
from oppo_sim.core.errors import ConfigError


@dataclass(frozen=True)
class TorchActorConfig(TorchEngineConfig):
    max_prefill_tokens: int = 16384  # padded tokens prefilled per step at most (at least one request)
    pad_token_id: int = 0  # fed in masked positions (any valid id)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_prefill_tokens < 1:
            raise ConfigError(f"TorchActorConfig.max_prefill_tokens must be >= 1, got {self.max_prefill_tokens}")


class TorchActor(ContinuousEngine):
    """`ActorBackend` over a transformers causal LM (loaded from `cfg.model`, or an in-memory model)."""

    def _init_engine(self) -> None:
        super()._init_engine()
        self._cache: Any = None
        self._mask: torch.Tensor | None = None  # [rows, width] long, 1 = a real token

    def kv_bytes(self) -> int:
        if self._cache is None:
            return 0
        return int(sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv_layers(self._cache)))

    # ------------------------------------------------------------------ internals
    def _compact(self) -> None:
        """Drop the rows that finished or were aborted from the batch cache."""
        keep = [i for i, st in enumerate(self._rows) if not st.gone]
        if len(keep) == len(self._rows):
            return
        if not keep:
            self._rows, self._cache, self._mask, self._last = [], None, None, None
            return
        self._cache, self._mask, self._last = select_rows(self._cache, self._mask, self._last, keep)
        self._rows = [self._rows[i] for i in keep]

    def _drop_all_kv(self) -> None:
        super()._drop_all_kv()
        self._cache, self._mask = None, None

    def _decode(self) -> list[Delta]:
        """One decode iteration of every row."""
        pos = self._mask.sum(dim=1, keepdim=True)
        self._mask = torch.cat([self._mask, torch.ones_like(self._mask[:, :1])], dim=1)
        out = self.model(input_ids=self._last.unsqueeze(1), attention_mask=self._mask, position_ids=pos,
                         past_key_values=self._cache, use_cache=True, logits_to_keep=1)
        self._cache = out.past_key_values
        tok, deltas = self._sample(out.logits[:, -1], self._rows)
        self._last = tok
        return deltas

    def _prefill(self) -> list[Delta]:
        """Prefill waiting requests (left-padded to the longest, within the token budget), sample their next
        token and merge their rows into the batch cache."""
        fresh = self._take_fresh(len(self._waiting))
        ids, mask, pos = left_padded([s.context for s in fresh], self.cfg.pad_token_id, self.device)
        from transformers import DynamicCache

        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=DynamicCache(),
                         use_cache=True, logits_to_keep=1)
        tok, deltas = self._sample(out.logits[:, -1], fresh)
        if self._cache is None:
            self._cache, self._mask, self._last = out.past_key_values, mask, tok
        else:
            self._cache, self._mask, self._last = merge_rows(self._cache, self._mask, self._last, out.past_key_values, mask, tok)
        self._rows = self._rows + fresh
        return deltas

    def _sample(self, logits: torch.Tensor, rows: list[Live]) -> tuple[torch.Tensor, list[Delta]]:
        """Sample every row's next token in one batched draw (``backends.sampling``); one host sync for the
        tokens and their log-probs."""
        seeds, positions = row_keys([s.seed for s in rows], [len(s.context) for s in rows], logits.device)
        tok, lp = sample(logits, self.cfg.sampling.temperature, seeds, positions)
        return tok, self._book_all(rows, tok, lp)
