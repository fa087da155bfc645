"""Command-line plumbing shared by ``oppo-sim`` and ``oppo-real``: a parser whose errors are one line,
argument types that reject nonsense with a clear message, and the entry that turns every expected error
into one line on stderr and exit status 2 (never a traceback)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Sequence

from oppo_sim.core.errors import OppoError


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive(kind=int):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(v) or v <= 0:  # NaN and infinity too: no option means "unbounded" by them
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        return v

    return parse


def integer(text: str) -> int:
    """Any integer: for values whose range the config they reach checks (one rule in one place)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def nonneg_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def nonneg_float(text: str) -> float:
    """A finite number >= 0 (NaN and infinity refused)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def int_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError("empty list")
    return vals


def str_list(text: str) -> tuple[str, ...]:
    vals = tuple(x.strip() for x in text.split(",") if x.strip())
    if not vals:
        raise argparse.ArgumentTypeError("empty list")
    return vals


def flag_name(dest: str, value) -> str:
    """The option a user gave for ``dest``: ``--no-x`` for a ``BooleanOptionalAction`` set to False, else ``--x``."""
    return ("--no-" if value is False else "--") + dest.replace("_", "-")


def on_off(flag: bool) -> str:
    return "on" if flag else "off"


TABLE_SUFFIXES = (".csv", ".csv.gz", ".parquet")
"""What a table (``sweep --out``) is written as, by the file name's ending."""
FIGURE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
"""What a figure (``--plot``) is written as, by the file name's ending (matplotlib's formats a reader opens)."""


def _output_path(text: str, suffixes: tuple[str, ...], what: str) -> str:
    if not text.lower().endswith(suffixes) or not _writable_name(text):
        raise argparse.ArgumentTypeError(f"cannot write a {what} to {text!r}: name a file ending in "
                                         f"{', '.join(suffixes)}")
    return text


def _writable_name(text: str) -> bool:
    return bool(text.strip()) and not Path(text).is_dir()


def file_path(text: str) -> str:
    """An option's output file (JSON, CSV), checked before any work is done: not a folder, not empty."""
    if not _writable_name(text):
        raise argparse.ArgumentTypeError(f"cannot write a file to {text!r}: name a file, not a folder")
    return text


def table_path(text: str) -> str:
    """An option's table file, checked before any work is done (a long sweep must not end in a refusal)."""
    return _output_path(text, TABLE_SUFFIXES, "table")


def figure_path(text: str) -> str:
    """An option's figure file, checked before any work is done."""
    return _output_path(text, FIGURE_SUFFIXES, "figure")


def output(path) -> Path:
    """An output file a command was asked to write: its folder is made if missing (``--plot out/x.png``
    on a fresh checkout must not fail on the missing ``out/``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse and run a sub-command; bad input becomes one line on stderr and exit status 2."""
    a = parser.parse_args(argv)
    try:
        return a.func(a)
    except OppoError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:  # e.g. an unwritable --json path
        print(f"{parser.prog}: error: {type(e).__name__}: {e}".splitlines()[0], file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
