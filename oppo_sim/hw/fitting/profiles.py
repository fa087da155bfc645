"""Hardware profiles: JSON files holding a device spec and its calibrated cost parameters
(format ``oppo-profile/2``: the units of ``oppo_sim.hw.devices.hardware``, bandwidths one direction per GPU and
memory in bytes as the device reports it; ``/1`` files predate that convention and are refused), a
nominal spec for the local CPU to calibrate against, and :func:`resolve_hardware` — the one place where a
command line's ``--gpu``/``--profile`` text becomes a :class:`Hardware` (a GPU-table id, a path to a
profile, or a path to a datasheet-only ``.yaml`` spec, :mod:`oppo_sim.hw.devices.gpu_yaml`)."""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, fields
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.userfiles import read_text
from oppo_sim.hw.devices.gpu_yaml import is_gpu_yaml, load_gpu_yaml
from oppo_sim.hw.devices.hardware import (
    GPUS,
    OP_KINDS,
    CostParams,
    GiB,
    GPUSpec,
    Hardware,
    OpParams,
    get_hardware,
)

PROFILE_FORMAT = "oppo-profile/2"
_OLD_FORMATS = ("oppo-profile/1",)  # bidirectional link_bw and 1e9-byte GB memory: refitting is the fix


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, PathLike):
        return os.fspath(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def save_profile(hw: Hardware, path: str | PathLike, meta: dict | None = None) -> None:
    """Write ``hw`` as a JSON profile: ``{"format", "gpu", "params", "host_scale", "meta"}`` (``host_scale``: what the
    x86-measured host constants its fits do not hold are stretched by, ``Hardware.host_scale``). Creates parent folders."""
    if not isinstance(hw, Hardware):
        raise ConfigError(f"save_profile needs a Hardware, got {type(hw).__name__}")
    doc = {
        "format": PROFILE_FORMAT,
        "gpu": asdict(hw.gpu),
        "params": {op: asdict(hw.params.op(op)) for op in OP_KINDS},
        "host_scale": hw.host_scale,
        **({} if hw.sync_tensor_s is None else {"sync_tensor_s": hw.sync_tensor_s}),
        "meta": dict(meta or {}),
    }
    try:
        text = json.dumps(doc, indent=2, allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"profile '{path}': meta is not JSON serialisable ({e})") from None
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n", encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"profile '{path}': cannot write ({e.strerror or e})") from None


def _section(doc: dict, key: str, where: str) -> dict:
    if key not in doc:
        raise ConfigError(f"{where}: missing field '{key}'")
    v = doc[key]
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: field '{key}' must be an object, got {type(v).__name__}")
    return v


def _build(cls: type, obj: dict, prefix: str, where: str) -> Any:
    names = [f.name for f in fields(cls)]
    for k in obj:
        if k not in names:
            raise ConfigError(f"{where}: unknown field '{prefix}.{k}'; expected {', '.join(names)}")
    kw = {}
    for f in fields(cls):
        if f.name not in obj:
            if f.default is not MISSING:  # a field added later (e.g. gpu.host_bw): older profiles keep loading
                continue
            raise ConfigError(f"{where}: missing field '{prefix}.{f.name}'")
        v = obj[f.name]
        want_str, want_bool = f.type in ("str", str), f.type in ("bool", bool)
        if want_str and not isinstance(v, str):
            raise ConfigError(f"{where}: field '{prefix}.{f.name}' must be a string, got {v!r}")
        if want_bool and not isinstance(v, bool):
            raise ConfigError(f"{where}: field '{prefix}.{f.name}' must be true or false, got {v!r}")
        if not (want_str or want_bool) and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ConfigError(f"{where}: field '{prefix}.{f.name}' must be a number, got {v!r}")
        kw[f.name] = v
    try:
        return cls(**kw)
    except ConfigError as e:
        raise ConfigError(f"{where}: field '{prefix}': {e}") from None


def read_profile(path: str | PathLike) -> tuple[Hardware, dict]:
    """Load a JSON profile: the ``Hardware`` and its ``meta`` dict. Errors name file and field."""
    where = f"profile '{path}'"
    text = read_text(path, where)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: top level must be a JSON object")
    if doc.get("format") in _OLD_FORMATS:
        raise ConfigError(f"{where}: format '{doc['format']}' predates '{PROFILE_FORMAT}' (bandwidths one direction "
                          "per GPU, memory as the device reports it): calibrate again to write it anew")
    if doc.get("format") != PROFILE_FORMAT:
        got = doc.get("format", "<missing>")
        raise ConfigError(f"{where}: field 'format' must be '{PROFILE_FORMAT}', got {got!r}")
    gpu = _build(GPUSpec, _section(doc, "gpu", where), "gpu", where)
    params_doc = _section(doc, "params", where)
    for k in params_doc:
        if k not in OP_KINDS:
            raise ConfigError(f"{where}: unknown field 'params.{k}'; expected {', '.join(OP_KINDS)}")
    ops = {}
    optional = {f.name for f in fields(CostParams) if f.default is not MISSING}  # ops added later
    for op in OP_KINDS:
        if op not in params_doc and op in optional:
            continue
        if op not in params_doc:
            raise ConfigError(f"{where}: missing field 'params.{op}'")
        if not isinstance(params_doc[op], dict):
            raise ConfigError(f"{where}: field 'params.{op}' must be an object")
        ops[op] = _build(OpParams, params_doc[op], f"params.{op}", where)
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: field 'meta' must be an object")
    scale = doc.get("host_scale", 1.0)  # profiles from before it: 1
    try:
        return Hardware(gpu, CostParams(**ops), f"calibrated profile {path}", host_scale=scale,
                        sync_tensor_s=doc.get("sync_tensor_s")), meta
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def profile_meta(hardware: str | PathLike) -> dict | None:
    """The ``meta`` of a ``--gpu``/``--profile`` argument that names a JSON profile; None for a GPU id or a
    datasheet YAML (they carry none)."""
    return read_profile(hardware)[1] if str(hardware).lower().endswith(".json") else None


def load_profile(path: str | PathLike) -> Hardware:
    """Load a JSON profile written by ``save_profile``; a bad/missing file or field -> one-line
    ``ConfigError`` naming the file and the field."""
    return read_profile(path)[0]


# --------------------------------------------------------------------------------------------------
# Nominal CPU spec


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpu_max_freq_hz() -> float | None:
    try:
        khz = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text().strip()
        return float(khz) * 1e3
    except (OSError, ValueError):
        return None


def _phys_mem_bytes() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 16.0 * GiB


def cpu_spec(
    name: str = "cpu",
    cores: int | None = None,
    *,
    freq_hz: float | None = None,
    flops_per_cycle: float = 32.0,
    mem_bw: float | None = None,
) -> GPUSpec:
    """A *nominal* spec for the local CPU, as a starting point to calibrate against.

    peak_flops = cores * flops_per_cycle (32: two AVX2 FMA units, fp32) * freq (max frequency from
    sysfs, else a 3.5 GHz guess); mem_bw = max(20 GB/s, 5 GB/s per core) unless given; mem_bytes from
    the OS; link_bw = host_bw = mem_bw (weight sync on a CPU is a memory copy, one direction). These are rough upper bounds,
    not measurements: the effective throughput (eff * peak) comes from ``fit_profile``. If a fit
    reports an efficiency at the bound 1, raise the nominal number (e.g. ``flops_per_cycle`` for
    AMX/AVX-512 bf16 machines).
    """
    n = _cpu_count() if cores is None else cores
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"cpu_spec: cores must be a positive integer, got {cores!r}")
    f = freq_hz if freq_hz is not None else (_cpu_max_freq_hz() or 3.5e9)
    f_src = "given" if freq_hz is not None else ("sysfs max" if _cpu_max_freq_hz() else "guessed")
    bw = mem_bw if mem_bw is not None else max(20e9, 5e9 * n)
    return GPUSpec(
        id=name,
        name=f"CPU ({n} cores, nominal)",
        peak_flops=float(n * flops_per_cycle * f),
        mem_bw=float(bw),
        mem_bytes=_phys_mem_bytes(),
        link_bw=float(bw),
        host_bw=float(bw),
        source=(
            f"nominal guess: {n} cores x {flops_per_cycle:g} FLOP/cycle x {f / 1e9:.2f} GHz ({f_src}), "
            f"mem_bw {bw / 1e9:.0f} GB/s {'given' if mem_bw is not None else 'guessed'}; "
            "effective values come from calibration"
        ),
    )


def resolve_hardware(gpu_or_profile: str | PathLike | Hardware) -> Hardware:
    """A GPU-table id -> its ``Hardware`` with default cost parameters; a path to a ``.json`` profile ->
    the calibrated ``Hardware`` it holds; a path to a ``.yaml``/``.yml`` datasheet spec -> that GPU with
    uncalibrated defaults (:func:`oppo_sim.hw.devices.gpu_yaml.load_gpu_yaml`); a ``Hardware`` -> itself. Command
    lines call this once, so configurations below them hold resolved specs and never read files."""
    if isinstance(gpu_or_profile, Hardware):
        return gpu_or_profile
    text = str(gpu_or_profile).strip()
    if text.lower() in GPUS:
        return get_hardware(text)
    if is_gpu_yaml(text):
        return load_gpu_yaml(text)
    if text.lower().endswith(".json") or Path(text).exists():
        return load_profile(text)
    raise ConfigError(f"unknown GPU {text!r}; known: {', '.join(GPUS)} (or pass a path to a .json profile "
                      "or a .yaml datasheet spec)")
