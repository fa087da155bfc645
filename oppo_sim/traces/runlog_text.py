"""The run logs that are text: verl's console lines, NeMo RL's console "Timing" blocks, a JSONL of
per-step metrics. Each reader returns ``{step: {metric: value}}`` in the order the steps were logged
(a step logged again keeps its last values), metric names as the framework logs them to wandb.

* **verl console** (``trainer.logger`` with ``console``: ``verl/utils/tracking.py`` prints each step's
  metrics dict as ``step:N - name:value - name:value ...``, numbers ``pprint``-formatted). A Ray prefix
  (``(TaskRunner pid=…)``, ``(main_task pid=…)``), ANSI colours and Ray's ``[repeated Nx across
  cluster]`` are removed; ``np.float64(x)`` and ``True``/``False`` are numbers. Lines that do not start
  with ``step:`` (after the prefix) are other output and skipped.
* **NeMo RL console** (``nemo_rl/algorithms/grpo.py``): a step header ``==== Step N/M ====``, then the
  "📊 Training Results:" and "⏱️  Timing:" blocks of ``  • label: value`` lines. A timing line
  ``  • name: 12.34s (45.6%)`` is ``timing/train/name`` (its wandb key; "Total step time" is
  ``timing/train/total_step_time``); the result lines NeMo RL prints (:data:`NEMO_RESULTS`) get their
  wandb key, others keep the label as printed.
* **OpenRLHF console** (``openrlhf/trainer/ppo_trainer.py`` ``fit``, at 3c3be623): each step's status dict
  logged as ``✨ Global step N: {'name': value, ...}`` (a Python dict, after the logger's own prefix). Each
  name gets the ``train/`` prefix OpenRLHF's wandb and TensorBoard loggers give it
  (``openrlhf/utils/logging_utils.py``), so ``timing/generation`` is ``train/timing/generation`` either way;
  ``nan``/``inf`` are numbers.
* **JSONL**: one JSON object per line, with the step under a key of :data:`JSON_STEP_KEYS` and the
  metrics beside it (or under ``"data"``); blank lines and ``#`` comments are skipped.

Anything malformed -- a ``step:`` that is not a whole number, a value that is not a number, a timing
block before any step header, a JSON line that is not an object or has no step -- is a one-line
:class:`~oppo_sim.core.errors.TraceError` naming the file and the line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from oppo_sim.core.errors import TraceError
from oppo_sim.traces.columns import one_line

Steps = dict[int, dict[str, float]]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RAY_PREFIX = re.compile(r"^\s*\([^()]*pid=\d+[^()]*\)\s*")
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_WRAPPED = re.compile(r"^(?:np\.|numpy\.)?[A-Za-z_][A-Za-z0-9_]*\((.*)\)$")  # np.float64(1.5), float32(2)
_NEMO_STEP = re.compile(r"^=+\s*Step\s+(\S+?)(?:\s*/\s*\d+)?\s*=+$")
_NEMO_ITEM = re.compile(r"^[•*-]\s*(?P<label>[^:]+?)\s*:\s*(?P<value>\S+?)(?P<unit>s?)(?:\s+[A-Za-z]+)?(?:\s*\([^)]*\))?$")
NEMO_RESULTS: dict[str, str] = {
    "Loss": "train/loss", "Avg Reward": "train/reward", "Mean Generation Length": "train/mean_gen_tokens_per_sample",
}
"""Result lines NeMo RL's GRPO prints -> the wandb key of the number printed (``metrics["loss"]``,
``metrics["reward"]``, ``rollout_metrics["mean_gen_tokens_per_sample"]``, logged with the ``train`` prefix)."""
JSON_STEP_KEYS: tuple[str, ...] = ("step", "_step", "global_step", "training/global_step", "train/global_step")


def clean(line: str) -> str:
    """A console line without ANSI colours, Ray's worker prefix and Ray's repeat note."""
    line = _ANSI.sub("", line).rstrip("\r\n")
    line = _RAY_PREFIX.sub("", line)
    return _RAY_REPEATED.sub("", line).strip()


def number(text: str, where: str, name: str) -> float:
    """A logged value as a float (``np.float64(x)`` unwrapped, ``True``/``False`` 1/0); else a TraceError."""
    raw = text.strip()
    m = _WRAPPED.match(raw)
    inner = m.group(1).strip() if m else raw
    if inner in ("True", "False"):
        return 1.0 if inner == "True" else 0.0
    try:
        return float(inner)
    except ValueError:
        raise TraceError(f"{where}: '{name}': not a number {raw!r}") from None


def _step(text: str, where: str) -> int:
    t = text.strip()
    if not re.fullmatch(r"\d+", t):
        raise TraceError(f"{where}: not a step number {t!r} (expected step:N with N a whole number >= 0)")
    return int(t)


def _store(out: Steps, step: int, metrics: dict[str, float]) -> None:
    out.pop(step, None)  # a step logged again keeps its last values, in its last place
    out[step] = metrics


def is_verl_console(lines: list[str]) -> bool:
    return any(clean(ln).startswith("step:") for ln in lines)


def is_nemo_console(lines: list[str]) -> bool:
    return any(_NEMO_STEP.match(clean(ln)) for ln in lines) and any("Timing:" in ln for ln in lines)


def read_verl_console(lines: list[str], path: Path) -> Steps:
    out: Steps = {}
    for i, line in enumerate(lines, 1):
        text = clean(line)
        if not text.startswith("step:"):
            continue
        where = f"{path}: line {i}"
        head, *items = text.split(" - ")
        step = _step(head[len("step:"):], where)
        metrics: dict[str, float] = {}
        for item in items:
            name, sep, value = item.rpartition(":")
            if not sep or not name.strip():
                raise TraceError(f"{where}: {item.strip()!r} is not name:value (verl prints 'step:N - name:value - ...')")
            metrics[name.strip()] = number(value, where, name.strip())
        _store(out, step, metrics)
    return out


_ORLHF_STEP = re.compile(r"Global step (?P<step>\d+): (?P<status>\{.*?)\s*$")
_NONFINITE = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")


def is_openrlhf_console(lines: list[str]) -> bool:
    return any(_ORLHF_STEP.search(clean(ln)) for ln in lines)


def read_openrlhf_console(lines: list[str], path: Path) -> Steps:
    import ast

    out: Steps = {}
    for i, line in enumerate(lines, 1):
        m = _ORLHF_STEP.search(clean(line))
        if not m:
            continue
        where = f"{path}: line {i}"
        step = _step(m.group("step"), where)
        try:  # nan/inf as strings first: a Python dict's repr prints them bare
            status = ast.literal_eval(_NONFINITE.sub(lambda t: f"'{t.group(1)}{t.group(2)}'", m.group("status")))
        except (ValueError, SyntaxError):
            raise TraceError(f"{where}: the status after 'Global step {step}:' is not a dict of name: value") from None
        if not isinstance(status, dict):
            raise TraceError(f"{where}: the status after 'Global step {step}:' is not a dict of name: value")
        _store(out, step, {f"train/{k}": number(str(v), where, str(k)) for k, v in status.items()})
    return out


def read_nemo_console(lines: list[str], path: Path) -> Steps:
    out: Steps = {}
    step: int | None = None
    block: str | None = None
    for i, line in enumerate(lines, 1):
        text = clean(line)
        where = f"{path}: line {i}"
        head = _NEMO_STEP.match(text)
        if head:
            step = _step(head.group(1), where)
            _store(out, step, {})
            block = None
            continue
        if text.endswith("Timing:") or text.endswith("Training Results:"):
            if step is None:
                raise TraceError(f"{where}: a '{text}' block before any '==== Step N/M ====' header")
            block = "timing" if text.endswith("Timing:") else "results"
            continue
        item = _NEMO_ITEM.match(text) if block else None
        if item is None:
            block = None if text else block  # a blank line inside a block is kept; any other line ends it
            continue
        label, value = item.group("label").strip(), item.group("value")
        if block == "timing":
            name = "timing/train/total_step_time" if label == "Total step time" else f"timing/train/{label}"
            out[step][name] = number(value, where, name)
        else:
            name = NEMO_RESULTS.get(label, label)
            out[step][name] = number(value + item.group("unit"), where, name)
    return out


def read_jsonl(lines: list[str], path: Path) -> Steps:
    out: Steps = {}
    for i, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{path}: line {i}"
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not JSON: {one_line(exc)}") from None
        if not isinstance(rec, dict):
            raise TraceError(f"{where}: not a JSON object (expected one object per step)")
        key = next((k for k in JSON_STEP_KEYS if k in rec), None)
        if key is None:
            raise TraceError(f"{where}: no step (expected one of {', '.join(JSON_STEP_KEYS)})")
        raw_step = rec[key]
        if isinstance(raw_step, bool) or not isinstance(raw_step, (int, float)) or raw_step < 0 or raw_step != int(raw_step):
            raise TraceError(f"{where}: not a step number {raw_step!r}")
        data = rec["data"] if isinstance(rec.get("data"), dict) else {k: v for k, v in rec.items() if k != key}
        metrics: dict[str, float] = {}
        for name, value in data.items():
            if value is None:
                continue
            if isinstance(value, bool):
                value = float(value)
            if not isinstance(value, (int, float)):
                raise TraceError(f"{where}: '{name}': not a number {value!r}")
            metrics[str(name)] = float(value)
        _store(out, int(raw_step), metrics)
    return out

