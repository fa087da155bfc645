"""A NeMo RL recipe as NeMo RL composes it (``nemo_rl/utils/config.py`` at 7ea279a, 2026-08-22): the YAML file,
its ``defaults:`` chain (one parent path or a list of them, relative to the file naming them; each parent
loaded with its own chain, merged parent first, later parents and then the child winning; a mapping marked
``_override_: true`` replaces the parent's instead of merging into it), then the command line's Hydra
overrides (``key=value`` on an existing key, ``+key=value`` adds one, ``++key=value`` adds or sets,
``~key`` deletes), and OmegaConf's ``${path.to.key}`` / ``${.sibling}`` interpolations resolved where a value
is read.

What the reader gets: the merged tree flattened to dotted keys (:func:`recipe`), the keys each file and
override set (to list what is ignored and check typos), and :func:`value`, which resolves interpolations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.userfiles import read_yaml_mapping, user_path
from oppo_sim.frameworks.suggest import check_typo, near
from oppo_sim.frameworks.translation import flatten, scalar

_INTERP = re.compile(r"^\$\{(\.*)([A-Za-z_][\w.]*)\}$")
_RESOLVER = re.compile(r"^\$\{(add|mul|div|max):\s*(\$\{[^{}]*\}|[^,\s{}]+)\s*,\s*(\$\{[^{}]*\}|[^,\s{}]+)\s*\}$")
_OPS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "max": max}
"""NeMo RL's registered OmegaConf resolvers (``nemo_rl/utils/config.py``)."""
_OVERRIDE = re.compile(r"^(\+{0,2}|~)([A-Za-z_][\w.\-]*)(?:=(.*))?$", re.S)


@dataclass(frozen=True)
class Recipe:
    """A composed recipe: ``flat`` (dotted key -> value, after overrides), ``chain`` (the files, the named one
    first, then its parents in the order read), ``own`` (the keys the named file and the overrides set)."""

    flat: dict[str, Any]
    chain: tuple[Path, ...]
    own: frozenset[str]
    overrides: tuple[str, ...] = ()
    origin: tuple[tuple[str, str], ...] = ()  # (key, the parent file that last set it) for keys not the recipe's own

    def parent_of(self, key: str) -> str | None:
        """The name of the parent file a key not set by the recipe itself comes from (None: from none)."""
        return dict(self.origin).get(key)


def merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """OmegaConf's merge as NeMo RL calls it: mappings merge key by key, anything else replaces; a child
    mapping with ``_override_: true`` replaces the parent's whole; ``???`` (missing) leaves the parent's."""
    out = dict(base)
    for k, v in child.items():
        if v == "???":
            continue
        if isinstance(v, dict) and v.get("_override_", False):
            out[k] = {kk: vv for kk, vv in v.items() if kk != "_override_"}
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def _load(path: Path, seen: tuple[Path, ...]) -> tuple[dict[str, Any], list[Path]]:
    """(the file's tree with its defaults chain merged in, the files read)."""
    real = path.resolve()
    if real in seen:
        raise ConfigError(f"NeMo RL recipe {path}: its defaults chain comes back to itself")
    if not path.is_file():
        where = f" (named in {seen[-1]})" if seen else ""
        raise ConfigError(f"NeMo RL recipe {path}: no such file{where}")
    tree = dict(read_yaml_mapping(path, f"NeMo RL recipe '{path}'", "a NeMo RL config"))
    parents = tree.pop("defaults", None)
    files = [path]
    if parents is None:
        return tree, files
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ConfigError(f"NeMo RL recipe {path}: defaults must be a file path or a list of them, got {parents!r}")
    base: dict[str, Any] = {}
    for parent in parents:
        p = Path(parent) if parent.startswith("/") else path.parent / parent
        sub, read = _load(p, (*seen, real))
        base, files = merge(base, sub), files + read
    return merge(base, tree), files


def _subtree_keys(flat: dict[str, Any], key: str) -> list[str]:
    return [k for k in flat if k == key or k.startswith(key + ".")]


def apply_override(flat: dict[str, Any], token: str, where: str) -> str:
    """Apply one Hydra override to ``flat`` in place; -> the key it set (or deleted)."""
    m = _OVERRIDE.match(token.strip())
    if not m or (m.group(1) != "~" and m.group(3) is None):
        raise ConfigError(f"{where}: {token!r} is not an override (key=value, +key=value, ++key=value or ~key)")
    op, key, text = m.groups()
    present = _subtree_keys(flat, key)
    if op == "~":
        if not present:
            raise ConfigError(f"{where}: ~{key}: no such key to delete")
        for k in present:
            del flat[k]
        return key
    if op == "" and not present:
        check_typo(key, flat, where)
        raise ConfigError(f"{where}: {key} is not in the recipe; NeMo RL adds a new key with +{key}={text}")
    if op == "+" and present:
        raise ConfigError(f"{where}: +{key}: the key is already in the recipe; set it with {key}={text}")
    mapping = text.strip().startswith("{")
    if present and present != [key] and not mapping and scalar(text) is not None:  # null removes a section (recipes do)
        raise ConfigError(f"{where}: {key} is a section of the recipe, not a value: override its keys ({key}.KEY=VALUE)")
    for k in present:
        del flat[k]
    flat.update(flatten(scalar(text), key) if mapping else {key: scalar(text)})
    return key


def _check_new_keys(path: Path, own: set[str], parents: dict[str, Any], watched: Iterable[str]) -> None:
    """A key the named file adds (its parents lack it) that nearly spells a watched key of the same section is a
    typo (``grpo.num_prompt_per_step``: a slip of a character or two): NeMo RL would add it and run with the
    parent's value. Other new keys are legitimate (recipes add keys and sections of their own)."""
    watched = {w for w in watched if w in parents}
    for k in sorted(own - set(parents)):
        section, _, leaf = k.rpartition(".")
        peers = {p.rpartition(".")[2]: p for p in parents if p.rpartition(".")[0] == section}
        best = near(leaf, peers)  # the nearest key of the section: a typo only of a key the reader reads
        if best is not None and peers[best] in watched and abs(len(best) - len(leaf)) <= 2:  # an edit, not a new word
            raise ConfigError(f"NeMo RL recipe {path}: {k} is not a key of its parents; did you mean {peers[best]}?")


def recipe(path: str | Path, overrides: Sequence[str] = (), watched: Iterable[str] = ()) -> Recipe:
    """The recipe at ``path`` with its defaults chain and ``overrides`` applied (module notes); a new key of the
    named file that nearly spells one of ``watched`` is refused as a typo."""
    path = user_path(path)
    tree, files = _load(path, ())
    flat = flatten(tree)
    own = set(flatten(dict(read_yaml_mapping(path, f"NeMo RL recipe '{path}'", "a NeMo RL config"))))
    own.discard("defaults")
    parents: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for p in reversed(files[1:]):  # the root-most parent first: a nearer parent wins, as in the merge
        keys = flatten(dict(read_yaml_mapping(p, f"NeMo RL recipe '{p}'", "a NeMo RL config")))
        parents.update(keys)
        origin.update({k: p.name for k in keys})
    if parents:
        _check_new_keys(path, own, parents, watched)
    for tok in overrides:
        own.add(apply_override(flat, tok, "NeMo RL override"))
    kept = tuple((k, f) for k, f in origin.items() if k not in own)
    return Recipe(flat, tuple(files), frozenset(own), tuple(overrides), kept)


def value(flat: dict[str, Any], key: str, depth: int = 0) -> Any:
    """``flat[key]`` with a whole-value interpolation (``${policy.max_total_sequence_length}``, ``${.top_p}``)
    and NeMo RL's resolvers (``${mul:${a},${b}}``, add, div, max) followed; a key that is absent is None; other
    interpolations stay text."""
    v = flat.get(key)
    r = _RESOLVER.match(v) if isinstance(v, str) else None
    if r is not None:
        args = []
        for a in r.groups()[1:]:
            flat_arg = {**flat, "\0": a}
            got = value(flat_arg, "\0", depth + 1) if a.startswith("${") else scalar(a)
            if isinstance(got, bool) or not isinstance(got, (int, float)):
                raise ConfigError(f"NeMo RL recipe: {key} = {v}: {a} is not a number ({got!r})")
            args.append(got)
        return _OPS[r.group(1)](*args)
    m = _INTERP.match(v) if isinstance(v, str) else None
    if m is None:
        return v
    if depth > 8:
        raise ConfigError(f"NeMo RL recipe: {key}: interpolation {v} does not resolve (a cycle?)")
    dots, target = m.groups()
    if dots:
        parts = key.split(".")[: -len(dots)]
        target = ".".join([*parts, target])
    if target not in flat:
        raise ConfigError(f"NeMo RL recipe: {key} = {v}: no key {target}")
    return value(flat, target, depth + 1)


__all__ = ["Recipe", "apply_override", "merge", "recipe", "value"]
