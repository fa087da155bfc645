"""verl's config keys, known: what a key given to ``--from-verl`` is. A key is *known* when verl's trainer
config has it (``oppo_sim/data/verl_config_keys.json``: the composed ``ppo_trainer`` and
``ppo_megatron_trainer`` configs, the one-step-off and fully-async configs and the DAPO recipe's keys, at
the verl commit named in the file) or lies under a known mapping (``...override_config.max_position_embeddings``).

Hydra refuses a key the config does not have unless it is added with ``+``; oppo-sim does the same for a
near-miss of a known key (``data.train_batchsize`` -> "did you mean data.train_batch_size"), where the
likely cause is a typo, and lists any other unknown key as ignored (a key of a newer verl, a recipe's own)."""

from __future__ import annotations

import difflib
import json
from functools import lru_cache
from importlib import resources
from typing import Iterable

from oppo_sim.core.errors import ConfigError

__all__ = ["KEYS_SOURCE", "check_typos", "is_known", "known_keys", "near_key"]

KEYS_SOURCE = "oppo_sim/data/verl_config_keys.json"


@lru_cache(maxsize=1)
def _table() -> tuple[frozenset[str], str]:
    data = json.loads(resources.files("oppo_sim.data").joinpath("verl_config_keys.json").read_text())
    return frozenset(data["keys"]), data["source"]


def known_keys() -> frozenset[str]:
    """Every key of verl's trainer configs (dotted)."""
    return _table()[0]


def is_known(key: str) -> bool:
    """``key`` is in verl's config, or under one of its keys (a mapping such as ``override_config``), or under
    one of its open mappings (``override_*``, ``*kwargs``: their keys are the user's, passed through)."""
    keys = known_keys()
    parts = key.split(".")
    if parts[-1] == "_target_":  # Hydra's class paths, in every composed config
        return True
    if any(".".join(parts[:i]) in keys for i in range(len(parts), 0, -1)):
        return True
    return any((p.startswith("override") or p.endswith("kwargs")) and _is_parent(".".join(parts[:i + 1]))
               for i, p in enumerate(parts[:-1]))


@lru_cache(maxsize=None)
def _is_parent(prefix: str) -> bool:
    return any(k.startswith(prefix + ".") for k in known_keys())


def near_key(key: str) -> str | None:
    """The known key ``key`` is a near-miss of: a sibling (same parent) whose last name is within a typo's
    distance, or, where the parent itself is unknown, a known key within a typo's distance of the whole."""
    keys = known_keys()
    parent, _, leaf = key.rpartition(".")
    siblings = {k.rpartition(".")[2]: k for k in keys if k.rpartition(".")[0] == parent}
    if siblings:
        hit = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.85)
        return siblings[hit[0]] if hit else None
    hit = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=0.95)
    return hit[0] if hit else None


def check_typos(keys: Iterable[str], added: Iterable[str] = ()) -> list[str]:
    """The unknown keys of ``keys`` (``added``: given with Hydra's ``+``, never a typo); a near-miss of a
    known key -> one-line ConfigError with "did you mean"."""
    added = set(added)
    unknown = [k for k in keys if not is_known(k)]
    for k in unknown:
        near = None if k in added else near_key(k)
        if near is not None:
            raise ConfigError(f"{k}: not a key of verl's config; did you mean {near}? (verl refuses an unknown key "
                              f"unless it is added with +{k}=...)")
    return unknown
