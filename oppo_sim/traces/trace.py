"""Request-length traces: load, validate, cap and replay ``prompt_tokens, response_tokens`` rows.

A :class:`Trace` is an immutable table of requests. Row ``i`` gives the prompt length and the
response length (new tokens) of request ``i``; optional columns are ``timestamp`` (seconds, >= 0),
``reward`` (finite float) and ``step`` (training step, >= 0).

Replay rule: :meth:`Trace.row` is **cyclic** -- request ``i`` uses row ``i % len(trace)``, so a trace
shorter than the run is replayed from the start. Which row a run's sample replays -- in order, or, with a
``step`` column, a row of the trace step its simulation step replays -- is decided in one place for the
simulator and the real executor: :mod:`oppo_sim.traces.rowmap`.

Generation cap: :func:`load_trace` clips every response to ``max_response`` new tokens, by default
:data:`DEFAULT_MAX_RESPONSE` (8192, a common ``max_new_tokens`` for RLHF rollouts). Pass
``max_response=None`` to keep raw lengths. The cap applied and the number of clipped rows are kept on
the trace (``max_response``, ``n_clipped``, ``clipped``).

Prompt cap: as RL frameworks load a prompt set (verl ``data.max_prompt_length`` with
``data.filter_overlong_prompts``, OpenRLHF ``--prompt_max_len``), a prompt longer than ``max_prompt``
tokens is *filtered* (its row dropped) or, with ``truncate_prompt``, *truncated* to ``max_prompt`` tokens
(verl ``data.truncation``; the response length is kept as traced). :meth:`Trace.limited` is the one
place both caps are applied, for the simulator and the real executor alike; the counts are kept on the
trace (``max_prompt``, ``n_prompts_filtered``, ``n_prompts_truncated``). The default,
:data:`DEFAULT_MAX_PROMPT` = 131,072, is the longest context of the models in the table (128k tokens:
Llama 3.1, Qwen2.5 with YaRN, DeepSeek-V3) — no prompt beyond it can be served by any of them — and
lies above every prompt of the shipped trace (longest 1,412) and of the public traces (longest:
Mooncake's 126,195), so none of them loses a row and their results stay as they were; with chunk-wise
log-probs (``hw.memory``) their longest sequences train on the default setup. What it filters is the
outlier no framework trains on (a ShareGPT-like set's 162,307-token prompt). verl's default (512) or
OpenRLHF's (1,024) would filter 239 or 8 of the shipped trace's 4,000 ordinary prompts.

File formats: CSV, JSONL and Parquet, each optionally gzip-compressed (detected from the magic bytes,
so ``.gz`` is optional). Required columns are ``prompt_tokens`` and ``response_tokens``; other columns
are ignored. Native column names are accepted too:

* Azure LLM inference trace: ``ContextTokens``, ``GeneratedTokens``, ``TIMESTAMP`` (a datetime
  string, converted to seconds from the earliest request);
* Mooncake JSONL: ``input_length``, ``output_length``, ``timestamp`` (milliseconds, converted to
  seconds).

Every problem is reported as a one-line :class:`~oppo_sim.core.errors.TraceError` naming the file and, where
relevant, the 1-based data row (header excluded; for JSONL the line number) and the column.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.traces.columns import (
    OPTIONAL_FIELDS,
    PROMPT_RULE,
    RESPONSE_RULE,
    REWARD_RULE,
    STEP_RULE,
    TIMESTAMP_RULE,
    first_true,
    validated,
)

DEFAULT_MAX_RESPONSE: int = 8192
"""Generation cap (max new tokens per response) that :func:`load_trace` applies unless told otherwise."""

DEFAULT_MAX_PROMPT: int = 131072
"""Prompt cap (tokens) :func:`load_trace` and ``SimConfig`` apply unless told otherwise (module notes)."""

DEFAULT_TRACE: str = "oppo-longtail-default"
"""Name of the self-generated trace shipped in ``oppo_sim/data`` (see ``scripts/make_default_trace.py``)."""

TRACES_ENV: str = "OPPO_TRACES"
"""Environment variable: extra trace directories (``os.pathsep`` separated), searched first."""

SUFFIXES: tuple[str, ...] = ("", ".csv.gz", ".csv", ".jsonl.gz", ".jsonl", ".parquet")
"""Suffixes tried, in order, when a bare trace name is looked up on the search path."""


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, copy=True)
    arr.setflags(write=False)
    return arr


def _cap(value: Any, name: str, src: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{src}: {name} must be an integer >= 1 or None, got {value!r}")
    return int(value)


def _check_length(arr: np.ndarray | None, n: int, source: str, column: str) -> None:
    if arr is not None and len(arr) != n:
        raise TraceError(f"{source}: column '{column}' has {len(arr)} rows, prompt_tokens has {n}")


# --------------------------------------------------------------------------------------------------
# Trace
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Trace:
    """An immutable, validated table of requests (one row per request).

    Arrays are converted to int64/float64 read-only copies. Content problems (zero-length prompt,
    negative step, mismatched lengths, ...) raise :class:`TraceError` naming ``source``, row and
    column; bad parameters to methods raise :class:`ConfigError`.

    ``clipped`` (bool per row, or None) says which responses the cap ``max_response`` cut;
    ``n_clipped`` is its count. ``max_prompt``: the prompt cap applied (every prompt is within it);
    ``n_prompts_filtered`` / ``n_prompts_truncated``: the rows it dropped / the prompts it cut.
    """

    name: str
    source: str
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    timestamp: np.ndarray | None = None
    reward: np.ndarray | None = None
    step: np.ndarray | None = None
    max_response: int | None = None
    n_clipped: int = 0
    clipped: np.ndarray | None = field(default=None, repr=False)
    max_prompt: int | None = None
    n_prompts_filtered: int = 0
    n_prompts_truncated: int = 0

    def __post_init__(self) -> None:
        src = self.source or self.name
        prompt = validated(self.prompt_tokens, src, "prompt_tokens", PROMPT_RULE)
        response = validated(self.response_tokens, src, "response_tokens", RESPONSE_RULE)
        n = len(prompt)
        if n == 0:
            raise TraceError(f"{src}: trace has no rows")
        _check_length(response, n, src, "response_tokens")
        object.__setattr__(self, "prompt_tokens", _frozen(prompt))
        object.__setattr__(self, "response_tokens", _frozen(response))
        self._init_optional(src, n)
        self._init_cap(src, n)

    def _init_optional(self, src: str, n: int) -> None:
        rules = {"timestamp": TIMESTAMP_RULE, "reward": REWARD_RULE, "step": STEP_RULE}
        for key, rule in rules.items():
            value = getattr(self, key)
            if value is not None:
                checked = validated(value, src, key, rule)
                _check_length(checked, n, src, key)
                object.__setattr__(self, key, _frozen(checked))

    def _init_cap(self, src: str, n: int) -> None:
        cap = self.max_response
        if cap is not None:
            if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
                raise ConfigError(f"{src}: max_response must be an integer >= 1 or None, got {cap!r}")
            object.__setattr__(self, "max_response", int(cap))
            over = first_true(self.response_tokens > cap)
            if over is not None:
                raise TraceError(f"{src}: row {over + 1}, column 'response_tokens': "
                                 f"{self.response_tokens[over]} exceeds max_response {cap}")
        if self.clipped is not None:
            mask = np.asarray(self.clipped, dtype=bool)
            if mask.shape != (n,):
                raise TraceError(f"{src}: clipped mask has shape {mask.shape}, expected ({n},)")
            object.__setattr__(self, "clipped", _frozen(mask))
            object.__setattr__(self, "n_clipped", int(mask.sum()))
        if not isinstance(self.n_clipped, (int, np.integer)) or not 0 <= self.n_clipped <= n:
            raise ConfigError(f"{src}: n_clipped must be an integer in [0, {n}], got {self.n_clipped!r}")
        object.__setattr__(self, "n_clipped", int(self.n_clipped))
        if self.max_prompt is not None:
            over = first_true(self.prompt_tokens > _cap(self.max_prompt, "max_prompt", src))
            if over is not None:
                raise TraceError(f"{src}: row {over + 1}, column 'prompt_tokens': "
                                 f"{self.prompt_tokens[over]} exceeds max_prompt {self.max_prompt}")

    # -- basic access -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def row(self, i: int) -> tuple[int, int]:
        """(prompt_tokens, response_tokens) of request ``i``.

        Cyclic: request ``i`` uses row ``i % len(self)``, so a trace shorter than the run is replayed
        from the start.
        """
        if i < 0:
            raise ConfigError(f"{self.name}: request index must be >= 0, got {i}")
        j = int(i) % len(self)
        return int(self.prompt_tokens[j]), int(self.response_tokens[j])

    def take(self, n: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`row` for requests ``start .. start+n-1`` (cyclic): (prompts, responses)."""
        if n < 0 or start < 0:
            raise ConfigError(f"{self.name}: take() needs n >= 0 and start >= 0, got n={n}, start={start}")
        idx = (start + np.arange(n)) % len(self)
        return self.prompt_tokens[idx], self.response_tokens[idx]

    # -- derived traces -----------------------------------------------------------------------------

    def capped(self, max_response: int) -> Trace:
        """Clip responses to ``max_response`` new tokens; records the cap and which rows it cut.

        A cap at or above the one already applied changes nothing (the trace is returned as is).
        """
        if isinstance(max_response, bool) or not isinstance(max_response, (int, np.integer)) \
                or max_response < 1:
            raise ConfigError(f"{self.name}: max_response must be an integer >= 1, got {max_response!r}")
        if self.max_response is not None and max_response >= self.max_response:
            return self
        mask = self.response_tokens > max_response
        return replace(self, response_tokens=np.minimum(self.response_tokens, max_response),
                       max_response=int(max_response), clipped=mask, n_clipped=int(mask.sum()))

    def limited(self, max_response: int | None = None, max_prompt: int | None = None,
                truncate_prompt: bool = False) -> Trace:
        """Both caps, as frameworks apply them (module notes): responses clipped to ``max_response``; a
        prompt over ``max_prompt`` tokens dropped with its row, or with ``truncate_prompt`` cut to
        ``max_prompt``. None: no cap. Applying the same caps again changes nothing; every prompt
        filtered -> one-line :class:`TraceError` naming the cap and how to pass it."""
        out = self if max_response is None else self.capped(max_response)
        if max_prompt is None:
            return out
        cap = _cap(max_prompt, "max_prompt", self.name)
        over = out.prompt_tokens > cap
        n = int(over.sum())
        recorded = cap if out.max_prompt is None else min(cap, out.max_prompt)
        if n == 0:
            return out if recorded == out.max_prompt else replace(out, max_prompt=recorded)
        if truncate_prompt:
            return replace(out, prompt_tokens=np.minimum(out.prompt_tokens, cap), max_prompt=recorded,
                           n_prompts_truncated=out.n_prompts_truncated + n)
        if n == len(out):
            raise TraceError(f"{out.name}: every prompt ({n:,}; shortest {int(out.prompt_tokens.min()):,} tokens) is "
                             f"longer than max_prompt {cap:,} and would be filtered; raise --max-prompt or give "
                             f"--truncate-prompt")
        return replace(out._rows(~over), max_prompt=recorded, n_prompts_filtered=out.n_prompts_filtered + n)

    def _rows(self, keep: np.ndarray | slice) -> Trace:
        """The rows ``keep`` selects (a mask or a slice), optional columns and the clipped mask with them."""
        opt = {k: (None if getattr(self, k) is None else getattr(self, k)[keep]) for k in OPTIONAL_FIELDS}
        if self.clipped is not None:
            clipped, n_clipped = self.clipped[keep], int(self.clipped[keep].sum())
        else:  # unknown which rows were cut: count rows sitting at the cap (upper bound)
            resp = self.response_tokens[keep]
            at_cap = 0 if self.max_response is None else int((resp >= self.max_response).sum())
            clipped, n_clipped = None, min(self.n_clipped, at_cap)
        return replace(self, prompt_tokens=self.prompt_tokens[keep], response_tokens=self.response_tokens[keep],
                       clipped=clipped, n_clipped=n_clipped, **opt)

    def head(self, n: int) -> Trace:
        """The first ``n`` rows (all rows if the trace is shorter)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ConfigError(f"{self.name}: head() needs an integer n >= 1, got {n!r}")
        if n >= len(self):
            return self
        return self._rows(slice(0, int(n)))

    # -- summaries ----------------------------------------------------------------------------------

    def to_frame(self) -> pd.DataFrame:
        """Columns prompt_tokens, response_tokens, then timestamp, reward, step where present."""
        data: dict[str, np.ndarray] = {
            "prompt_tokens": np.array(self.prompt_tokens),
            "response_tokens": np.array(self.response_tokens),
        }
        for key in OPTIONAL_FIELDS:
            value = getattr(self, key)
            if value is not None:
                data[key] = np.array(value)
        return pd.DataFrame(data)

    def describe(self) -> dict[str, float]:
        """Length statistics; percentiles are linear-interpolated (same as pandas ``quantile``)."""
        resp = self.response_tokens.astype(np.float64)
        prompt = self.prompt_tokens.astype(np.float64)
        p50, p90, p99 = np.percentile(resp, [50, 90, 99])
        return {
            "rows": float(len(self)),
            "resp_mean": float(resp.mean()),
            "resp_p50": float(p50),
            "resp_p90": float(p90),
            "resp_p99": float(p99),
            "resp_max": float(resp.max()),
            "p99_over_p50": float(p99 / p50),
            "prompt_mean": float(prompt.mean()),
            "prompt_p50": float(np.percentile(prompt, 50)),
        }

    @classmethod
    def from_arrays(cls, prompt: Any, response: Any, *, name: str = "array", **optional: Any) -> Trace:
        """Build a validated trace from array-likes.

        ``optional`` may hold ``timestamp``, ``reward``, ``step``, ``source`` (default ``"array:<name>"``),
        ``max_response``, ``n_clipped``, ``clipped``, ``max_prompt``, ``n_prompts_filtered`` and
        ``n_prompts_truncated``.
        """
        allowed = {"timestamp", "reward", "step", "source", "max_response", "n_clipped", "clipped", "max_prompt",
                   "n_prompts_filtered", "n_prompts_truncated"}
        unknown = sorted(set(optional) - allowed)
        if unknown:
            raise ConfigError(f"Trace.from_arrays: unknown argument(s) {unknown}; allowed: {sorted(allowed)}")
        source = optional.pop("source", f"array:{name}")
        return cls(name=name, source=source, prompt_tokens=prompt, response_tokens=response, **optional)
