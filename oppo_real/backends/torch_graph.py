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

import time
from collections import deque
from dataclasses import dataclass, field

import torch

from oppo_real.backends.api import FINISH_LENGTH, FINISH_STOP, Delta, GenRequest, SamplingConfig
from oppo_real.backends.graph_decoder import SlotDecoder, slots_for
from oppo_real.backends.torch_actor import _DTYPES, _Live, copy_weights, load_causal_lm
from oppo_sim.core.errors import ConfigError


@dataclass(frozen=True)
class TorchGraphConfig:
    model: str
    dtype: str = "float32"  # "bfloat16" on a GPU
    device: str = "cpu"  # "cuda", "cuda:1", ...
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_model_len: int = 1024  # positions per KV slot
    eos_token_ids: tuple[int, ...] | None = None  # None: read from the model directory
    max_prefill_tokens: int = 16384  # padded tokens prefilled per step at most (at least one request)
    max_num_seqs: int = 128  # KV slots: sequences running at once (vLLM's max_num_seqs)
    kv_cache_bytes: int | None = None  # cap on the KV cache (fewer slots); None: max_num_seqs slots
    cuda_graphs: bool = True  # capture decode iterations on a CUDA device (eager elsewhere)

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ConfigError(f"TorchGraphConfig.dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        for name, low in (("max_model_len", 2), ("max_prefill_tokens", 1), ("max_num_seqs", 1)):
            if getattr(self, name) < low:
                raise ConfigError(f"TorchGraphConfig.{name} must be >= {low}, got {getattr(self, name)}")
        if self.kv_cache_bytes is not None and self.kv_cache_bytes < 1:
            raise ConfigError(f"TorchGraphConfig.kv_cache_bytes must be None or >= 1, got {self.kv_cache_bytes}")


class TorchGraphActor:
    """`ActorBackend` over a transformers causal LM on static KV slots, decode iterations graph-captured."""

    def __init__(self, cfg: TorchGraphConfig, model: torch.nn.Module | None = None) -> None:
        self.cfg = cfg
        t0 = time.perf_counter()
        self.device, self.model, self.eos_ids = load_causal_lm(cfg, model)
        slots = slots_for(self.model, cfg.max_model_len, cfg.max_num_seqs, cfg.kv_cache_bytes)
        self.dec = SlotDecoder(self.model, slots, cfg.max_model_len, cfg.sampling.temperature, cfg.cuda_graphs)
        self._live: dict[str, _Live] = {}
        self._waiting: deque[_Live] = deque()  # need a prefill of their whole context
        self._rows: list[_Live] = []  # row i holds KV slot i
        self._last: torch.Tensor | None = None  # [rows] the token each row feeds next, on the device
        self.forwards = 0
        self.init_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------ ActorBackend
    def add(self, req: GenRequest) -> None:
        if req.req_id in self._live:
            raise ConfigError(f"request {req.req_id} is already running")
        if len(req.prompt_ids) >= self.cfg.max_model_len:
            raise ConfigError(f"request {req.req_id}: prompt of {len(req.prompt_ids)} tokens exceeds max_model_len")
        st = _Live(req=req, context=list(req.prompt_ids), n_generated=0, seed=self.cfg.sampling.request_seed(req.req_id))
        self._live[req.req_id] = st
        self._waiting.append(st)

    @torch.no_grad()
    def step(self) -> list[Delta]:
        self._compact()
        deltas: list[Delta] = []
        if self._rows:
            deltas += self._decode()
        if self._waiting and len(self._rows) < self.dec.slots:
            deltas += self._prefill()
        return deltas

    def abort(self, req_id: str) -> None:
        st = self._live.pop(req_id, None)
        if st is None:
            return
        st.aborted = True
        if st in self._waiting:
            self._waiting.remove(st)
        # a row with KV leaves its slot at the next step

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def num_running(self) -> int:
        return len(self._live)

    @torch.no_grad()
    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> float:
        t0 = time.perf_counter()
        copy_weights(self.model, state_dict)  # in place: captured graphs stay valid
        self._drop_kv()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def sleep(self) -> int:
        """Free the KV cache and the captured graphs; returns the bytes the cache held. Running requests are
        prefilled again at the next step; the weights stay."""
        held = self.kv_bytes()
        self._drop_kv()
        self.dec.release()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return held

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Nothing to restore: the cache is allocated again at the next forward."""

    def kv_bytes(self) -> int:
        return self.dec.kv_bytes()

    def capture_graphs(self, max_batch: int | None = None) -> int:
        """Capture the decode graphs of every batch bucket up to ``max_batch`` (default: all slots) and every
        length bucket now, while no request holds a slot (``backends.warmup`` calls it); returns how many."""
        if self._rows:
            raise ConfigError("capture_graphs needs an idle engine (requests hold KV slots)")
        return self.dec.capture_all(max_batch or self.dec.slots)

    def close(self) -> None:
        self._live.clear()
        self._waiting.clear()
        self._rows, self._last = [], None
        self.dec.release()

    # ------------------------------------------------------------------ internals
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

    def _drop_kv(self) -> None:
        """Forget every row's KV: they wait for a prefill of their whole context (before new requests)."""
        rows = [st for st in self._rows if not st.gone]
        self._waiting = deque(rows + list(self._waiting))
        self._rows, self._last = [], None

    def _decode(self) -> list[Delta]:
        rows = self._rows
        tok, lp = self.dec.decode(len(rows), self._last, [s.seed for s in rows], [len(s.context) - 1 for s in rows])
        self._last = tok.clone()  # the graph's output buffer is overwritten by the next replay
        return self._book_all(rows, tok, lp)

    def _prefill(self) -> list[Delta]:
        free = self.dec.slots - len(self._rows)
        fresh = [self._waiting.popleft()]
        while (self._waiting and len(fresh) < free
               and (len(fresh) + 1) * max(len(s.context) for s in [*fresh, self._waiting[0]]) <= self.cfg.max_prefill_tokens):
            fresh.append(self._waiting.popleft())
        tok, lp = self.dec.prefill(len(self._rows), [s.context for s in fresh], [s.seed for s in fresh])
        self._last = tok if self._last is None else torch.cat([self._last, tok])
        self._rows = self._rows + fresh
        return self._book_all(fresh, tok, lp)

    def _book_all(self, rows: list[_Live], tok: torch.Tensor, lp: torch.Tensor) -> list[Delta]:
        host = torch.stack([tok.double(), lp.double()]).tolist()  # the forward's one host sync
        self.forwards += 1
        return [self._book(s, int(t), float(v)) for s, t, v in zip(rows, host[0], host[1])]

    def _book(self, s: _Live, t: int, lp: float) -> Delta:
        s.context.append(t)
        s.n_generated += 1
        if not s.req.ignore_eos and t in self.eos_ids:
            s.reason = FINISH_STOP
        elif s.n_generated >= s.req.max_new_tokens or len(s.context) >= self.cfg.max_model_len:
            s.reason = FINISH_LENGTH
        if s.reason is not None:
            self._live.pop(s.req.req_id, None)
        return Delta(s.req.req_id, (t,), (lp,), s.reason is not None, s.reason)
