"""The ``--from-verl`` / ``--from-openrlhf`` / ``--from-nemo-rl`` options of ``oppo-sim run``/``compare``/``sweep``: the framework's
settings are translated into oppo-sim arguments and placed *before* the typed ones, so that one parser
builds the ``SimConfig`` and a typed oppo-sim flag wins over a translated one. The echo (every key used
with the option it became, every key ignored) is printed first.

A translated option this oppo-sim does not have is moved to the ignored list rather than refused (a
reader may know a setting before the simulator models it)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Sequence

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.translation import Ignored, Translation

FLAGS: tuple[str, ...] = ("--from-verl", "--from-openrlhf", "--from-nemo-rl")
COMMANDS: tuple[str, ...] = ("run", "compare", "sweep", "check")


def add_framework_args(p: argparse.ArgumentParser) -> None:
    """``--from-verl SOURCE`` (repeatable), ``--from-openrlhf ARGS`` and ``--from-nemo-rl RECIPE`` (repeatable)
    (read by :func:`with_framework_args`)."""
    g = p.add_argument_group("a framework's settings, translated (typed oppo-sim options win)")
    g.add_argument("--from-verl", action="append", metavar="SOURCE", default=None,
                   help="a verl trainer config: a ppo_trainer.yaml-shaped .yaml file, a file of key=value overrides "
                        "or a launch script, or the overrides themselves; repeatable, later wins (default: none)")
    g.add_argument("--from-openrlhf", metavar="ARGS", default=None,
                   help="an OpenRLHF train_ppo_ray command line, its dotted (2026-04 on) or flat flags (its "
                        "arguments, or a file holding it) (default: none)")
    g.add_argument("--from-nemo-rl", action="append", metavar="RECIPE", default=None,
                   help="a NeMo RL GRPO recipe .yaml (its defaults: chain followed) and key=value overrides as "
                        "run_grpo.py takes them; repeatable (default: none)")


def _known(parser: argparse.ArgumentParser, cmd: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(cmd)
    return None


def _split(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(argv without the framework options, {framework option: its values in order})."""
    rest: list[str] = []
    given: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        flag, eq, value = tok.partition("=")
        if flag in FLAGS:
            if not eq:
                if i + 1 >= len(argv):
                    raise ConfigError(f"{flag} needs a value")
                value, i = argv[i + 1], i + 1
            if flag == "--from-openrlhf" and flag in given:
                raise ConfigError("--from-openrlhf given twice")
            given.setdefault(flag, []).append(value)
        else:
            rest.append(tok)
        i += 1
    return rest, given


def fit_to(t: Translation, known: set[str]) -> Translation:
    """``t`` without the options the parser does not have (each such key moved to the ignored list)."""
    used, ignored = [], list(t.ignored)
    for u in t.used:
        groups: list[list[str]] = []
        for a in u.args:
            if a.startswith("--") or not groups:
                groups.append([a])
            else:
                groups[-1].append(a)
        kept = [g for g in groups if g[0] in known]
        for g in groups:
            if g[0] not in known:
                ignored.append(Ignored(u.key, u.value, f"-> {' '.join(g)}, but this oppo-sim has no {g[0]}"))
        used.append(replace(u, args=tuple(a for g in kept for a in g)) if len(kept) < len(groups) else u)
    return replace(t, used=tuple(used), ignored=tuple(ignored))


def translate(verl: Sequence[str], openrlhf: str | None, nemo_rl: Sequence[str] = ()) -> Translation:
    named = [f for f, on in (("--from-verl", verl), ("--from-openrlhf", openrlhf is not None),
                             ("--from-nemo-rl", nemo_rl)) if on]
    if len(named) > 1:
        raise ConfigError(f"give {' or '.join(named)}, not " + ("both" if len(named) == 2 else "several"))
    if openrlhf is not None:
        from oppo_sim.frameworks.openrlhf import translate_openrlhf

        return translate_openrlhf(openrlhf)
    if nemo_rl:
        from oppo_sim.frameworks.nemo_rl import translate_nemo_rl

        return translate_nemo_rl(nemo_rl)
    from oppo_sim.frameworks.verl import translate_verl

    return translate_verl(verl)


POLICY_KNOBS: dict[str, str] = {"--staleness": "async", "--in-flight-weight-updates": "async"}
"""A translated policy knob and the policy that uses it: kept only where that policy runs."""


def _typed_policies(rest: list[str]) -> list[str] | None:
    """The policies typed with ``--policy``/``--policies`` (None: none typed)."""
    for i, tok in enumerate(rest):
        flag, eq, value = tok.partition("=")
        if flag in ("--policy", "--policies"):
            value = value if eq else (rest[i + 1] if i + 1 < len(rest) else "")
            return [v.strip().lower().split("(")[0] for v in value.split(",")]
    return None


def fit_policy(t: Translation, rest: list[str]) -> Translation:
    """``t`` without the framework's policy knobs (``--staleness``) where the policy that uses them does not run:
    a policy typed on the command line wins over the framework's, and ``compare``/``sweep`` run their
    ``--policies`` (the knob is moved to the ignored list, saying so)."""
    typed = _typed_policies(rest)
    args = list(t.args)
    own = args[args.index("--policy") + 1] if "--policy" in args[:-1] else None
    running = typed if typed is not None else ([own] if own else [])
    used, ignored = [], list(t.ignored)
    for u in t.used:
        drop = [k for k in POLICY_KNOBS if k in u.args and POLICY_KNOBS[k] not in running]
        if not drop and not (typed is not None and "--policy" in u.args):
            used.append(u)
            continue
        keep, gone = _without(u.args, (*drop, "--policy"))
        ignored.append(Ignored(u.key, u.value, "the policies run are the command line's: " + " ".join(gone)))
        used.append(replace(u, args=keep))
    return replace(t, used=tuple(used), ignored=tuple(ignored))


def _without(args: tuple[str, ...], options: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
    """(``args`` less ``options`` and each one's value, what was taken out)."""
    keep = [a for i, a in enumerate(args) if a not in options and (i == 0 or args[i - 1] not in options)]
    return tuple(keep), [a for a in args if a not in keep]


EXCLUSIVE: tuple[tuple[str, str], ...] = (("--micro-batch-tokens", "--micro-batch-size"),
                                          ("--logprob-micro-batch-tokens", "--logprob-micro-batch-size"))
"""Options of which one run takes one: typing either replaces the framework's of the pair, whichever it gave."""


def fit_typed(t: Translation, typed: set[str]) -> Translation:
    """``t`` without the framework's options of a pair (:data:`EXCLUSIVE`) one of which is typed on the command line
    (a typed ``--micro-batch-tokens`` wins over the framework's ``--micro-batch-size`` too; said in the ignored list)."""
    drop = [o for pair in EXCLUSIVE if typed & set(pair) for o in pair]
    used, ignored = [], list(t.ignored)
    for u in t.used:
        if not drop or not set(drop) & set(u.args):
            used.append(u)
            continue
        keep, gone = _without(u.args, drop)
        ignored.append(Ignored(u.key, u.value, "the command line's micro-batch wins over " + " ".join(gone)))
        used.append(replace(u, args=keep))
    return replace(t, used=tuple(used), ignored=tuple(ignored))


def with_framework_args(parser: argparse.ArgumentParser, argv: Sequence[str], echo: bool = True) -> list[str]:
    """``argv`` with any ``--from-verl``/``--from-openrlhf``/``--from-nemo-rl`` replaced by the translated arguments, placed right
    after the sub-command (so typed options win); prints the echo. Other argv is returned unchanged."""
    argv = list(argv)
    if not argv or not any(tok.partition("=")[0] in FLAGS for tok in argv):
        return argv
    cmd = argv[0]
    sub = _known(parser, cmd) if cmd in COMMANDS else None
    if sub is None:
        raise ConfigError(f"{'/'.join(FLAGS)} go with {', '.join(COMMANDS)}, after the sub-command")
    rest, given = _split(argv[1:])
    orl = given.get("--from-openrlhf", [None])[0]
    known = set(sub._option_string_actions) - ({"--steps", "--trace"} if cmd == "check" else set())  # check: the log's
    t = fit_to(translate(given.get("--from-verl", []), orl, given.get("--from-nemo-rl", [])), known)
    if cmd != "check":  # check simulates the framework's own schedule (--policy) and its --policies beside it
        t = fit_policy(t, rest)
    typed = {tok.partition("=")[0] for tok in rest if tok.startswith("--")}
    t = fit_typed(t, typed)
    for option, error in t.pending:
        if option not in typed:
            raise ConfigError(error)
    if echo:  # check's lengths come from the run's log, not from a trace
        print(t.echo(typed | ({"--trace"} if cmd == "check" else set())) + "\n")
    said = ["--config-framework", t.framework] if cmd == "check" else []  # check refuses a log of another framework
    return [cmd, *said, *t.args, *rest]


__all__ = ["COMMANDS", "EXCLUSIVE", "FLAGS", "POLICY_KNOBS", "add_framework_args", "fit_policy", "fit_to", "fit_typed", "translate",
           "with_framework_args"]
