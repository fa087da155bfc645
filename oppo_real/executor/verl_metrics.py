"""A real run's per-step metrics under verl's names (``oppo-real run --verl-metrics PATH``), so that a
run here can be read, and checked, like a verl run (:func:`oppo_sim.traces.runlog.read_run_log`).

**The verl followed**: ``RayPPOTrainer.fit()`` of ``verl/trainer/ppo/ray_trainer.py`` at commit
``0094eb2057e6f3210c2a4fca88704689d02879aa`` (verl-project/verl; the trainer with a checkpoint engine).
There, inside the ``step`` timer: ``gen`` times ``generate_sequences`` **and** the ``sleep_replicas()``
that follows it (the engine frees its memory for training); ``reward``, ``old_log_prob``, ``ref``,
``values``, ``adv``, ``update_critic``, ``update_actor`` one after the other; then ``update_weights`` --
``checkpoint_manager.update_weights()``, which **wakes** the engine and loads the new weights for the
next step. (Older verl -- the hybrid-engine sharding manager, no ``update_weights`` timer -- counted
the wake and the weight resharding inside the *next* step's ``gen``.)

Each timer of step ``t`` from the run's measured rows (:class:`~oppo_real.executor.real_result.RealResult`):

=============================  ===============================================================================
``timing_s/gen``               ``generation_s`` (the step's start to the end of its generation, the wakes of a
                               sleeping engine included) + the step's ``sleep`` rows
``timing_s/reward``            the step's ``reward`` (reward model) and ``rule`` (verifier) rows, summed
``timing_s/old_log_prob``      the step's ``logprob`` rows (the actor's log-probs of the batch)
``timing_s/ref``               the step's ``reference`` rows
``timing_s/values``            the step's ``critic`` scoring rows (PPO)
``timing_s/adv``               from the end of the train worker's last scoring pass (log-probs, values) to the
                               start of the update: KL-penalised rewards and advantages
``timing_s/update_actor``      the update (``train:actor`` rows); under PPO the critic is updated in the same
                               mini-batch loop, so its time is here too and ``timing_s/update_critic`` is
                               not written (not measured apart)
``timing_s/update_weights``    ``sync_s``: from the end of the update to the new weights loaded in the engine
                               (the weights' export, the engine's wake when it slept, the load)
``timing_s/step``              ``step_time_s`` (time between consecutive step ends; for a synchronous policy
                               the step's wall span, verl's ``step``)
=============================  ===============================================================================

The scoring timers are the busy time of their rows: under a policy that streams scoring into
generation (``intra``, ``oppo``) those rows overlap the generation, so the timers can sum past the step,
where verl's, one stage after the other, cannot. A timer with no row in the run (no reference without a KL term, no critic under GRPO) is not written,
as verl writes no timer for a stage it does not run. Lengths and score as
``verl/trainer/ppo/metric_utils.py`` computes them over the step's trained responses:
``response_length/mean|max|min``, ``response_length/clip_ratio`` (share at the run's ``max_response``),
``prompt_length/mean|max|min``, ``critic/score/mean`` (the reward the update used);
``perf/total_num_tokens`` (prompt + response tokens), ``perf/time_per_step`` and ``training/global_step``.

Steps are numbered as verl numbers them: the run's step ``t`` is ``step:t+1``. A path ending in
``.jsonl`` gets one JSON object per step (``{"step": N, "timing_s/gen": ..., ...}``); any other path
verl's console lines (``step:N - name:value - ...``, values as ``pprint`` prints Python floats).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from oppo_sim.core.placement import TRAINER_PASSES

STAGE_ROWS: dict[str, tuple[str, ...]] = {  # verl timer -> the timeline roles whose rows it sums
    "timing_s/reward": ("reward", "rule"), "timing_s/old_log_prob": ("logprob",), "timing_s/ref": ("reference",),
    "timing_s/values": ("critic",),
}


def verl_step_metrics(steps: pd.DataFrame, timeline: pd.DataFrame, rollouts: pd.DataFrame,
                      max_response: int) -> list[dict[str, float]]:
    """One dict per step (in step order) of verl's metric names (see the module docstring)."""
    out = []
    for rec in steps.sort_values("step").to_dict("records"):
        t = int(rec["step"])
        rows = timeline[timeline["step"] == t]
        dur = rows["end"] - rows["start"]
        m: dict[str, float] = {"training/global_step": t + 1}  # an int, as verl logs it
        m["timing_s/gen"] = float(rec["generation_s"] + dur[rows["activity"] == "sleep"].sum())
        for name, roles in STAGE_ROWS.items():
            mask = rows["role"].isin(roles) & (rows["activity"] == "score")
            if mask.any():
                m[name] = float(dur[mask].sum())
        update = rows[(rows["activity"] == "train") & (rows["role"] == "actor")]
        scored = rows[(rows["activity"] == "score") & rows["role"].isin(TRAINER_PASSES)]  # the train worker's own passes
        if len(update) and len(scored):
            m["timing_s/adv"] = float(max(0.0, update["start"].min() - scored["end"].max()))
        if len(update):
            m["timing_s/update_actor"] = float((update["end"] - update["start"]).sum())
        m["timing_s/update_weights"] = float(rec["sync_s"])
        m["timing_s/step"] = float(rec["step_time_s"])
        m.update(_lengths(rollouts[rollouts["step"] == t], max_response))
        m["perf/time_per_step"] = m["timing_s/step"]
        out.append(m)
    return out


def _lengths(batch: pd.DataFrame, max_response: int) -> dict[str, float]:
    if batch.empty:
        return {}
    resp = batch["response_tokens"].to_numpy(dtype=np.float64)
    prompt = batch["prompt_tokens"].to_numpy(dtype=np.float64)
    return {
        "critic/score/mean": float(np.mean(batch["rm_score"].to_numpy(dtype=np.float64))),
        "response_length/mean": float(resp.mean()), "response_length/max": float(resp.max()),
        "response_length/min": float(resp.min()), "response_length/clip_ratio": float(np.mean(resp >= max_response)),
        "prompt_length/mean": float(prompt.mean()), "prompt_length/max": float(prompt.max()),
        "prompt_length/min": float(prompt.min()), "perf/total_num_tokens": float(resp.sum() + prompt.sum()),
    }


def console_line(step: int, metrics: dict[str, float]) -> str:
    """verl's console line of one step (``verl/utils/tracking.py``: ``step:N - name:value - ...``)."""
    return " - ".join([f"step:{step}", *(f"{k}:{_value(v)}" for k, v in metrics.items())])


def _value(v: float) -> str:
    return repr(v) if isinstance(v, int) else repr(float(v))  # pprint.pformat of a Python int / float


def write_verl_metrics(steps: pd.DataFrame, timeline: pd.DataFrame, rollouts: pd.DataFrame, max_response: int,
                       path: str | Path) -> Path:
    """Write the run's per-step metrics under verl's names to ``path`` (JSONL or console lines, by its ending)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    per_step = verl_step_metrics(steps, timeline, rollouts, max_response)
    with path.open("w") as f:
        for m in per_step:
            n = int(m["training/global_step"])
            if path.name.endswith(".jsonl"):
                f.write(json.dumps({"step": n, **m}) + "\n")
            else:
                f.write(console_line(n, m) + "\n")
    return path
