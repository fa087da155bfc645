"""A simulated run's steps as each framework's own stage timers time them: the per-step table a user's logged
timers are compared with (verl ``timing_s/*``, NeMo RL ``timing/train/*``, OpenRLHF's and DeepSpeed-Chat's
generation / training latencies).

The simulator's timeline has one row per piece of work (``activity``, ``role``, ``step``, ``start``, ``end``):
``generate``; ``score`` by role (``reward``, ``rule``, ``reference``, ``critic``, ``logprob``); ``train`` by role
(``actor``, ``critic``); the engine's ``sleep`` (when generation ends) and ``wake`` (after training, before the
sync); the weight ``sync``. A framework's timer covers some of them; its value in a step is the wall time of
the union of the intervals it covers in that step (pieces that run side by side count once). What each timer
covers, read from the framework's source at the stated commit:

- **verl** (``volcengine/verl`` b178a3cd, 2026-01-29, ``verl/trainer/ppo/ray_trainer.py``): ``gen`` is
  ``generate_sequences`` then ``checkpoint_manager.sleep_replicas()`` (generation and the engine's sleep);
  ``reward`` (reward model / rule), ``old_log_prob``, ``ref`` (``str(Role.RefPolicy)``), ``values``,
  ``update_critic``, ``update_actor``, then ``update_weights`` (``CheckpointEngineManager.update_weights``:
  the engine woken and the weights resharded into it, ``verl/checkpoint_engine/base.py``); ``step`` the
  whole. ``update_weights`` arrived with #5031 (2026-01-27).
- **verl-0.7** (v0.4.0 to v0.7.0: ``ray_trainer.py`` at v0.7.0, ``fsdp_workers.py`` at v0.5.0 and
  ``experimental/agent_loop/agent_loop.py`` at v0.6.1): ``gen`` wraps the whole round trip — the rollout
  manager's ``wake_up()`` (``rollout_mode``: the trainer's weights loaded and resharded into the engine,
  the KV cache resumed), generation, and ``sleep()`` — or the sharding manager's enter/exit around
  ``generate_sequences``: wake, resharding and sleep are all in ``gen``; no ``update_weights`` timer. verl's
  published baselines (one-step-off and fully-async pages) were timed by these releases.
- **nemo-rl** (``NVIDIA-NeMo/RL`` 9dbd9adc, v0.5, ``nemo_rl/algorithms/grpo.py`` ``grpo_train``, logged
  under ``timing/train/``): ``prepare_for_generation/total`` (refit: the trainer offloaded, the engine's
  weights woken and transferred, its KV cache resumed), ``generation`` (which ends with
  ``finish_generation``: the engine to sleep), ``reward_calculation``, ``policy_and_reference_logprobs``,
  ``policy_training``, ``total_step_time``. Its ``logprob_inference_prep`` and ``training_prep`` (the
  trainer's state back to the GPU) are inside the simulator's ``sleep`` and counted in ``generation`` here.
- **nemo-rl-async** (the same commit, ``async_grpo_train``: generation runs in the background on its own GPUs):
  ``exposed_generation`` (the loop's wait for the step's trajectories, and for ``prepare_for_refit``: the
  part of generation the trainer sees, ``EXPOSED``: from the previous step's end, or the step's start, to its
  generation's end), ``reward_calculation``, ``policy_and_reference_logprobs``, ``policy_training``,
  ``weight_sync`` (the refit), ``total_step_time``.
- **openrlhf** (``OpenRLHF/OpenRLHF`` dbdd43b0, the benchmark's harness ``openrlhf/trainer/ppo_trainer.py``
  and ``trainer/ray/ppo_actor.py``): ``generation`` is ``make_experience`` (generation and the actor,
  reference, reward and critic forwards); ``training`` is ``ppo_train`` (actor and critic updates, then
  ``_broadcast_to_vllm``: the weight sync, and any wake before it); ``e2e`` the whole.
- **openrlhf-timing** (``OpenRLHF/OpenRLHF`` since 4908e6ee, v0.9.6; read at 3c3be623:
  ``openrlhf/trainer/ppo_trainer.py`` ``train_step`` and ``fit``, logged under ``train/`` by
  ``openrlhf/utils/logging_utils.py``): ``train/timing/generation`` (``generate_samples``: the KV cache woken,
  generation, the engine to sleep), ``make_experience`` (the reward, reference, old log-prob and value
  forwards), ``ppo_train`` (actor and critic updates), ``broadcast`` (the weights woken and synced into the
  engine), ``step_total`` -- in the synchronous trainer the *sum* of the four, not a wall clock; what falls
  between them (handing the experience to the trainers, statistics) is in no timer.
- **deepspeed-chat**: the same two latencies (DeepSpeed-Chat's ``print_throughput_step3``, whose timing
  OpenRLHF's benchmark follows; from its source, not read at a commit here).
- **trl**: TRL's ``PPOTrainer`` logs no stage times: the step alone.

The wake and the sync that prepare step ``t + 1``'s generation end step ``t`` in the simulator; verl-0.7's
``gen`` and NeMo RL's ``prepare_for_generation`` time them at the start of step ``t + 1``. They are counted in
step ``t`` here, so a step's timers add up to its time; over steady steps the two are the same.

:func:`framework_timers` is the function every per-stage report calls; :data:`STAGE_GROUPS` says which
timers make the published comparison's generation / scoring / training columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import numpy as np
import pandas as pd

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.results import SimResult

__all__ = ["Timer", "FRAMEWORK_TIMERS", "STAGE_GROUPS", "FRAMEWORKS", "EXPOSED", "framework_timers", "stage_groups",
           "union_seconds"]

STEP = ("step", None)
"""The step's time as a training loop times an iteration: from the trainer being free (the previous step's end;
the first step: its start) to the step's end (``SimResult.steps`` ``step_time_s``). In a synchronous run that is
the step's start to its end; where generation runs ahead of the trainer (one step off, fully async) the
generation that overlapped the previous step is not in it, as in NeMo RL's ``async_grpo_train`` and verl's
loops, whose step timer wraps the wait for the batch, the passes and the sync."""
EXPOSED = ("exposed", None)
"""The generation a trainer waits for: from the previous step's end (the first step: its start) to the step's
generation's end, or 0 when the batch was ready first."""


@dataclass(frozen=True)
class Timer:
    """One framework timer: its logged name and the timeline pieces (``activity``, ``role`` or None for any
    role) it covers; ``STEP`` for the whole step."""

    name: str
    covers: tuple[tuple[str, str | None], ...]


def _t(name: str, *covers: tuple[str, str | None]) -> Timer:
    return Timer(name, tuple(covers))


GEN, SLEEP, WAKE, SYNC = ("generate", None), ("sleep", None), ("wake", None), ("sync", None)
REWARD, RULE = ("score", "reward"), ("score", "rule")
LOGPROB, REF, VALUES = ("score", "logprob"), ("score", "reference"), ("score", "critic")
ACTOR, CRITIC = ("train", "actor"), ("train", "critic")

_VERL_SCORING = (_t("timing_s/reward", REWARD, RULE), _t("timing_s/old_log_prob", LOGPROB), _t("timing_s/ref", REF),
                 _t("timing_s/values", VALUES), _t("timing_s/update_critic", CRITIC), _t("timing_s/update_actor", ACTOR))
_TWO_LATENCIES = (_t("generation", GEN, SLEEP, ("score", None)), _t("training", ("train", None), WAKE, SYNC), _t("e2e", STEP))

FRAMEWORK_TIMERS: Mapping[str, tuple[Timer, ...]] = MappingProxyType({
    "verl": (_t("timing_s/gen", GEN, SLEEP), *_VERL_SCORING, _t("timing_s/update_weights", WAKE, SYNC),
             _t("timing_s/step", STEP)),
    "verl-0.7": (_t("timing_s/gen", GEN, SLEEP, WAKE, SYNC), *_VERL_SCORING, _t("timing_s/step", STEP)),
    "nemo-rl": (_t("timing/train/prepare_for_generation/total", WAKE, SYNC), _t("timing/train/generation", GEN, SLEEP),
                _t("timing/train/reward_calculation", REWARD, RULE),
                _t("timing/train/policy_and_reference_logprobs", LOGPROB, REF),
                _t("timing/train/policy_training", ACTOR, CRITIC), _t("timing/train/total_step_time", STEP)),
    "nemo-rl-async": (_t("timing/train/exposed_generation", EXPOSED), _t("timing/train/reward_calculation", REWARD, RULE),
                      _t("timing/train/policy_and_reference_logprobs", LOGPROB, REF),
                      _t("timing/train/policy_training", ACTOR, CRITIC), _t("timing/train/weight_sync", SYNC),
                      _t("timing/train/total_step_time", STEP)),
    "openrlhf": _TWO_LATENCIES,
    "openrlhf-timing": (_t("train/timing/generation", GEN, SLEEP), _t("train/timing/make_experience", REWARD, RULE, LOGPROB,
                                                                        REF, VALUES),
                        _t("train/timing/ppo_train", ACTOR, CRITIC), _t("train/timing/broadcast", WAKE, SYNC),
                        _t("train/timing/step_total", STEP)),
    "deepspeed-chat": _TWO_LATENCIES,
    "trl": (_t("step_time", STEP),),
})
"""Each framework's timers, in the order it logs them (see the module docstring for the sources)."""

FRAMEWORKS: tuple[str, ...] = tuple(FRAMEWORK_TIMERS)

STAGE_GROUPS: Mapping[str, Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "verl": {"generation": ("timing_s/gen",), "scoring": ("timing_s/old_log_prob", "timing_s/ref", "timing_s/values"),
             "training": ("timing_s/update_actor", "timing_s/update_critic")},
    "verl-0.7": {"generation": ("timing_s/gen",), "scoring": ("timing_s/old_log_prob", "timing_s/ref", "timing_s/values"),
                 "training": ("timing_s/update_actor", "timing_s/update_critic")},
    "nemo-rl": {"generation": ("timing/train/prepare_for_generation/total", "timing/train/generation"),
                "scoring": ("timing/train/policy_and_reference_logprobs",), "training": ("timing/train/policy_training",)},
    "nemo-rl-async": {"generation": ("timing/train/exposed_generation",),
                      "scoring": ("timing/train/policy_and_reference_logprobs",),
                      "training": ("timing/train/policy_training",)},
    "openrlhf": {"generation": ("generation",), "scoring": (), "training": ("training",)},
    "openrlhf-timing": {"generation": ("train/timing/generation",), "scoring": ("train/timing/make_experience",),
                        "training": ("train/timing/ppo_train",)},
    "deepspeed-chat": {"generation": ("generation",), "scoring": (), "training": ("training",)},
    "trl": {"generation": (), "scoring": (), "training": ()},
})
"""Which of a framework's timers make a comparison's generation / scoring / training columns (summed)."""


def _framework(name: str) -> str:
    key = str(name).strip().lower()
    if key not in FRAMEWORK_TIMERS:
        raise ConfigError(f"unknown framework {name!r} for stage timers; known: {', '.join(FRAMEWORKS)}")
    return key


def union_seconds(starts: np.ndarray, ends: np.ndarray) -> float:
    """Seconds covered by the union of the intervals ``[starts[i], ends[i]]`` (overlaps count once)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(zip(starts.tolist(), ends.tolist())):
        if cur_e is None or s > cur_e:
            total += 0.0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0.0 if cur_e is None else cur_e - cur_s)


def _covered(timeline: pd.DataFrame, covers: tuple[tuple[str, str | None], ...]) -> pd.Series:
    mask = pd.Series(False, index=timeline.index)
    for activity, role in covers:
        m = timeline["activity"] == activity
        mask |= m if role is None else m & (timeline["role"] == role)
    return mask


def _step_seconds(steps: pd.DataFrame) -> pd.Series:
    """Each step's :data:`STEP` time: the table's ``step_time_s``, or (a table without it) its end less the
    previous step's end (the first step: less its start)."""
    if "step_time_s" in steps:
        return steps["step_time_s"]
    return steps["end"] - steps["end"].shift(1).fillna(steps["start"])


def framework_timers(res: SimResult, framework: str) -> pd.DataFrame:
    """One row per step of ``res``: ``step``, then each of ``framework``'s timers (seconds, named as the
    framework logs them) that covers something in this run (a timer with nothing to time — ``values`` without
    a critic — is left out, as the framework would not log it). Unknown framework -> ``ConfigError``."""
    timers = FRAMEWORK_TIMERS[_framework(framework)]
    steps, tl = res.steps, res.timeline
    out: dict[str, list[float]] = {"step": [int(s) for s in steps["step"]]}
    for timer in timers:
        if timer.covers == (STEP,):
            out[timer.name] = [float(v) for v in _step_seconds(steps)]
            continue
        if timer.covers == (EXPOSED,):
            free = steps["end"].shift(1).fillna(steps["start"])  # the trainer is free from the previous step's end
            out[timer.name] = [float(v) for v in (steps["start"] + steps["generation_s"] - free).clip(lower=0.0)]
            continue
        rows = tl[_covered(tl, timer.covers)]
        if rows.empty:
            continue
        by_step = {int(s): g for s, g in rows.groupby("step")}
        out[timer.name] = [union_seconds(by_step[s]["start"].to_numpy(float), by_step[s]["end"].to_numpy(float))
                           if s in by_step else 0.0 for s in out["step"]]
    return pd.DataFrame(out)


def stage_groups(res: SimResult, framework: str) -> pd.DataFrame:
    """Per step, the comparison's ``generation``, ``scoring`` and ``training`` columns: the sums of the
    framework's timers :data:`STAGE_GROUPS` names (NaN where the framework has none of them)."""
    key = _framework(framework)
    t = framework_timers(res, key)
    out = pd.DataFrame({"step": t["step"]})
    for group, names in STAGE_GROUPS[key].items():
        have = [n for n in names if n in t.columns]
        out[group] = t[have].sum(axis=1) if have else (0.0 if names else np.nan)
    return out
