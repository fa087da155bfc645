"""Bash's words, as bash reads and expands them (the subset framework launch scripts use): the lexer that
cuts a script into raw words and operators (quotes, ``\\`` escapes and line continuations, ``#`` comments,
``$(...)``, ``$((...))``, ``${...}``, back-quotes and ``NAME=(...)`` arrays kept whole), and the
expansion of one raw word against the script's variables (``$VAR``, ``${VAR}``, ``${VAR:-d}``,
``${VAR-d}``, ``${VAR:=d}``, ``${VAR:+a}``, ``${#VAR}``, ``${ARR[@]}``, ``$((arithmetic))``, ``~``, quote
removal and the splitting of unquoted expansions). What is not evaluated (command substitution, other
``${...}`` operators) is kept as written and reported through ``note``. :mod:`oppo_sim.frameworks.shell`
runs the statements."""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from typing import Callable

from oppo_sim.core.errors import ConfigError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ARGS_NOTE = "$@, $1, ...: the script's arguments are taken as none"
_OPS = ("&&", "||", ";;", ";", "|", "&", "\n", "(", ")")


@dataclass(frozen=True)
class Token:
    """A raw word (as written, quotes and all), an operator (``;``, ``&&``, ``\\n`` ...), or an array
    assignment ``NAME=(...)`` (``items``: its raw words)."""

    text: str
    op: bool = False
    items: tuple[str, ...] | None = None


def _close(text: str, i: int, opener: str, closer: str) -> int:
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
            i = _dq_end(text, i)
            continue
        if c == opener:
            depth += 1
        elif c == closer:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unclosed {opener!r}")


def _dq_end(text: str, i: int) -> int:
    """Index just past the double-quoted string starting at ``text[i] == '"'``."""
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "$" and text[i + 1:i + 2] in ("(", "{"):
            i = _close(text, i + 1, text[i + 1], ")" if text[i + 1] == "(" else "}")
        elif c == "`":
            i = text.index("`", i + 1) + 1
        else:
            i += 1
    raise ValueError("unclosed '\"'")


def lex(text: str) -> list[Token]:
    """The script's raw words and operators (a ``\\n`` operator ends each line; comments dropped)."""
    out: list[Token] = []
    heredocs: list[tuple[str, bool]] = []  # (delimiter, <<- strips leading tabs) whose body starts at the next line
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n" and heredocs:
            out.append(Token("\n", op=True))
            i = _skip_heredocs(text, i + 1, heredocs)
            heredocs = []
        elif text.startswith("<<", i) and not text.startswith("<<<", i):
            m = re.compile(r"<<(-?)[ \t]*").match(text, i)
            words: list[Token] = []
            i = _word(text, m.end(), words)
            heredocs.append((words[0].text.replace("'", "").replace('"', "").replace("\\", "") if words else "",
                             m.group(1) == "-"))
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


def _skip_heredocs(text: str, i: int, heredocs: list[tuple[str, bool]]) -> int:
    """Index after the bodies of ``heredocs`` (a here-document is a command's input, not words), from ``i``."""
    for delimiter, tabs in heredocs:
        while i < len(text):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            line = text[i:end]
            i = end + 1
            if (line.lstrip("\t") if tabs else line) == delimiter:
                break
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
            end = _close(text, i, "(", ")")
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
            i = _dq_end(text, i)
        elif c == "$" and text[i + 1:i + 2] in ("(", "{"):
            i = _close(text, i + 1, text[i + 1], ")" if text[i + 1] == "(" else "}")
        else:
            i += 1
    out.append(Token(text[start:i]))
    return i


def _raise(msg: str) -> int:
    raise ValueError(msg)


@dataclass
class Part:
    text: str
    quoted: bool


class Expander:
    """Expands raw words against ``vars`` (name -> a string or, for an array, a list of strings).
    ``note(text)``: called with a one-line account of anything assumed rather than evaluated."""

    def __init__(self, vars: dict[str, str | list[str]], home: str, note: Callable[[str], None]):
        self.vars, self.home, self.note = vars, home, note

    # ---- words -------------------------------------------------------------------------------------
    def words(self, raw: str) -> list[str]:
        """``raw`` -> the words bash passes on (unquoted expansions split on blanks, quotes removed; a
        quoted empty string is a word, an empty unquoted expansion is none)."""
        words: list[list] = [["", False]]
        for part in self._parts(raw, tilde=True):
            if isinstance(part, list):  # "${ARR[@]}": one word each
                for j, item in enumerate(part):
                    if j:
                        words.append(["", False])
                    words[-1][0] += item
                    words[-1][1] = True
                continue
            if part.quoted:
                words[-1][0] += part.text
                words[-1][1] = True
                continue
            for j, piece in enumerate(re.split(r"[ \t\n]+", part.text)):
                if j:
                    words.append(["", False])
                words[-1][0] += piece
        return [w for w, quoted in words if w or quoted]

    def string(self, raw: str, tilde: bool = True) -> str:
        """``raw`` as one string, no splitting (an assignment's value, a ``${V:-default}``'s default)."""
        parts = self._parts(raw, tilde=tilde)
        return "".join(" ".join(p) if isinstance(p, list) else p.text for p in parts)

    def _parts(self, raw: str, tilde: bool) -> list:
        parts: list = []
        i, n = 0, len(raw)
        if tilde and (raw == "~" or raw.startswith("~/")):
            parts.append(Part(self.home, True))
            i = 1
        while i < n:
            c = raw[i]
            if c == "\\":  # an escaped character; a line continuation is removed
                parts.append(Part("" if raw[i + 1:i + 2] == "\n" else raw[i + 1:i + 2], True))
                i += 2
            elif c == "'":
                end = raw.index("'", i + 1)
                parts.append(Part(raw[i + 1:end], True))
                i = end + 1
            elif c == '"':
                end = _dq_end(raw, i)
                parts += self._double(raw[i + 1:end - 1])
                i = end
            elif c == "$":
                i = self._dollar(raw, i, parts, quoted=False)
            elif c == "`":
                end = raw.index("`", i + 1) + 1
                parts.append(Part(self._unrun(raw[i:end]), False))
                i = end
            else:
                j = i
                while j < n and raw[j] not in "\\'\"$`":
                    j += 1
                text = raw[i:j]
                if tilde and not parts and re.match(r"[A-Za-z_][A-Za-z0-9_]*=~(/|$)", text):  # NAME=~/path
                    text = text.replace("=~", f"={self.home}", 1)
                parts.append(Part(text, False))
                i = j
        return parts

    def _double(self, body: str) -> list:
        parts: list = []
        i = 0
        while i < len(body):
            c = body[i]
            if c == "\\" and body[i + 1:i + 2] in ('"', "\\", "$", "`", "\n"):
                parts.append(Part("" if body[i + 1] == "\n" else body[i + 1], True))
                i += 2
            elif c == "$":
                i = self._dollar(body, i, parts, quoted=True)
            elif c == "`":
                end = body.index("`", i + 1) + 1
                parts.append(Part(self._unrun(body[i:end]), True))
                i = end
            else:
                j = i + 1
                while j < len(body) and body[j] not in "\\$`":
                    j += 1
                parts.append(Part(body[i:j], True))
                i = j
        return parts

    def _dollar(self, s: str, i: int, parts: list, quoted: bool) -> int:
        nxt = s[i + 1:i + 2]
        if s.startswith("$((", i):
            end = _close(s, i + 1, "(", ")")
            parts.append(Part(str(self.arith(s[i + 3:end - 2])), quoted))
            return end
        if nxt == "(":
            end = _close(s, i + 1, "(", ")")
            parts.append(Part(self._unrun(s[i:end]), quoted))
            return end
        if nxt == "{":
            end = _close(s, i + 1, "{", "}")
            value = self.brace(s[i + 2:end - 1])
            value = "" if value is None else value
            parts.append(value if isinstance(value, list) and quoted else
                         Part(" ".join(value) if isinstance(value, list) else value, quoted))
            return end
        m = _NAME.match(s, i + 1)
        if m:
            parts.append(Part(self.scalar(m.group()), quoted))
            return m.end()
        if nxt and (nxt.isdigit() or nxt in "@*#"):
            self.note(ARGS_NOTE)
            parts.append(Part("0" if nxt == "#" else "", quoted))
            return i + 2
        parts.append(Part("$", quoted))
        return i + 1

    def _unrun(self, text: str) -> str:
        self.note(f"{_short(text)}: command substitution not run; kept as written")
        return text

    # ---- parameters --------------------------------------------------------------------------------
    def scalar(self, name: str) -> str:
        v = self.lookup(name)
        return v[0] if isinstance(v, list) and v else ("" if v is None or isinstance(v, list) else v)

    def lookup(self, name: str) -> str | list[str] | None:
        if name == "HOME":
            return self.vars.get("HOME", self.home)
        if name not in self.vars:
            self.note(f"${name} is not set in the script (the environment is not read): taken as empty")
        return self.vars.get(name)

    def brace(self, body: str) -> str | list[str]:
        """The value of ``${body}``: a list for ``ARR[@]``/``ARR[*]``."""
        m = re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?", body)
        if m:  # ${#VAR}, ${#ARR[@]}
            v = self.vars.get(m.group(1))
            return str(len(v) if isinstance(v, list) and m.group(2) else len(self.scalar(m.group(1))) if v is not None else 0)
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9@*#])(\[([^\]]*)\])?", body)
        if not m:
            raise ConfigError(f"${{{body}}}: bad substitution")
        name, index, rest = m.group(1), m.group(3), body[m.end():]
        if not _NAME.fullmatch(name):  # $1, $@, $#: the script's arguments, taken as none
            self.note(ARGS_NOTE)
            value = "0" if name == "#" else None
            return self._operator(name, value, rest, body) if rest else (value or "")
        value = self._indexed(name, index, rest)
        if not rest:
            return value
        return self._operator(name, value, rest, body)

    def _indexed(self, name: str, index: str | None, rest: str) -> str | list[str] | None:
        v = self.vars.get(name) if rest[:1] in ("-", "=", "+", "?", ":") and rest else self.lookup(name)
        if index is None:
            return v[0] if isinstance(v, list) and v else ("" if isinstance(v, list) else v)
        items = v if isinstance(v, list) else ([] if v is None else [v])
        if index in ("@", "*"):
            return items
        k = self.arith(index)
        return items[k] if -len(items) <= k < len(items) else None

    def _operator(self, name: str, value, rest: str, body: str) -> str | list[str]:
        op = rest[:2] if rest[:2] in (":-", ":=", ":+", ":?") else rest[:1]
        word = rest[len(op):]
        empty = value is None or (op.startswith(":") and value in ("", []))
        if op in (":-", "-"):
            return self.string(word) if empty else value
        if op in (":=", "="):
            if empty:
                self.vars[name] = self.string(word)
            return self.vars[name] if empty else value
        if op in (":+", "+"):
            return "" if empty else self.string(word)
        if op in (":?", "?"):
            if empty:
                raise ConfigError(f"${{{body}}}: {name} is not set in the script ({self.string(word) or 'required'})")
            return value
        self.note(f"${{{body}}}: this expansion is not evaluated; kept as written")
        return "${" + body + "}"

    # ---- arithmetic --------------------------------------------------------------------------------
    def arith(self, expr: str) -> int:
        """Bash integer arithmetic: + - * / % ** ( ), comparisons; names and ``$names`` read as integers."""
        text = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", r"\1", expr)
        text = _NAME.sub(lambda m: f"({self._int(m.group())})", text)
        try:
            return _eval(ast.parse(text.strip() or "0", mode="eval").body)
        except (SyntaxError, ValueError, ZeroDivisionError, TypeError) as e:
            raise ConfigError(f"$(({expr})): not integer arithmetic bash can evaluate ({e})") from None

    def _int(self, name: str, depth: int = 0) -> int:
        v = self.scalar(name).strip()
        if not v:
            return 0
        if re.fullmatch(r"-?\d+", v):
            return int(v)
        if depth < 8 and _NAME.fullmatch(v):
            return self._int(v, depth + 1)
        raise ConfigError(f"${name}={v!r} is used in $((...)) but is not an integer")


def _div(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("division by 0")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q  # bash truncates toward zero


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _div, ast.FloorDiv: _div,
        ast.Mod: lambda a, b: a - b * _div(a, b), ast.Pow: operator.pow, ast.LShift: operator.lshift,
        ast.RShift: operator.rshift}
_CMP = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
        ast.NotEq: operator.ne}


def _eval(node) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return _BIN[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return -_eval(node.operand) if isinstance(node.op, ast.USub) else _eval(node.operand)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        return int(_CMP[type(node.ops[0])](_eval(node.left), _eval(node.comparators[0])))
    raise ValueError("unsupported operator")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["Expander", "Token", "lex"]
