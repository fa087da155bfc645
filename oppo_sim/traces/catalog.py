"""Finding and loading traces by name: the search path (``$OPPO_TRACES``, ``./traces``, then the traces
shipped in the package, ``oppo_sim/data``), synthetic traces by name (``synthetic:longtail``,
``synthetic:longtail-drift``, generated with the run's seed), and the catalog of what the search path holds."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.core.userfiles import user_path
from oppo_sim.traces.readers import detect_format, read_bytes, read_trace_file
from oppo_sim.traces.synthetic import synthetic_trace
from oppo_sim.traces.columns import PMF_COLS, TRACE_FILE_ENDINGS, strip_trace_suffix
from oppo_sim.traces.trace import DEFAULT_MAX_PROMPT, DEFAULT_MAX_RESPONSE, SUFFIXES, TRACES_ENV, Trace

SYNTHETIC_PREFIX = "synthetic:"


# --------------------------------------------------------------------------------------------------
# Locating trace files
# --------------------------------------------------------------------------------------------------


def package_data_dir() -> Path:
    """Directory of the traces shipped with the package (``oppo_sim/data``): the public production traces
    described in ``traces/README.md`` and the self-generated default trace. It is package data, so a plain
    clone, an editable install and a wheel all have it."""
    return Path(__file__).resolve().parents[1] / "data"


def trace_search_path() -> list[Path]:
    """Directories searched for bare trace names, in order.

    1. every entry of ``$OPPO_TRACES`` (``os.pathsep`` separated);
    2. ``./traces`` relative to the current directory (your own traces);
    3. the package data directory ``oppo_sim/data`` (the traces that ship with the project).

    Duplicates are dropped (first occurrence kept).
    """
    dirs: list[Path] = [user_path(p) for p in os.environ.get(TRACES_ENV, "").split(os.pathsep) if p]
    dirs += [Path.cwd() / "traces", package_data_dir()]
    seen: set[Path] = set()
    unique: list[Path] = []
    for d in dirs:
        key = d.resolve() if d.exists() else d.absolute()
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def _is_trace_file(path: Path) -> bool:
    return path.is_file() and any(path.name.endswith(e) for e in TRACE_FILE_ENDINGS)


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
    direct = user_path(text)
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
    names = sorted({strip_trace_suffix(p.name) for d in search if d.is_dir() for p in d.iterdir()
                    if _is_trace_file(p)})
    hint = f"; available: {', '.join(names[:20])}" if names else ""
    dirs = ", ".join(str(d) for d in search)
    raise TraceError(f"trace '{text}' not found; searched {dirs} (set {TRACES_ENV} to add directories){hint}")


def load_trace(name_or_path: str | Path, *, max_response: int | None = DEFAULT_MAX_RESPONSE,
               limit: int | None = None, seed: int = 0, max_prompt: int | None = DEFAULT_MAX_PROMPT,
               truncate_prompt: bool = False) -> Trace:
    """Load, validate and cap a trace (the simulator's commands and ``oppo-real`` load through here).

    ``name_or_path``: a path, a bare name looked up with :func:`find_trace`, or a synthetic trace name
    (``synthetic:longtail``, ``synthetic:longtail-drift``), generated from ``seed``.
    ``max_response``: generation cap applied to responses (default :data:`DEFAULT_MAX_RESPONSE`);
    None keeps raw lengths. ``limit``: keep only the first ``limit`` rows (rows after it are not
    validated). ``max_prompt`` / ``truncate_prompt``: the prompt cap (default
    :data:`~oppo_sim.traces.trace.DEFAULT_MAX_PROMPT`), longer prompts filtered or truncated
    (:meth:`Trace.limited`); None keeps every prompt.
    """
    if max_response is not None and (isinstance(max_response, bool) or not isinstance(max_response, (int, np.integer))
                                     or max_response < 1):
        raise ConfigError(f"max_response must be an integer >= 1 or None, got {max_response!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1):
        raise ConfigError(f"limit must be an integer >= 1 or None, got {limit!r}")
    if str(name_or_path).startswith(SYNTHETIC_PREFIX):
        trace = synthetic_trace(str(name_or_path)[len(SYNTHETIC_PREFIX):], seed=seed, n=limit)
    else:
        trace = read_trace_file(find_trace(name_or_path), None if limit is None else int(limit))
    return trace.limited(None if max_response is None else int(max_response), max_prompt, truncate_prompt)


# --------------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------------


def _count_rows(path: Path) -> tuple[int | None, str]:
    """(rows, kind) without parsing values; kind is 'requests', 'pmf' or 'unreadable'."""
    try:
        data = read_bytes(path)
        fmt = detect_format(path, data)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            pfile = pq.ParquetFile(io.BytesIO(data))
            names = set(pfile.schema_arrow.names)
            return pfile.metadata.num_rows, ("pmf" if PMF_COLS <= names else "requests")
        lines = [ln for ln in data.splitlines() if ln.strip()]
        if fmt == "jsonl":
            return len(lines), "requests"
        header = set(lines[0].decode("utf-8-sig", errors="replace").strip().split(",")) if lines else set()
        return max(len(lines) - 1, 0), ("pmf" if PMF_COLS <= header else "requests")
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
            name = strip_trace_suffix(path.name)
            rows, kind = _count_rows(path)
            records.append({"name": name, "path": str(path), "rows": rows, "kind": kind, "shadowed": name in seen})
            seen.add(name)
    frame = pd.DataFrame.from_records(records, columns=["name", "path", "rows", "kind", "shadowed"])
    frame["rows"] = frame["rows"].astype("Int64")
    return frame
