"""The per-step metrics CSVs a training run's dashboards export, read into one table: what the length
import (:mod:`oppo_sim.traces.metrics_import`) and the run-log reader (:mod:`oppo_sim.traces.runlog`) share.

* A **wide** table, one row per logged step: a wandb run's "Download CSV" / ``run.history()`` export,
  or any CSV with a step column and one column per metric. wandb names a column ``RUN - metric`` when
  the file holds runs side by side; ``metric__MIN`` / ``metric__MAX`` (sampled-history ranges) are ignored.
* A **long** table, one scalar per row (columns ``step``, ``tag``, ``value``): pivoted to wide.
* A **TensorBoard scalar** CSV ("Download CSV" of one chart: ``Wall time,Step,Value``): one metric,
  named after the file (see :func:`tag_of_file`); a folder of them is one table.

The step column is the first of :data:`STEP_COLUMNS` present (else the row number).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.traces.columns import one_line

STEP_COLUMNS: tuple[str, ...] = ("_step", "step", "training/global_step", "global_step", "train/global_step", "Step")
TB_SCALAR_COLUMNS = ("Wall time", "Step", "Value")


def read_frame(path: Path, known: Iterable[str] = ()) -> pd.DataFrame:
    """A CSV as a wide table (a long ``step,tag,value`` table pivoted; a TensorBoard scalar named by its file,
    see :func:`tag_of_file`)."""
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except Exception as exc:  # pandas: EmptyDataError, ParserError, UnicodeDecodeError, ...
        raise TraceError(f"{path}: cannot read as CSV: {one_line(exc)}") from None
    cols = set(frame.columns)
    if {"tag", "value"} <= cols:  # a long table: one scalar per row
        step = next((c for c in STEP_COLUMNS if c in cols), None)
        if step is None:
            raise TraceError(f"{path}: a tag,value table needs a step column ({', '.join(STEP_COLUMNS)})")
        frame = frame.pivot_table(index=step, columns="tag", values="value", aggfunc="last").reset_index()
        frame.columns = [str(c) for c in frame.columns]
    elif set(TB_SCALAR_COLUMNS) <= cols:  # TensorBoard's CSV of one scalar
        frame = frame[["Step", "Value"]].rename(columns={"Value": tag_of_file(path, known)})
    return frame


def tag_of_file(path: Path, known: Iterable[str] = ()) -> str:
    """The metric a TensorBoard scalar CSV holds, from its file name: TensorBoard names a download
    ``run-RUN-tag-TAG.csv`` with the tag's ``/`` written ``_``; the part after ``-tag-`` (else the whole
    stem), ``%2F`` read as ``/``, and put back to the ``known`` name it spells when there is one."""
    stem = path.name[: -len(".csv.gz")] if path.name.endswith(".csv.gz") else path.stem
    tag = stem.split("-tag-", 1)[1] if "-tag-" in stem else stem
    tag = re.sub("%2f", "/", tag, flags=re.I)
    for name in known:
        if name.replace("/", "_") == tag:
            return name
    return tag


def read_scalar_folder(folder: Path, known: Iterable[str] = ()) -> pd.DataFrame:
    """A folder of TensorBoard scalar CSVs (one metric each, named by the file) as one wide table on ``Step``."""
    files = sorted([*folder.glob("*.csv"), *folder.glob("*.csv.gz")])
    if not files:
        raise TraceError(f"{folder}: a folder holds no *.csv (expected TensorBoard scalar CSVs: Wall time,Step,Value)")
    known = tuple(known)
    merged: pd.DataFrame | None = None
    for f in files:
        frame = read_frame(f, known)
        if list(frame.columns[:1]) != ["Step"] or len(frame.columns) != 2:
            raise TraceError(f"{f}: not a TensorBoard scalar CSV (columns {', '.join(TB_SCALAR_COLUMNS)})")
        frame = frame.groupby("Step", sort=True).last().reset_index()
        merged = frame if merged is None else merged.merge(frame, on="Step", how="outer", suffixes=("", f" ({f.name})"))
    assert merged is not None
    return merged.sort_values("Step", kind="stable").reset_index(drop=True)


def run_of(column: str) -> tuple[str | None, str]:
    """(run name, metric) of a wandb column ``RUN - metric`` (no run: ``None``)."""
    if " - " in column:
        run, _, metric = column.rpartition(" - ")
        return run.strip(), metric.strip()
    return None, column.strip()


def run_columns(frame: pd.DataFrame, run: str | None, path: Path,
                is_run: Callable[[str], bool]) -> dict[str, str]:
    """Metric (as logged, run prefix removed) -> its column, for the run ``run`` or the only run whose
    metrics pass ``is_run`` (columns of no run are shared by every run)."""
    by_run: dict[str | None, dict[str, str]] = {}
    for col in map(str, frame.columns):
        if not col.endswith(("__MIN", "__MAX")):
            col_run, metric = run_of(col)
            by_run.setdefault(col_run, {})[metric] = col
    runs = sorted(r for r in by_run if r is not None)
    if run is not None and run not in runs:
        raise ConfigError(f"--run {run!r}: not in {path} (runs found: {', '.join(runs) or 'none named'})")
    named = [r for r in runs if any(is_run(m) for m in by_run[r])]
    if run is None and len(named) > 1:
        raise ConfigError(f"{path} holds several runs ({', '.join(named)}): choose one with --run NAME")
    chosen = run if run is not None else (named[0] if named else None)
    return {**by_run.get(None, {}), **by_run.get(chosen, {})}


def step_column(frame: pd.DataFrame) -> str | None:
    return next((c for c in STEP_COLUMNS if c in frame.columns), None)
