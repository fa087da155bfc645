"""What every trace reader and the :class:`~oppo_sim.traces.trace.Trace` table share: the column names
(canonical first, then the Azure and Mooncake native aliases), the file endings a trace may have, and
the vectorised column validation that turns the first bad cell into a one-line
:class:`~oppo_sim.core.errors.TraceError` naming the source, the 1-based row and the column."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from oppo_sim.core.errors import TraceError

TRACE_FILE_ENDINGS: tuple[str, ...] = (
    ".csv.gz", ".csv", ".jsonl.gz", ".jsonl", ".json.gz", ".json", ".parquet.gz", ".parquet", ".pq",
)
MAX_EXACT_INT = 2**53

# Column aliases, canonical name first.
PROMPT_COLS = ("prompt_tokens", "ContextTokens", "input_length")
RESPONSE_COLS = ("response_tokens", "GeneratedTokens", "output_length")
TIMESTAMP_COLS = ("timestamp", "TIMESTAMP")
REWARD_COLS = ("reward",)
STEP_COLS = ("step",)
KNOWN_COLS = frozenset(PROMPT_COLS + RESPONSE_COLS + TIMESTAMP_COLS + REWARD_COLS + STEP_COLS)
PMF_COLS = frozenset({"tokens", "p_prompt", "p_response"})
OPTIONAL_FIELDS = ("timestamp", "reward", "step")


def strip_trace_suffix(filename: str) -> str:
    for ending in TRACE_FILE_ENDINGS:
        if filename.endswith(ending) and len(filename) > len(ending):
            return filename[: -len(ending)]
    return filename


# --------------------------------------------------------------------------------------------------
# Array validation helpers (shared by the file loader and Trace.__post_init__)
# --------------------------------------------------------------------------------------------------


def one_line(text: object) -> str:
    """Collapse an exception text to a single line."""
    return " ".join(str(text).split())


def where(source: str, row: int, column: str) -> str:
    return f"{source}: row {row}, column '{column}'"


def first_true(mask: np.ndarray) -> int | None:
    """Index of the first True in ``mask`` (vectorised), or None."""
    if not mask.any():
        return None
    return int(np.argmax(mask))


def row_number(index: int, rows: np.ndarray | None) -> int:
    """1-based row number shown to the user for 0-based array position ``index``."""
    return int(rows[index]) if rows is not None else index + 1


@dataclass(frozen=True)
class Rule:
    """How a column is validated: integer or float, lower bound, noun used in messages."""

    integer: bool
    minimum: float | None
    what: str


PROMPT_RULE = Rule(True, 1, "prompt")
RESPONSE_RULE = Rule(True, 1, "response")
STEP_RULE = Rule(True, 0, "step")
TIMESTAMP_RULE = Rule(False, 0.0, "timestamp")
REWARD_RULE = Rule(False, None, "reward")
RAW_TIME_RULE = Rule(False, None, "timestamp")  # before unit conversion; range checked afterwards


def _below_message(value: float, rule: Rule) -> str:
    if value < 0:
        noun = "length" if rule.what in ("prompt", "response") else rule.what
        return f"negative {noun} {value}"
    return f"zero-length {rule.what} (every request needs >= 1 token)"


def validated(values: Any, source: str, column: str, rule: Rule, rows: np.ndarray | None = None,
               nonnumeric: np.ndarray | None = None, raw: Any = None) -> np.ndarray:
    """Check a column and return it as int64 (``rule.integer``) or float64.

    Vectorised: every problem (non-numeric text, empty cell, non-integer, too large, below the
    minimum) is found with numpy masks and the earliest bad row is reported as a one-line TraceError.
    ``nonnumeric`` marks cells whose text was not a number (their value is NaN); ``raw`` holds the
    original cells for the message.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise TraceError(f"{source}: column '{column}' must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind == "b":
        nonnumeric, raw = np.ones(len(arr), dtype=bool), arr
    if arr.dtype.kind == "i" and nonnumeric is None:  # fast path: already integers
        out = arr.astype(np.int64) if rule.integer else arr.astype(np.float64)
        bad = None if rule.minimum is None else first_true(out < rule.minimum)
        if bad is not None:
            raise TraceError(f"{where(source, row_number(bad, rows), column)}: {_below_message(out[bad], rule)}")
        return out
    try:
        arr = arr.astype(np.float64)
    except (TypeError, ValueError):
        raise TraceError(f"{source}: column '{column}' must be numeric, got dtype {arr.dtype}") from None
    nonnum = np.zeros(len(arr), dtype=bool) if nonnumeric is None else nonnumeric
    raw_values = arr if raw is None else np.asarray(raw, dtype=object)
    nan = np.isnan(arr)
    finite = np.isfinite(arr)
    with np.errstate(invalid="ignore"):
        bad_number = ~nan & (~finite | (arr != np.floor(arr))) if rule.integer else ~nan & ~finite
        too_big = finite & (np.abs(arr) >= MAX_EXACT_INT) if rule.integer else np.zeros(len(arr), dtype=bool)
        below = finite & (arr < rule.minimum) if rule.minimum is not None else np.zeros(len(arr), dtype=bool)
    checks = [
        (nonnum, lambda i: f"non-{'integer' if rule.integer else 'numeric'} value {raw_values[i]!r}"),
        (nan & ~nonnum, lambda i: "empty cell (missing value)"),
        (bad_number, lambda i: (f"non-integer value {arr[i].item()!r}" if rule.integer
                                else f"non-finite value {arr[i].item()!r}")),
        (too_big, lambda i: f"value too large {arr[i]:.0f}"),
        (below, lambda i: _below_message(int(arr[i]) if rule.integer else arr[i].item(), rule)),
    ]
    combined = np.logical_or.reduce([mask for mask, _ in checks])
    bad = first_true(combined)
    if bad is not None:
        message = next(describe(bad) for mask, describe in checks if mask[bad])
        raise TraceError(f"{where(source, row_number(bad, rows), column)}: {message}")
    return arr.astype(np.int64) if rule.integer else arr
