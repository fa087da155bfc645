"""Defaults and argument types shared by the ``oppo-real`` commands."""

from __future__ import annotations

import argparse

DEFAULT_TRACE = "oppo-longtail-default"
DEFAULT_LENGTH_SCALE = 0.1
DEFAULT_MAX_RESPONSE = 256


def cores(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated core ids, got {text!r}") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"expected core ids >= 0, got {text!r}")
    return vals
