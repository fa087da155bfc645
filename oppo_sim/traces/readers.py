"""Reading trace files: CSV, JSONL and Parquet, gzip or not (detected from the magic bytes), with the
Azure and Mooncake native column names, into a validated :class:`~oppo_sim.traces.trace.Trace`. Every
problem is one line naming the file, the 1-based row and the column."""

from __future__ import annotations

import gzip
import io
import json
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oppo_sim.core.errors import OppoError, TraceError
from oppo_sim.traces.columns import (
    KNOWN_COLS,
    PMF_COLS,
    PROMPT_COLS,
    PROMPT_RULE,
    RAW_TIME_RULE,
    RESPONSE_COLS,
    RESPONSE_RULE,
    REWARD_RULE,
    STEP_RULE,
    TIMESTAMP_COLS,
    TIMESTAMP_RULE,
    Rule,
    first_true,
    one_line,
    row_number,
    strip_trace_suffix,
    validated,
    where,
)
from oppo_sim.traces.trace import Trace

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"


# --------------------------------------------------------------------------------------------------
# Reading files into a DataFrame of raw columns
# --------------------------------------------------------------------------------------------------


def read_bytes(path: Path) -> bytes:
    """File contents, gunzipped if they start with the gzip magic (or the name ends in .gz)."""
    try:
        data = path.read_bytes()
    except PermissionError:
        raise TraceError(f"{path}: cannot read file: permission denied") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read file: {one_line(exc.strerror or exc)}") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path}: bad gzip data: {one_line(exc)}") from None
    if path.name.endswith(".gz"):
        raise TraceError(f"{path}: name ends in .gz but the file is not gzip-compressed")
    return data


def detect_format(path: Path, data: bytes) -> str:
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
        raise TraceError(f"{path}: cannot parse as CSV: {one_line(exc)}") from None
    header = [str(c) for c in frame.columns]
    return frame[[c for c in header if c in KNOWN_COLS or c in PMF_COLS]], header, None


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
            raise TraceError(f"{path}: row {lineno}: invalid JSON: {one_line(exc)}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}: row {lineno}: expected a JSON object, got {type(obj).__name__}")
        all_keys.update(dict.fromkeys(obj))
        records.append({k: v for k, v in obj.items() if k in KNOWN_COLS or k in PMF_COLS})
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
        wanted = [c for c in names if c in KNOWN_COLS or c in PMF_COLS]
        table = pfile.read(columns=wanted)
        if limit is not None:
            table = table.slice(0, limit)
        frame = table.to_pandas()
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise TraceError(f"{path}: cannot read as Parquet: {one_line(exc)}") from None
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


def _column(frame: pd.DataFrame, col: str, source: str, rows: np.ndarray | None, rule: Rule) -> np.ndarray:
    values, nonnumeric = _numeric(frame[col])
    return validated(values, source, col, rule, rows, nonnumeric, frame[col].to_numpy(dtype=object))


def _timestamps(frame: pd.DataFrame, col: str, source: str, rows: np.ndarray | None,
                millis: bool) -> np.ndarray:
    """Seconds. Numeric columns are seconds (milliseconds for Mooncake); datetime strings become
    seconds from the earliest request."""
    series = frame[col]
    values, nonnumeric = _numeric(series)
    present = first_true(~np.isnan(values) | nonnumeric) if nonnumeric is not None else None
    if present is not None and nonnumeric[present]:  # first non-empty cell is text: datetime column
        ts = _datetime_seconds(series, source, col, rows)
    else:
        ts = validated(values, source, col, RAW_TIME_RULE, rows, nonnumeric, series.to_numpy(dtype=object))
        ts = ts / 1000.0 if millis else ts
    return validated(ts, source, col, TIMESTAMP_RULE, rows)


def _datetime_seconds(series: pd.Series, source: str, col: str, rows: np.ndarray | None) -> np.ndarray:
    missing = first_true(series.isna().to_numpy())
    if missing is not None:
        raise TraceError(f"{where(source, row_number(missing, rows), col)}: empty cell (missing value)")
    parsed = pd.to_datetime(series, errors="coerce")
    if parsed.isna().any():
        try:
            parsed = pd.to_datetime(series, errors="coerce", format="mixed")
        except (ValueError, TypeError):
            pass
    bad = first_true(parsed.isna().to_numpy())
    if bad is not None:
        raise TraceError(f"{where(source, row_number(bad, rows), col)}: not a number or datetime "
                         f"{series.iloc[bad]!r}")
    delta = parsed - parsed.min()
    return (delta.dt.total_seconds()).to_numpy(dtype=np.float64)


def _frame_to_trace(frame: pd.DataFrame, found: list[str], rows: np.ndarray | None, path: Path) -> Trace:
    source = str(path)
    columns = [str(c) for c in frame.columns]
    if PMF_COLS <= set(found) and _pick(found, PROMPT_COLS) is None:
        hint = ("load 'servegen_deepseek_r1_sampled' instead (50,000 requests sampled from these distributions)"
                if "servegen" in path.name else "load a per-request trace instead")
        raise TraceError(f"{source}: this is a length PMF (columns tokens,p_prompt,p_response), not a "
                         f"per-request trace; {hint}")
    p_col, r_col = _pick(columns, PROMPT_COLS), _pick(columns, RESPONSE_COLS)
    if p_col is None or r_col is None:
        missing = "prompt_tokens" if p_col is None else "response_tokens"
        raise TraceError(f"{source}: missing required column '{missing}' (need prompt_tokens,response_tokens "
                         f"or ContextTokens,GeneratedTokens or input_length,output_length); "
                         f"found columns: {', '.join(found) if found else '(none)'}")
    if len(frame) == 0:
        raise TraceError(f"{source}: no data rows")
    prompt = _column(frame, p_col, source, rows, PROMPT_RULE)
    response = _column(frame, r_col, source, rows, RESPONSE_RULE)
    optional: dict[str, np.ndarray] = {}
    t_col = _pick(columns, TIMESTAMP_COLS)
    if t_col is not None:
        optional["timestamp"] = _timestamps(frame, t_col, source, rows, millis=(p_col == "input_length"))
    if "reward" in columns:
        optional["reward"] = _column(frame, "reward", source, rows, REWARD_RULE)
    if "step" in columns:
        optional["step"] = _column(frame, "step", source, rows, STEP_RULE)
    name = strip_trace_suffix(path.name)
    return Trace(name=name, source=source, prompt_tokens=prompt, response_tokens=response, **optional)




def read_trace_file(path: Path, limit: int | None = None) -> Trace:
    """The trace in ``path`` (its first ``limit`` rows), validated."""
    data = read_bytes(path)
    if not data.strip():
        raise TraceError(f"{path}: empty file")
    frame, found, rows = _READERS[detect_format(path, data)](path, data, limit)
    try:
        return _frame_to_trace(frame, found, rows, path)
    except OppoError:
        raise
    except Exception as exc:  # safety net: a pandas/numpy error on odd input must still be one line
        raise TraceError(f"{path}: cannot interpret trace: {one_line(exc)}") from None
