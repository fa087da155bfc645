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

import json
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from oppo_real.backends.api import (
    FINISH_LENGTH,
    FINISH_STOP,
    Delta,
    GenRequest,
    SamplingConfig,
)
from oppo_real.backends.padded_cache import kv_layers, merge_rows, select_rows
from oppo_real.backends.sampling import row_keys, sample
from oppo_sim.core.errors import ConfigError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class TorchActorConfig:
    model: str
    dtype: str = "float32"  # "bfloat16" on a GPU
    device: str = "cpu"  # "cuda", "cuda:1", ...
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_model_len: int = 1024
    eos_token_ids: tuple[int, ...] | None = None  # None: read from the model directory
    max_prefill_tokens: int = 16384  # padded tokens prefilled per step at most (at least one request)
    pad_token_id: int = 0  # fed in masked positions (any valid id)

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ConfigError(f"TorchActorConfig.dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if self.max_model_len < 2:
            raise ConfigError(f"TorchActorConfig.max_model_len must be >= 2, got {self.max_model_len}")
        if self.max_prefill_tokens < 1:
            raise ConfigError(f"TorchActorConfig.max_prefill_tokens must be >= 1, got {self.max_prefill_tokens}")


@dataclass(eq=False)
class _Live:
    req: GenRequest
    context: list[int]  # prompt + generated so far
    n_generated: int
    seed: int  # the request's sampling seed (backends.sampling: counter-based noise)
    reason: str | None = None  # finish reason once finished
    aborted: bool = False

    @property
    def gone(self) -> bool:
        return self.aborted or self.reason is not None


class TorchActor:
    """`ActorBackend` over a transformers causal LM (loaded from `cfg.model`, or an in-memory model)."""

    def __init__(self, cfg: TorchActorConfig, model: torch.nn.Module | None = None) -> None:
        self.cfg = cfg
        t0 = time.perf_counter()
        self.device, self.model, self.eos_ids = load_causal_lm(cfg, model)
        self._live: dict[str, _Live] = {}
        self._waiting: deque[_Live] = deque()  # need a prefill of their whole context
        self._rows: list[_Live] = []  # rows of the batch cache, in order
        self._cache: Any = None
        self._mask: torch.Tensor | None = None  # [rows, width] long, 1 = a real token
        self._last: torch.Tensor | None = None  # [rows] the token each row feeds next
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
        if self._waiting:
            deltas += self._prefill()
        return deltas

    def abort(self, req_id: str) -> None:
        st = self._live.pop(req_id, None)
        if st is None:
            return
        st.aborted = True
        if st in self._waiting:
            self._waiting.remove(st)
        # a row with KV leaves the cache at the next step

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def num_running(self) -> int:
        return len(self._live)

    @torch.no_grad()
    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> float:
        t0 = time.perf_counter()
        copy_weights(self.model, state_dict)
        self._drop_kv()  # KV computed with the old weights is stale
        self._sync()
        return time.perf_counter() - t0

    def sleep(self) -> int:
        """Free the KV cache (e.g. while training uses the GPU); returns the bytes it held. Running requests
        are prefilled again from their context at the next step; the weights stay."""
        held = self.kv_bytes()
        self._drop_kv()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return held

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Nothing to restore: the KV cache is allocated again as requests are prefilled."""

    def kv_bytes(self) -> int:
        if self._cache is None:
            return 0
        return int(sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv_layers(self._cache)))

    def close(self) -> None:
        self._live.clear()
        self._waiting.clear()
        self._rows, self._cache, self._mask, self._last = [], None, None, None

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

    def _drop_kv(self) -> None:
        """Forget the batch cache: its rows wait for a prefill of their whole context (before new requests)."""
        rows = [st for st in self._rows if not st.gone]
        self._waiting = deque(rows + list(self._waiting))
        self._rows, self._cache, self._mask, self._last = [], None, None, None

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
        fresh = [self._waiting.popleft()]
        while self._waiting and (len(fresh) + 1) * max(len(s.context) for s in [*fresh, self._waiting[0]]) <= self.cfg.max_prefill_tokens:
            fresh.append(self._waiting.popleft())
        p = max(len(s.context) for s in fresh)
        ids = torch.full((len(fresh), p), self.cfg.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(fresh), p), dtype=torch.long)
        for i, s in enumerate(fresh):
            ids[i, p - len(s.context):] = torch.tensor(s.context, dtype=torch.long)
            mask[i, p - len(s.context):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(dim=1) - 1).clamp(min=0)
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

    def _sample(self, logits: torch.Tensor, rows: list[_Live]) -> tuple[torch.Tensor, list[Delta]]:
        """Sample every row's next token in one batched draw (``backends.sampling``); one host sync for the
        tokens and their log-probs."""
        seeds, positions = row_keys([s.seed for s in rows], [len(s.context) for s in rows], logits.device)
        tok, lp = sample(logits, self.cfg.sampling.temperature, seeds, positions)
        host = torch.stack([tok.double(), lp.double()]).tolist()
        self.forwards += 1
        return tok, [self._book(s, int(t), float(v)) for s, t, v in zip(rows, host[0], host[1])]

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

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def load_causal_lm(cfg, model: torch.nn.Module | None) -> tuple[torch.device, torch.nn.Module, frozenset[int]]:
    """(device, the model on it in eval mode, its EOS ids) for a torch actor backend's ``cfg`` (``device``,
    ``model`` directory, ``dtype``, ``eos_token_ids``); ``model`` given is used instead of loading one."""
    from transformers import AutoModelForCausalLM

    device = torch.device(cfg.device)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=_DTYPES[cfg.dtype])
    eos = cfg.eos_token_ids if cfg.eos_token_ids is not None else read_eos_ids(Path(cfg.model))
    return device, model.to(device).eval(), frozenset(eos)


@torch.no_grad()
def copy_weights(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Copy ``state_dict`` into ``model``'s parameters in place (captured CUDA graphs stay valid); a state
    dict that lacks one of the model's parameters (rotary buffers aside) -> one-line ConfigError."""
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict and not k.endswith("inv_freq")]
    if missing:
        raise ConfigError(f"load_weights: state_dict lacks {len(missing)} parameters, e.g. {missing[0]}")
    for k, v in state_dict.items():
        if k in own:
            own[k].copy_(v.detach().to(device=own[k].device, dtype=own[k].dtype))


def read_eos_ids(model_dir: Path) -> tuple[int, ...]:
    """EOS ids from generation_config.json (or config.json) of a HF model directory; () if none."""
    for name in ("generation_config.json", "config.json"):
        path = Path(model_dir) / name
        if path.exists():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if eos is not None:
                return tuple(eos) if isinstance(eos, list) else (int(eos),)
    return ()
