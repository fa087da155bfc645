"""Reading a file a user names (a profile, a datasheet spec, a framework config): its text and, for YAML, its
top-level mapping — every failure one :class:`~oppo_sim.core.errors.ConfigError` line naming the file
(``where``) and the problem, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oppo_sim.core.errors import ConfigError

__all__ = ["user_path", "read_text", "read_yaml_mapping"]


def user_path(text: str | Path) -> Path:
    """``text`` as a path with a leading ``~`` expanded; a ``~name`` that names no user stays as written (so that it
    reads as a file that is not there, or as what else it may be — a Hydra ``~key`` delete override), where
    ``Path.expanduser`` would raise."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)


def read_text(path: str | Path, where: str) -> str:
    """The UTF-8 text of ``path``; a missing or unreadable file -> ``"{where}: file not found"`` / ``cannot read``."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: cannot read ({getattr(e, 'strerror', None) or e})") from None


def read_yaml_mapping(path: str | Path, where: str, expected: str) -> dict[str, Any]:
    """The top-level mapping of the YAML file ``path``: bad YAML names its line and column; a top level that is
    not a mapping says ``expected`` (what the mapping should hold)."""
    import yaml

    text = read_text(path, where)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: not valid YAML ({getattr(e, 'problem', None) or 'syntax error'}{at})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: top level must be a mapping of keys ({expected}), got {type(doc).__name__}")
    return doc
