"""What the framework readers share: the :class:`Translation` a reader returns (oppo-sim arguments, and
what each framework key became or why it was ignored), the readers' inputs (a YAML file, a file of
``key=value`` overrides or a launch script, a string of them; a script or command line is read as bash
would expand it, :mod:`oppo_sim.frameworks.shell`, and what that assumed is echoed), the model-path rule,
and the planner's placement labels that ``--placement`` also takes. The echo ends with what matters to a
run's time and came from oppo-sim's defaults rather than the file (the GPU, the trace).

A translation is a list of oppo-sim command-line arguments, parsed by the same parser as typed ones:
there is one path from options to a ``SimConfig``. On the command line the translated arguments go
*before* the ones typed, so an explicit oppo-sim flag wins over a translated one (argparse keeps the
last value). An on/off option the translation sets (``--no-reference``, ``--truncate-prompt``) cannot be
unset from the command line; edit the framework file instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.userfiles import read_yaml_mapping, user_path
from oppo_sim.frameworks.shell import read_script

_KEY = re.compile(r"^[+~]{0,2}[A-Za-z_][\w.\-]*$")
_INTERP = re.compile(r"^\$\{(?:oc\.select:)?([A-Za-z_][\w.]*)\s*(?:,\s*(.*))?\}$")
_WORD = re.compile(r"[a-z0-9.]+")


@dataclass(frozen=True)
class Used:
    """A framework key and the oppo-sim arguments it became (empty: oppo-sim's default already matches)."""

    key: str
    value: Any
    args: tuple[str, ...]
    note: str = ""
    default: bool = False  # the framework's documented default, not given in the source


@dataclass(frozen=True)
class Ignored:
    """A framework key oppo-sim does not use, and why."""

    key: str
    value: Any
    why: str


@dataclass(frozen=True)
class Translation:
    """A framework configuration as oppo-sim arguments: ``args`` in order, ``used`` (key -> option), ``ignored``,
    ``notes`` (what is approximated), and ``pending``: option -> error raised unless the option is typed
    explicitly (e.g. a model path that names no known model, which ``--actor`` on the command line settles).
    ``assumed``: what reading a launch script assumed (:mod:`oppo_sim.frameworks.shell`); ``schedule``: the
    oppo-sim policy the framework's own schedule is (``baseline`` for a synchronous loop, ``async(k=1)``;
    None where the reader does not say)."""

    framework: str
    sources: tuple[str, ...]
    used: tuple[Used, ...]
    ignored: tuple[Ignored, ...] = ()
    notes: tuple[str, ...] = ()
    pending: tuple[tuple[str, str], ...] = ()
    assumed: tuple[str, ...] = ()
    schedule: str | None = None

    @property
    def args(self) -> tuple[str, ...]:
        return tuple(a for u in self.used for a in u.args)

    def options(self) -> tuple[str, ...]:
        """The oppo-sim options the translation sets (``--batch``, ``--no-reference``, ...)."""
        return tuple(a for a in self.args if a.startswith("--"))

    def echo(self, given: Iterable[str] = ()) -> str:
        """The readable block: every key used with the option it became, every key ignored, the notes.
        ``given``: options typed on the command line (they win; marked as overridden)."""
        given = set(given)
        lines = [f"{self.framework} configuration from {', '.join(self.sources)} -> oppo-sim options:"]
        width = max((len(u.key) for u in self.used), default=10)
        for u in self.used:
            became = " ".join(u.args) or "(no option of its own)"
            over = [a for a in u.args if a.startswith("--") and a in given]
            tail = "".join([f"  [{u.note}]" if u.note else "", "  (framework default)" if u.default else "",
                            f"  (overridden by {', '.join(over)} on the command line)" if over else ""])
            lines.append(f"  {u.key:<{width}} = {_show(u.value):<14} -> {became}{tail}")
        if self.schedule is not None:
            lines.append(f"schedule: {self.framework}'s own loop is oppo-sim's policy {self.schedule}")
        if self.ignored:
            lines.append(f"ignored ({len(self.ignored)}):")
            lines += [f"  {i.key}{'' if i.value == '' else ' = ' + _show(i.value)}  ({i.why})" for i in self.ignored]
        if self.assumed:
            lines.append("assumed while reading the script as bash would run it:")
            lines += [f"  - {n}" for n in self.assumed]
        if self.notes:
            lines.append("approximated:")
            lines += [f"  - {n}" for n in self.notes]
        lines += _from_defaults(set(self.options()) | given)
        return "\n".join(lines)


def _from_defaults(set_: set[str]) -> list[str]:
    """What matters to a run's time and comes from oppo-sim's defaults, not the framework's file (one line)."""
    from oppo_sim.pipeline.config import SimConfig
    from oppo_sim.traces.trace import DEFAULT_TRACE

    missing = [f"{what} {opt} {value}" for opt, what, value in (
        ("--gpu", "the GPU:", SimConfig.gpu), ("--trace", "the prompt and response lengths: the trace", DEFAULT_TRACE))
        if opt not in set_ and not (opt == "--gpu" and "--profile" in set_)]
    return [f"not in the file, oppo-sim's default (type it to match your job): {'; '.join(missing)}"] if missing else []


def _show(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 48 else text[:45] + "..."


@dataclass
class Builder:
    """Collects a translation key by key (a reader's scratch pad; :meth:`done` freezes it)."""

    framework: str
    sources: tuple[str, ...]
    used: list[Used] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pending: list[tuple[str, str]] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    schedule: str | None = None

    def use(self, key: str, value: Any, *args: Any, note: str = "", default: bool = False) -> None:
        self.used.append(Used(key, value, tuple(str(a) for a in args), note, default))

    def use_model(self, key: str, value: Any, flag: str) -> None:
        """A framework's model path as ``flag`` (``--actor``, ``--reward``): its config.json or a matched table id
        (:func:`model_arg`); unmatched, it is echoed as unresolved and the run needs ``flag`` typed."""
        arg, how = model_arg(key, value)
        if arg is None:
            self.pending.append((flag, missing_model(key, value, flag)))
            self.use(key, value, note=f"unresolved: needs {flag}")
        else:
            self.use(key, value, flag, arg, note=how)

    def training_loop(self, name: str) -> None:
        """The framework's trainer runs every scoring pass in its own loop, one after the other, once the previous
        step's update and weight sync are done: ``--after-update all`` (it matters to an async schedule)."""
        self.use("training loop", "one pass at a time", "--after-update", "all", default=True,
                 note=f"{name}'s trainer runs each step's scoring passes in turn, after the previous step's update and "
                      f"weight sync")

    def ignore(self, key: str, value: Any, why: str) -> None:
        self.ignored.append(Ignored(key, value, why))

    def done(self) -> Translation:
        return Translation(self.framework, self.sources, tuple(self.used), tuple(self.ignored), tuple(self.notes),
                           tuple(self.pending), tuple(dict.fromkeys(self.assumed)), self.schedule)


# ---- reading -------------------------------------------------------------------------------------------

def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (``{'data': {'train_batch_size': 8}}`` -> ``{'data.train_batch_size': 8}``);
    lists and scalars are values."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out


def _yaml():
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is a dependency
        raise ConfigError("reading a YAML config needs PyYAML: pip install pyyaml") from None
    return yaml


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping file, flattened; anything else -> one-line ConfigError."""
    return flatten(read_yaml_mapping(path, f"verl config '{path}'", "a verl trainer config"))


def scalar(text: str) -> Any:
    """An override's value as Hydra reads it (YAML scalars: ``True``, ``null``, ``512``, ``0.6``, ``[a,b]``);
    what YAML cannot read stays a string (``$HOME/data``)."""
    yaml = _yaml()
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def read_overrides(tokens: Iterable[str], source: str) -> tuple[dict[str, Any], list[str]]:
    """``key=value`` tokens (Hydra's ``+key``/``++key`` taken as ``key``) -> (overrides in order, other tokens).
    ``~key`` (a deletion) and a token that is not ``key=value`` are returned as the other tokens."""
    out: dict[str, Any] = {}
    stray: list[str] = []
    for tok in tokens:
        key, eq, value = tok.partition("=")
        if not eq or not _KEY.match(key) or key.startswith("~"):
            if eq and not key:
                raise ConfigError(f"{source}: override {tok!r} has no key (expected key=value)")
            stray.append(tok)
            continue
        out[key.lstrip("+")] = scalar(value)
    return out, stray


def existing_file(text: str) -> Path | None:
    """``text`` as a path if it names a file (a command line or an override string is not one: it may be
    longer than the system allows a file name, which ``Path.is_file`` would raise on), else None."""
    if "\n" in text or not text.strip():
        return None
    try:
        path = user_path(text.strip())
        return path if path.is_file() else None
    except OSError:  # e.g. ENAMETOOLONG: an argument string, not a file
        return None


@dataclass(frozen=True)
class Source:
    """One framework source read: its ``key=value`` keys, the other words (``python3``, ``-m``, a module,
    ``--config-name=...``), and what reading it as bash assumed (:func:`oppo_sim.frameworks.shell.read_script`)."""

    keys: dict[str, Any]
    stray: tuple[str, ...]
    notes: tuple[str, ...] = ()
    plus: frozenset[str] = frozenset()  # keys given as +key=value (Hydra: added, not overridden)


def load_source(source: str, flag: str) -> Source:
    """One ``--from-verl`` value: a ``.yaml``/``.yml`` file (a whole trainer config), another file (overrides
    or a launch script, expanded as bash would), or the overrides themselves."""
    path = existing_file(source)
    if path is not None:
        if path.suffix.lower() in (".yaml", ".yml"):
            return Source(read_yaml(path), ())
        script = read_script(path.read_text(), str(path))
    elif "=" in source:
        script = read_script(source, flag)
    else:
        raise ConfigError(f"{flag} {source!r}: no such file, and not key=value overrides")
    keys, stray = read_overrides(script.words, str(path) if path is not None else flag)
    plus = frozenset(w.split("=", 1)[0].lstrip("+") for w in script.words if w.startswith("+") and "=" in w)
    return Source(keys, tuple(stray), script.notes, plus)


def read_source(source: str, flag: str) -> tuple[dict[str, Any], list[str]]:
    """:func:`load_source` as (keys, stray words)."""
    src = load_source(source, flag)
    return src.keys, list(src.stray)


def split_words(text: str, where: str) -> list[str]:
    """The words of the commands a script or command line runs, expanded as bash would (its assignments
    consumed; comments and line continuations removed). :func:`script_words` also returns what was assumed."""
    return list(read_script(text, where).words)


def script_words(text: str, where: str) -> tuple[list[str], tuple[str, ...]]:
    """(:func:`split_words`, one line per thing the reading assumed: loops, ``$(...)``, unset variables)."""
    script = read_script(text, where)
    return list(script.words), script.notes


def resolve(flat: dict[str, Any]) -> dict[str, Any]:
    """Replace ``${other.key}`` values by that key's value, and ``${oc.select:other.key,default}`` by it or
    the default (Hydra/OmegaConf interpolation, one level deep at a time)."""
    out = dict(flat)
    for _ in range(4):
        changed = False
        for k, v in out.items():
            m = _INTERP.match(v) if isinstance(v, str) else None
            if not m or (m.group(2) is not None and not v.startswith("${oc.select:")):
                continue
            if m.group(1) in out and out[m.group(1)] is not v:
                out[k], changed = out[m.group(1)], True
            elif m.group(1) not in out and m.group(2) is not None:
                out[k], changed = scalar(m.group(2).strip()), True
        if not changed:
            break
    return out


# ---- values --------------------------------------------------------------------------------------------

def as_int(key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ConfigError(f"{key}: expected an integer, got {v!r}")
    try:
        f = float(v)
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {v!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise ConfigError(f"{key}: expected an integer, got {v!r}")
    return int(f)


def as_float(key: str, v: Any) -> float:
    """A finite number (every float setting the readers take is a fraction or a coefficient: NaN and infinity are
    refused)."""
    if isinstance(v, bool):
        raise ConfigError(f"{key}: expected a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected a number, got {v!r}") from None
    if not math.isfinite(f):
        raise ConfigError(f"{key}: expected a finite number, got {v!r}")
    return f


def as_bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", "none", "null"):
        return False
    raise ConfigError(f"{key}: expected True or False, got {v!r}")


def model_arg(key: str, value: Any) -> tuple[str | None, str]:
    """A framework's model path as an oppo-sim model argument -> (argument, how it was found), argument None
    when nothing matches. A local directory holding ``config.json`` (or the file itself) is passed as a path
    (``get_model`` reads Hugging Face configs); otherwise a table id is matched from the name
    (``Qwen/Qwen2.5-7B-Instruct`` -> ``qwen2.5-7b``: the longest id found in the name on word boundaries)."""
    from oppo_sim.hw.models.lookup import MODELS

    text = str(value).strip()
    path = existing_file(text)
    if path is not None and path.name == "config.json":
        return str(path), "its config.json"
    if existing_file(str(user_path(text) / "config.json")) is not None:
        return str(user_path(text) / "config.json"), "its config.json"
    name = text.rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-")
    best = None
    for mid in MODELS:
        for m in re.finditer(re.escape(mid), name):
            before = name[m.start() - 1] if m.start() else "-"
            after = name[m.end()] if m.end() < len(name) else "-"
            if not before.isalnum() and not (after.isalnum() or after == "."):
                best = mid if best is None or len(mid) > len(best) else best
    if best is None:
        return None, ""
    note = MODELS[best].note
    return best, f"table id matched from the name {text!r}" + (f"; {note}" if note else "")


def missing_model(key: str, value: Any, flag: str) -> str:
    text = str(value).strip()
    what = ("is empty (a variable the script does not set?)" if not text else
            "a placeholder for you to fill in, not a model (the framework cannot run it as written either)"
            if text.startswith("<") or " " in text else "no config.json there and no oppo-sim model matches the name")
    return f"{key}={value}: {what}; give {flag} with a table id or a path to a Hugging Face config.json"


__all__ = ["Builder", "Ignored", "Source", "Translation", "Used", "as_bool", "as_float", "as_int", "existing_file", "flatten",
           "load_source", "missing_model", "model_arg", "read_overrides", "read_source", "read_yaml", "resolve", "scalar",
           "script_words", "split_words"]
