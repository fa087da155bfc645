"""`IncrementalScorer`: reward / critic / reference scoring with incremental prefill over chunks.

OPPO's intra-step overlap streams the actor's output in chunks; the scorer prefills each chunk as it
arrives, keeping a per-sequence KV cache (transformers `DynamicCache`), so that when generation ends
only the last chunk is left. The final result equals a one-shot prefill of prompt + response (fp32:
within ~1e-6 relative; tested at 1e-5).

Kinds (all over the same sequence layout: prompt of P tokens, response of R tokens):
- ``"reward"``   (token-classification model, 1 label): scalar head at the last token;
- ``"critic"``   (same model type): values at positions P-1 .. P+R-2, i.e. V(state before token t);
- ``"reference"`` (causal LM): log-prob of each response token under the model. Point it at the actor's
  weights to get the actor's "old" log-probs.

Life cycle: ``open(seq_id, prompt)`` -> ``feed(seq_id, chunk)`` ... -> ``finish(seq_id)`` -> result.
``evict(seq_id)`` drops the KV cache (cache loss); the next computation re-prefills the whole known
context and the result is unchanged. ``one_shot`` / ``score_batch`` score whole sequences at once.

Batching: `feed_many` prefills the ready chunks of several sequences in one forward — each sequence's
KV cache left-padded to the longest context, the new tokens right-padded to the longest chunk, masks and
explicit positions keeping every row exact — and cuts each row's cache back out; `score_batch` (whole
sequences, right-padded) is batched too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import torch

from oppo_sim.core.errors import ConfigError

ScoreKind = Literal["reward", "critic", "reference"]
_KINDS = ("reward", "critic", "reference")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ScorerConfig:
    kind: ScoreKind
    model: str  # HF model directory (ignored when a model object is passed to IncrementalScorer)
    dtype: str = "float32"
    device: str = "cpu"  # "cuda:0", ...

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ConfigError(f"ScorerConfig.kind must be one of {_KINDS}, got {self.kind!r}")
        if self.dtype not in _DTYPES:
            raise ConfigError(f"ScorerConfig.dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")


@dataclass(frozen=True)
class ScoreResult:
    seq_id: str
    kind: str
    n_prompt: int
    n_response: int
    reward: float | None = None  # "reward"
    values: tuple[float, ...] | None = None  # "critic": one per response token
    logprobs: tuple[float, ...] | None = None  # "reference": one per response token
    prefill_tokens: int = 0  # tokens run through the model for this sequence (re-prefills included)
    compute_seconds: float = 0.0


@dataclass
class _Seq:
    n_prompt: int
    tokens: list[int]  # everything known: prompt + response tokens fed so far
    n_done: int = 0  # tokens whose KV is in `cache`
    cache: Any = None
    outs: list[float] = field(default_factory=list)  # reward/critic: head at positions P-1 .. n_done-1
    token_logps: list[float] = field(default_factory=list)  # reference: logp of tokens at positions P .. n_done-1
    prev_row: torch.Tensor | None = None  # reference: log-softmax at position n_done-1
    prefill_tokens: int = 0
    seconds: float = 0.0


class IncrementalScorer:
    """Scores sequences chunk by chunk with a per-sequence KV cache; see the module docstring."""

    def __init__(self, cfg: ScorerConfig, model: torch.nn.Module | None = None) -> None:
        self.cfg = cfg
        if model is None:
            from transformers import (
                AutoModelForCausalLM,
                AutoModelForTokenClassification,
            )

            cls = AutoModelForCausalLM if cfg.kind == "reference" else AutoModelForTokenClassification
            model = cls.from_pretrained(cfg.model, dtype=_DTYPES[cfg.dtype])
        self.device = torch.device(cfg.device)
        self.model = model.to(self.device).eval()
        self._seqs: dict[str, _Seq] = {}

    # ------------------------------------------------------------------ incremental API
    def open(self, seq_id: str, prompt_ids: Sequence[int]) -> None:
        if seq_id in self._seqs:
            raise ConfigError(f"sequence {seq_id} is already open")
        if len(prompt_ids) == 0:
            raise ConfigError(f"sequence {seq_id}: empty prompt")
        self._seqs[seq_id] = _Seq(n_prompt=len(prompt_ids), tokens=[int(t) for t in prompt_ids])

    def feed(self, seq_id: str, token_ids: Sequence[int], compute: bool = True) -> None:
        """Append response tokens; with ``compute`` prefill everything pending now (else at finish/flush)."""
        st = self._get(seq_id)
        st.tokens.extend(int(t) for t in token_ids)
        if compute:
            self._run(st)

    def feed_many(self, chunks: dict[str, Sequence[int]]) -> None:
        """Feed several sequences' ready chunks in ONE forward: each sequence's KV cache is left-padded to the
        longest context and the new tokens right-padded to the longest chunk (attention masks keep every row
        to its own tokens; explicit positions keep RoPE exact), then each row's cache is cut back out."""
        group = []
        for seq_id, toks in chunks.items():
            st = self._get(seq_id)
            st.tokens.extend(int(t) for t in toks)
            if len(st.tokens) > st.n_done:
                group.append(st)
        if len(group) == 1:
            self._run(group[0])
        elif group:
            self._run_batch(group)

    def flush(self, seq_id: str) -> None:
        """Prefill whatever is pending for `seq_id`."""
        self._run(self._get(seq_id))

    def pending_tokens(self, seq_id: str) -> int:
        st = self._get(seq_id)
        return len(st.tokens) - st.n_done

    def finish(self, seq_id: str) -> ScoreResult:
        """Prefill what is left and return the score; the sequence is closed."""
        st = self._get(seq_id)
        if len(st.tokens) == st.n_prompt:
            raise ConfigError(f"sequence {seq_id}: no response tokens to score")
        self._run(st)
        del self._seqs[seq_id]
        return self._result(seq_id, st)

    def evict(self, seq_id: str) -> None:
        """Drop the KV cache (simulated cache loss); the next computation re-prefills the full context."""
        st = self._get(seq_id)
        st.cache, st.n_done, st.prev_row = None, 0, None
        st.outs.clear()
        st.token_logps.clear()

    def drop(self, seq_id: str) -> None:
        """Forget a sequence (e.g. its generation was discarded)."""
        self._seqs.pop(seq_id, None)

    def open_ids(self) -> list[str]:
        return list(self._seqs)

    def cached_tokens(self, seq_id: str) -> int:
        return self._get(seq_id).n_done

    # ------------------------------------------------------------------ whole-sequence API
    def one_shot(self, prompt_ids: Sequence[int], response_ids: Sequence[int], seq_id: str = "one_shot") -> ScoreResult:
        """Score prompt + response in a single prefill (no cache kept)."""
        st = _Seq(n_prompt=len(prompt_ids), tokens=[int(t) for t in prompt_ids] + [int(t) for t in response_ids])
        if len(response_ids) == 0 or len(prompt_ids) == 0:
            raise ConfigError("one_shot needs a non-empty prompt and response")
        self._run(st, keep_cache=False)
        return self._result(seq_id, st)

    @torch.no_grad()
    def score_batch(self, items: Sequence[tuple[str, Sequence[int], Sequence[int]]]) -> list[ScoreResult]:
        """Score many (seq_id, prompt, response) at once in one right-padded forward."""
        if not items:
            return []
        t0 = time.perf_counter()
        seqs = [[int(t) for t in p] + [int(t) for t in r] for _, p, r in items]
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        attn = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            attn[i, : len(s)] = 1
        out = self.model(input_ids=ids.to(self.device), attention_mask=attn.to(self.device)).logits.float()
        dt = (time.perf_counter() - t0) / len(items)
        results = []
        for i, (sid, p, r) in enumerate(items):
            n_p, n_r = len(p), len(r)
            if n_p == 0 or n_r == 0:
                raise ConfigError(f"score_batch: sequence {sid} needs a non-empty prompt and response")
            row = out[i, : n_p + n_r]
            common = dict(seq_id=sid, kind=self.cfg.kind, n_prompt=n_p, n_response=n_r,
                          prefill_tokens=n_p + n_r, compute_seconds=dt)
            if self.cfg.kind == "reference":
                logp = torch.log_softmax(row[n_p - 1 : n_p + n_r - 1], dim=-1)
                tgt = torch.tensor(seqs[i][n_p:], device=self.device)
                lps = logp.gather(-1, tgt[:, None])[:, 0]
                results.append(ScoreResult(logprobs=tuple(lps.tolist()), **common))
            elif self.cfg.kind == "critic":
                results.append(ScoreResult(values=tuple(row[n_p - 1 : n_p + n_r - 1, 0].tolist()), **common))
            else:
                results.append(ScoreResult(reward=float(row[-1, 0]), **common))
        return results

    # ------------------------------------------------------------------ internals
    def _get(self, seq_id: str) -> _Seq:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise ConfigError(f"sequence {seq_id} is not open") from None

    @torch.no_grad()
    def _run(self, st: _Seq, keep_cache: bool = True) -> None:
        """Prefill tokens[n_done:] on top of the cache and collect the per-position outputs."""
        from transformers import DynamicCache

        new = st.tokens[st.n_done:]
        if not new:
            return
        t0 = time.perf_counter()
        if st.cache is None:
            st.cache = DynamicCache()
        ids = torch.tensor([new], dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids, past_key_values=st.cache, use_cache=True).logits[0].float()
        self._collect(st, out)
        st.seconds += time.perf_counter() - t0
        if not keep_cache:
            st.cache = None

    @torch.no_grad()
    def _run_batch(self, group: list[_Seq]) -> None:
        """One forward over several sequences' pending tokens, each on top of its own cache."""
        from transformers import DynamicCache

        t0 = time.perf_counter()
        ctx = [st.n_done for st in group]
        new = [st.tokens[st.n_done:] for st in group]
        C, N, B = max(ctx), max(len(n) for n in new), len(group)
        ids = torch.zeros((B, N), dtype=torch.long)
        attn = torch.zeros((B, C + N), dtype=torch.long)
        pos = torch.zeros((B, N), dtype=torch.long)
        for i, (c, n) in enumerate(zip(ctx, new)):
            ids[i, : len(n)] = torch.tensor(n)
            attn[i, C - c: C + len(n)] = 1
            pos[i] = torch.arange(c, c + N)
        cache = DynamicCache()
        if C > 0:
            for layer in range(len(next(st.cache for st in group if st.cache is not None).layers)):
                keys, values = zip(*(self._padded_kv(st, layer, C) for st in group))
                cache.update(torch.cat(keys), torch.cat(values), layer)
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache,
                         use_cache=True).logits.float()
        dt = (time.perf_counter() - t0) / B
        for i, (st, c, n) in enumerate(zip(group, ctx, new)):
            st.cache = DynamicCache()
            for layer, lay in enumerate(cache.layers):
                st.cache.update(lay.keys[i: i + 1, :, C - c: C + len(n)], lay.values[i: i + 1, :, C - c: C + len(n)], layer)
            self._collect(st, out[i, : len(n)])
            st.seconds += dt

    def _padded_kv(self, st: _Seq, layer: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One sequence's cached keys and values of ``layer``, left-padded with zeros to ``width`` positions."""
        ref = next(s for s in self._seqs.values() if s.cache is not None).cache.layers[layer]
        if st.cache is None or st.n_done == 0:
            shape = (1, ref.keys.shape[1], width, ref.keys.shape[3])
            zero = torch.zeros(shape, dtype=ref.keys.dtype, device=ref.keys.device)
            return zero, zero
        lay = st.cache.layers[layer]
        pad = width - lay.keys.shape[2]
        if pad == 0:
            return lay.keys, lay.values
        f = torch.nn.functional.pad
        return f(lay.keys, (0, 0, pad, 0)), f(lay.values, (0, 0, pad, 0))

    def _collect(self, st: _Seq, out: torch.Tensor) -> None:
        """Keep what the rows ``out`` (positions n_done .. len(tokens)-1) give: logps or head outputs."""
        start = st.n_done
        positions = range(start, len(st.tokens))
        if self.cfg.kind == "reference":
            logp = torch.log_softmax(out, dim=-1)
            for j, pos in enumerate(positions):
                if pos >= st.n_prompt:  # token at pos is a response token: logp from row pos-1
                    row = st.prev_row if j == 0 else logp[j - 1]
                    st.token_logps.append(float(row[st.tokens[pos]]))
            st.prev_row = logp[-1].clone()
        else:
            keep = [j for j, pos in enumerate(positions) if pos >= st.n_prompt - 1]  # outputs at positions >= P-1
            st.outs.extend(out[keep, 0].tolist())
        st.prefill_tokens += len(st.tokens) - start
        st.n_done = len(st.tokens)

    def _result(self, seq_id: str, st: _Seq) -> ScoreResult:
        n_r = len(st.tokens) - st.n_prompt
        common = dict(seq_id=seq_id, kind=self.cfg.kind, n_prompt=st.n_prompt, n_response=n_r,
                      prefill_tokens=st.prefill_tokens, compute_seconds=st.seconds)
        if self.cfg.kind == "reference":
            return ScoreResult(logprobs=tuple(st.token_logps), **common)
        if self.cfg.kind == "critic":
            return ScoreResult(values=tuple(st.outs[:n_r]), **common)
        return ScoreResult(reward=st.outs[-1], **common)
