"""Models by name: a table id, or a Hugging Face ``config.json`` — dense, mixture-of-experts or MLA.

``get_model(arg)`` is what ``--actor``, ``--reward`` and ``SimConfig.actor/reward/critic`` go through:
``arg`` is an id of the table (:mod:`oppo_sim.hw.models.model_table`, case-insensitive), a path to a model's
``config.json``, or a directory holding one (:mod:`oppo_sim.hw.models.hf_config` reads it; its id is the
model's directory name). The shape and every count derived from it — total and active parameters,
KV-cache bytes, FLOPs, the bytes a decode batch reads — are :class:`~oppo_sim.hw.models.model_spec.ModelSpec`'s.
"""

from __future__ import annotations

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.userfiles import user_path
from oppo_sim.hw.models.hf_config import model_from_hf_config, read_hf_config
from oppo_sim.hw.models.model_spec import ModelSpec
from oppo_sim.hw.models.model_table import MODELS

__all__ = ["ModelSpec", "MODELS", "get_model", "model_from_hf_config", "looks_like_path"]


def looks_like_path(arg: str) -> bool:
    """``arg`` names a file or directory rather than a table id (it has a path separator or ends in .json)."""
    s = str(arg).strip()
    return "/" in s or "\\" in s or s.lower().endswith(".json") or s.startswith(("~", "."))


def get_model(arg: str) -> ModelSpec:
    """The model ``arg`` names: a table id (case-insensitive), a ``config.json`` or a directory holding
    one. An unknown id -> ``ConfigError`` listing the known ones; a missing file or key -> one line
    naming the file and the key."""
    key = str(arg).strip()
    if key.lower() in MODELS:
        return MODELS[key.lower()]
    if looks_like_path(key) or user_path(key).exists():
        return read_hf_config(key)
    raise ConfigError(f"unknown model {arg!r}; known: {', '.join(MODELS)} (or a path to a Hugging Face config.json)")
