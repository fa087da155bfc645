"""A run's per-step log in, a per-step synthetic trace out (``oppo-sim import`` of a metrics CSV or a log).

**What it reads.** Any run log :func:`oppo_sim.traces.runlog.read_run_log` reads -- a wandb export or a
TensorBoard CSV ("Download CSV" of a run's history, ``run.history().to_csv``, a ``step,tag,value``
table, a folder of scalar CSVs), verl's console lines, NeMo RL's console, a JSONL of per-step metrics --
or the :class:`~oppo_sim.traces.runlog.RunLog` it returned. The lengths are found by the names the
frameworks log them under (:data:`oppo_sim.traces.runlog.LENGTHS`; any prefix, e.g. a wandb ``actor/``
or a run name ``RUN - response_length/mean``, is fine):

* required: ``response_length/mean``, ``prompt_length/mean`` (NeMo RL: ``mean_gen_tokens_per_sample``;
  OpenRLHF: ``train/response_length`` and ``train/total_length`` - the response);
* optional: ``response_length/max``, ``response_length/min``, ``response_length/clip_ratio`` (the share
  of responses cut at the cap), ``prompt_length/max``, ``prompt_length/min``, ``critic/score/mean`` or
  ``critic/rewards/mean`` (the reward);
* the step: as the log numbers it (a CSV: ``_step``, ``step``, ``training/global_step``, ``global_step``
  or ``Step``, else the row number).

A file holding several runs needs ``--run NAME``. Steps where the mean response length is empty are
skipped; a step logged twice keeps its last values.

**What it writes** (:func:`metrics_to_trace`): ``N`` rows per step (``--prompts-per-step``, the
responses of one batch), with ``step`` = the logged step. Per step, the responses:

* ``round(clip_ratio x N)`` rows sit exactly at the cap ``L`` (``--max-response``; by default the largest
  ``response_length/max`` of the file when some step was clipped — clipped responses end at the cap);
* where the step's max is below ``L`` (or nothing was clipped), one row is exactly the step's max;
* the others are drawn from a **lognormal** fitted to their mean (what is left of the step's mean) and
  to a quantile: its ``1 - 1/(r + 1)`` quantile (r: how many rows are drawn) is the step's max, the
  largest value r draws reach on average; clipped to ``[min, max]`` (``min``: the step's
  ``response_length/min``, else 1; below ``L`` when some rows are at the cap) and then scaled so their
  mean is exact — integer rounding is spread so the step's mean matches to 1/N token.

So per step the mean matches (within 1/N token, where the logged numbers are consistent: the cap rows
must leave room for the rest), the max matches exactly, and the clip share matches to within 1/(2N) —
except that a step whose max is the cap has at least that one row there (share 1/N) even where
``round(clip_ratio x N)`` is 0; the drawn rows always stay below the cap. Prompts: the same fit to ``prompt_length/mean`` and ``/max`` (and ``/min``) where the max
is logged, else every prompt is the step's mean. The reward, when logged: a 0/1 draw with probability
= the step's mean where that mean is in [0, 1] (rule rewards: right or wrong), else the mean itself.
Rows are shuffled within their step. Everything is drawn from ``numpy.random.default_rng((seed, step))``:
the same file and seed give the same trace. These choices are written into the output
(:class:`~oppo_sim.traces.importers.Imported` notes).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import norm

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import MAX_STEP_PROMPTS
from oppo_sim.traces.importers import Imported
from oppo_sim.traces.runlog import LENGTHS, RunLog, lengths, read_run_log
from oppo_sim.traces.trace import Trace

DEFAULT_PROMPTS_PER_STEP: int = 256
"""Rows written per step when ``--prompts-per-step`` is not given."""



def read_metrics(source: str | Path | RunLog, run: str | None = None) -> pd.DataFrame:
    """The log's lengths as one row per step: ``step`` and our names (:data:`~oppo_sim.traces.runlog.LENGTHS`; NaN where not logged)."""
    log = source if isinstance(source, RunLog) else read_run_log(source, run)
    return lengths(log)


# --------------------------------------------------------------------------------------------------
# Drawing lengths
# --------------------------------------------------------------------------------------------------


def lognormal_sigma(mean: float, top: float, r: int) -> float:
    """The sigma of the lognormal with mean ``mean`` whose ``1 - 1/(r + 1)`` quantile is ``top`` (the smaller
    root; the largest sigma such a quantile allows where ``top`` is too far above the mean)."""
    if top <= mean or r < 1:
        return 0.0
    z = float(norm.ppf(1.0 - 1.0 / (r + 1)))
    gap = 2.0 * math.log(top / mean)
    return z - math.sqrt(z * z - gap) if z * z >= gap else z


def exact_mean_lengths(rng: np.random.Generator, r: int, mean: float, lo: int, hi: int) -> np.ndarray:
    """``r`` integers in ``[lo, hi]`` from the lognormal fitted to ``mean`` and ``hi``, summing to
    ``round(r x mean)`` (clipped to what ``[lo, hi]`` allows)."""
    if r == 0:
        return np.zeros(0, dtype=np.int64)
    target = min(max(round(r * mean), r * lo), r * hi)
    sigma = lognormal_sigma(mean, hi, r)
    x = np.exp(math.log(mean) - sigma * sigma / 2 + sigma * rng.standard_normal(r))
    x = np.clip(x, lo, hi)
    for _ in range(50):  # scale toward the target sum inside the bounds
        total = x.sum()
        if abs(total - target) < 0.5:
            break
        x = np.clip(x * (target / total), lo, hi) if total > 0 else np.full(r, target / r)
        if np.all(x == (hi if total < target else lo)):
            break
    out = np.floor(x).astype(np.int64)
    short = int(target - out.sum())
    order = np.argsort(-(x - out), kind="stable")  # largest fractional parts first
    while short > 0:
        room = order[out[order] < hi][:short]
        if len(room) == 0:
            break
        out[room] += 1
        short -= len(room)
    while short < 0:
        room = order[::-1][out[order[::-1]] > lo][:-short]
        if len(room) == 0:
            break
        out[room] -= 1
        short += len(room)
    return out


def step_responses(rng: np.random.Generator, n: int, mean: float, top: float, low: float, clip: float,
                   cap: int) -> np.ndarray:
    """One step's ``n`` response lengths (see the module docstring)."""
    at_cap = min(n, round(clip * n)) if clip > 0 else 0
    top = min(int(round(top)), cap)
    fixed = [cap] * at_cap
    if top < cap or at_cap == 0:  # the step's max is one row (when the cap rows do not hold it already)
        fixed.append(top)
    fixed = fixed[:n]
    hi = max(1, min(top, cap - 1))  # the drawn rows were not clipped: below the cap
    r = n - len(fixed)
    rest_mean = (n * mean - sum(fixed)) / r if r else mean
    lo = max(1, int(math.ceil(low))) if math.isfinite(low) else 1
    lo = min(lo, hi)
    drawn = exact_mean_lengths(rng, r, max(rest_mean, lo), lo, max(hi, lo))
    return np.concatenate([np.array(fixed, dtype=np.int64), drawn])


def step_prompts(rng: np.random.Generator, n: int, mean: float, top: float, low: float) -> np.ndarray:
    """One step's ``n`` prompt lengths: fitted like the responses where the max is known, else the mean."""
    if not math.isfinite(top) or top <= mean:
        return exact_mean_lengths(rng, n, mean, max(1, int(math.floor(mean))), max(1, int(math.ceil(mean))))
    top_i = int(round(top))
    lo = max(1, int(math.ceil(low))) if math.isfinite(low) else 1
    rest = exact_mean_lengths(rng, n - 1, (n * mean - top_i) / (n - 1) if n > 1 else mean, min(lo, top_i), top_i)
    return np.concatenate([[top_i], rest]).astype(np.int64)[:n]


# --------------------------------------------------------------------------------------------------
# The trace
# --------------------------------------------------------------------------------------------------


def _cap(m: pd.DataFrame, max_response: int | None, path: Path) -> tuple[int, str]:
    clipped = bool((m["clip"].fillna(0) > 0).any())
    logged_max = m["resp_max"].max()
    if max_response is not None:
        if math.isfinite(logged_max) and logged_max > max_response:
            raise ConfigError(f"--max-response {max_response}: below the longest response logged in {path} "
                              f"({logged_max:g})")
        return int(max_response), f"cap {max_response} (--max-response)"
    if clipped and math.isfinite(logged_max):
        return int(round(logged_max)), f"cap {int(round(logged_max))} (the largest response_length/max: clipped responses end at the cap)"
    if not clipped and math.isfinite(logged_max):
        return int(round(logged_max)), f"cap {int(round(logged_max))} (no step was clipped: the largest response_length/max)"
    raise ConfigError(f"{path} logs no response_length/max: give the cap with --max-response")


def metrics_to_trace(source: str | Path | RunLog, prompts_per_step: int | None = None, max_response: int | None = None,
                     seed: int = 0, run: str | None = None) -> Imported:
    """The per-step synthetic trace of a run's log -- a path or the :class:`RunLog` read from it (see the
    module docstring for the rule)."""
    log = source if isinstance(source, RunLog) else read_run_log(source, run)
    path = Path(log.source)
    n = DEFAULT_PROMPTS_PER_STEP if prompts_per_step is None else int(prompts_per_step)
    if not 1 <= n <= MAX_STEP_PROMPTS:
        raise ConfigError(f"--prompts-per-step must be in [1, {MAX_STEP_PROMPTS:,}], got {n}")
    if max_response is not None and max_response < 1:
        raise ConfigError(f"--max-response must be >= 1, got {max_response}")
    m = lengths(log)
    cap, cap_note = _cap(m, max_response, path)
    cols: dict[str, list[np.ndarray]] = {"prompt": [], "response": [], "reward": [], "step": []}
    has_reward = bool(m["reward"].notna().any())
    for row in m.itertuples(index=False):
        rng = np.random.default_rng((int(seed), int(row.step)))
        top = row.resp_max if math.isfinite(row.resp_max) else cap
        resp = step_responses(rng, n, min(row.resp_mean, cap), top, row.resp_min,
                              0.0 if not math.isfinite(row.clip) else row.clip, cap)
        prompt = step_prompts(rng, n, row.prompt_mean, row.prompt_max, row.prompt_min)
        reward = _rewards(rng, n, row.reward) if has_reward else np.zeros(n)
        order = rng.permutation(n)
        cols["response"].append(resp[order])
        cols["prompt"].append(prompt[order])
        cols["reward"].append(reward)
        cols["step"].append(np.full(n, row.step, dtype=np.int64))
    arrays = {k: np.concatenate(v) for k, v in cols.items()}
    trace = Trace.from_arrays(arrays["prompt"], arrays["response"], name=path.name, source=str(path),
                              step=arrays["step"], reward=arrays["reward"] if has_reward else None)
    notes = _notes(path, m, n, cap_note, has_reward, seed)
    return Imported(trace, f"{log.framework} {log.format} log {path.name}: {len(m)} steps x {n} rows, synthetic (lognormal fit), seed {seed}",
                    notes)


def _rewards(rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    if not math.isfinite(mean):
        return np.zeros(n)
    if 0.0 <= mean <= 1.0:
        return (rng.random(n) < mean).astype(np.float64)
    return np.full(n, float(mean))


def _notes(path: Path, m: pd.DataFrame, n: int, cap_note: str, has_reward: bool, seed: int) -> tuple[str, ...]:
    logged = [LENGTHS[k][0] for k in ("resp_max", "resp_min", "clip", "prompt_max", "prompt_min", "reward")
              if m[k].notna().any()]
    return (
        f"synthetic: {len(m)} steps of {path} (steps {int(m['step'].min())}..{int(m['step'].max())}), {n} rows a step "
        f"(--prompts-per-step), drawn with numpy default_rng((seed={seed}, step))",
        f"responses: {cap_note}; round(clip_ratio x {n}) rows at the cap, one row at the step's max, the others "
        "lognormal with the rest of the mean and its 1-1/(r+1) quantile at the max, clipped to [min, max], scaled to "
        "the exact mean (per step: mean within 1/N token, max exact, clip share within 1/(2N))",
        "prompts: the same lognormal fit where prompt_length/max is logged, else every prompt = the step's mean",
        ("reward: 0/1 with probability = the step's mean (in [0, 1]), else the mean" if has_reward
         else "no reward logged: no reward column"),
        f"logged besides the means: {', '.join(logged) if logged else 'nothing'}",
        "rows shuffled within their step; oppo-sim replays step t's rows in step t (oppo_sim.traces.rowmap)",
    )
