"""A launch script read the way bash would run it, for what a framework reader needs: the words of the
commands it runs, after the script's own assignments (``VAR=value``, ``export``, ``NAME=(a b)`` arrays,
``${VAR:=default}``) and every expansion (:mod:`oppo_sim.frameworks.shell_words`).

Nothing is executed and the environment is not read (a result must not depend on the shell it is read
from): a variable the script does not set takes its ``${VAR:-default}``, else is empty and said so;
``$HOME`` and ``~`` are the home directory. What bash would decide at run time is assumed and each
assumption is one line of :attr:`Script.notes`: an ``if``/``elif`` whose test is a string or number
comparison (``[ "$mode" = async ]``) is evaluated, any other test is taken as true (a file test ``-f``
as false); a ``for`` loop runs its body once, for its first item; ``while``/``until``/``case`` bodies and
functions are not run; ``$(...)`` and back-quotes are kept as written; ``source``d files are not read;
the commands a pipe feeds (``| tee log``) are dropped; the script's arguments (``$@``, ``$1``) are none.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.shell_lex import Token, lex
from oppo_sim.frameworks.shell_words import Expander

_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)", re.S)
_DECLARE = ("export", "declare", "typeset", "local", "readonly")
_QUIET = frozenset({"set", "cd", "echo", "printf", "mkdir", "ulimit", "shift", "wait", "sleep", "trap", "true", "false",
                    ":", "pushd", "popd", "rm", "cp", "mv", "ln", "touch", "umask", "shopt", "exit", "return", "cat",
                    "ls", "pip", "pip3", "wget", "curl", "git", "nvidia-smi", "chmod", "source", "."})
"""Commands whose words no reader wants (they change nothing the readers use)."""
_KEYWORDS = frozenset({"if", "then", "elif", "else", "fi", "for", "while", "until", "do", "done", "case", "esac",
                       "function", "{", "}", "!", "time"})


@dataclass(frozen=True)
class Script:
    """What a script runs: ``commands`` (each one's expanded words, in order), ``words`` (all of them,
    joined), the variables it set, and ``notes``: one line per thing assumed rather than evaluated."""

    commands: tuple[tuple[str, ...], ...]
    variables: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(w for c in self.commands for w in c)


@dataclass
class _Frame:
    active: bool
    taken: bool
    kind: str  # if, for, skip (while/until/case/function body), group


class _Run:
    def __init__(self, home: str):
        self.vars: dict[str, str | list[str]] = {}
        self.notes: list[str] = []
        self.ex = Expander(self.vars, home, self.note)
        self.frames: list[_Frame] = []
        self.commands: list[tuple[str, ...]] = []
        self.functions: set[str] = set()
        self.stopped = False
        self.depth = 0  # bash -c strings read inside one another

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    @property
    def active(self) -> bool:
        return all(f.active for f in self.frames)

    # ---- statements --------------------------------------------------------------------------------
    def statement(self, toks: list[Token], after: str) -> bool | None:
        """Run one simple statement (``after``: the operator before it); -> its status (None: not run)."""
        if not toks or self.stopped:
            return None
        head = toks[0].text if toks[0].items is None else ""
        if head in _KEYWORDS:
            return self._keyword(head, toks[1:], after)
        if not self.active:
            return None
        if head in self.functions:
            self.note(f"{head}: a function of the script; not run")
            return True
        if head in ("[", "[[", "test"):
            return self.test(toks)
        if head in ("source", "."):
            self.note(f"{head} {_raw(toks[1:2])}: the sourced file is not read")
            return True
        if head == "unset":
            for t in toks[1:]:
                self.vars.pop(t.text, None)
            return True
        return self._command(toks, after)

    def _command(self, toks: list[Token], after: str) -> bool:
        i = 0
        while i < len(toks) and (toks[i].items is not None or _ASSIGN.fullmatch(toks[i].text)):
            i += 1
        if i == len(toks):  # only assignments: they stay
            for t in toks:
                self.assign(t)
            return True
        if after == "|":
            self.note(f"| {_raw(toks[i:i + 2])}: the command a pipe feeds is not read")
            return True
        docs = [t.heredoc for t in toks[i:] if t.heredoc is not None]
        words = [w for t in toks[i:] if t.heredoc is None for w in self._expand(t)]
        if words[:1] == ["read"] and docs and len(words) > 1:  # read -r -d '' VAR <<EOF: VAR holds the text
            body, expand = docs[0]
            self.vars[words[-1]] = self.ex.heredoc(body) if expand else body
            return True
        if not words:
            return True
        if words[0] in _DECLARE:
            for t in toks[i + 1:]:
                if t.items is not None or _ASSIGN.fullmatch(t.text):
                    self.assign(t)
            return True
        if words[0] == "exit":
            self.stopped = True
        shell = next((j for j in range(len(words) - 2) if words[j].rsplit("/", 1)[-1] in ("bash", "sh")
                      and words[j + 1] == "-c"), None)
        inner = _lex_or_none(words[shell + 2]) if shell is not None and self.depth < 4 else None
        if inner is not None:  # srun ... bash -c "...": the string is a script of its own
            if shell and words[0] not in _QUIET:
                self.commands.append(tuple(words[:shell]))
            self.note(f"{words[shell]} -c: its command string read as a script")
            self.depth += 1
            self.run(inner)
            self.depth -= 1
        elif words[0] not in _QUIET:
            self.commands.append(tuple(words))
        return True

    def run(self, tokens: list[Token]) -> None:
        """Run the statements of ``tokens`` in order (``&&``/``||`` on each one's status)."""
        status: bool | None = True
        for toks, after in _statements(tokens):
            if after == "&&" and status is False or after == "||" and status:
                status = status if after == "||" else False
                continue
            st = self.statement(toks, after)
            status = True if st is None and after in ("&&", "||") else st

    def _expand(self, t: Token) -> list[str]:
        if t.items is not None:
            return [t.text + "(" + " ".join(t.items) + ")"]
        return self.ex.words(t.text)

    def assign(self, t: Token) -> None:
        m = _ASSIGN.fullmatch(t.text if t.items is None else t.text + "x")
        name, plus = m.group(1), m.group(2)
        if t.items is not None:
            items = [w for raw in t.items for w in self.ex.words(raw)]
            old = self.vars.get(name, [])
            self.vars[name] = (old if isinstance(old, list) else [old]) + items if plus else items
            return
        value = self.ex.string(m.group(3))
        old = self.vars.get(name)
        if isinstance(old, list) and not plus:
            self.vars[name] = [value] + old[1:]
        else:
            self.vars[name] = (("" if old is None else old if isinstance(old, str) else old[0]) + value) if plus else value

    # ---- control ------------------------------------------------------------------------------------
    def _keyword(self, head: str, rest: list[Token], after: str) -> bool | None:
        words = " ".join(t.text for t in rest)
        if head in ("then", "do", "else", "!", "time", "{"):
            if head == "else" and self.frames:
                f = self.frames[-1]
                f.active, f.taken = not f.taken and f.kind == "if", True
            if head == "{":
                self.frames.append(_Frame(True, True, "group"))
            status = self.statement(rest, after) if rest else True
            return (not status) if head == "!" and status is not None else status
        if head in ("fi", "done", "esac", "}"):
            if self.frames:
                self.frames.pop()
            return self.statement(rest, after) if rest else True
        if head in ("if", "elif"):
            return self._if(head, rest)
        if head == "for":
            live = self.active
            m = re.fullmatch(r"(\w+) in (.*)", words, re.S)
            items = [w for t in rest[2:] for w in self.ex.words(t.text)] if m and live else []
            if live and m and items:
                self.note(f"for {_short(words)}: its body is read once, for {m.group(1)}={items[0]}")
                self.vars[m.group(1)] = items[0]
            elif live:
                self.note(f"for {_short(words) or '((...))'}: its body is not run")
            self.frames.append(_Frame(bool(m and items), True, "for"))
            return True
        if self.active:
            self.note(f"{head} {_short(words)}: its body is not run" if head != "function" else
                      f"function {rest[0].text if rest else ''}: defined, not run")
        if head == "function" and rest:
            self.functions.add(rest[0].text)
        self.frames.append(_Frame(False, True, "skip"))
        return True

    def _if(self, head: str, cond: list[Token]) -> bool:
        if head == "if":
            live = self.active
            self.frames.append(_Frame(False, False, "if"))
            status = self._condition(cond) if live else False
        else:
            f = self.frames[-1] if self.frames else None
            if f is None or f.kind != "if":
                raise ConfigError("elif without if")
            f.active = False
            status = False if f.taken or not all(g.active for g in self.frames[:-1]) else self._condition(cond)
        f = self.frames[-1]
        f.active, f.taken = bool(status), f.taken or bool(status)
        return True

    def _condition(self, cond: list[Token]) -> bool:
        head = cond[0].text if cond else ""
        if head in ("[", "[[", "test", "!"):
            return bool(self.test(cond))
        self.note(f"if {_short(_raw(cond))}: not run; taken as true")
        return True

    def test(self, toks: list[Token]) -> bool:
        """``[ ... ]``/``[[ ... ]]``/``test ...``: string and integer comparisons, -z/-n; else assumed."""
        raw = [t.text for t in toks]
        neg = bool(raw) and raw[0] == "!"
        body = raw[1:] if neg else raw
        body = body[1:-1] if body and body[0] in ("[", "[[") and body[-1] in ("]", "]]") else body[1:]
        if body and body[0] == "!":
            neg, body = not neg, body[1:]
        args = [self.ex.string(w) for w in body]
        text = _short(" ".join(raw))
        if len(args) == 3 and args[1] in ("=", "==", "!="):
            result = (args[0] == args[2]) == (args[1] != "!=")
        elif len(args) == 3 and args[1] in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
            a, b = self.ex.arith(args[0]), self.ex.arith(args[2])
            result = {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-le": a <= b, "-gt": a > b, "-ge": a >= b}[args[1]]
        elif len(args) == 2 and args[0] in ("-z", "-n"):
            result = (args[1] == "") == (args[0] == "-z")
        elif len(args) == 1:
            result = args[0] != ""
        elif len(args) == 2 and re.fullmatch(r"-[a-zA-Z]", args[0]):
            self.note(f"{text}: files are not looked at; taken as false")
            result = False
        else:
            self.note(f"{text}: not evaluated; taken as true")
            result = True
        return result != neg


def _lex_or_none(text: str) -> list[Token] | None:
    """A ``bash -c`` string's tokens, or None where it cannot be read (it holds a ``$(...)`` kept as written)."""
    try:
        return lex(text)
    except ValueError:
        return None


def _raw(toks: list[Token]) -> str:
    return " ".join(t.text for t in toks)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _statements(tokens: list[Token]) -> Iterator[tuple[list[Token], str]]:
    """(statement, the operator before it): split at ``;``/``&&``/``||``/``|``/``&``/newline/parens;
    ``name() {`` and ``function name() {`` become ``function name {``."""
    cur: list[Token] = []
    after = "\n"
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if (t.op and t.text == "(" and cur and (len(cur) == 1 or (len(cur) == 2 and cur[0].text == "function"))
                and i + 1 < len(tokens) and tokens[i + 1].text == ")"):  # name() { or function name() {
            cur = [Token("function"), cur[-1]]
            i += 2
            continue
        if t.op:
            if cur:
                yield cur, after
            cur, after = [], t.text if t.text in ("&&", "||", "|") else "\n"
        else:
            cur.append(t)
        i += 1
    if cur:
        yield cur, after


def read_script(text: str, where: str, home: str | None = None) -> Script:
    """``text`` (a launch script, an overrides file or a command line) run as bash would run it -> the
    commands' words, the variables set and what was assumed. A script bash cannot read (an unclosed
    quote) -> one-line ConfigError naming ``where``."""
    try:
        tokens = lex(text.replace("\r\n", "\n"))
    except ValueError as e:
        raise ConfigError(f"{where}: cannot read as a shell script: {e}") from None
    run = _Run(home if home is not None else os.path.expanduser("~"))
    try:
        run.run(tokens)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    except (ValueError, IndexError) as e:
        raise ConfigError(f"{where}: cannot read as a shell script: {e}") from None
    variables = tuple((k, v if isinstance(v, str) else " ".join(v)) for k, v in run.vars.items())
    return Script(tuple(run.commands), variables, tuple(run.notes))


__all__ = ["Script", "read_script"]
