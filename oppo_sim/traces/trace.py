"""Request-length traces: load, validate, cap and replay ``prompt_tokens, response_tokens`` rows.

A :class:`Trace` is an immutable table of requests. Row ``i`` gives the prompt length and the
response length (new tokens) of request ``i``; optional columns are ``timestamp`` (seconds, >= 0),
``reward`` (finite float) and ``step`` (training step, >= 0).

Replay rule: :meth:`Trace.row` is **cyclic** -- request ``i`` uses row ``i % len(trace)``, so a trace
shorter than the run is replayed from the start.

Generation cap: :func:`load_trace` clips every response to ``max_response`` new tokens, by default
:data:`DEFAULT_MAX_RESPONSE` (8192, a common ``max_new_tokens`` for RLHF rollouts). Pass
``max_response=None`` to keep raw lengths. The cap applied and the number of clipped rows are kept on
the trace (``max_response``, ``n_clipped``, ``clipped``).

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

import gzip
import io
import json
import os
import warnings
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError, OppoError, TraceError

DEFAULT_MAX_RESPONSE: int = 8192
"""Generation cap (max new tokens per response) that :func:`load_trace` applies unless told otherwise."""

DEFAULT_TRACE: str = "oppo-longtail-default"
"""Name of the self-generated trace shipped in ``oppo_sim/data`` (see ``scripts/make_default_trace.py``)."""

TRACES_ENV: str = "OPPO_TRACES"
"""Environment variable: extra trace directories (``os.pathsep`` separated), searched first."""

SUFFIXES: tuple[str, ...] = ("", ".csv.gz", ".csv", ".jsonl.gz", ".jsonl", ".parquet")
"""Suffixes tried, in order, when a bare trace name is looked up on the search path."""

_TRACE_FILE_ENDINGS: tuple[str, ...] = (
    ".csv.gz", ".csv", ".jsonl.gz", ".jsonl", ".json.gz", ".json", ".parquet.gz", ".parquet", ".pq",
)
_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_MAX_EXACT_INT = 2**53

# Column aliases, canonical name first.
_PROMPT_COLS = ("prompt_tokens", "ContextTokens", "input_length")
_RESPONSE_COLS = ("response_tokens", "GeneratedTokens", "output_length")
_TIMESTAMP_COLS = ("timestamp", "TIMESTAMP")
_REWARD_COLS = ("reward",)
_STEP_COLS = ("step",)
_KNOWN_COLS = frozenset(_PROMPT_COLS + _RESPONSE_COLS + _TIMESTAMP_COLS + _REWARD_COLS + _STEP_COLS)
_PMF_COLS = frozenset({"tokens", "p_prompt", "p_response"})
_OPTIONAL_FIELDS = ("timestamp", "reward", "step")


# --------------------------------------------------------------------------------------------------
# Array validation helpers (shared by the file loader and Trace.__post_init__)
# --------------------------------------------------------------------------------------------------


def _one_line(text: object) -> str:
    """Collapse an exception text to a single line."""
    return " ".join(str(text).split())


def _where(source: str, row: int, column: str) -> str:
    return f"{source}: row {row}, column '{column}'"


def _first(mask: np.ndarray) -> int | None:
    """Index of the first True in ``mask`` (vectorised), or None."""
    if not mask.any():
        return None
    return int(np.argmax(mask))


def _row_number(index: int, rows: np.ndarray | None) -> int:
    """1-based row number shown to the user for 0-based array position ``index``."""
    return int(rows[index]) if rows is not None else index + 1


@dataclass(frozen=True)
class _Rule:
    """How a column is validated: integer or float, lower bound, noun used in messages."""

    integer: bool
    minimum: float | None
    what: str


_PROMPT_RULE = _Rule(True, 1, "prompt")
_RESPONSE_RULE = _Rule(True, 1, "response")
_STEP_RULE = _Rule(True, 0, "step")
_TIMESTAMP_RULE = _Rule(False, 0.0, "timestamp")
_REWARD_RULE = _Rule(False, None, "reward")
_RAW_TIME_RULE = _Rule(False, None, "timestamp")  # before unit conversion; range checked afterwards


def _below_message(value: float, rule: _Rule) -> str:
    if value < 0:
        noun = "length" if rule.what in ("prompt", "response") else rule.what
        return f"negative {noun} {value}"
    return f"zero-length {rule.what} (every request needs >= 1 token)"


def _validated(values: Any, source: str, column: str, rule: _Rule, rows: np.ndarray | None = None,
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
        bad = None if rule.minimum is None else _first(out < rule.minimum)
        if bad is not None:
            raise TraceError(f"{_where(source, _row_number(bad, rows), column)}: {_below_message(out[bad], rule)}")
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
        too_big = finite & (np.abs(arr) >= _MAX_EXACT_INT) if rule.integer else np.zeros(len(arr), dtype=bool)
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
    bad = _first(combined)
    if bad is not None:
        message = next(describe(bad) for mask, describe in checks if mask[bad])
        raise TraceError(f"{_where(source, _row_number(bad, rows), column)}: {message}")
    return arr.astype(np.int64) if rule.integer else arr


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, copy=True)
    arr.setflags(write=False)
    return arr


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
    ``n_clipped`` is its count.
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

    def __post_init__(self) -> None:
        src = self.source or self.name
        prompt = _validated(self.prompt_tokens, src, "prompt_tokens", _PROMPT_RULE)
        response = _validated(self.response_tokens, src, "response_tokens", _RESPONSE_RULE)
        n = len(prompt)
        if n == 0:
            raise TraceError(f"{src}: trace has no rows")
        _check_length(response, n, src, "response_tokens")
        object.__setattr__(self, "prompt_tokens", _frozen(prompt))
        object.__setattr__(self, "response_tokens", _frozen(response))
        self._init_optional(src, n)
        self._init_cap(src, n)

    def _init_optional(self, src: str, n: int) -> None:
        rules = {"timestamp": _TIMESTAMP_RULE, "reward": _REWARD_RULE, "step": _STEP_RULE}
        for key, rule in rules.items():
            value = getattr(self, key)
            if value is not None:
                checked = _validated(value, src, key, rule)
                _check_length(checked, n, src, key)
                object.__setattr__(self, key, _frozen(checked))

    def _init_cap(self, src: str, n: int) -> None:
        cap = self.max_response
        if cap is not None:
            if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 1:
                raise ConfigError(f"{src}: max_response must be an integer >= 1 or None, got {cap!r}")
            object.__setattr__(self, "max_response", int(cap))
            over = _first(self.response_tokens > cap)
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

    def head(self, n: int) -> Trace:
        """The first ``n`` rows (all rows if the trace is shorter)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ConfigError(f"{self.name}: head() needs an integer n >= 1, got {n!r}")
        if n >= len(self):
            return self
        sl = slice(0, int(n))
        opt = {k: (None if getattr(self, k) is None else getattr(self, k)[sl]) for k in _OPTIONAL_FIELDS}
        if self.clipped is not None:
            clipped, n_clipped = self.clipped[sl], int(self.clipped[sl].sum())
        else:  # unknown which rows were cut: count rows sitting at the cap (upper bound)
            at_cap = 0 if self.max_response is None else int((self.response_tokens[sl] >= self.max_response).sum())
            clipped, n_clipped = None, min(self.n_clipped, at_cap)
        return replace(self, prompt_tokens=self.prompt_tokens[sl], response_tokens=self.response_tokens[sl],
                       clipped=clipped, n_clipped=n_clipped, **opt)

    # -- summaries ----------------------------------------------------------------------------------

    def to_frame(self) -> pd.DataFrame:
        """Columns prompt_tokens, response_tokens, then timestamp, reward, step where present."""
        data: dict[str, np.ndarray] = {
            "prompt_tokens": np.array(self.prompt_tokens),
            "response_tokens": np.array(self.response_tokens),
        }
        for key in _OPTIONAL_FIELDS:
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
        ``max_response``, ``n_clipped`` and ``clipped``.
        """
        allowed = {"timestamp", "reward", "step", "source", "max_response", "n_clipped", "clipped"}
        unknown = sorted(set(optional) - allowed)
        if unknown:
            raise ConfigError(f"Trace.from_arrays: unknown argument(s) {unknown}; allowed: {sorted(allowed)}")
        source = optional.pop("source", f"array:{name}")
        return cls(name=name, source=source, prompt_tokens=prompt, response_tokens=response, **optional)


# --------------------------------------------------------------------------------------------------
# Locating trace files
# --------------------------------------------------------------------------------------------------


def package_data_dir() -> Path:
    """Directory of the traces shipped with the package (``oppo_sim/data``)."""
    return Path(__file__).resolve().parents[1] / "data"


def trace_search_path() -> list[Path]:
    """Directories searched for bare trace names, in order.

    1. every entry of ``$OPPO_TRACES`` (``os.pathsep`` separated);
    2. ``./traces`` and ``../shared/traces`` relative to the current directory;
    3. ``shared/traces`` next to this checkout (if it exists);
    4. the package data directory ``oppo_sim/data``.

    Duplicates are dropped (first occurrence kept).
    """
    dirs: list[Path] = [Path(p).expanduser() for p in os.environ.get(TRACES_ENV, "").split(os.pathsep) if p]
    cwd = Path.cwd()
    dirs += [cwd / "traces", cwd.parent / "shared" / "traces"]
    checkout_shared = Path(__file__).resolve().parents[3] / "shared" / "traces"
    if checkout_shared.is_dir():
        dirs.append(checkout_shared)
    dirs.append(package_data_dir())
    seen: set[Path] = set()
    unique: list[Path] = []
    for d in dirs:
        key = d.resolve() if d.exists() else d.absolute()
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def _strip_trace_suffix(filename: str) -> str:
    for ending in _TRACE_FILE_ENDINGS:
        if filename.endswith(ending) and len(filename) > len(ending):
            return filename[: -len(ending)]
    return filename


def _is_trace_file(path: Path) -> bool:
    return path.is_file() and any(path.name.endswith(e) for e in _TRACE_FILE_ENDINGS)


def _is_bare_name(name: str) -> bool:
    seps = [os.sep] + ([os.altsep] if os.altsep else [])
    return not Path(name).is_absolute() and not any(s in name for s in seps)


def find_trace(name: str | Path) -> Path:
    """Resolve a trace name or path to an existing file.

    An existing path (absolute or relative to the current directory) is used directly. Otherwise the
    suffixes :data:`SUFFIXES` are tried on it; a bare name (no directory part) is also looked up in
    every directory of :func:`trace_search_path`. Not found -> :class:`TraceError` listing the
    directories searched.
    """
    text = str(name)
    if not text.strip():
        raise TraceError("trace name is empty")
    direct = Path(text).expanduser()
    if direct.is_dir():
        raise TraceError(f"{direct}: is a directory, not a trace file")
    for suffix in SUFFIXES:
        candidate = Path(str(direct) + suffix)
        if candidate.is_file():
            return candidate
    if not _is_bare_name(text):
        raise TraceError(f"{text}: trace file not found (also tried suffixes {', '.join(SUFFIXES[1:])})")
    search = trace_search_path()
    for directory in search:
        for suffix in SUFFIXES:
            candidate = directory / (text + suffix)
            if candidate.is_file():
                return candidate
    names = sorted({_strip_trace_suffix(p.name) for d in search if d.is_dir() for p in d.iterdir()
                    if _is_trace_file(p)})
    hint = f"; available: {', '.join(names[:20])}" if names else ""
    dirs = ", ".join(str(d) for d in search)
    raise TraceError(f"trace '{text}' not found; searched {dirs} (set {TRACES_ENV} to add directories){hint}")


# --------------------------------------------------------------------------------------------------
# Reading files into a DataFrame of raw columns
# --------------------------------------------------------------------------------------------------


def _read_bytes(path: Path) -> bytes:
    """File contents, gunzipped if they start with the gzip magic (or the name ends in .gz)."""
    try:
        data = path.read_bytes()
    except PermissionError:
        raise TraceError(f"{path}: cannot read file: permission denied") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read file: {_one_line(exc.strerror or exc)}") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path}: bad gzip data: {_one_line(exc)}") from None
    if path.name.endswith(".gz"):
        raise TraceError(f"{path}: name ends in .gz but the file is not gzip-compressed")
    return data


def _detect_format(path: Path, data: bytes) -> str:
    base = path.name[:-3] if path.name.endswith(".gz") else path.name
    if data[:4] == _PARQUET_MAGIC or base.endswith((".parquet", ".pq")):
        return "parquet"
    if base.endswith((".jsonl", ".json")):
        return "jsonl"
    if base.endswith(".csv"):
        return "csv"
    return "jsonl" if data.lstrip()[:1] == b"{" else "csv"


def _decode_text(path: Path, data: bytes) -> str:
    nul = data.find(b"\x00")
    if nul >= 0:
        raise TraceError(f"{path}: not a text file (binary data at byte {nul})")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not a UTF-8 text file (binary data at byte {exc.start})") from None
    if not text.strip():
        raise TraceError(f"{path}: empty file")
    return text


def _read_csv(path: Path, data: bytes, limit: int | None) -> tuple[pd.DataFrame, list[str], np.ndarray | None]:
    text = _decode_text(path, data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)  # rows longer than the header
            frame = pd.read_csv(io.StringIO(text), nrows=limit, index_col=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise TraceError(f"{path}: empty file") from None
    except Exception as exc:  # pandas raises many types (ParserError, ValueError, ...)
        raise TraceError(f"{path}: cannot parse as CSV: {_one_line(exc)}") from None
    header = [str(c) for c in frame.columns]
    return frame[[c for c in header if c in _KNOWN_COLS or c in _PMF_COLS]], header, None


def _read_jsonl(path: Path, data: bytes, limit: int | None) -> tuple[pd.DataFrame, list[str], np.ndarray | None]:
    text = _decode_text(path, data)
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    all_keys: dict[str, None] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise TraceError(f"{path}: row {lineno}: invalid JSON: {_one_line(exc)}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}: row {lineno}: expected a JSON object, got {type(obj).__name__}")
        all_keys.update(dict.fromkeys(obj))
        records.append({k: v for k, v in obj.items() if k in _KNOWN_COLS or k in _PMF_COLS})
        lines.append(lineno)
        if limit is not None and len(records) >= limit:
            break
    columns: dict[str, None] = {}
    for rec in records:
        columns.update(dict.fromkeys(rec))
    frame = pd.DataFrame.from_records(records, columns=list(columns))
    return frame, list(all_keys), np.asarray(lines, dtype=np.int64)


def _read_parquet(path: Path, data: bytes, limit: int | None) -> tuple[pd.DataFrame, list[str], np.ndarray | None]:
    try:
        import pyarrow.parquet as pq

        pfile = pq.ParquetFile(io.BytesIO(data))
        names = list(pfile.schema_arrow.names)
        wanted = [c for c in names if c in _KNOWN_COLS or c in _PMF_COLS]
        table = pfile.read(columns=wanted)
        if limit is not None:
            table = table.slice(0, limit)
        frame = table.to_pandas()
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise TraceError(f"{path}: cannot read as Parquet: {_one_line(exc)}") from None
    return frame, names, None


_READERS = {"csv": _read_csv, "jsonl": _read_jsonl, "parquet": _read_parquet}


# --------------------------------------------------------------------------------------------------
# Converting raw columns
# --------------------------------------------------------------------------------------------------


def _pick(columns: list[str], aliases: tuple[str, ...]) -> str | None:
    return next((c for c in aliases if c in columns), None)


def _numeric(series: pd.Series) -> tuple[np.ndarray, np.ndarray | None]:
    """Series -> (numeric array, mask of cells whose text is not a number or None). Empty cells -> NaN."""
    if pd.api.types.is_bool_dtype(series.dtype):
        return series.to_numpy(), None
    if pd.api.types.is_integer_dtype(series.dtype) and not series.hasnans:
        return series.to_numpy(dtype=np.int64), None
    if pd.api.types.is_float_dtype(series.dtype) or pd.api.types.is_integer_dtype(series.dtype):
        return series.to_numpy(dtype=np.float64, na_value=np.nan), None
    blank = (series.astype("string").str.strip() == "").fillna(False).to_numpy(dtype=bool)
    missing = series.isna().to_numpy(dtype=bool) | blank
    is_bool = series.map(lambda v: isinstance(v, bool)).to_numpy(dtype=bool)
    values = pd.to_numeric(series.where(~is_bool), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    values = np.where(missing, np.nan, values)
    return values, np.isnan(values) & ~missing


def _column(frame: pd.DataFrame, col: str, source: str, rows: np.ndarray | None, rule: _Rule) -> np.ndarray:
    values, nonnumeric = _numeric(frame[col])
    return _validated(values, source, col, rule, rows, nonnumeric, frame[col].to_numpy(dtype=object))


def _timestamps(frame: pd.DataFrame, col: str, source: str, rows: np.ndarray | None,
                millis: bool) -> np.ndarray:
    """Seconds. Numeric columns are seconds (milliseconds for Mooncake); datetime strings become
    seconds from the earliest request."""
    series = frame[col]
    values, nonnumeric = _numeric(series)
    present = _first(~np.isnan(values) | nonnumeric) if nonnumeric is not None else None
    if present is not None and nonnumeric[present]:  # first non-empty cell is text: datetime column
        ts = _datetime_seconds(series, source, col, rows)
    else:
        ts = _validated(values, source, col, _RAW_TIME_RULE, rows, nonnumeric, series.to_numpy(dtype=object))
        ts = ts / 1000.0 if millis else ts
    return _validated(ts, source, col, _TIMESTAMP_RULE, rows)


def _datetime_seconds(series: pd.Series, source: str, col: str, rows: np.ndarray | None) -> np.ndarray:
    missing = _first(series.isna().to_numpy())
    if missing is not None:
        raise TraceError(f"{_where(source, _row_number(missing, rows), col)}: empty cell (missing value)")
    parsed = pd.to_datetime(series, errors="coerce")
    if parsed.isna().any():
        try:
            parsed = pd.to_datetime(series, errors="coerce", format="mixed")
        except (ValueError, TypeError):
            pass
    bad = _first(parsed.isna().to_numpy())
    if bad is not None:
        raise TraceError(f"{_where(source, _row_number(bad, rows), col)}: not a number or datetime "
                         f"{series.iloc[bad]!r}")
    delta = parsed - parsed.min()
    return (delta.dt.total_seconds()).to_numpy(dtype=np.float64)


def _frame_to_trace(frame: pd.DataFrame, found: list[str], rows: np.ndarray | None, path: Path) -> Trace:
    source = str(path)
    columns = [str(c) for c in frame.columns]
    if _PMF_COLS <= set(found) and _pick(found, _PROMPT_COLS) is None:
        hint = ("load 'servegen_deepseek_r1_sampled' instead (50,000 requests sampled from these distributions)"
                if "servegen" in path.name else "load a per-request trace instead")
        raise TraceError(f"{source}: this is a length PMF (columns tokens,p_prompt,p_response), not a "
                         f"per-request trace; {hint}")
    p_col, r_col = _pick(columns, _PROMPT_COLS), _pick(columns, _RESPONSE_COLS)
    if p_col is None or r_col is None:
        missing = "prompt_tokens" if p_col is None else "response_tokens"
        raise TraceError(f"{source}: missing required column '{missing}' (need prompt_tokens,response_tokens "
                         f"or ContextTokens,GeneratedTokens or input_length,output_length); "
                         f"found columns: {', '.join(found) if found else '(none)'}")
    if len(frame) == 0:
        raise TraceError(f"{source}: no data rows")
    prompt = _column(frame, p_col, source, rows, _PROMPT_RULE)
    response = _column(frame, r_col, source, rows, _RESPONSE_RULE)
    optional: dict[str, np.ndarray] = {}
    t_col = _pick(columns, _TIMESTAMP_COLS)
    if t_col is not None:
        optional["timestamp"] = _timestamps(frame, t_col, source, rows, millis=(p_col == "input_length"))
    if "reward" in columns:
        optional["reward"] = _column(frame, "reward", source, rows, _REWARD_RULE)
    if "step" in columns:
        optional["step"] = _column(frame, "step", source, rows, _STEP_RULE)
    name = _strip_trace_suffix(path.name)
    return Trace(name=name, source=source, prompt_tokens=prompt, response_tokens=response, **optional)


def load_trace(name_or_path: str | Path, *, max_response: int | None = DEFAULT_MAX_RESPONSE,
               limit: int | None = None) -> Trace:
    """Load, validate and cap a trace.

    ``name_or_path``: a path, or a bare name looked up with :func:`find_trace`.
    ``max_response``: generation cap applied to responses (default :data:`DEFAULT_MAX_RESPONSE`);
    None keeps raw lengths. ``limit``: keep only the first ``limit`` rows (rows after it are not
    validated).
    """
    if max_response is not None and (isinstance(max_response, bool) or not isinstance(max_response, (int, np.integer))
                                     or max_response < 1):
        raise ConfigError(f"max_response must be an integer >= 1 or None, got {max_response!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1):
        raise ConfigError(f"limit must be an integer >= 1 or None, got {limit!r}")
    path = find_trace(name_or_path)
    data = _read_bytes(path)
    if not data.strip():
        raise TraceError(f"{path}: empty file")
    frame, found, rows = _READERS[_detect_format(path, data)](path, data, None if limit is None else int(limit))
    try:
        trace = _frame_to_trace(frame, found, rows, path)
    except OppoError:
        raise
    except Exception as exc:  # safety net: a pandas/numpy error on odd input must still be one line
        raise TraceError(f"{path}: cannot interpret trace: {_one_line(exc)}") from None
    return trace if max_response is None else trace.capped(int(max_response))


# --------------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------------


def _count_rows(path: Path) -> tuple[int | None, str]:
    """(rows, kind) without parsing values; kind is 'requests', 'pmf' or 'unreadable'."""
    try:
        data = _read_bytes(path)
        fmt = _detect_format(path, data)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pfile = pq.ParquetFile(io.BytesIO(data))
            names = set(pfile.schema_arrow.names)
            return pfile.metadata.num_rows, ("pmf" if _PMF_COLS <= names else "requests")
        lines = [ln for ln in data.splitlines() if ln.strip()]
        if fmt == "jsonl":
            return len(lines), "requests"
        header = set(lines[0].decode("utf-8-sig", errors="replace").strip().split(",")) if lines else set()
        return max(len(lines) - 1, 0), ("pmf" if _PMF_COLS <= header else "requests")
    except Exception:  # a catalog must list broken files too, not fail on them
        return None, "unreadable"


def available_traces() -> pd.DataFrame:
    """Every trace file on :func:`trace_search_path`: name, path, rows, kind, shadowed.

    ``kind`` is 'requests', 'pmf' (a length distribution, not loadable) or 'unreadable';
    ``shadowed`` is True when an earlier directory has a trace of the same name (the one
    :func:`load_trace` would not pick).
    """
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for directory in trace_search_path():
        if not directory.is_dir():
            continue
        for path in sorted(p for p in directory.iterdir() if _is_trace_file(p)):
            name = _strip_trace_suffix(path.name)
            rows, kind = _count_rows(path)
            records.append({"name": name, "path": str(path), "rows": rows, "kind": kind, "shadowed": name in seen})
            seen.add(name)
    frame = pd.DataFrame.from_records(records, columns=["name", "path", "rows", "kind", "shadowed"])
    frame["rows"] = frame["rows"].astype("Int64")
    return frame
