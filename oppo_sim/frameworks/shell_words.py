"""Bash's words, as bash expands them (the subset framework launch scripts use): the expansion of one raw
word (:mod:`oppo_sim.frameworks.shell_lex`) against the script's variables (``$VAR``, ``${VAR}``, ``${VAR:-d}``,
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
from oppo_sim.frameworks.shell_lex import close as _close
from oppo_sim.frameworks.shell_lex import dq_end as _dq_end

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ARGS_NOTE = "$@, $1, ...: the script's arguments are taken as none"


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

    def heredoc(self, body: str) -> str:
        """A here-document's text with its ``$`` expansions (quotes are text there); line continuations removed."""
        return "".join(" ".join(p) if isinstance(p, list) else p.text for p in self._double(body.replace("\\\n", "")))

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


__all__ = ["ARGS_NOTE", "Expander"]
