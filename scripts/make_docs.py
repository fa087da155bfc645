"""Write the parts of the docs that come from the code and from committed outputs, never by hand.

    python scripts/make_docs.py           # rewrite docs/cli.md and every generated block in place
    python scripts/make_docs.py --check   # exit 1, naming the files, if anything is out of date

- ``docs/cli.md``: the command-line reference, walked from the ``oppo-sim`` and ``oppo-real`` parsers
  (every option, its default, its help);
- a block ``<!-- generated: NAME -->`` … ``<!-- /generated -->`` in README.md, ``docs/*.md`` or
  ``benchmarks/README.md`` is replaced by the table ``NAME`` renders from its committed output (the
  ``TABLES`` below say which file each reads). A number in a table is therefore the number in the file.

``tests/test_docs.py`` runs ``--check``, so a change of parser or output that leaves the docs behind fails.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Callable

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "scripts"):  # run as a script from anywhere
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from docs_gpu_tables import GPU_TABLES  # noqa: E402
from docs_tables import TABLES as _TABLES  # noqa: E402
from docs_trainer_tables import TRAINER_TABLES  # noqa: E402

TABLES = {**_TABLES, **GPU_TABLES, **TRAINER_TABLES}

BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)
PAGES = ("README.md", "docs/*.md", "benchmarks/README.md")


def _default(action: argparse.Action) -> str:
    d = action.default
    if d is None or d is argparse.SUPPRESS or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return ""
    if isinstance(d, (tuple, list)):
        d = ",".join(str(x) for x in d)
    return f"`{d}`"


def _help(action: argparse.Action) -> str:
    text = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
    text = re.sub(r"\s*\(default:? [^)]*\)\s*$", "", text)  # the default has its own column
    if action.choices and not isinstance(action.choices, dict):
        text += f" (one of: {', '.join(str(c) for c in action.choices)})"
    return " ".join(text.split()).replace("|", "\\|")


def parser_reference(prog: str, parser: argparse.ArgumentParser) -> list[str]:
    """Markdown for every sub-command of ``parser``: a table of its options."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    out = [f"## `{prog}`", "", parser.description or "", ""]
    for name, p in sub.choices.items():
        out += [f"### `{prog} {name}`", "", helps.get(name, "") or (p.description or ""), "",
                "| option | default | what it sets |", "|---|---|---|"]
        for a in p._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            flags = ", ".join(f"`{s}`" for s in a.option_strings) or f"`{a.dest}`"
            out.append(f"| {flags} | {_default(a)} | {_help(a)} |")
        out.append("")
    return out


def cli_reference() -> str:
    from oppo_real.cli import build_parser as real_parser
    from oppo_sim.cli import build_parser as sim_parser

    lines = ["# Command-line reference", "",
             "Generated from the parsers by `python scripts/make_docs.py`; `--help` on any command prints the same.", ""]
    lines += parser_reference("oppo-sim", sim_parser())
    lines += parser_reference("oppo-real", real_parser())
    return "\n".join(lines).rstrip() + "\n"


def render_blocks(text: str, tables: dict[str, Callable[[], str]] = TABLES) -> str:
    def one(m: re.Match) -> str:
        name = m.group("name")
        if name not in tables:
            raise SystemExit(f"unknown generated block {name!r} (known: {', '.join(sorted(tables))})")
        return m.group(1) + tables[name]().rstrip() + "\n" + m.group(4)

    return BLOCK.sub(one, text)


def expected_files() -> dict[Path, str]:
    """Every generated file and page, as it should read now."""
    files = {ROOT / "docs" / "cli.md": cli_reference()}
    for pattern in PAGES:
        for page in sorted(ROOT.glob(pattern)):
            text = page.read_text()
            if BLOCK.search(text):
                files[page] = render_blocks(text)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a generated file is out of date (default: write)")
    a = ap.parse_args(argv)
    pd.set_option("display.width", 200)
    stale = [p for p, text in expected_files().items() if not p.exists() or p.read_text() != text]
    if a.check:
        for p in stale:
            print(f"out of date: {p.relative_to(ROOT)} (run python scripts/make_docs.py)")
        return 1 if stale else 0
    for p, text in expected_files().items():
        if p in stale:
            p.write_text(text)
            print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
