"""`TorchStaticActor`: a batched, static, left-padded transformers decoder that generates in calls of C
tokens with its KV cache carried from call to call — the generation OPPO was built on (TRL's PPO with
Hugging Face ``generate``, cut into calls of ``max_new_tokens = C``), implementing `ActorBackend`.

The model it runs is the simulator's ``oppo_sim.engine.static`` (read its docstring): requests are cut
into mini-batches (*groups*) of at most ``gen_batch`` rows, each with one padded KV cache (a transformers
``DynamicCache`` over the whole group, rows left-padded, an attention mask and position ids that skip the
padding); the groups are called round-robin; a *call* runs until every row of the group has produced
``min(C, what it has left)`` tokens or finished.

- One `step()` = one forward of the current group: the prefill of the rows without KV (requests that
  joined, left-padded to the longest of them; it samples their first token of the call), or one decode
  iteration in which every row takes its slot. Rows done for this call (finished, at their call budget,
  aborted) are fed padding that the mask hides, and keep their slot until the call ends.
- Tokens are handed out when the call ends (that is when ``generate`` returns): the `step()` that ends a
  call returns one `Delta` per row with the tokens it produced in the call; other steps return [].
  Finished rows leave then; the columns only they needed are trimmed from the cache (exact: positions
  come from the mask).
- Requests added with `add()` (also mid-call) join at the start of the next *round* (before the first
  group's call): they fill groups with free rows, then form new groups.
- ``call_tokens=None``: a call runs to the group's longest remaining response (one unchunked
  ``generate``). ``carry_kv=False``: every call re-prefills each row's whole context instead of
  carrying the KV (``generate`` called again on the concatenated ids).

Greedy output does not depend on C, ``gen_batch`` or the other rows: each row sees exactly its own
tokens at its own positions; sampled output (temperature > 0) does not either: every row is drawn at once
with noise keyed by request seed and position (`backends.sampling`), as `TorchActor` does. One host sync per step (the sampled tokens and their log-probs).

``record_timings=True`` records each forward and each call boundary in ``timings`` (what
``oppo_real.profiling.static_decoder`` turns into a measurement table); on CUDA it then synchronises around them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from oppo_real.backends.api import Delta
from oppo_real.backends.padded_cache import kv_layers, merge_rows, select_rows
from oppo_real.backends.sampling import row_keys, sample
from oppo_real.backends.torch_base import Live, TorchEngine, TorchEngineConfig, left_padded
from oppo_sim.core.errors import ConfigError

_NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class TorchStaticConfig(TorchEngineConfig):
    call_tokens: int | None = None  # C: tokens per call; None: one call to the group's longest response
    gen_batch: int | None = None  # rows per mini-batch (TRL's local_rollout_forward_batch_size); None: one
    carry_kv: bool = True
    pad_token_id: int = 0  # fed in masked positions (any valid id)
    record_timings: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("call_tokens", "gen_batch"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ConfigError(f"TorchStaticConfig.{name} must be None or >= 1, got {v}")
        if self.pad_token_id < 0:
            raise ConfigError(f"TorchStaticConfig.pad_token_id must be >= 0, got {self.pad_token_id}")


@dataclass(eq=False)
class _Seq(Live):
    """A request's state (`Live`: a finished one stays in the batch until the call ends) and its call."""

    budget: int = 0  # tokens it may produce in the current call
    made: int = 0  # tokens produced in the current call
    out_tokens: list[int] = field(default_factory=list)  # produced in this call, handed out when it ends
    out_lps: list[float] = field(default_factory=list)

    @property
    def idle(self) -> bool:
        return self.aborted or self.reason is not None or self.made >= self.budget


class _Group:
    """One mini-batch: ``seqs`` are the cache's rows, in order; ``joining`` have no KV yet."""

    def __init__(self) -> None:
        self.seqs: list[_Seq] = []
        self.joining: list[_Seq] = []
        self.cache: Any = None  # DynamicCache over len(seqs) rows, or None
        self.mask: torch.Tensor | None = None  # [rows, width] long, 1 = a real token
        self.last: torch.Tensor | None = None  # [rows] the token each row feeds next
        self.in_call = False


class TorchStaticActor(TorchEngine):
    """`ActorBackend` over a transformers causal LM, generating static batches in calls of C tokens."""

    record = _Seq

    def _init_engine(self) -> None:
        self.call_tokens = self.cfg.call_tokens
        self._groups: list[_Group] = []
        self._cursor = 0
        self._outbox: list[Delta] = []
        self.calls = 0
        self.timings: list[dict] = []
        self._bnd = 0.0
        self._call_wall = 0.0
        self._call_bnd = 0.0

    # ------------------------------------------------------------------ knobs
    def set_call_tokens(self, c: int | None) -> None:
        """Tokens per call from the next call on (the step's chunk size C); None: ``cfg.call_tokens``."""
        if c is not None and c < 1:
            raise ConfigError(f"call tokens must be None or >= 1, got {c}")
        self.call_tokens = c if c is not None else self.cfg.call_tokens

    # ------------------------------------------------------------------ ActorBackend
    @torch.no_grad()
    def step(self) -> list[Delta]:
        t0 = time.perf_counter()
        self._bnd = 0.0  # seconds of call-boundary work in this step
        rec = None
        ended = False
        while self._groups or self._waiting:
            if self._cursor >= len(self._groups):
                self._cursor = 0
            if not self._groups or not self._groups[self._cursor].in_call:
                if not self._start_call():
                    continue  # that group had nothing left to run
            g = self._groups[self._cursor]
            if g.seqs and not g.joining and all(s.idle for s in g.seqs):  # e.g. every row aborted mid-call
                self._end_call(g)
                continue
            rec = self._prefill(g) if g.joining else self._decode(g)
            if all(s.idle for s in g.seqs):
                ended = True
                self._end_call(g)
            break
        if rec is not None and self.cfg.record_timings:
            self._sync()
            wall = time.perf_counter() - t0
            rec["seconds"] = wall - self._bnd
            self.timings.append(rec)
            self._call_wall += wall
            self._call_bnd += self._bnd
            if ended:
                self.timings.append({"kind": "call", "call_s": self._call_wall, "boundary_s": self._call_bnd})
                self._call_wall = self._call_bnd = 0.0
        out, self._outbox = self._outbox, []
        return out

    def abort(self, req_id: str) -> _Seq | None:
        s = super().abort(req_id)
        for g in self._groups:
            if s in g.joining:
                g.joining.remove(s)
        # a row with KV stays in its batch (padding) until its call ends or the next call starts
        return s

    def has_unfinished(self) -> bool:
        return bool(self._live) or bool(self._outbox)

    def kv_bytes(self) -> int:
        return int(sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                       for g in self._groups if g.cache is not None for k, v in kv_layers(g.cache)))

    def close(self) -> None:
        super().close()
        self._groups = []
        self._outbox = []

    def _drop_all_kv(self) -> None:
        """After a weight load or on sleep: a call in progress ends here (its tokens are handed out by the
        next step) and every row is prefilled again from its whole context at its next call."""
        for g in list(self._groups):
            if g.in_call:
                self._end_call(g)
        for g in self._groups:
            self._drop_kv(g)

    # ------------------------------------------------------------------ calls
    def _assign(self) -> None:
        """Round start: waiting requests fill groups with free rows (in order), then open new groups."""
        gmax = self.cfg.gen_batch or _NO_LIMIT
        while self._waiting:
            g = next((g for g in self._groups if len(g.seqs) + len(g.joining) < gmax), None)
            if g is None:
                g = _Group()
                self._groups.append(g)
            g.joining.append(self._waiting.popleft())

    def _start_call(self) -> bool:
        t = time.perf_counter()
        try:
            return self._open_call()
        finally:
            self._bnd += time.perf_counter() - t

    def _open_call(self) -> bool:
        if self._cursor == 0:
            self._assign()
        g = self._groups[self._cursor]
        if any(s.aborted for s in g.seqs):
            self._keep_rows(g, [i for i, s in enumerate(g.seqs) if not s.aborted])
        if not self.cfg.carry_kv:
            self._drop_kv(g)
        members = g.seqs + g.joining
        if not members:
            del self._groups[self._cursor]
            return False
        lefts = [min(s.req.max_new_tokens - s.n_generated, self.cfg.max_model_len - len(s.context)) for s in members]
        cap = self.call_tokens if self.call_tokens is not None else _NO_LIMIT
        c = min(cap, max(lefts))
        for s, left in zip(members, lefts):
            s.budget, s.made = min(c, left), 0
        g.in_call = True
        return True

    def _end_call(self, g: _Group) -> None:
        t = time.perf_counter()
        keep = []
        for i, s in enumerate(g.seqs):
            if not s.aborted and (s.out_tokens or s.reason is not None):
                self._outbox.append(Delta(s.req.req_id, tuple(s.out_tokens), tuple(s.out_lps), s.reason is not None, s.reason))
            s.out_tokens, s.out_lps = [], []
            if s.reason is not None and not s.aborted:
                self._live.pop(s.req.req_id, None)
            if s.reason is None and not s.aborted:
                keep.append(i)
        if len(keep) < len(g.seqs):
            self._keep_rows(g, keep)
        if not self.cfg.carry_kv:
            self._drop_kv(g)
        g.in_call = False
        self.calls += 1
        if g.seqs or g.joining:
            self._cursor += 1
        else:
            self._groups.remove(g)
        if self.cfg.record_timings:
            self._sync()
        self._bnd += time.perf_counter() - t

    def _keep_rows(self, g: _Group, keep: list[int]) -> None:
        """Keep only rows ``keep`` of the group's cache; trim the columns no remaining row uses."""
        g.seqs = [g.seqs[i] for i in keep]
        if g.cache is None:
            return
        if not keep:
            g.cache = g.mask = g.last = None
            return
        g.cache, g.mask, g.last = select_rows(g.cache, g.mask, g.last, keep)

    def _drop_kv(self, g: _Group) -> None:
        """Forget the group's KV: its rows are prefilled again (whole context) at their next call."""
        g.joining = g.seqs + g.joining
        g.seqs = []
        g.cache = g.mask = g.last = None

    # ------------------------------------------------------------------ forwards
    def _prefill(self, g: _Group) -> dict:
        """Prefill the joining rows (left-padded to the longest), sample their first token, merge their KV
        into the group's cache."""
        fresh = g.joining
        ids, mask, pos = left_padded([s.context for s in fresh], self.cfg.pad_token_id, self.device)
        p = ids.shape[1]
        from transformers import DynamicCache

        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=DynamicCache(),
                         use_cache=True, logits_to_keep=1)
        logits = out.logits[:, -1]
        tok = self._sample(logits, fresh)
        t_merge = time.perf_counter()
        if g.cache is None:
            g.cache, g.mask, g.last = out.past_key_values, mask, tok
        else:
            g.cache, g.mask, g.last = merge_rows(g.cache, g.mask, g.last, out.past_key_values, mask, tok)
        g.seqs = g.seqs + fresh
        g.joining = []
        if self.cfg.record_timings:
            self._sync()
        self._bnd += time.perf_counter() - t_merge  # merging caches is call-boundary work
        return {"kind": "prefill", "rows": len(fresh), "kv": 0, "new": len(fresh) * p, "width": p}

    def _decode(self, g: _Group) -> dict:
        """One decode iteration of every row of the group (idle rows feed masked padding)."""
        active = [not s.idle for s in g.seqs]
        act = torch.tensor(active, device=self.device)
        width = g.mask.shape[1]
        ids = torch.where(act, g.last, torch.full_like(g.last, self.cfg.pad_token_id))
        pos = g.mask.sum(dim=1, keepdim=True)
        g.mask = torch.cat([g.mask, act.long().unsqueeze(1)], dim=1)
        out = self.model(input_ids=ids.unsqueeze(1), attention_mask=g.mask, position_ids=pos,
                         past_key_values=g.cache, use_cache=True, logits_to_keep=1)
        g.cache = out.past_key_values
        tok = self._sample(out.logits[:, -1], g.seqs, active)
        g.last = torch.where(act, tok, g.last)
        return {"kind": "decode", "rows": len(g.seqs), "kv": len(g.seqs) * width, "new": 0, "width": width}

    def _sample(self, logits: torch.Tensor, seqs: list[_Seq], active: list[bool] | None = None) -> torch.Tensor:
        """Sample the next token of every row (rows not ``active`` are ignored); book-keep the active ones."""
        seeds, positions = row_keys([s.seed for s in seqs], [len(s.context) for s in seqs], logits.device)
        tok, lp = sample(logits, self.cfg.sampling.temperature, seeds, positions)  # inactive rows: ignored
        return self._book(tok, lp, seqs, active)

    def _book(self, tok: torch.Tensor, lp: torch.Tensor, seqs: list[_Seq], active: list[bool] | None) -> torch.Tensor:
        """Book the sampled tokens of the active rows (their context, call output, finish reason)."""
        toks, lps = self._to_host(tok, lp)  # the step's one host sync
        for i, s in enumerate(seqs):
            if active is not None and not active[i]:
                continue
            t = int(toks[i])
            self._advance(s, t)
            s.made += 1
            s.out_tokens.append(t)
            s.out_lps.append(float(lps[i]))
        return tok
