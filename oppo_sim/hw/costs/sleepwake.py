"""Sleep and wake of a colocated generation engine: what each switch between the ``generate`` phase and
the ``other`` phase moves over the host link, and what it costs.

Where generation shares GPUs with other roles and they take turns (``colocate="sleep"``: the memory
plan's phases, :mod:`oppo_sim.hw.memory.train_memory`), every step switches twice on that pool — the engine goes to
sleep when generation ends so that scoring and training get the memory, and wakes before the next step
generates. That is how verl's hybrid engine (``actor_rollout_ref`` on one worker group), OpenRLHF
(``--colocate_all_models --vllm_enable_sleep --deepspeed_enable_sleep``) and NeMo RL's colocated mode
run. Each switch has two legs, run one after the other as those frameworks do (the engine's call
returns, then the trainer moves its state):

- **the engine** — vLLM sleep mode (https://docs.vllm.ai/en/latest/features/sleep_mode/):
  *level 1* offloads the model weights to CPU memory and discards the KV cache; waking copies the
  weights back over the host link and re-allocates the KV cache. *Level 2* discards both; waking
  re-allocates them and the weights are refilled from the trainer — which the weight sync that follows
  each update moves anyway (:mod:`oppo_sim.hw.costs.sync`), so level 2 moves no bytes here. vLLM recommends
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
  and the contiguous gradient buffer). Activations are freed, not moved. verl's offload switches are
  off by default: such a job (``SimConfig.offload_train_state=False``, ``--no-offload-train-state``) keeps
  the trainer's state and the frozen weights on the GPUs in both phases, so nothing of theirs is in the
  ``other`` phase alone (only activations, freed), this leg moves nothing and is not charged at all (no
  offload call), and a switch is the engine's leg alone.

Cost, per device: each leg is a copy between device and host memory at the rate *measured* for the
mechanism that makes it (:class:`HostCopy`, one rate per direction, plus a fixed cost per leg), not the
link's datasheet figure::

    sleep = engine_bytes / engine.to_host + state_bytes / state.from_host   (+ fixed_s per leg that moves)
    wake  = engine_bytes / engine.from_host + state_bytes / state.to_host
    engine_bytes = generation weights per device (W / tp) at level 1, 0 at level 2
    state_bytes  = sum over the other phase's roles of weights + gradients + Adam, per device

The rates (:data:`PINNED_COPY`, :data:`MEMORY_SAVER_COPY`) are from one measurement on a PCIe Gen4 x16
card (NVIDIA L20, fzyzcjy/torch_memory_saver#111): a plain pinned ``Tensor.copy_`` moves 24.43 GiB/s to
the host and 23.54 GiB/s back — 0.82 and 0.79 of the link's 32 GB/s each way, the fractions kept here, so a
PCIe Gen5 GPU copies twice as fast — while torch_memory_saver's CPU backup (what SGLang's
``release_memory_occupation`` and slime use) moves 2.41 GiB/s on ``pause()`` and 5.32 GiB/s on ``resume()``,
bound by the library's copy path rather than the link (absolute rates, capped by the pinned ones).
vLLM's sleep mode backs weights up with a pinned copy (``CuMemAllocator``: ``pin_memory`` CPU tensors,
``copy_``) and DeepSpeed's ``offload_states`` pins its buffers: both are :data:`PINNED_COPY`, the default
for both legs (verl's FSDP offload copies with ``.to("cpu", non_blocking=True)``, which PyTorch's ``_to_copy``
lands in freshly pinned memory; NeMo RL's ``move_optimizer`` copies its optimizer state with a blocking
``.to("cpu")`` into fresh pageable memory and ``.to("cuda")`` back: :data:`PAGEABLE_COPY`, measured on an H200,
far slower to the host — ``SimConfig.optimizer_move`` = ``pageable`` prices the Adam part of the state leg so, and
:func:`sleep_wake`'s ``optimizer_copy`` carries it). Going to sleep and waking are priced separately; a step pays both
(``step_s``), and :attr:`SleepWake.switch_s` is their mean, what a driver charging two equal switches uses.
Nothing is charged where nothing takes turns: a pool that only generates, ``colocate="resident"``, or a
policy under which generation and training run at the same time (``async``: the memory plan keeps
everything resident there).
"""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.devices.hardware import GiB, Hardware
from oppo_sim.hw.memory.pool_memory import GENERATE, OTHER, PoolMemory

__all__ = ["SLEEP_LEVELS", "DEFAULT_SLEEP_LEVEL", "check_sleep_level", "HostCopy", "PINNED_COPY", "MEMORY_SAVER_COPY",
           "PAGEABLE_COPY", "OPTIMIZER_MOVES", "SWITCH_FIXED_S", "SleepWake", "sleep_wake", "swap_seconds"]

SLEEP_LEVELS: tuple[int, ...] = (1, 2)
DEFAULT_SLEEP_LEVEL = 1
"""verl's ``VLLM_SLEEP_LEVEL`` (and OpenRLHF's default sleep level)."""


def check_sleep_level(level: object) -> int:
    """``level`` if it is a vLLM sleep level (1 or 2), else ``ConfigError`` (one line)."""
    if isinstance(level, bool) or level not in SLEEP_LEVELS:
        raise ConfigError(f"sleep_level must be 1 (weights to host, KV freed) or 2 (weights and KV freed), got {level!r}")
    return int(level)  # type: ignore[arg-type]


SWITCH_FIXED_S = 0.05
"""Fixed seconds per leg that moves bytes: the framework's calls around the copy (a Ray round trip, ``gc``
and ``empty_cache``, unmapping or mapping the memory — "a few ms per GiB" with the backup off,
torch_memory_saver#111). An order of magnitude, not a measurement."""


@dataclass(frozen=True)
class HostCopy:
    """How fast a mechanism copies between device and host memory, each direction: a fraction of the GPU's
    one-direction ``host_bw`` (``*_fraction``) or an absolute rate in bytes/s (``*_bps``, capped by the
    pinned copy's), and a fixed cost per leg. ``source`` says where the numbers come from."""

    name: str
    source: str
    to_host_fraction: float | None = None
    from_host_fraction: float | None = None
    to_host_bps: float | None = None
    from_host_bps: float | None = None
    fixed_s: float = SWITCH_FIXED_S

    def __post_init__(self) -> None:
        for d in ("to_host", "from_host"):
            frac, bps = getattr(self, f"{d}_fraction"), getattr(self, f"{d}_bps")
            if (frac is None) == (bps is None):
                raise ConfigError(f"host copy '{self.name}': give exactly one of {d}_fraction and {d}_bps")
            if frac is not None and not 0 < frac <= 1 or bps is not None and not bps > 0:
                raise ConfigError(f"host copy '{self.name}': {d} rate must be a fraction in (0, 1] or bytes/s > 0")
        if not self.fixed_s >= 0:
            raise ConfigError(f"host copy '{self.name}': fixed_s must be >= 0, got {self.fixed_s!r}")

    def rate(self, direction: str, host_bw: float) -> float:
        """Bytes/s of this copy ``to_host`` or ``from_host`` over a link of ``host_bw`` bytes/s each way."""
        frac, bps = getattr(self, f"{direction}_fraction"), getattr(self, f"{direction}_bps")
        pinned = getattr(PINNED_COPY, f"{direction}_fraction") * host_bw
        return frac * host_bw if frac is not None else min(bps, pinned)

    def leg(self, nbytes: float, direction: str, host_bw: float) -> float:
        """Seconds of one copy of ``nbytes`` ``to_host`` or ``from_host``: the fixed cost and the bytes at :meth:`rate`
        (0 where nothing moves)."""
        return self.fixed_s + nbytes / self.rate(direction, host_bw) if nbytes > 0 else 0.0


PINNED_COPY = HostCopy(
    "pinned copy", "a plain pinned Tensor.copy_ of 4 GiB on an L20 (PCIe Gen4 x16): 24.43 GiB/s to the host, 23.54 "
    "GiB/s back (fzyzcjy/torch_memory_saver#111), 0.82 and 0.79 of 32 GB/s",
    to_host_fraction=24.43 * GiB / 32e9, from_host_fraction=23.54 * GiB / 32e9)
"""vLLM sleep mode's CPU backup of the weights and DeepSpeed ``offload_states``: a pinned copy."""

MEMORY_SAVER_COPY = HostCopy(
    "torch_memory_saver CPU backup", "pause() 2.41 GiB/s, resume() 5.32 GiB/s on the same L20 "
    "(fzyzcjy/torch_memory_saver#111)", to_host_bps=2.41 * GiB, from_host_bps=5.32 * GiB)
"""SGLang's ``release_memory_occupation`` / ``resume_memory_occupation`` with the CPU backup on."""

PAGEABLE_COPY = HostCopy(
    "pageable .to()", "a blocking Tensor.to('cpu') per tensor into fresh pageable memory and .to('cuda') back, 7.4 GiB "
    "of fp32 trainer state in 1,160 tensors, three times each way on an NVIDIA H200 (PCIe Gen5 x16, x86 host), "
    "2026-11-27: 1.33 GiB/s to the host (1.25-1.80), 6.34 GiB/s back (6.1-6.8) against 49.8 / 41.9 GiB/s pinned "
    "(paper_figs/out/gpu_h200/gpu_moves*.csv, oppo-real profile --moves sleepwake)",
    to_host_bps=1.33 * GiB, from_host_bps=6.34 * GiB, fixed_s=0.0)
"""NeMo RL's ``move_optimizer``: every optimizer tensor to fresh pageable host memory and back, each step its
policy sleeps (its Megatron worker's ``offload_before_refit`` / ``prepare_for_training``). One process on one host
measured, at one size (the fixed cost is in the rate); eight GPUs' processes copying at once on a node are assumed
not to slow each other (their page faults run on their own cores)."""

OPTIMIZER_MOVES: dict[str, HostCopy] = {"pinned": PINNED_COPY, "pageable": PAGEABLE_COPY}
"""``SimConfig.optimizer_move`` -> how the trainer's optimizer state crosses the host link."""


@dataclass(frozen=True)
class SleepWake:
    """The switches of one pool whose generation engine sleeps: bytes per device of each leg, the GPU's host
    link and the copy mechanism of each leg. ``sleep_s`` / ``wake_s`` are the two switches, ``step_s``
    their sum (a step makes both), ``switch_s`` their mean."""

    pool: str
    level: int
    engine_bytes: float  # the engine's weights per device, each way (0 at level 2)
    state_bytes: float  # the other phase's weights + gradients + Adam per device, each way
    host_bw: float  # bytes/s per GPU, one direction
    engine_copy: HostCopy = PINNED_COPY
    state_copy: HostCopy = PINNED_COPY
    optimizer_bytes: float = 0.0  # the Adam part of state_bytes, moved by optimizer_copy
    optimizer_copy: HostCopy = PINNED_COPY

    def _leg(self, nbytes: float, copy: HostCopy, direction: str) -> float:
        return copy.leg(nbytes, direction, self.host_bw)

    @property
    def optimizer_apart(self) -> bool:
        """The optimizer state moves by a copy of its own (not as the rest of the state)."""
        return self.optimizer_copy != self.state_copy and self.optimizer_bytes > 0

    def _state(self, direction: str) -> float:
        """The state leg: the optimizer's bytes at their own copy's rate where it differs, the rest at the state's."""
        if not self.optimizer_apart:
            return self._leg(self.state_bytes, self.state_copy, direction)
        rest = max(self.state_bytes - self.optimizer_bytes, 0.0)
        return self._leg(rest, self.state_copy, direction) + self._leg(self.optimizer_bytes, self.optimizer_copy, direction)

    def legs(self) -> dict[str, float]:
        """Seconds of each leg of a step (they add up to :attr:`step_s`); a leg that moves nothing costs 0."""
        level2 = self.level == 2  # the engine's call still runs (its fixed cost), moving no bytes
        engine_sleep = self._leg(self.engine_bytes, self.engine_copy, "to_host") or (self.engine_copy.fixed_s if level2 else 0.0)
        engine_wake = self._leg(self.engine_bytes, self.engine_copy, "from_host") or (self.engine_copy.fixed_s if level2 else 0.0)
        return {"sleep_engine": engine_sleep, "sleep_state": self._state("from_host"),
                "wake_engine": engine_wake, "wake_state": self._state("to_host")}

    @property
    def optimizer_s(self) -> float:
        """Seconds a step of the optimizer state's own copies, both ways (0 where it moves as the rest of the state)."""
        if not self.optimizer_apart:
            return 0.0
        return sum(self._leg(self.optimizer_bytes, self.optimizer_copy, d) for d in ("to_host", "from_host"))

    @property
    def sleep_s(self) -> float:
        legs = self.legs()
        return legs["sleep_engine"] + legs["sleep_state"]

    @property
    def wake_s(self) -> float:
        legs = self.legs()
        return legs["wake_engine"] + legs["wake_state"]

    @property
    def step_s(self) -> float:
        """Sleep after generation plus wake before the next generation."""
        return self.sleep_s + self.wake_s

    @property
    def switch_s(self) -> float:
        """The mean of the two switches (a driver that charges two equal switches charges ``step_s``)."""
        return self.step_s / 2.0

    def describe(self) -> str:
        return (f"pool '{self.pool}' sleeps (vLLM level {self.level}): {self.engine_bytes / GiB:.1f} GiB engine weights + "
                f"{self.state_bytes / GiB:.1f} GiB other-phase state per GPU each way ({self.engine_copy.name}"
                + (f"; its {self.optimizer_bytes / GiB:.1f} GiB optimizer state by {self.optimizer_copy.name}"
                   if self.optimizer_apart else "")
                + f", host link {self.host_bw / 1e9:.0f} GB/s), {self.step_s:.2f} s a step")


def sleep_wake(pool: PoolMemory, hw: Hardware, level: int, engine_copy: HostCopy = PINNED_COPY,
               optimizer_copy: HostCopy = PINNED_COPY) -> SleepWake | None:
    """The switches of ``pool`` under the memory plan's phases, or None where nothing takes turns (no role
    held only while generating): the one rule of what sleep and wake charge. ``engine_copy``: how the
    engine backs its weights up (vLLM's pinned copy; :data:`MEMORY_SAVER_COPY` for torch_memory_saver);
    ``optimizer_copy``: how the trainer's optimizer state moves (:data:`OPTIMIZER_MOVES`)."""
    level = check_sleep_level(level)
    engine = [r for r in pool.roles if r.phase == GENERATE]
    if not engine:
        return None
    return SleepWake(
        pool.pool, level,
        engine_bytes=sum(r.weights for r in engine) if level == 1 else 0.0,
        state_bytes=sum(r.weights + r.grads + r.optimizer for r in pool.roles if r.phase == OTHER),
        host_bw=hw.gpu.host_bw, engine_copy=engine_copy,
        optimizer_bytes=sum(r.optimizer for r in pool.roles if r.phase == OTHER), optimizer_copy=optimizer_copy,
    )


def swap_seconds(nbytes: float, host_bw: float, copy: HostCopy = PINNED_COPY) -> float:
    """Seconds of one swap of a frozen model held on the host with the policy's weights of the same size
    (``nbytes`` a device): NeMo RL's ``use_reference_model`` copies the policy's weights to the host, loads the
    reference's from pinned host memory, runs the pass, and copies the policy's back — one copy to the host and
    two from it, each a leg at ``copy``'s rate with its fixed cost (the policy's copy is a non-blocking
    ``.to("cpu")``, which PyTorch lands in freshly pinned memory). 0 where nothing moves."""
    return copy.leg(nbytes, "to_host", host_bw) + 2.0 * copy.leg(nbytes, "from_host", host_bw)
