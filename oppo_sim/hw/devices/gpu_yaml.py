"""A GPU described by its datasheet alone: ``--gpu PATH.yaml`` (or ``.yml``).

A GPU the table (:mod:`oppo_sim.hw.devices.gpu_table`) does not know can be simulated from a YAML file holding the
numbers its datasheet prints, each key naming its unit (``examples/gpus/h20.yaml`` is the table's ``h20``
entry written this way)::

    name: NVIDIA H20 96GB (HGX)          # required
    bf16_tflops: 148                     # required: dense BF16 tensor peak, no sparsity
    memory_bandwidth_gb_s: 4000          # required: device memory, GB/s (1e9 B/s)
    memory_mib: 97871                    # required, one of: memory_mib (what nvidia-smi prints) or memory_gib
    link_gb_s_per_direction: 450         # required: to the GPUs of its scale-up domain, ONE direction
    host_gb_s_per_direction: 64          # required: to host memory (PCIe 5.0 x16: 64), one direction
    network_gb_s_per_direction: 50       # required: its own NIC (400 Gb/s = 50), one direction
    nvlink_domain: 8                     # optional (8): GPUs one scale-up domain spans
    domain_spans_nodes: false            # optional (false): true where the domain reaches past a node (NVL72)
    host_op_scale: 1                     # optional (1): host time per op over an x86 server's (Grace: gpu_table)
    id: h20                              # optional (the file's name): lowercase-dashed
    source: NVIDIA HGX H20 datasheet     # optional (the file's path)
    efficiencies:                        # optional: cost parameters per op, over the defaults
      decode: {eff_memory: 0.75}         #   keys eff_compute, eff_memory, overhead_s

Vendors quote NVLink, Infinity Fabric and PCIe with both directions summed: halve them (NVLink 4
"900 GB/s" is 450 each way). A datasheet's "96 GB" of HBM is neither GiB nor what the device reports;
``memory_mib`` from ``nvidia-smi --query-gpu=memory.total`` is what the memory model wants.

Such a GPU runs with :data:`~oppo_sim.hw.devices.hardware.DEFAULT_COST_PARAMS` — efficiencies no measurement
has set, their host overheads stretched by ``host_op_scale`` — unless ``efficiencies`` gives some (an
``overhead_s`` given is its host's own); ``Hardware.params_source`` says which, and the headers of
``oppo-sim run``/``compare``/``plan`` print it. An unknown key, a missing one or a bad value is a
one-line ``ConfigError`` naming the file and the key.
"""

from __future__ import annotations

import re
from dataclasses import asdict, replace
from decimal import Decimal
from os import PathLike
from pathlib import Path
from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.userfiles import read_yaml_mapping
from oppo_sim.hw.devices.gpu_table import GPUSpec, MiB
from oppo_sim.hw.devices.hardware import DEFAULT_COST_PARAMS, OP_KINDS, UNCALIBRATED, CostParams, GiB, Hardware, datasheet_hardware

YAML_SUFFIXES: tuple[str, ...] = (".yaml", ".yml")

_SCALED = {  # YAML key -> (GPUSpec field, factor to bytes/s or FLOP/s)
    "bf16_tflops": ("peak_flops", 10**12),
    "memory_bandwidth_gb_s": ("mem_bw", 10**9),
    "link_gb_s_per_direction": ("link_bw", 10**9),
    "host_gb_s_per_direction": ("host_bw", 10**9),
    "network_gb_s_per_direction": ("net_bw", 10**9),
}
_MEMORY = {"memory_mib": MiB, "memory_gib": GiB}
_OPTIONAL = ("id", "source", "nvlink_domain", "domain_spans_nodes", "host_op_scale", "efficiencies")
KEYS: tuple[str, ...] = ("name", *_SCALED, *_MEMORY, *_OPTIONAL)
"""Every key a GPU YAML may hold."""
_OP_KEYS = ("eff_compute", "eff_memory", "overhead_s")


def is_gpu_yaml(text: str | PathLike) -> bool:
    """Whether a ``--gpu`` value names a datasheet YAML (by its suffix)."""
    return str(text).strip().lower().endswith(YAML_SUFFIXES)


def _number(where: str, key: str, v: Any, positive: bool = True) -> float:
    if isinstance(v, str):  # YAML 1.1 reads an exponent without a dot (1e3) as a string: a number all the same
        try:
            v = float(v)
        except ValueError:
            pass
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{where}: '{key}' must be a number, got {v!r}")
    if not (v == v and abs(v) != float("inf")) or (v <= 0 if positive else v < 0):
        kind = "positive" if positive else "non-negative"
        raise ConfigError(f"{where}: '{key}' must be a {kind} finite number, got {v!r}")
    return v


def _scaled(v: float, factor: int) -> float:
    """``v * factor`` as the decimal the file wrote (1307.4 TFLOPS -> exactly the float 1307.4e12)."""
    return float(Decimal(repr(v)) * factor)


def _default_id(path: Path) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", path.stem.lower()).strip("-.") or "gpu"


def _spec(doc: dict, path: Path, where: str) -> GPUSpec:
    missing = [k for k in ("name", *_SCALED) if k not in doc]
    if missing:
        raise ConfigError(f"{where}: missing key '{missing[0]}'")
    mem = [k for k in _MEMORY if k in doc]
    if len(mem) != 1:
        raise ConfigError(f"{where}: {'give one of' if not mem else 'give only one of'} 'memory_mib', 'memory_gib'")
    kw: dict[str, Any] = {f: _scaled(_number(where, k, doc[k]), factor) for k, (f, factor) in _SCALED.items()}
    m = _number(where, mem[0], doc[mem[0]])
    kw["mem_bytes"] = int(m) * _MEMORY[mem[0]] if float(m).is_integer() else _scaled(m, _MEMORY[mem[0]])
    for key in ("name", "id", "source"):
        if key in doc and (not isinstance(doc[key], str) or not doc[key].strip()):
            raise ConfigError(f"{where}: '{key}' must be a non-empty string, got {doc[key]!r}")
    d = doc.get("nvlink_domain", 8)
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ConfigError(f"{where}: 'nvlink_domain' must be an integer >= 1, got {d!r}")
    spans = doc.get("domain_spans_nodes", False)
    if not isinstance(spans, bool):
        raise ConfigError(f"{where}: 'domain_spans_nodes' must be true or false, got {spans!r}")
    host = _number(where, "host_op_scale", doc.get("host_op_scale", 1), positive=True)
    try:
        return GPUSpec(id=doc.get("id", _default_id(path)), name=doc["name"],
                       source=doc.get("source", f"datasheet spec {path}"), nvlink_domain=d, domain_spans_nodes=spans,
                       host_op_scale=host, **kw)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _params(doc: dict, where: str) -> tuple[CostParams, tuple[str, ...]]:
    eff = doc.get("efficiencies", {})
    if not isinstance(eff, dict):
        raise ConfigError(f"{where}: 'efficiencies' must be a mapping of op -> {{{', '.join(_OP_KEYS)}}}")
    params, given = DEFAULT_COST_PARAMS, []
    for op, values in eff.items():
        if op not in OP_KINDS:
            raise ConfigError(f"{where}: unknown key 'efficiencies.{op}'; known: {', '.join(OP_KINDS)}")
        if not isinstance(values, dict) or not values:
            raise ConfigError(f"{where}: 'efficiencies.{op}' must be a mapping with some of {', '.join(_OP_KEYS)}")
        for k, v in values.items():
            if k not in _OP_KEYS:
                raise ConfigError(f"{where}: unknown key 'efficiencies.{op}.{k}'; known: {', '.join(_OP_KEYS)}")
            _number(where, f"efficiencies.{op}.{k}", v, positive=k != "overhead_s")
        try:
            params = replace(params, **{op: replace(params.op(op), **values)})
        except ConfigError as e:
            raise ConfigError(f"{where}: 'efficiencies.{op}': {e}") from None
        given.append(op)
    return params, tuple(given)


def _read(path: Path, where: str) -> dict:
    doc = read_yaml_mapping(path, where, f"{', '.join(KEYS[:4])}, ...")
    unknown = [k for k in doc if k not in KEYS]
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}'; known: {', '.join(KEYS)}")
    return doc


def load_gpu_yaml(path: str | PathLike) -> Hardware:
    """The ``Hardware`` a datasheet YAML describes (see the module docstring), with the default cost
    parameters unless ``efficiencies`` gives some, and its ``params_source`` saying which."""
    p = Path(path)
    where = f"GPU spec '{path}'"
    doc = _read(p, where)
    gpu = _spec(doc, p, where)
    params, given = _params(doc, where)
    source = f"{UNCALIBRATED}, datasheet spec {path}"
    if given:
        source = f"datasheet spec {path} with its own efficiencies for {', '.join(given)}, {UNCALIBRATED} otherwise"
    own = tuple(op for op in given if "overhead_s" in doc["efficiencies"][op])  # its host's own fixed cost
    return datasheet_hardware(gpu, params, source, own)


def gpu_yaml_dict(gpu: GPUSpec) -> dict:
    """The keys of a GPU YAML that describe ``gpu`` (what ``load_gpu_yaml`` reads back into an equal spec)."""
    d = asdict(gpu)
    mib = d["mem_bytes"] / MiB
    out = {"id": d["id"], "name": d["name"], "source": d["source"]}
    out.update({k: d[f] / factor for k, (f, factor) in _SCALED.items()})
    out.update({"memory_mib": int(mib) if float(mib).is_integer() else mib,
                "nvlink_domain": d["nvlink_domain"], "domain_spans_nodes": d["domain_spans_nodes"],
                "host_op_scale": d["host_op_scale"]})
    return out


__all__ = ["KEYS", "YAML_SUFFIXES", "gpu_yaml_dict", "is_gpu_yaml", "load_gpu_yaml"]
