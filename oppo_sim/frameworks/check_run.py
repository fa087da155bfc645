"""``oppo-sim check``: a run's log held against the simulator, stage by stage. The fit is
:mod:`oppo_sim.frameworks.check_fit`, the what-if :mod:`oppo_sim.frameworks.check_policies`.

**What is simulated.** The run's config (a framework reader's translation: batch ``B``, responses per
prompt ``n``, models, placement, engine) and, per logged step, that step's logged lengths: the log
becomes a stepped trace as ``oppo-sim import`` makes it (:func:`~oppo_sim.traces.metrics_import.metrics_to_trace`,
``B x n`` rows a step, the cap the config's ``max_response``), and simulation step ``i`` replays the
``i``-th logged step checked (:mod:`oppo_sim.traces.rowmap`). The schedule is the run's own: the policy the
reader says the framework ran (``baseline`` for a synchronous loop, ``async`` for verl's one-step-off and
fully-async trainers), or ``--policy``.

**What is compared.** The simulated timeline is cut into the framework's own timers by
:func:`~oppo_sim.frameworks.stages.framework_timers` (its docstring says what each timer covers, e.g. verl's
``timing_s/gen`` is generation and the engine's sleep; verl before ``update_weights`` existed, ``verl-0.7``,
counts the wake and the resharding in ``gen`` too). Every timer the framework has, the log holds and the
simulated run times is compared; a logged timer the simulation has nothing for (``timing_s/values`` without a
critic, ``timing_s/adv``) is named and left out. ``error_pct = 100 x (predicted - measured) / measured``.

**The stage map** (which framework): ``--framework``, else the log's (a verl log with ``timing_s/update_weights``
is ``verl``, one without it ``verl-0.7``). A framework that is not the log's (``nemo-rl`` timers asked of a
verl log) or a config read from another framework than the log's is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.stages import FRAMEWORK_TIMERS, STEP, framework_timers
from oppo_sim.hw.devices.hardware import Hardware
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.traces.metrics_import import metrics_to_trace
from oppo_sim.traces.runlog import RunLog
from oppo_sim.traces.trace import Trace

COMPATIBLE: dict[str, tuple[str, ...]] = {  # the log's framework -> the stage maps that read its timers
    "verl": ("verl", "verl-0.7"), "nemo-rl": ("nemo-rl", "nemo-rl-async"), "openrlhf": ("openrlhf-timing", "openrlhf", "deepspeed-chat"),
}
CONFIG_FRAMEWORK: dict[str, str] = {"verl": "verl", "openrlhf": "openrlhf", "nemo rl": "nemo-rl", "nemo-rl": "nemo-rl",
                                     "nemo_rl": "nemo-rl"}
"""A reader's framework (``Translation.framework``, its first words) -> the log framework it must match."""

TABLE_COLUMNS = ["step", "stage", "measured_s", "predicted_s", "error_pct"]


def stage_map(log: RunLog, framework: str | None) -> str:
    """The stage map used for ``log``: ``framework`` if it reads this log's timers, else the log's own."""
    compatible = COMPATIBLE.get(log.framework, ())
    if framework is None:
        if log.framework == "verl":
            return "verl" if "timing_s/update_weights" in log.table.columns else "verl-0.7"
        if log.framework == "nemo-rl":  # async GRPO's loop logs the generation it waited for
            return "nemo-rl-async" if "timing/train/exposed_generation" in log.table.columns else "nemo-rl"
        if log.framework == "openrlhf":  # its own timers (v0.9.6 on), else its benchmark's two latencies
            return "openrlhf-timing" if any(str(c).endswith("timing/ppo_train") for c in log.table.columns) else "openrlhf"
        return log.framework
    key = str(framework).strip().lower()
    if key not in compatible:
        raise ConfigError(f"--framework {framework}: {log.source} is a {log.framework} log; its timers read as "
                          f"{' or '.join(compatible)}")
    return key


def check_config_framework(log: RunLog, reader: str | None) -> None:
    """Refuse a config read from another framework than the log's (``reader``: the translation's framework)."""
    if not reader:
        return
    words = reader.strip().lower()
    want = next((fw for key, fw in CONFIG_FRAMEWORK.items() if words.startswith(key)), None)
    if want is None:
        raise ConfigError(f"--config-framework {reader!r}: expected verl, openrlhf or nemo-rl")
    if want != log.framework:
        raise ConfigError(f"the config is {reader.split(' (')[0]}'s but {log.source} is a {log.framework} log: "
                          f"give the config and the log of one run")


def select_steps(log: RunLog, first: int | None, last: int | None) -> RunLog:
    """``log`` keeping the steps in ``[first, last]`` (as the log numbers them) that log a mean response length."""
    steps = log.table["step"]
    lo, hi = int(steps.min()), int(steps.max())
    for flag, v in (("--steps-from", first), ("--steps-to", last)):
        if v is not None and not lo <= v <= hi:
            raise ConfigError(f"{flag} {v}: out of the log's steps {lo}..{hi} ({log.source})")
    if first is not None and last is not None and first > last:
        raise ConfigError(f"--steps-from {first} is after --steps-to {last}")
    keep = (steps >= (lo if first is None else first)) & (steps <= (hi if last is None else last))
    table = log.table[keep].reset_index(drop=True)
    return RunLog(table, log.framework, log.format, log.source)


def measured_timers(log: RunLog, framework: str) -> tuple[pd.DataFrame, list[str]]:
    """(``step`` + the framework's timers the log holds, per logged step; the timer names). A log with none
    of them -> one line."""
    names = [t.name for t in FRAMEWORK_TIMERS[framework]]
    have = [n for n in names if n in log.table.columns and log.table[n].notna().any()]
    if not have:
        raise ConfigError(f"{log.source}: no stage timer of {framework} logged (expected some of: "
                          f"{', '.join(names)}); check needs a log with timers")
    return log.table[["step", *have]].reset_index(drop=True), have


def unmapped(log: RunLog, framework: str) -> list[str]:
    """The log's timers (the framework's prefix: ``timing_s/``, ``timing/train/``) outside its stage map, e.g.
    verl's ``timing_s/adv``: no simulated work of their own; the fixed step cost holds them."""
    names = [t.name for t in FRAMEWORK_TIMERS[framework]]
    prefixes = {n.rsplit("/", 1)[0] + "/" for n in names if "/" in n}
    return [c for c in log.table.columns if c not in names and any(str(c).startswith(p) for p in prefixes)
            and log.table[c].notna().any()]


@dataclass(frozen=True)
class CheckRun:
    """A run to check: its log (the steps checked), the stage map, the simulated run's config and policy."""

    log: RunLog
    framework: str
    cfg: SimConfig
    policy: str
    policy_options: tuple[tuple[str, object], ...] = ()

    @property
    def steps(self) -> list[int]:
        return [int(s) for s in self.log.table["step"]]

    def measured(self) -> pd.DataFrame:
        return measured_timers(self.log, self.framework)[0]

    def head(self, k: int) -> "CheckRun":
        """The first ``k`` logged steps only."""
        return replace(self, log=RunLog(self.log.table.head(k).reset_index(drop=True), self.log.framework,
                                        self.log.format, self.log.source))

    def tail(self, k: int) -> "CheckRun":
        """The steps after the first ``k``."""
        return replace(self, log=RunLog(self.log.table.iloc[k:].reset_index(drop=True), self.log.framework,
                                        self.log.format, self.log.source))


def run_trace(run: CheckRun, seed: int | None = None) -> Trace:
    """The stepped trace of the checked steps: ``B x n`` rows a step, drawn from each step's logged lengths."""
    cfg = run.cfg
    return metrics_to_trace(run.log, prompts_per_step=cfg.sequences, max_response=cfg.max_response,
                            seed=cfg.seed if seed is None else seed).trace


def predicted_timers(run: CheckRun, hardware: Hardware, step_overhead_s: float = 0.0, policy: str | None = None,
                     trace: Trace | None = None) -> pd.DataFrame:
    """The simulated run's timers (the framework's names), one row per checked step, numbered as the log numbers
    them. ``step_overhead_s`` (a fixed cost per step outside every stage timer) is added to the step's timer."""
    from oppo_sim.core.policies import make_policy
    from oppo_sim.pipeline.simulate import simulate

    trace = run_trace(run) if trace is None else trace
    cfg = replace(run.cfg, gpu=hardware, steps=len(run.steps))
    res = simulate(trace, make_policy(policy or run.policy, **dict(run.policy_options)), cfg)
    out = framework_timers(res, run.framework)
    step_name = next(t.name for t in FRAMEWORK_TIMERS[run.framework] if t.covers == (STEP,))
    out[step_name] = out[step_name] + step_overhead_s
    out["step"] = [run.steps[i] for i in out["step"]]
    return out


FOLDS: tuple[tuple[str, str], ...] = (("timing_s/update_critic", "timing_s/update_actor"),)
"""(timer, into): a simulated timer the log does not hold, counted in another that it does. A verl log without
``update_critic`` from a run that trains a critic times it inside ``update_actor`` (``oppo-real run
--verl-metrics`` does: one mini-batch loop updates both); the two run one after the other, so they add."""


def folded(measured: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """``predicted`` with each :data:`FOLDS` timer the log lacks added into the one it has."""
    out = predicted.copy()
    for name, into in FOLDS:
        if name in out.columns and name not in measured.columns and into in out.columns and into in measured.columns:
            out[into] = out[into] + out.pop(name)
    return out


def compare(measured: pd.DataFrame, predicted: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(The long table: ``step, stage, measured_s, predicted_s, error_pct`` for every logged timer the simulation
    times, in the framework's order; the logged timers it has nothing for)."""
    stages = [c for c in measured.columns if c != "step"]
    predicted = folded(measured, predicted)
    untimed = [s for s in stages if s not in predicted.columns]
    both = measured.merge(predicted, on="step", suffixes=("", "#pred"))
    rows = []
    for stage in (s for s in stages if s in predicted.columns):
        pred_col = stage + "#pred" if stage + "#pred" in both.columns else stage
        for step, m, p in zip(both["step"], both[stage], both[pred_col]):
            if np.isfinite(m) and m > 0:
                rows.append((int(step), stage, float(m), float(p), 100.0 * (float(p) - float(m)) / float(m)))
    return pd.DataFrame(rows, columns=TABLE_COLUMNS), untimed


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per stage: steps, median measured and predicted seconds, median |error| % and the range of the error."""
    if table.empty:
        return pd.DataFrame(columns=["stage", "steps", "measured_s", "predicted_s", "median_abs_error_pct",
                                     "error_min_pct", "error_max_pct"])
    g = table.groupby("stage", sort=False)
    return pd.DataFrame({
        "stage": list(g.groups), "steps": g.size().to_numpy(), "measured_s": g["measured_s"].median().to_numpy(),
        "predicted_s": g["predicted_s"].median().to_numpy(),
        "median_abs_error_pct": g["error_pct"].apply(lambda e: float(np.median(np.abs(e)))).to_numpy(),
        "error_min_pct": g["error_pct"].min().to_numpy(), "error_max_pct": g["error_pct"].max().to_numpy(),
    })


__all__ = ["COMPATIBLE", "CheckRun", "TABLE_COLUMNS", "check_config_framework", "compare", "folded", "measured_timers",
           "predicted_timers", "run_trace", "select_steps", "stage_map", "summary", "unmapped"]
