"""Where each role of a real run computes: ``cpu`` or a CUDA device, per role.

``--device cuda`` puts every role on ``cuda:0``; a per-role map such as ``gen=cuda:0,score=cuda:1,train=cuda:0``
places them one by one (every role must be named, so a map never places a role by accident). On a GPU the roles run in bf16 (training keeps fp32 master weights and runs
its forwards under bf16 autocast); on the CPU in fp32.

Under Ray the workers ask for GPUs as Ray resources the way OpenRLHF and verl place their actors: one
placement-group bundle per physical GPU, and each role on a GPU takes ``1 / (roles sharing it)`` of it
(:func:`ray_gpu_plan`). Ray then shows a worker only its GPU, as ``cuda:0`` (:func:`worker_device`).

Everything here is pure parsing and arithmetic except :func:`check_available` and :func:`device_memory`,
which ask torch about the machine (and never allocate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError

ROLES: tuple[str, ...] = ("gen", "score", "train")
"""The three role workers: actor generation, frozen scorers (reward, reference), the PPO trainer (with
the critic and the actor's log-probs)."""

_DEVICE_RE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


def normalize_device(text: str) -> str:
    """``cpu``, ``cuda`` (= ``cuda:0``) or ``cuda:N``; anything else is a one-line ``ConfigError``."""
    t = str(text).strip().lower()
    m = _DEVICE_RE.match(t)
    if not m:
        raise ConfigError(f"unknown device {text!r}: expected cpu, cuda or cuda:N")
    kind, idx = m.group(1), m.group(2)
    if kind == "cpu":
        if idx is not None:
            raise ConfigError(f"unknown device {text!r}: the CPU takes no index (cpu)")
        return "cpu"
    return f"cuda:{int(idx or 0)}"


@dataclass(frozen=True)
class DeviceMap:
    """The device of each role worker (normalized: ``cpu`` or ``cuda:N``)."""

    gen: str = "cpu"
    score: str = "cpu"
    train: str = "cpu"

    def __post_init__(self) -> None:
        for role in ROLES:
            object.__setattr__(self, role, normalize_device(getattr(self, role)))

    @classmethod
    def parse(cls, text: str | None) -> "DeviceMap":
        """``cpu`` / ``cuda`` / ``cuda:N`` for every role, or ``role=device,...`` naming each role once."""
        t = (text or "cpu").strip()
        if "=" not in t:
            d = normalize_device(t)
            return cls(d, d, d)
        out: dict[str, str] = {}
        for part in t.split(","):
            role, eq, dev = part.partition("=")
            role = role.strip().lower()
            if not eq or not role or not dev.strip():
                raise ConfigError(f"device map {text!r}: expected role=device pairs such as gen=cuda:0,score=cuda:1,train=cuda:0")
            if role not in ROLES:
                raise ConfigError(f"device map {text!r}: unknown role {role!r}; roles: {', '.join(ROLES)}")
            if role in out:
                raise ConfigError(f"device map {text!r}: role {role!r} is given twice")
            out[role] = normalize_device(dev)
        missing = [r for r in ROLES if r not in out]
        if missing:
            raise ConfigError(f"device map {text!r}: no device for {', '.join(missing)} (name every role: {', '.join(ROLES)})")
        return cls(**out)

    def of(self, role: str) -> str:
        if role not in ROLES:
            raise ConfigError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
        return getattr(self, role)

    def describe(self) -> str:
        devs = {self.of(r) for r in ROLES}
        if len(devs) == 1:
            return next(iter(devs))
        return ",".join(f"{r}={self.of(r)}" for r in ROLES)

    # ---- derived -----------------------------------------------------------------------------------
    @property
    def uses_cuda(self) -> bool:
        return any(self.of(r).startswith("cuda") for r in ROLES)

    def is_cuda(self, role: str) -> bool:
        return self.of(role).startswith("cuda")

    def dtype(self, role: str) -> str:
        """The compute dtype of ``role``'s models: bf16 on a GPU, fp32 on the CPU."""
        return "bfloat16" if self.is_cuda(role) else "float32"

    def dtype_bytes(self, role: str) -> int:
        return 2 if self.is_cuda(role) else 4

    def shared(self, a: str, b: str) -> bool:
        """Whether roles ``a`` and ``b`` run on the same GPU (the CPU is not counted as shared memory)."""
        return self.is_cuda(a) and self.of(a) == self.of(b)

    def cuda_devices(self) -> tuple[str, ...]:
        """The distinct GPUs used, in role order."""
        return tuple(dict.fromkeys(self.of(r) for r in ROLES if self.is_cuda(r)))

    def roles_on(self, device: str) -> tuple[str, ...]:
        return tuple(r for r in ROLES if self.of(r) == device)


@dataclass(frozen=True)
class RayGPUPlan:
    """Ray resources for the role workers: one bundle per GPU, and per role its GPU fraction and bundle."""

    bundles: tuple[dict, ...]  # [{"GPU": 1, "CPU": c}, ...] one per physical GPU
    num_gpus: dict  # role -> fraction of a GPU (0 on the CPU)
    bundle: dict  # role -> bundle index (None on the CPU)


def ray_gpu_plan(devices: DeviceMap, num_cpus: dict[str, float]) -> RayGPUPlan:
    """Fractional GPUs as OpenRLHF/verl colocate actors: roles on one GPU split it evenly (two roles:
    0.5 each), and each GPU is one placement-group bundle holding its roles' CPUs too."""
    gpus = devices.cuda_devices()
    bundles, frac, where = [], {}, {}
    for i, dev in enumerate(gpus):
        roles = devices.roles_on(dev)
        bundles.append({"GPU": 1.0, "CPU": float(sum(num_cpus.get(r, 1.0) for r in roles))})
        for r in roles:
            frac[r], where[r] = 1.0 / len(roles), i
    for r in ROLES:
        frac.setdefault(r, 0.0)
        where.setdefault(r, None)
    return RayGPUPlan(tuple(bundles), frac, where)


def worker_device(device: str, workers: str) -> str:
    """The device a worker opens: under Ray a GPU worker sees only its bundle's GPU, as ``cuda:0``."""
    if workers == "ray" and device.startswith("cuda"):
        return "cuda:0"
    return device


def check_available(devices: DeviceMap) -> None:
    """One-line ``ConfigError`` if a role asks for a GPU this machine does not have."""
    if not devices.uses_cuda:
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"devices {devices.describe()}: no CUDA device is visible here (torch {torch.__version__}, "
                          f"built for CUDA {torch.version.cuda or 'none'}); use --device cpu")
    n = torch.cuda.device_count()
    for dev in devices.cuda_devices():
        if int(dev.split(":")[1]) >= n:
            raise ConfigError(f"devices {devices.describe()}: {dev} does not exist, this machine has {n} GPU(s) (cuda:0..cuda:{n - 1})")


def device_memory(device: str) -> tuple[float, float, str]:
    """(free bytes, total bytes, name) of a GPU, read from the driver without allocating."""
    import torch

    idx = int(device.split(":")[1])
    free, total = torch.cuda.mem_get_info(idx)
    return float(free), float(total), torch.cuda.get_device_name(idx)


def synchronize(device: str) -> None:
    """Wait for the work queued on ``device`` (a no-op on the CPU): timings on a GPU must end here."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)
