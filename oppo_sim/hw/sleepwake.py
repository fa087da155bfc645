"""Sleep and wake of a colocated generation engine: what each switch between the ``generate`` phase and
the ``other`` phase moves over the host link, and what it costs.

Where generation shares GPUs with other roles and they take turns (``colocate="sleep"``: the memory
plan's phases, :mod:`oppo_sim.hw.memory`), every step switches twice on that pool — the engine goes to
sleep when generation ends so that scoring and training get the memory, and wakes before the next step
generates. That is how verl's hybrid engine (``actor_rollout_ref`` on one worker group), OpenRLHF
(``--colocate_all_models --vllm_enable_sleep --deepspeed_enable_sleep``) and NeMo RL's colocated mode
run. Each switch has two legs, run one after the other as those frameworks do (the engine's call
returns, then the trainer moves its state):

- **the engine** — vLLM sleep mode (https://docs.vllm.ai/en/latest/features/sleep_mode/):
  *level 1* offloads the model weights to CPU memory and discards the KV cache; waking copies the
  weights back over the host link and re-allocates the KV cache. *Level 2* discards both; waking
  re-allocates them and the weights are refilled from the trainer — which the weight sync that follows
  each update moves anyway (:mod:`oppo_sim.hw.sync`), so level 2 moves no bytes here. vLLM recommends
  level 2 for RLHF weight updates; verl calls ``sleep(level=VLLM_SLEEP_LEVEL)`` with
  ``VLLM_SLEEP_LEVEL = 1`` (``verl/third_party/vllm``) and OpenRLHF's engine actor defaults to
  ``sleep(level=1)``: the default here (``SimConfig.sleep_level``). At level 1 the weights therefore cross the host
  link twice a step and are then overwritten by the sync — what level 2 saves. The KV cache is never
  moved (both levels forget it; requests carried to the next step are recomputed, as after any sync).
- **the other phase's state** — everything the memory plan holds only in the ``other`` phase (the
  trainer's weights, gradients and Adam state; frozen scorers' weights where they share the pool) is
  offloaded to host memory while the engine generates and reloaded before it is used: verl's
  ``actor.fsdp_config.param_offload`` / ``optimizer_offload`` (and ``ref.fsdp_config.param_offload``),
  OpenRLHF's ``--deepspeed_enable_sleep`` (DeepSpeed ``offload_states``: parameters, optimizer states
  and the contiguous gradient buffer). Activations are freed, not moved. (verl's offload switches are
  off by default; such a job keeps its trainer resident: ``--colocate resident``.)

Cost of one switch, per device, with the ``sync`` op's calibrated efficiency and overhead (defaults 0.6
and 50 ms; a switch is a bulk copy of weights between device and pinned host memory plus the framework's
own work, which is what a weight sync measures end to end — no run measures a sleep separately, so it
gets no op kind of its own) and ``host_bw`` the GPU's host link, one direction
(:mod:`oppo_sim.hw.hardware`)::

    switch = 2 * overhead_s + (engine_bytes + state_bytes) / (host_bw * eff)
    engine_bytes = generation weights per device (W / tp) at level 1, 0 at level 2
    state_bytes  = sum over the other phase's roles of weights + gradients + Adam, per device

Going to sleep moves ``engine_bytes`` to the host and ``state_bytes`` from it; waking the reverse, so
both switches cost the same and a step pays twice that. Nothing is charged where nothing takes turns:
a pool that only generates, ``colocate="resident"``, or a policy under which generation and training
run at the same time (``async``: the memory plan keeps everything resident there).
"""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.hardware import GiB, Hardware
from oppo_sim.hw.memory import GENERATE, OTHER, PoolMemory

__all__ = ["SLEEP_LEVELS", "DEFAULT_SLEEP_LEVEL", "check_sleep_level", "SleepWake", "sleep_wake"]

SLEEP_LEVELS: tuple[int, ...] = (1, 2)
DEFAULT_SLEEP_LEVEL = 1
"""verl's ``VLLM_SLEEP_LEVEL`` (and OpenRLHF's default sleep level)."""


def check_sleep_level(level: object) -> int:
    """``level`` if it is a vLLM sleep level (1 or 2), else ``ConfigError`` (one line)."""
    if isinstance(level, bool) or level not in SLEEP_LEVELS:
        raise ConfigError(f"sleep_level must be 1 (weights to host, KV freed) or 2 (weights and KV freed), got {level!r}")
    return int(level)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SleepWake:
    """The switches of one pool whose generation engine sleeps: bytes per device of each leg and the
    link they cross. ``switch_s`` is one switch (sleep or wake); ``step_s`` the two a step makes."""

    pool: str
    level: int
    engine_bytes: float  # the engine's weights per device, each way (0 at level 2)
    state_bytes: float  # the other phase's weights + gradients + Adam per device, each way
    host_bw: float  # bytes/s per GPU, one direction
    eff: float  # the sync op's eff_memory
    overhead_s: float  # the sync op's overhead, once per leg

    def legs(self) -> dict[str, float]:
        """Seconds of each leg of one switch (they add up to :attr:`switch_s`)."""
        bw = self.host_bw * self.eff
        return {"engine": self.overhead_s + self.engine_bytes / bw, "state": self.overhead_s + self.state_bytes / bw}

    @property
    def switch_s(self) -> float:
        return sum(self.legs().values())

    @property
    def step_s(self) -> float:
        """Sleep after generation plus wake before the next generation."""
        return 2.0 * self.switch_s

    def describe(self) -> str:
        return (f"pool '{self.pool}' sleeps (vLLM level {self.level}): {self.engine_bytes / GiB:.1f} GiB engine weights + "
                f"{self.state_bytes / GiB:.1f} GiB other-phase state per GPU each way over {self.host_bw / 1e9:.0f} GB/s, "
                f"{self.step_s:.2f} s a step")


def sleep_wake(pool: PoolMemory, hw: Hardware, level: int) -> SleepWake | None:
    """The switches of ``pool`` under the memory plan's phases, or None where nothing takes turns (no role
    held only while generating): the one rule of what sleep and wake charge."""
    level = check_sleep_level(level)
    engine = [r for r in pool.roles if r.phase == GENERATE]
    if not engine:
        return None
    op = hw.params.sync
    return SleepWake(
        pool.pool, level,
        engine_bytes=sum(r.weights for r in engine) if level == 1 else 0.0,
        state_bytes=sum(r.weights + r.grads + r.optimizer for r in pool.roles if r.phase == OTHER),
        host_bw=hw.gpu.host_bw, eff=op.eff_memory, overhead_s=op.overhead_s,
    )
