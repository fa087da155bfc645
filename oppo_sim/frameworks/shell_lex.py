"""Bash's lexer, for what framework launch scripts use: a script cut into raw words and operators, with quotes,
``\\`` escapes and line continuations, ``#`` comments, ``$(...)``, ``$((...))``, ``${...}``, back-quotes and
``NAME=(...)`` arrays kept whole, redirections and here-documents (a command's input) dropped. The words are
expanded by :mod:`oppo_sim.frameworks.shell_words`."""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPS = ("&&", "||", ";;", ";", "|", "&", "\n", "(", ")")


@dataclass(frozen=True)
class Token:
    """A raw word (as written, quotes and all), an operator (``;``, ``&&``, ``\\n`` ...), an array
    assignment ``NAME=(...)`` (``items``: its raw words), or a here-document's body (``heredoc``: the text,
    and whether it is expanded: its delimiter unquoted)."""

    text: str
    op: bool = False
    items: tuple[str, ...] | None = None
    heredoc: tuple[str, bool] | None = None


def close(text: str, i: int, opener: str, closer: str) -> int:
    """Index just past the ``closer`` matching ``text[i] == opener``, skipping quotes and nested pairs."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'" and opener != "{":
            i = text.index("'", i + 1) + 1 if "'" in text[i + 1:] else n
            continue
        if c == '"':
            i = dq_end(text, i)
            continue
        if c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unclosed {opener!r}")


def dq_end(text: str, i: int) -> int:
    """Index just past the double-quoted string starting at ``text[i] == '"'``."""
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "$" and text[i + 1:i + 2] in ("(", "{"):
            i = close(text, i + 1, text[i + 1], ")" if text[i + 1] == "(" else "}")
        elif c == "`":
            i = text.index("`", i + 1) + 1
        else:
            i += 1
    raise ValueError("unclosed '\"'")


def lex(text: str) -> list[Token]:
    """The script's raw words and operators (a ``\\n`` operator ends each line; comments dropped)."""
    out: list[Token] = []
    heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, <<- strips tabs, expanded) bodies from the next line
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n" and heredocs:
            i = _heredoc_bodies(text, i + 1, heredocs, out)
            out.append(Token("\n", op=True))
            heredocs = []
        elif text.startswith("<<", i) and not text.startswith("<<<", i):
            m = re.compile(r"<<(-?)[ \t]*").match(text, i)
            words: list[Token] = []
            i = _word(text, m.end(), words)
            raw = words[0].text if words else ""
            heredocs.append((raw.replace("'", "").replace('"', "").replace("\\", ""), m.group(1) == "-",
                             not any(q in raw for q in "'\"\\")))
        elif text.startswith("\\\n", i):
            i += 2
        elif c in " \t\r":
            i += 1
        elif c == "#":
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif any(text.startswith(op, i) for op in _OPS):
            op = next(op for op in _OPS if text.startswith(op, i))
            out.append(Token(op, op=True))
            i += len(op)
        elif c in "<>" or (c.isdigit() and text[i + 1:i + 2] in ("<", ">")):
            i = _redirect(text, i)
        else:
            i = _word(text, i, out)
    return out


def _heredoc_bodies(text: str, i: int, heredocs: list[tuple[str, bool, bool]], out: list[Token]) -> int:
    """Append each here-document's body from ``i`` (a token of its own); -> the index after the last one."""
    for delimiter, tabs, expand in heredocs:
        lines = []
        while i < len(text):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            line = text[i:end]
            i = end + 1
            if (line.lstrip("\t") if tabs else line) == delimiter:
                break
            lines.append(line.lstrip("\t") if tabs else line)
        out.append(Token("", heredoc=("\n".join(lines), expand)))
    return min(i, len(text))


def _redirect(text: str, i: int) -> int:
    """Skip a redirection (``> log``, ``2>&1``, ``>> f``, ``<<< w``) and its target word."""
    m = re.compile(r"\d?(>>|>&|<<<|<<|>|<)&?\d?-?[ \t]*").match(text, i)
    j = m.end() if m else i + 1
    if j < len(text) and text[j] not in "\n;&|":
        j = _word(text, j, [])
    return j


def _word(text: str, i: int, out: list[Token]) -> int:
    """Append the raw word starting at ``i`` (or an array assignment); return the index after it."""
    start, n = i, len(text)
    while i < n:
        c = text[i]
        if c == "(" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\+?=", text[start:i]):  # NAME=( ... ): an array
            end = close(text, i, "(", ")")
            items = tuple(t.text for t in lex(text[i + 1:end - 1]) if not t.op)
            out.append(Token(text[start:i], items=items))
            return end
        if c in " \t\r\n;&|<>()":
            break
        if c == "\\":
            i += 2
        elif c in "'`":
            end = text.find(c, i + 1)
            i = end + 1 if end >= 0 else _raise(f"unclosed {c!r}")
        elif c == '"':
            i = dq_end(text, i)
        elif c == "$" and text[i + 1:i + 2] in ("(", "{"):
            i = close(text, i + 1, text[i + 1], ")" if text[i + 1] == "(" else "}")
        else:
            i += 1
    out.append(Token(text[start:i]))
    return i


def _raise(msg: str) -> int:
    raise ValueError(msg)


__all__ = ["Token", "close", "dq_end", "lex"]
