""""Did you mean": a framework key that is not one of the framework's own but nearly spells one is taken for a
typo and refused (the framework itself would refuse it, or silently use its default where the user meant a
value), with the nearest known name. A key near none is not a typo: the reader lists it as ignored."""

from __future__ import annotations

import difflib
from typing import Iterable

from oppo_sim.core.errors import ConfigError

CUTOFF = 0.85
"""How alike (difflib's ratio) a key must be to a known one to count as its typo."""


def near(key: str, known: Iterable[str]) -> str | None:
    """The known name ``key`` most nearly spells (``rollout.bach_size`` -> ``rollout.batch_size``), or None."""
    found = difflib.get_close_matches(key, sorted(set(known)), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def check_typo(key: str, known: Iterable[str], where: str, shown: str = "{}") -> None:
    """Raise a one-line ConfigError if ``key`` (not itself known) is a near-miss of a known name.
    ``shown`` formats a name as the user writes it (``"--{}"`` for command-line options)."""
    best = near(key, known)
    if best is not None:
        raise ConfigError(f"{where}: {shown.format(key)} is not a known setting; did you mean {shown.format(best)}?")


__all__ = ["CUTOFF", "check_typo", "near"]
