"""What the torch generation backends share: their config's common fields, the model they load, and the
bookkeeping of requests — adding, aborting, booking a sampled token (context, finish reason), sleep and
wake, weight loads that make the KV stale. `TorchActor` (``torch``), `TorchGraphActor` (``torch-graph``)
and `TorchStaticActor` (``torch-static``, and ``torch-static-graph`` over it) keep only what differs:
where the KV lives and how a step runs its forwards.

- :class:`TorchEngineConfig`: model, dtype, device, sampling, ``max_model_len``, EOS ids (checked once);
- :class:`Live`: one request's state (its context so far, tokens generated, sampling seed, finish reason);
- :class:`TorchEngine`: requests by id, the queue of those waiting for a prefill of their whole context,
  `add` / `abort` / `has_unfinished` / `num_running`, `load_weights` and `sleep` (both drop every row's
  KV: :meth:`TorchEngine._drop_all_kv`), the one host sync of a forward (:meth:`TorchEngine._to_host`) and
  the booking of one sampled token (:meth:`TorchEngine._advance`);
- :class:`ContinuousEngine`: continuous batching at token granularity (``torch`` and ``torch-graph``): one
  step drops the rows that left, decodes every row, then prefills waiting requests within the prefill
  token budget; each sampled token is handed out at once.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import torch

from oppo_real.backends.api import FINISH_LENGTH, FINISH_STOP, Delta, GenRequest, SamplingConfig
from oppo_sim.core.errors import ConfigError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class TorchEngineConfig:
    """The fields every torch backend's config starts with (subclasses add theirs after them)."""

    model: str
    dtype: str = "float32"  # "bfloat16" on a GPU
    device: str = "cpu"  # "cuda", "cuda:1", ...
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_model_len: int = 1024
    eos_token_ids: tuple[int, ...] | None = None  # None: read from the model directory

    def __post_init__(self) -> None:
        name = type(self).__name__
        if self.dtype not in DTYPES:
            raise ConfigError(f"{name}.dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.max_model_len < 2:
            raise ConfigError(f"{name}.max_model_len must be >= 2, got {self.max_model_len}")


@dataclass(eq=False)
class Live:
    req: GenRequest
    context: list[int]  # prompt + generated so far
    n_generated: int
    seed: int  # the request's sampling seed (backends.sampling: counter-based noise)
    reason: str | None = None  # finish reason once finished
    aborted: bool = False

    @property
    def gone(self) -> bool:
        return self.aborted or self.reason is not None


class TorchEngine:
    """Request bookkeeping over a transformers causal LM (loaded from ``cfg.model``, or an in-memory model).
    A subclass sets up its KV in :meth:`_init_engine` and implements `step`, :meth:`_drop_all_kv` and
    `kv_bytes`."""

    record = Live  # the request state a backend keeps (a subclass may extend it)

    def __init__(self, cfg: TorchEngineConfig, model: torch.nn.Module | None = None) -> None:
        self.cfg = cfg
        t0 = time.perf_counter()
        self.device, self.model, self.eos_ids = load_causal_lm(cfg, model)
        self._live: dict[str, Live] = {}
        self._waiting: deque[Live] = deque()  # need a prefill of their whole context
        self.forwards = 0
        self._init_engine()
        self.init_seconds = time.perf_counter() - t0

    def _init_engine(self) -> None:
        """The backend's own state (its KV, decoders); called once the model is loaded."""

    # ------------------------------------------------------------------ ActorBackend
    def add(self, req: GenRequest) -> None:
        if req.req_id in self._live:
            raise ConfigError(f"request {req.req_id} is already running")
        if len(req.prompt_ids) >= self.cfg.max_model_len:
            raise ConfigError(f"request {req.req_id}: prompt of {len(req.prompt_ids)} tokens exceeds max_model_len")
        st = self.record(req=req, context=list(req.prompt_ids), n_generated=0, seed=self.cfg.sampling.request_seed(req.req_id))
        self._live[req.req_id] = st
        self._waiting.append(st)

    def abort(self, req_id: str) -> Live | None:
        """Stop a request; a row with KV leaves at the backend's next step. Returns its state (None if unknown)."""
        st = self._live.pop(req_id, None)
        if st is None:
            return None
        st.aborted = True
        if st in self._waiting:
            self._waiting.remove(st)
        return st

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def num_running(self) -> int:
        return len(self._live)

    @torch.no_grad()
    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> float:
        """Copy new weights in place (captured graphs stay valid); every row's KV is stale and is prefilled
        again from its whole context. Returns the seconds spent."""
        t0 = time.perf_counter()
        copy_weights(self.model, state_dict)
        self._drop_all_kv()
        self._sync()
        return time.perf_counter() - t0

    def sleep(self) -> int:
        """Free the KV cache (e.g. while training uses the GPU); returns the bytes it held. Running requests
        are prefilled again from their context at the next step; the weights stay."""
        held = self.kv_bytes()
        self._drop_all_kv()
        self._release_kv()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return held

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Nothing to restore: the KV cache is allocated again as requests are prefilled."""

    def kv_bytes(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        self._live.clear()
        self._waiting.clear()

    # ------------------------------------------------------------------ for subclasses
    def _drop_all_kv(self) -> None:
        """Forget every row's KV: the rows wait for a prefill of their whole context (before new requests)."""
        raise NotImplementedError

    def _release_kv(self) -> None:
        """Free what holds the KV beyond its rows (preallocated slots, captured graphs) on `sleep`."""

    def _to_host(self, tok: torch.Tensor, lp: torch.Tensor) -> tuple[list[float], list[float]]:
        """The forward's one host sync: the sampled tokens and their log-probs, as Python lists."""
        host = torch.stack([tok.double(), lp.double()]).tolist()
        self.forwards += 1
        return host[0], host[1]

    def _advance(self, s: Live, t: int) -> None:
        """Book token ``t`` into ``s``'s context; set its finish reason if it stops (EOS) or hits its length."""
        s.context.append(t)
        s.n_generated += 1
        if not s.req.ignore_eos and t in self.eos_ids:
            s.reason = FINISH_STOP
        elif s.n_generated >= s.req.max_new_tokens or len(s.context) >= self.cfg.max_model_len:
            s.reason = FINISH_LENGTH

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class ContinuousEngine(TorchEngine):
    """Continuous batching at token granularity: ``_rows`` are the running rows (row i of the KV), ``_last``
    the token each feeds next. A subclass implements :meth:`_decode`, :meth:`_prefill` and :meth:`_compact`."""

    def _init_engine(self) -> None:
        self._rows: list[Live] = []
        self._last: torch.Tensor | None = None  # [rows] the token each row feeds next, on the device

    @torch.no_grad()
    def step(self) -> list[Delta]:
        self._compact()
        deltas: list[Delta] = []
        if self._rows:
            deltas += self._decode()
        if self._waiting and len(self._rows) < self._capacity():
            deltas += self._prefill()
        return deltas

    def close(self) -> None:
        self._rows = []
        self._drop_all_kv()
        self._release_kv()
        super().close()

    def _capacity(self) -> int:
        """Rows the KV holds at most."""
        return 1 << 62

    def _drop_all_kv(self) -> None:
        rows = [st for st in self._rows if not st.gone]
        self._waiting = deque(rows + list(self._waiting))
        self._rows, self._last = [], None

    def _take_fresh(self, free: int) -> list[Live]:
        """Waiting requests to prefill now, in order: at least one, at most ``free``, and within
        ``max_prefill_tokens`` padded tokens."""
        fresh = [self._waiting.popleft()]
        while (self._waiting and len(fresh) < free
               and (len(fresh) + 1) * max(len(s.context) for s in [*fresh, self._waiting[0]]) <= self.cfg.max_prefill_tokens):
            fresh.append(self._waiting.popleft())
        return fresh

    def _book_all(self, rows: list[Live], tok: torch.Tensor, lp: torch.Tensor) -> list[Delta]:
        """Book one sampled token per row; a finished row leaves the live requests."""
        toks, lps = self._to_host(tok, lp)
        return [self._book(s, int(t), float(v)) for s, t, v in zip(rows, toks, lps)]

    def _book(self, s: Live, t: int, lp: float) -> Delta:
        self._advance(s, t)
        if s.reason is not None:
            self._live.pop(s.req.req_id, None)
        return Delta(s.req.req_id, (t,), (lp,), s.reason is not None, s.reason)

    def _compact(self) -> None:
        raise NotImplementedError

    def _decode(self) -> list[Delta]:
        raise NotImplementedError

    def _prefill(self) -> list[Delta]:
        raise NotImplementedError


def left_padded(contexts: list[list[int]], pad_token_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, position ids) ``[rows, longest]`` of ``contexts`` left-padded to the longest,
    on ``device`` (positions count real tokens only)."""
    p = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), p), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(contexts), p), dtype=torch.long)
    for i, c in enumerate(contexts):
        ids[i, p - len(c):] = torch.tensor(c, dtype=torch.long)
        mask[i, p - len(c):] = 1
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (mask.cumsum(dim=1) - 1).clamp(min=0)


def load_causal_lm(cfg, model: torch.nn.Module | None) -> tuple[torch.device, torch.nn.Module, frozenset[int]]:
    """(device, the model on it in eval mode, its EOS ids) for a torch actor backend's ``cfg`` (``device``,
    ``model`` directory, ``dtype``, ``eos_token_ids``); ``model`` given is used instead of loading one."""
    from transformers import AutoModelForCausalLM

    device = torch.device(cfg.device)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=DTYPES[cfg.dtype])
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
