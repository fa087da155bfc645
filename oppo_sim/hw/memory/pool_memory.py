"""Who holds what on a pool's devices, and when: roles, phases, the engine's and the trainer's shares of a
device, and the one-line refusal when they do not fit. Both sides check fits with it: the simulator's memory
plan (:mod:`oppo_sim.pipeline.memory_plan`) and ``oppo-real``'s fit check (``oppo_real.devices.memory_fit``).

**Pools and phases.** Every number is bytes per device (capacities as the device reports them, see
``oppo_sim.hw.devices.hardware``); every printed figure and every summary number is in GiB (``GiB`` = 2**30 B). Roles
are resident ``always`` or only in a phase: where generation shares GPUs with other roles and the engine sleeps
(``colocate="sleep"``), generation (``generate`` phase) and everything else (``other`` phase) take turns.

**Two shares of a device.** The generation engine's is vLLM's ``gpu_memory_utilization``
(``PoolMemory.utilization``): vLLM sizes its KV cache to fill ``mem_bytes × utilization`` after its weights and
what its memory profiling takes (:mod:`oppo_sim.hw.memory.engine_memory`) — memory other processes hold on the device
is not inside it. Every other role is capped by the trainer's share (``train_utilization``; the rest is the
CUDA context, NCCL buffers and allocator fragmentation): in verl, OpenRLHF and NeMo RL the trainer has the GPU
while the engine sleeps, and the engine's fraction does not cap it. Where the engine and other roles are
resident at once (the trainer's state kept on the GPU while vLLM generates — verl's default
``param_offload=False`` —, or everything resident: ``async`` on a shared pool) the engine's whole share and what
the others hold must fit the trainer's share of the device together (vLLM at 0.5 beside a trainer leaves it
0.4 of the device at a 0.9 cap). ``oppo-real`` states its engine's bytes (an explicit KV budget) and gives one
cap to everything (``train_utilization=None``, ``engine_sized=False``).

Headroom = usable − what a phase holds, the engine's KV cache counted as headroom: memory no phase commits to
weights, states or activations.

**Policies.** A policy that generates while an earlier step is scored and trained (``async``) cannot take
turns: on a shared generation pool :func:`colocate_for` keeps everything resident whatever ``colocate`` says,
and :func:`resident_refusal` is the one line both sides print when that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.devices.hardware import GiB
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig

ALWAYS, GENERATE, OTHER = "always", "generate", "other"
COLOCATE_MODES: tuple[str, ...] = ("sleep", "resident")  # what shares a generation pool does while it generates
ENGINE_ROLE = "generate"


def colocate_for(colocate: str, shared: bool, trains_while_generating: bool) -> str:
    """The colocation a policy runs: ``resident`` where it generates while an earlier step trains
    (``Policy.trains_while_generating``) and generation shares its devices with other roles — they cannot take
    turns —, else ``colocate``."""
    return "resident" if colocate == "sleep" and shared and trains_while_generating else colocate


def resident_refusal(policy: str, pool: str, err: str, way_out: str) -> str:
    """The one line a policy that generates beside training gets where its shared pool cannot hold everything
    at once (``err``: the pool's own line, starting "does not fit")."""
    return (f"{policy} generates while the previous step trains, so pool '{pool}' must hold the engine and every "
            f"other role at once (no sleep), and it {err}; {way_out}")


@dataclass(frozen=True)
class RoleMemory:
    """What one role holds on each device of its pool, bytes, and when (``phase``)."""

    role: str  # "generate", "train", "reward", "reference", "critic", "logprob"
    label: str  # e.g. "actor qwen2.5-7b + critic qwen2.5-7b"
    phase: str = ALWAYS
    weights: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    note: str = ""  # e.g. "ZeRO-2 over 7 devices, recompute none"

    def __post_init__(self) -> None:
        if self.phase not in (ALWAYS, GENERATE, OTHER):
            raise ConfigError(f"role {self.role}: phase must be always, generate or other, got {self.phase!r}")

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations

    def describe(self) -> str:
        parts = [("weights", self.weights), ("grads", self.grads), ("Adam", self.optimizer), ("activations", self.activations)]
        shown = [f"{name} {v / GiB:.1f}" for name, v in parts if v > 0]
        head = f"{self.role} ({self.label}{', ' + self.note if self.note else ''}) {self.total / GiB:.1f} GiB"
        return head + (f" [{' + '.join(shown)}]" if len(shown) > 1 else "")


@dataclass(frozen=True)
class PoolMemory:
    """One pool's budget per device: the two shares, the roles on it, and the KV cache one longest sequence
    needs on a generation replica (``kv_min``; 0 where nothing generates). ``engine_sized``: the engine fills
    its share (vLLM's fraction) with its KV cache; else its roles' bytes are all it holds."""

    pool: str
    gpu: str
    devices: int
    mem_bytes: float
    utilization: float
    roles: tuple[RoleMemory, ...]
    generates: bool = False
    kv_min: float = 0.0
    seq_tokens: int = 0
    train_utilization: float | None = None  # the share every role but the engine may use (None: ``utilization``)
    engine_sized: bool = False

    @property
    def capacity(self) -> float:
        """The engine's share per device (``gpu_memory_utilization``, vLLM's); with ``engine_sized`` off, the cap."""
        return self.mem_bytes * self.utilization

    def _cap(self) -> float:
        return self.capacity if self.train_utilization is None else self.mem_bytes * self.train_utilization

    def _engine_in(self, phase: str) -> bool:
        return self.engine_sized and any(r.role == ENGINE_ROLE for r in self.held(phase))

    def others(self, phase: str) -> tuple[RoleMemory, ...]:
        """The roles other than a share-sized engine held during ``phase``."""
        return tuple(r for r in self.held(phase) if not (self.engine_sized and r.role == ENGINE_ROLE))

    def capacity_of(self, phase: str) -> float:
        """Usable bytes per device in ``phase``: the engine's share where it is alone (or, unsized, while it
        generates here), the trainer's share of the device for everything else, the engine's share included."""
        if self._engine_in(phase):
            return self._cap() if self.others(phase) else self.capacity
        unsized_engine = self.generates and phase == GENERATE
        return self.capacity if unsized_engine else self._cap()

    def need(self, phase: str) -> float:
        """Bytes per device ``phase`` takes: a share-sized engine's whole share (its KV cache fills it) and what
        the other roles hold."""
        if self._engine_in(phase):
            return self.capacity + sum(r.total for r in self.others(phase))
        return self.committed(phase)

    def by_role(self) -> dict[str, float]:
        """GiB per device of each role (a role held in parts — the trainer's state always, its activations
        only while training — summed)."""
        out: dict[str, float] = {}
        for r in self.roles:
            out[r.role] = out.get(r.role, 0.0) + r.total / GiB
        return out

    def held(self, phase: str) -> tuple[RoleMemory, ...]:
        """Roles on the devices during ``phase`` (``generate`` or ``other``), largest first."""
        return tuple(sorted((r for r in self.roles if r.phase in (ALWAYS, phase)), key=lambda r: -r.total))

    def committed(self, phase: str) -> float:
        return sum(r.total for r in self.held(phase))

    @property
    def peak(self) -> float:
        return max(self.need(GENERATE), self.need(OTHER))

    @property
    def headroom(self) -> float:
        """Usable bytes no phase commits to weights, states or activations (the KV cache counted free)."""
        kv = self.kv_cache or 0.0
        return min(self.capacity_of(ph) - self.need(ph) + (kv if self._engine_in(ph) else 0.0) for ph in (GENERATE, OTHER))

    @property
    def kv_cache(self) -> float | None:
        """Bytes per device the generation engine gets for its KV cache (None: no generation here)."""
        if not self.generates:
            return None
        if self.engine_sized:
            return self.capacity - sum(r.total for r in self.roles if r.role == ENGINE_ROLE)
        return self.capacity - self.committed(GENERATE)

    def _usable(self, phase: str) -> str:
        cap = self.capacity_of(phase)
        return (f"{cap / GiB:.1f} GiB usable per device ({self.devices} x {self.gpu}, "
                f"{self.mem_bytes / GiB:.1f} GiB x {cap / self.mem_bytes:g})")

    def error(self) -> str | None:
        """One line if the pool cannot hold its roles, else None."""
        for phase in (OTHER, GENERATE):
            need = self.need(phase)
            if need <= self.capacity_of(phase) * (1 + 1e-12):
                continue
            if self._engine_in(phase):
                rest = " and ".join(r.describe() for r in self.others(phase))
                return (f"does not fit: the engine's share (gpu_memory_utilization {self.utilization:g}, "
                        f"{self.capacity / GiB:.1f} GiB per {self.gpu}) beside {rest}, pool '{self.pool}' needs "
                        f"{need / GiB:.1f} GiB > {self._usable(phase)}")
            first, *rest = self.held(phase)
            with_ = f"; with {' and '.join(r.describe() for r in rest)}" if rest else ""
            return (f"does not fit: {first.describe()} per {self.gpu}{with_}, pool '{self.pool}' needs "
                    f"{need / GiB:.1f} GiB > {self._usable(phase)}")
        kv = self.kv_cache
        if kv is not None and kv < self.kv_min:
            held = (sum(r.total for r in self.roles if r.role == ENGINE_ROLE) if self.engine_sized
                    else self.committed(GENERATE))
            return (f"does not fit: generate leaves {max(kv, 0.0) / GiB:.2f} GiB per {self.gpu} for the KV cache in pool "
                    f"'{self.pool}', less than one {self.seq_tokens:,}-token sequence needs ({self.kv_min / GiB:.2f} GiB); "
                    f"{held / GiB:.1f} GiB held by the engine of its {self.capacity / GiB:.1f} GiB "
                    f"(gpu_memory_utilization {self.utilization:g})")
        return None


@dataclass(frozen=True)
class MemoryReport:
    """Memory per pool for one resolved training setup."""

    pools: tuple[PoolMemory, ...]
    train: TrainMemoryConfig
    seq_tokens: int
    colocate: str

    def pool(self, name: str) -> PoolMemory:
        for p in self.pools:
            if p.pool == name:
                return p
        raise ConfigError(f"no pool '{name}' in the memory report; pools: {', '.join(p.pool for p in self.pools)}")

    def error(self) -> str | None:
        return next((e for e in (p.error() for p in self.pools) if e is not None), None)

    def check(self) -> "MemoryReport":
        """Itself if every pool fits, else ``ConfigError`` with the first problem (one line)."""
        err = self.error()
        if err is not None:
            raise ConfigError(err)
        return self

    def headroom_gib(self) -> dict[str, float]:
        return {p.pool: p.headroom / GiB for p in self.pools}

    def summary(self) -> dict:
        """Plain numbers (GiB per device) for a result summary."""
        return {
            "memory_headroom_gib": self.headroom_gib(),
            "memory_gib": {p.pool: p.by_role() for p in self.pools},
            "kv_cache_gib": {p.pool: p.kv_cache / GiB for p in self.pools if p.kv_cache is not None},
            "engine_share": {p.pool: p.utilization for p in self.pools if p.generates},  # gpu_memory_utilization run
            "zero_stage": self.train.zero_stage,
            "recompute": self.train.recompute,
            "colocate": self.colocate,
            "max_seq_tokens": self.seq_tokens,
        }
