"""Your training logs as traces: a verl rollout dump in, a trace file out (``oppo-sim import``).

**verl rollout dumps.** With ``trainer.rollout_data_dir=DIR`` set, verl's trainer
(``RayPPOTrainer._dump_generations`` in ``verl/trainer/ppo/ray_trainer.py``) writes one JSON-lines file
per training step, ``DIR/{step}.jsonl``, one line per response::

    {"input": "<prompt text>", "output": "<response text>", "gts": "<ground truth>", "score": 1.0, "step": 3, ...}

``input`` and ``output`` are the decoded prompt and response (verl decodes them with
``skip_special_tokens=True``), ``score`` the sequence's reward, ``step`` the global step (older verl
versions have no ``gts``; extra keys of the reward function are ignored). The ``n`` responses of a
prompt are consecutive lines. :func:`read_verl_dump` reads one such file or a directory of them (every
``*.jsonl``, in step order) into a trace with the columns ``prompt_tokens``, ``response_tokens``,
``reward`` (from ``score``) and ``step`` (the line's ``step``, else the file name's number), which
``oppo-sim run --trace`` replays step by step (:mod:`oppo_sim.traces.rowmap`).

**Token counts.** The dump holds text, not tokens. With a local Hugging Face tokenizer directory
(``--tokenizer DIR``: ``tokenizer.json`` and its config, loaded with transformers' ``AutoTokenizer``
from local files only, never downloaded) the counts are exact for the text verl wrote: special tokens
(chat-template markers, the EOS token) are not in that text, so they are not counted. Without one the
counts are estimated as ``max(1, round(characters / X))`` with ``X`` = ``--chars-per-token``
(default :data:`DEFAULT_CHARS_PER_TOKEN` = 4.0, the usual figure for English text with a BPE vocabulary;
code and non-Latin scripts have fewer characters per token). An empty response counts as 1 token (the
EOS the model generated). Which counting was used is printed and written with the trace.

**What is written.** :func:`write_trace` writes the trace as CSV, JSONL (gzip when the name ends in
``.gz``) or Parquet, with a ``source`` column saying where the rows came from (the readers ignore it),
and the assumptions in a sidecar ``<file>.assumptions.txt``.

Every problem is one line: a bad dump line is a :class:`~oppo_sim.core.errors.TraceError` naming the
file and the line, a bad option a :class:`~oppo_sim.core.errors.ConfigError`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.traces.columns import one_line
from oppo_sim.traces.readers import read_bytes
from oppo_sim.traces.trace import Trace

DEFAULT_CHARS_PER_TOKEN: float = 4.0
"""Characters per token of the estimate used when no tokenizer is given (English text, BPE vocabulary)."""

WRITE_ENDINGS: tuple[str, ...] = (".csv", ".csv.gz", ".jsonl", ".jsonl.gz", ".parquet")
"""File endings :func:`write_trace` writes (the format follows the ending)."""

SIDECAR_SUFFIX = ".assumptions.txt"


@dataclass(frozen=True)
class Imported:
    """A trace made from someone's logs, and the assumptions it rests on (one sentence each)."""

    trace: Trace
    source: str  # one line: what was read and how (the ``source`` column of the written file)
    notes: tuple[str, ...]


# --------------------------------------------------------------------------------------------------
# Token counting
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenCounter:
    """Counts the tokens of texts: exactly with a tokenizer, else estimated from their characters."""

    count: Callable[[list[str]], list[int]]
    how: str  # one sentence for the output
    short: str  # a few words for the trace's source column

    @property
    def exact(self) -> bool:
        return self.how.startswith("exact")


def _estimate(chars_per_token: float) -> Callable[[list[str]], list[int]]:
    return lambda texts: [max(1, round(len(t) / chars_per_token)) for t in texts]


def token_counter(tokenizer: str | Path | None = None, chars_per_token: float | None = None) -> TokenCounter:
    """A counter: exact with the local tokenizer directory ``tokenizer``, else ``chars_per_token`` (default
    :data:`DEFAULT_CHARS_PER_TOKEN`) characters a token. Giving both is refused (which would win?)."""
    if tokenizer is not None and chars_per_token is not None:
        raise ConfigError("give --tokenizer (exact counts) or --chars-per-token (an estimate), not both")
    if tokenizer is None:
        x = DEFAULT_CHARS_PER_TOKEN if chars_per_token is None else float(chars_per_token)
        if not (math.isfinite(x) and x > 0):
            raise ConfigError(f"--chars-per-token must be a number > 0, got {chars_per_token!r}")
        return TokenCounter(_estimate(x), f"estimated token counts: max(1, round(characters / {x:g})) "
                                          f"({x:g} characters per token, no tokenizer given)",
                            f"tokens estimated at {x:g} characters per token")
    return _tokenizer_counter(Path(tokenizer))


def _tokenizer_counter(path: Path) -> TokenCounter:
    if not path.is_dir():
        raise ConfigError(f"--tokenizer {path}: not a directory (a local Hugging Face tokenizer directory "
                          "with tokenizer.json or its vocabulary files)")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError("--tokenizer needs the transformers package (pip install transformers), "
                          "or estimate with --chars-per-token") from None
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ... on a bad directory
        raise ConfigError(f"--tokenizer {path}: cannot load a tokenizer from it: {one_line(exc)}") from None

    def count(texts: list[str]) -> list[int]:
        if not texts:
            return []
        ids = tok(texts, add_special_tokens=False)["input_ids"]
        return [max(1, len(x)) for x in ids]

    name = type(tok).__name__
    return TokenCounter(count, f"exact token counts with the tokenizer in {path} ({name}; special tokens "
                               "such as the chat template and EOS are not in verl's decoded text, so not counted)",
                        f"exact tokens ({path.name})")


# --------------------------------------------------------------------------------------------------
# verl rollout dumps
# --------------------------------------------------------------------------------------------------

_STEP_NAME = re.compile(r"^(\d+)\.jsonl(\.gz)?$")


def dump_files(path: str | Path) -> list[Path]:
    """The dump files of ``path``: the file itself, or a directory's ``*.jsonl`` (and ``.jsonl.gz``) files
    in step order (numeric names by their number, then the others by name)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise TraceError(f"{p}: no such file or directory")
    files = [f for f in p.iterdir() if f.is_file() and f.name.endswith((".jsonl", ".jsonl.gz"))]
    if not files:
        raise TraceError(f"{p}: no *.jsonl files (verl writes one per step, {{step}}.jsonl, into trainer.rollout_data_dir)")

    def key(f: Path) -> tuple[int, int, str]:
        m = _STEP_NAME.match(f.name)
        return (0, int(m.group(1)), f.name) if m else (1, 0, f.name)

    return sorted(files, key=key)


def _text(obj: dict, key: str, where: str) -> str:
    if key not in obj:
        raise TraceError(f"{where}: missing key '{key}' (a verl dump line has input, output, score, step)")
    value = obj[key]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):  # a chat given as text pieces
        value = "".join(value)
    if not isinstance(value, str):
        raise TraceError(f"{where}: '{key}' must be text, got {type(value).__name__}")
    return value


def _number(obj: dict, key: str, where: str, integer: bool) -> float | int | None:
    if key not in obj or obj[key] is None:
        return None
    v = obj[key]
    if isinstance(v, list) and len(v) == 1:  # numpy scalars are sometimes dumped as one-element lists
        v = v[0]
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if integer:
        ok = ok and float(v).is_integer() and v >= 0
    if not ok:
        what = "an integer >= 0" if integer else "a finite number"
        raise TraceError(f"{where}: '{key}' must be {what}, got {v!r}")
    return int(v) if integer else float(v)


def _read_dump_file(path: Path) -> list[tuple[str, str, float | None, int]]:
    """(input, output, score, step) of every line of one dump file."""
    data = read_bytes(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not a UTF-8 text file (binary data at byte {exc.start})") from None
    m = _STEP_NAME.match(path.name)
    file_step = int(m.group(1)) if m else None
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {lineno}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise TraceError(f"{where}: invalid JSON: {one_line(exc)}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        step = _number(obj, "step", where, integer=True)
        if step is None:
            step = file_step
        if step is None:
            raise TraceError(f"{where}: no 'step' key, and the file name is not {{step}}.jsonl")
        out.append((_text(obj, "input", where), _text(obj, "output", where), _number(obj, "score", where, False), step))
    if not out:
        raise TraceError(f"{path}: no lines")
    return out


def read_verl_dump(path: str | Path, counter: TokenCounter | None = None) -> Imported:
    """The trace of a verl rollout dump (a ``{step}.jsonl`` file or the directory of them)."""
    counter = counter or token_counter()
    files = dump_files(path)
    rows: list[tuple[str, str, float | None, int]] = []
    for f in files:
        rows += _read_dump_file(f)
    scores = [r[2] for r in rows]
    missing = sum(s is None for s in scores)
    if 0 < missing < len(rows):
        raise TraceError(f"{path}: {missing} of {len(rows)} lines have no 'score' (all or none must have one)")
    prompts = counter.count([r[0] for r in rows])
    responses = counter.count([r[1] for r in rows])
    steps = np.array([r[3] for r in rows], dtype=np.int64)
    reward = None if missing else np.array(scores, dtype=np.float64)
    name = Path(path).name or str(path)
    trace = Trace.from_arrays(prompts, responses, name=name, source=str(path), reward=reward, step=steps)
    n_steps = len(np.unique(steps))
    source = f"verl rollout dump {name}, {counter.short}"
    notes = (
        f"read {len(rows)} responses from {len(files)} verl dump file(s) in {path}, {n_steps} training step(s)",
        counter.how,
        "reward = the line's 'score'" if reward is not None else "no 'score' in the dump: no reward column",
        "step = the line's 'step' (the file name's number where a line has none); oppo-sim replays step t's "
        "rows in step t (oppo_sim.traces.rowmap)",
    )
    return Imported(trace, source, notes)


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def sidecar_path(out: str | Path) -> Path:
    """Where :func:`write_trace` writes the assumptions of ``out``."""
    return Path(str(out) + SIDECAR_SUFFIX)


def write_trace(imported: Imported, out: str | Path) -> tuple[Path, Path]:
    """Write the trace (format from the file ending, :data:`WRITE_ENDINGS`) with a ``source`` column, and
    its assumptions in ``<out>.assumptions.txt``; returns both paths."""
    path = Path(out)
    if not path.name.endswith(WRITE_ENDINGS):
        raise ConfigError(f"--out {path}: the name must end in one of {', '.join(WRITE_ENDINGS)}")
    frame = imported.trace.to_frame()
    frame["source"] = imported.source
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith((".csv", ".csv.gz")):
        frame.to_csv(path, index=False)
    elif path.name.endswith((".jsonl", ".jsonl.gz")):
        frame.to_json(path, orient="records", lines=True)
    else:
        _write_parquet(frame, path, imported.notes)
    side = sidecar_path(path)
    side.write_text("\n".join([imported.source, ""] + [f"- {n}" for n in imported.notes]) + "\n")
    return path, side


def _write_parquet(frame: pd.DataFrame, path: Path, notes: Sequence[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta: dict[Any, Any] = dict(table.schema.metadata or {})
    meta[b"oppo.assumptions"] = "\n".join(notes).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)
