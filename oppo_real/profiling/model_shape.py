"""The simulator's shape (``ModelSpec``) of a local Hugging Face model directory, and the dtype a device
computes in: what every profiler needs to price a timed call with the cost model's formulas."""

from __future__ import annotations

import json
from pathlib import Path

from oppo_sim.hw.models import ModelSpec, model_from_hf_config


def model_spec(model_dir: Path, dtype_bytes: int = 4) -> ModelSpec:
    """The simulator's shape of a local HF model (the tiny models run in float32)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return model_from_hf_config(cfg, id=Path(model_dir).parent.name or "local").with_(dtype_bytes=dtype_bytes)


def compute_dtype(device: str) -> tuple[str, int]:
    """(dtype, bytes per element) a device computes in: bf16 on a GPU, fp32 on the CPU."""
    return ("bfloat16", 2) if device.startswith("cuda") else ("float32", 4)
