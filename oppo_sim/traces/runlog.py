"""A training run's log in, one row per step: the framework's own stage timers and length statistics.

:func:`read_run_log` reads, by what the file is (:data:`FORMATS`):

* ``verl-console`` -- verl's console lines ``step:N - timing_s/gen:… - …`` (a saved stdout, Ray
  prefixes and colours included); ``nemo-rl-console`` -- NeMo RL's per-step "Timing" blocks;
  ``openrlhf-console`` -- OpenRLHF's ``✨ Global step N: {...}`` status lines;
  ``jsonl`` -- one JSON object of metrics per step (what ``oppo-real run --verl-metrics X.jsonl`` writes);
  see :mod:`oppo_sim.traces.runlog_text`;
* ``csv`` -- a wandb export or a TensorBoard CSV (wide, long ``step,tag,value``, or one scalar
  ``Wall time,Step,Value``); ``tensorboard-scalars`` -- a folder of TensorBoard scalar CSVs, one
  metric per file, named by the file; see :mod:`oppo_sim.traces.metrics_csv`.

Anything else is refused in one line naming what was expected.

**The table** (:attr:`RunLog.table`): column ``step`` (int64, the step as the framework numbers it:
verl and NeMo RL count from 1, verl's validation before training is step 0), then one float64 column
per metric, **named as the framework logs it** (a wandb run prefix ``RUN - `` removed), NaN where a
step did not log it; one row per step, sorted by step (a step logged twice keeps its last values).
Rows holding only validation metrics (``val-*``, ``val/*``) are left out. Which framework wrote it
(:attr:`RunLog.framework`, also ``table.attrs["framework"]``) is told by the names (:func:`framework_of`):

* ``verl``: ``timing_s/*`` (``gen``, ``reward``, ``old_log_prob``, ``ref``, ``values``, ``adv``,
  ``update_critic``, ``update_actor``, ``update_weights``, ``step``), ``response_length/*``,
  ``prompt_length/*``, ``critic/score/mean`` (``verl/trainer/ppo/metric_utils.py``);
* ``nemo-rl``: ``timing/train/*`` (``total_step_time``, ``generation``, ``policy_training``,
  ``policy_and_reference_logprobs``, ``prepare_for_generation``, …), ``train/*``;
* ``openrlhf``: its ``train/*`` wandb/TensorBoard keys (``train/response_length`` -- the mean --,
  ``train/total_length``, ``train/reward``, ``train/global_step``). Since 4908e6ee (v0.9.6) its trainer
  (``openrlhf/trainer/ppo_trainer.py``) also logs per-phase timers ``train/timing/generation``,
  ``make_experience``, ``ppo_train``, ``broadcast``, ``step_total`` and the batch's
  ``train/rollout/response_length_mean`` and ``truncated_rate`` (the clip ratio); older versions log no
  stage timers.

:func:`lengths` gives the per-step lengths a trace is drawn from (:func:`~oppo_sim.traces.metrics_import.metrics_to_trace`).
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError, TraceError
from oppo_sim.traces import runlog_text as text
from oppo_sim.traces.metrics_csv import read_frame, read_scalar_folder, run_columns, step_column

FORMATS: tuple[str, ...] = ("verl-console", "nemo-rl-console", "openrlhf-console", "jsonl", "csv", "tensorboard-scalars")
FRAMEWORKS: tuple[str, ...] = ("verl", "nemo-rl", "openrlhf")
EXPECTED = ("verl console lines ('step:N - timing_s/gen:… - …'), a NeMo RL console log ('==== Step N/M ====' "
            "blocks with '⏱️  Timing:'), OpenRLHF's status lines ('Global step N: {…}'), a JSONL of per-step metrics, a wandb/TensorBoard CSV export, or a folder "
            "of TensorBoard scalar CSVs")

VERL_TIMERS: tuple[str, ...] = tuple(f"timing_s/{t}" for t in (
    "gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "update_weights", "step"))
VERL_LENGTHS: tuple[str, ...] = (
    "response_length/mean", "response_length/max", "response_length/min", "response_length/clip_ratio",
    "prompt_length/mean", "prompt_length/max", "prompt_length/min", "critic/score/mean", "critic/rewards/mean")
NEMO_TIMERS: tuple[str, ...] = tuple(f"timing/train/{t}" for t in (
    "total_step_time", "generation", "exposed_generation", "policy_training", "policy_and_reference_logprobs",
    "prepare_for_generation", "weight_sync", "reward_calculation", "data_processing", "training_prep"))
KNOWN: tuple[str, ...] = VERL_TIMERS + VERL_LENGTHS + NEMO_TIMERS + (
    "train/mean_gen_tokens_per_sample", "train/response_length", "train/total_length", "train/global_step")
"""Metric names a TensorBoard scalar file name (``/`` written ``_``) is put back to."""

LENGTHS: dict[str, tuple[str, ...]] = {  # our name -> the names that log it (any prefix), in order of preference
    "resp_mean": ("response_length/mean", "mean_gen_tokens_per_sample", "rollout/response_length_mean",
                  "train/response_length"),
    "resp_max": ("response_length/max",), "resp_min": ("response_length/min",),
    "clip": ("response_length/clip_ratio", "rollout/truncated_rate"),
    "prompt_mean": ("prompt_length/mean", "mean_prompt_length"),
    "prompt_max": ("prompt_length/max",), "prompt_min": ("prompt_length/min",),
    "reward": ("critic/score/mean", "critic/rewards/mean", "train/reward"),
}
"""The lengths (and reward) a trace is drawn from, by the names verl, NeMo RL and OpenRLHF log them.
OpenRLHF logs ``total_length`` (prompt + response) and no prompt length: its prompt mean is
``total_length - response_length``."""

_VAL = re.compile(r"^val[-/]")


@dataclass(frozen=True)
class RunLog:
    """A run's per-step log: :attr:`table` (see the module docstring), who wrote it and how it was read."""

    table: pd.DataFrame
    framework: str
    format: str
    source: str

    def __post_init__(self) -> None:
        self.table.attrs.update(framework=self.framework, format=self.format, source=self.source)

    @property
    def steps(self) -> list[int]:
        return [int(s) for s in self.table["step"]]

    def metric(self, name: str) -> pd.Series:
        """The column ``name`` (as logged) per step, NaN where absent."""
        if name in self.table.columns:
            return self.table[name]
        return pd.Series(np.nan, index=self.table.index, name=name)


def _ends(name: str, key: str) -> bool:
    return name == key or name.endswith("/" + key)


_ORLHF_TIMING = r"(^|/)timing/(generation|make_experience|ppo_train|broadcast|step_total)$"


def framework_of(names, where: str) -> str:
    """The framework whose metric names ``names`` are (see the module docstring); else a one-line TraceError."""
    names = [str(n) for n in names]
    if any(re.search(r"(^|/)(timing_s|response_length|prompt_length|timing_per_token_ms)/", n)
           or _ends(n, "critic/score/mean") for n in names):
        return "verl"
    if any(re.search(r"(^|/)timing/train/", n) or _ends(n, "mean_gen_tokens_per_sample") for n in names):
        return "nemo-rl"
    if any(_ends(n, "train/response_length") or _ends(n, "train/total_length") or re.search(_ORLHF_TIMING, n)
           or _ends(n, "rollout/response_length_mean") for n in names):
        return "openrlhf"
    shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
    raise TraceError(f"{where}: no metric of verl (timing_s/*, response_length/*), NeMo RL (timing/train/*) or "
                     f"OpenRLHF (train/response_length, train/total_length) (found: {shown or 'none'})")


def _known_metric(name: str) -> bool:
    try:
        framework_of([name], "")
        return True
    except TraceError:
        return False


def _lines(path: Path) -> list[str]:
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        return raw.decode("utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _from_steps(steps: text.Steps, path: Path) -> pd.DataFrame:
    if not steps:
        raise TraceError(f"{path}: no step logged")
    frame = pd.DataFrame.from_records([{"step": s, **m} for s, m in steps.items()])
    return frame.astype({c: np.float64 for c in frame.columns if c != "step"})


def _from_frame(frame: pd.DataFrame, run: str | None, path: Path) -> pd.DataFrame:
    cols = run_columns(frame, run, path, _known_metric)
    step_col = step_column(frame)
    out = {}
    for metric, col in cols.items():
        if col == step_col:
            continue
        values = pd.to_numeric(frame[col], errors="coerce")
        filled = frame[col].notna() & (frame[col].astype(str).str.strip() != "")
        bad = values.isna() & filled
        if filled.any() and bad[filled].all():
            continue  # a text column (media, run names): not a scalar metric
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise TraceError(f"{path}: row {i + 1}, column '{col}': not a number {frame[col].iloc[i]!r}")
        out[metric] = values.astype(np.float64)
    table = pd.DataFrame(out, index=frame.index)
    if step_col is None:
        table.insert(0, "step", np.arange(len(frame)))
        return table
    steps = pd.to_numeric(frame[step_col], errors="coerce")
    logged = table.notna().any(axis=1)
    bad = logged & (steps.isna() | (steps < 0) | (steps != np.floor(steps)))
    if bad.any():
        i = int(np.argmax(bad.to_numpy()))
        raise TraceError(f"{path}: row {i + 1}, column '{step_col}': not a step number {frame[step_col].iloc[i]!r}")
    table.insert(0, "step", steps)
    return table[logged].groupby("step", sort=True).last().reset_index()


def _format(path: Path, lines: list[str] | None) -> str:
    if path.is_dir():
        return "tensorboard-scalars"
    name = path.name.lower()
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    if name.endswith((".jsonl", ".jsonl.gz", ".json")):
        return "jsonl"
    assert lines is not None
    if text.is_verl_console(lines):
        return "verl-console"
    if text.is_nemo_console(lines):
        return "nemo-rl-console"
    if text.is_openrlhf_console(lines):
        return "openrlhf-console"
    raise TraceError(f"{path}: not a run log I can read: expected {EXPECTED}")


def read_run_log(path: str | Path, run: str | None = None) -> RunLog:
    """The per-step table of a run's log (see the module docstring). ``run``: the run of a wandb CSV
    holding several (``RUN - metric`` columns)."""
    path = Path(path)
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if not (path.is_file() or path.is_dir()):
        raise TraceError(f"{path}: not a file (a run log, a CSV export) nor a folder of TensorBoard scalars")
    is_text = path.is_file() and not path.name.lower().endswith((".csv", ".csv.gz"))
    lines = _lines(path) if is_text else None
    fmt = _format(path, lines)
    if run is not None and fmt != "csv":
        raise ConfigError(f"--run {run!r}: only a wandb CSV export holds several runs, not a {fmt} log ({path})")
    if fmt == "tensorboard-scalars":
        table = _from_frame(read_scalar_folder(path, KNOWN), None, path)
    elif fmt == "csv":
        table = _from_frame(read_frame(path, KNOWN), run, path)
    else:
        reader = {"verl-console": text.read_verl_console, "nemo-rl-console": text.read_nemo_console,
                  "openrlhf-console": text.read_openrlhf_console, "jsonl": text.read_jsonl}[fmt]
        table = _from_steps(reader(lines, path), path)
    metrics = [c for c in table.columns if c != "step"]
    framework = {"verl-console": "verl", "nemo-rl-console": "nemo-rl", "openrlhf-console": "openrlhf"}.get(fmt) \
        or framework_of(metrics, str(path))
    training = [c for c in metrics if not _VAL.match(c)]
    keep = table[training].notna().any(axis=1) if training else pd.Series(False, index=table.index)
    table = table[keep].sort_values("step", kind="stable").reset_index(drop=True)
    table = table[["step", *(c for c in metrics if table[c].notna().any())]]
    if table.empty:
        raise TraceError(f"{path}: no step logs a training metric (only validation: val-*, val/*)")
    too_big = ~(table["step"].abs() < 2**62)
    if too_big.any():
        raise TraceError(f"{path}: step {table['step'][too_big].iloc[0]} is not a step number a run reaches")
    table["step"] = table["step"].astype(np.int64)
    return RunLog(table, framework, fmt, str(path))


# --------------------------------------------------------------------------------------------------
# Lengths, for a trace
# --------------------------------------------------------------------------------------------------


def _column_for(log: RunLog, key: str) -> str | None:
    for name in LENGTHS[key]:
        hit = next((c for c in log.table.columns if c != "step" and _ends(str(c), name)), None)
        if hit is not None:
            return hit
    return None


def lengths(log: RunLog) -> pd.DataFrame:
    """The log's per-step lengths: ``step`` and :data:`LENGTHS`' names (NaN where not logged), the steps
    that log a mean response length. Refused in one line without a mean response or prompt length."""
    table = log.table
    cols = {key: _column_for(log, key) for key in LENGTHS}
    out = pd.DataFrame({key: (table[c] if c is not None else np.nan) for key, c in cols.items()}, index=table.index)
    total = _column_for_name(table, "total_length")
    if cols["prompt_mean"] is None and cols["resp_mean"] is not None and total is not None:
        out["prompt_mean"] = table[total] - table[cols["resp_mean"]]  # OpenRLHF: total - response
        cols["prompt_mean"] = f"{total} - {cols['resp_mean']}"
    for key in ("resp_mean", "prompt_mean"):
        if cols[key] is None:
            found = ", ".join(map(str, table.columns))
            raise TraceError(f"{log.source}: no column '{LENGTHS[key][0]}' (found: {found})")
    out.insert(0, "step", table["step"])
    out = out[out["resp_mean"].notna()]
    if out.empty:
        raise TraceError(f"{log.source}: no step has a value in '{cols['resp_mean']}'")
    for key in ("resp_mean", "prompt_mean"):
        bad = ~((out[key] >= 1) & np.isfinite(out[key]))
        if bad.any():
            raise TraceError(f"{log.source}: step {int(out['step'][bad].iloc[0])}: '{cols[key]}' must be a finite "
                             f"number >= 1, got {float(out[key][bad].iloc[0]):g}")
    _check_moments(out, cols, log.source)
    return out.reset_index(drop=True)


def _check_moments(out: pd.DataFrame, cols: dict, source: str) -> None:
    """A step's logged minimum, mean and maximum of a length must be finite and in that order (a trace drawn to match
    them cannot otherwise): one line naming the first step that breaks it."""
    for kind in ("resp", "prompt"):
        lo, mean, hi = (out[f"{kind}_{m}"] for m in ("min", "mean", "max"))
        for name, v in ((f"{kind}_min", lo), (f"{kind}_max", hi)):
            bad = np.isinf(v)
            if bad.any():
                raise TraceError(f"{source}: step {int(out['step'][bad].iloc[0])}: '{cols[name]}' is not finite")
        bad = (lo > mean) | (hi < mean)  # NaN (not logged) compares False
        if bad.any():
            i, label = bad.idxmax(), "response" if kind == "resp" else "prompt"
            raise TraceError(f"{source}: step {int(out['step'][i])}: {label} length min {lo[i]:g}, mean {mean[i]:g}, "
                             f"max {hi[i]:g} are not in order")


def _column_for_name(table: pd.DataFrame, name: str) -> str | None:
    return next((c for c in table.columns if c != "step" and _ends(str(c), name)), None)
