"""`TorchGraphActor` (``--backend torch-graph``): the torch engine made GPU-bound — continuous batching at
token granularity, as `TorchActor`, on a KV cache allocated once in static slots, with every decode
iteration replayed as a CUDA graph per batch-size bucket (:mod:`oppo_real.backends.graph_decoder` says
how, and why slots rather than paged blocks).

One `step()`:

1. the sequences that finished or were aborted leave their slots (the last ones move into the holes, so
   the running batch always fills slots ``0..n-1``);
2. one decode iteration of every running sequence (one token each): the batch padded to its bucket, the
   captured graph replayed on a GPU (eager on the CPU or with ``cuda_graphs=False``), sampling inside it;
3. one prefill of waiting requests — new ones, or ones whose KV was dropped (weight sync, sleep) and are
   prefilled again from their whole context — up to ``max_prefill_tokens`` padded tokens and the free
   slots; it samples their first token.

The outputs are `TorchActor`'s: greedy output token for token (each row sees exactly its own tokens at
its own positions: tested on the CPU), and sampled output too, since both draw with the counter-based
noise of `backends.sampling` keyed by (request seed, position). Log-probs are the log-softmax of the
raw logits, as `TorchActor` and vLLM report. Requests beyond ``max_num_seqs`` running at once wait for a
free slot (vLLM's scheduler does the same). One host synchronisation per forward: the sampled tokens.

The cache holds ``slots x max_model_len`` tokens (`kv_bytes`); ``kv_cache_bytes`` caps it (fewer slots).
`load_weights` copies into the model's parameters in place (the captured graphs stay valid) and makes
every running sequence prefill again; `sleep()` frees the cache and the graphs (captured again lazily).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oppo_real.backends.api import Delta
from oppo_real.backends.graph_decoder import SlotDecoder, slots_for
from oppo_real.backends.torch_base import ContinuousEngine, TorchEngineConfig
from oppo_sim.core.errors import ConfigError


@dataclass(frozen=True)
class TorchGraphConfig(TorchEngineConfig):
    max_prefill_tokens: int = 16384  # padded tokens prefilled per step at most (at least one request)
    max_num_seqs: int = 128  # KV slots: sequences running at once (vLLM's max_num_seqs)
    kv_cache_bytes: int | None = None  # cap on the KV cache (fewer slots); None: max_num_seqs slots
    cuda_graphs: bool = True  # capture decode iterations on a CUDA device (eager elsewhere)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, low in (("max_prefill_tokens", 1), ("max_num_seqs", 1)):
            if getattr(self, name) < low:
                raise ConfigError(f"TorchGraphConfig.{name} must be >= {low}, got {getattr(self, name)}")
        if self.kv_cache_bytes is not None and self.kv_cache_bytes < 1:
            raise ConfigError(f"TorchGraphConfig.kv_cache_bytes must be None or >= 1, got {self.kv_cache_bytes}")


class TorchGraphActor(ContinuousEngine):
    """`ActorBackend` over a transformers causal LM on static KV slots, decode iterations graph-captured.
    Row i holds KV slot i."""

    def _init_engine(self) -> None:
        super()._init_engine()
        cfg = self.cfg
        slots = slots_for(self.model, cfg.max_model_len, cfg.max_num_seqs, cfg.kv_cache_bytes)
        self.dec = SlotDecoder(self.model, slots, cfg.max_model_len, cfg.sampling.temperature, cfg.cuda_graphs)

    def kv_bytes(self) -> int:
        return self.dec.kv_bytes()

    def capture_graphs(self, max_batch: int | None = None) -> int:
        """Capture the decode graphs of every batch bucket up to ``max_batch`` (default: all slots) and every
        length bucket now, while no request holds a slot (``backends.warmup`` calls it); returns how many."""
        if self._rows:
            raise ConfigError("capture_graphs needs an idle engine (requests hold KV slots)")
        return self.dec.capture_all(max_batch or self.dec.slots)

    # ------------------------------------------------------------------ internals
    def _capacity(self) -> int:
        return self.dec.slots

    def _release_kv(self) -> None:
        """The cache and the captured graphs (captured again lazily)."""
        self.dec.release()

    def _compact(self) -> None:
        """Free the slots of finished or aborted rows; the last live rows move into the holes."""
        n_old = len(self._rows)
        keep = [i for i, st in enumerate(self._rows) if not st.gone]
        if len(keep) == n_old:
            return
        n = len(keep)
        holes = [i for i in range(n) if self._rows[i].gone]
        movers = [i for i in keep if i >= n]  # as many as holes
        self.dec.move(movers, holes, max((len(self._rows[i].context) for i in movers), default=0))
        rows = list(self._rows)
        order = list(range(n))
        for h, m in zip(holes, movers):
            rows[h] = rows[m]
            order[h] = m
        self._rows = rows[:n]
        self._last = self._last.index_select(0, torch.tensor(order, device=self._last.device)) if n else None

    def _decode(self) -> list[Delta]:
        rows = self._rows
        tok, lp = self.dec.decode(len(rows), self._last, [s.seed for s in rows], [len(s.context) - 1 for s in rows])
        self._last = tok.clone()  # the graph's output buffer is overwritten by the next replay
        return self._book_all(rows, tok, lp)

    def _prefill(self) -> list[Delta]:
        fresh = self._take_fresh(self.dec.slots - len(self._rows))
        tok, lp = self.dec.prefill(len(self._rows), [s.context for s in fresh], [s.seed for s in fresh])
        self._last = tok if self._last is None else torch.cat([self._last, tok])
        self._rows = self._rows + fresh
        return self._book_all(fresh, tok, lp)
