"""`TorchActor`: a plain transformers decode loop implementing `ActorBackend`.

Each request keeps its own KV cache (transformers `DynamicCache`); one `step()` advances every live
request by one token (a request's first step is its prompt prefill, which also yields its first token).
There is no continuous batching: requests are run one after another inside a step (simple, supports
`add()` mid-flight and `abort()` trivially, and is fast enough for the tiny models used on CPU).

Sampling semantics match `VLLMActor`: per-request seeded generator (seed from `SamplingConfig` and the
request id), temperature 0 = greedy, log-probs = log-softmax of the raw logits of the sampled token.
After `load_weights` the live requests' caches are dropped and rebuilt from their full context with the
new weights on the next step (what vLLM's prefix-cache reset with running requests does).
"""

from __future__ import annotations

import json
import time
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
from oppo_sim.core.errors import ConfigError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class TorchActorConfig:
    model: str
    dtype: str = "float32"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_model_len: int = 1024
    eos_token_ids: tuple[int, ...] | None = None  # None: read from the model directory

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ConfigError(f"TorchActorConfig.dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if self.max_model_len < 2:
            raise ConfigError(f"TorchActorConfig.max_model_len must be >= 2, got {self.max_model_len}")


@dataclass
class _Live:
    req: GenRequest
    context: list[int]  # prompt + generated so far
    n_generated: int
    generator: torch.Generator
    cache: Any = None  # DynamicCache once prefilled; None = needs (re)prefill of `context`
    next_logits: torch.Tensor | None = None


class TorchActor:
    """`ActorBackend` over a transformers causal LM (loaded from `cfg.model`, or an in-memory model)."""

    def __init__(self, cfg: TorchActorConfig, model: torch.nn.Module | None = None) -> None:
        from transformers import AutoModelForCausalLM

        self.cfg = cfg
        t0 = time.perf_counter()
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=_DTYPES[cfg.dtype])
        self.model = model.eval()
        self.eos_ids = frozenset(cfg.eos_token_ids if cfg.eos_token_ids is not None else read_eos_ids(Path(cfg.model)))
        self._live: dict[str, _Live] = {}
        self.init_seconds = time.perf_counter() - t0

    # ------------------------------------------------------------------ ActorBackend
    def add(self, req: GenRequest) -> None:
        if req.req_id in self._live:
            raise ConfigError(f"request {req.req_id} is already running")
        if len(req.prompt_ids) >= self.cfg.max_model_len:
            raise ConfigError(f"request {req.req_id}: prompt of {len(req.prompt_ids)} tokens exceeds max_model_len")
        gen = torch.Generator().manual_seed(self.cfg.sampling.request_seed(req.req_id))
        self._live[req.req_id] = _Live(req=req, context=list(req.prompt_ids), n_generated=0, generator=gen)

    @torch.no_grad()
    def step(self) -> list[Delta]:
        deltas = []
        for rid in list(self._live):
            st = self._live[rid]
            logits = self._advance(st)
            tok, lp = self._sample(logits, st.generator)
            st.context.append(tok)
            st.n_generated += 1
            st.next_logits = None
            reason = None
            if not st.req.ignore_eos and tok in self.eos_ids:
                reason = FINISH_STOP
            elif st.n_generated >= st.req.max_new_tokens or len(st.context) >= self.cfg.max_model_len:
                reason = FINISH_LENGTH
            deltas.append(Delta(rid, (tok,), (lp,), reason is not None, reason))
            if reason is not None:
                del self._live[rid]
        return deltas

    def abort(self, req_id: str) -> None:
        self._live.pop(req_id, None)

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def num_running(self) -> int:
        return len(self._live)

    @torch.no_grad()
    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> float:
        t0 = time.perf_counter()
        own = self.model.state_dict()
        missing = [k for k in own if k not in state_dict and not k.endswith("inv_freq")]
        if missing:
            raise ConfigError(f"load_weights: state_dict lacks {len(missing)} parameters, e.g. {missing[0]}")
        for k, v in state_dict.items():
            if k in own:
                own[k].copy_(v.detach().to(own[k].dtype))
        for st in self._live.values():  # KV computed with the old weights is stale
            st.cache = None
            st.next_logits = None
        return time.perf_counter() - t0

    def close(self) -> None:
        self._live.clear()

    # ------------------------------------------------------------------ internals
    def _advance(self, st: _Live) -> torch.Tensor:
        """Logits for the next token of `st` (prefilling its context first if it has no cache)."""
        from transformers import DynamicCache

        if st.cache is None:
            st.cache = DynamicCache()
            ids = torch.tensor([st.context], dtype=torch.long)
        else:
            ids = torch.tensor([[st.context[-1]]], dtype=torch.long)
        out = self.model(input_ids=ids, past_key_values=st.cache, use_cache=True, logits_to_keep=1)
        st.cache = out.past_key_values
        return out.logits[0, -1].float()

    def _sample(self, logits: torch.Tensor, gen: torch.Generator) -> tuple[int, float]:
        logp = torch.log_softmax(logits, dim=-1)
        temp = self.cfg.sampling.temperature
        if temp == 0.0:
            tok = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits / temp, dim=-1)
            tok = int(torch.multinomial(probs, 1, generator=gen))
        return tok, float(logp[tok])


def read_eos_ids(model_dir: Path) -> tuple[int, ...]:
    """EOS ids from generation_config.json (or config.json) of a HF model directory; () if none."""
    for name in ("generation_config.json", "config.json"):
        path = Path(model_dir) / name
        if path.exists():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if eos is not None:
                return tuple(eos) if isinstance(eos, list) else (int(eos),)
    return ()
