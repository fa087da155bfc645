"""The vocabulary between the step machine and its two drivers: what a driver tells the machine
(events) and what the machine tells the driver to do (actions).

Every record is a plain dataclass, in the spirit of vLLM v1's ``SchedulerOutput``: the machine
never calls an engine, it *answers*. The simulator's simpy driver (``oppo_sim/pipeline/driver.py``) and
the real executor's driver (``oppo_real/executor/real_driver.py``) turn engine events into :class:`Progress` reports
and actions into engine calls, and neither decides anything itself. Records are never changed once made;
the four made per sample and chunk (``Progress``, ``Marks``, ``Launch``, ``Emit``) are slotted rather than
frozen, as a frozen dataclass takes about four times as long to build (a simulated run makes ~6 per sample).

Action kinds, in the order a step produces them::

    Launch      resume a carried request / admit a fresh prompt, with its engine marks
    Emit        hand tokens [start, upto) of a response to the streamed scorers (final: it finished)
    Pause       take a request out of generation (its token budget is spent); it is deferred
    EndGeneration   stop generating: whatever is unfinished is deferred with its tokens
    Defer       these requests carry over to the next step with their partial work (with groups: whole
                groups, their finished members included -- those wait, they are not launched again)
    FormBatch   the B samples (B groups of n) this step trains on (first to finish / complete first)
    ScoreWhole  score these samples' whole sequences with this role (what streaming did not cover)
    Train       every role has scored the batch: run the PPO update
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union


@dataclass(slots=True)
class Progress:
    """An engine report about one request: it has generated ``generated`` response tokens in total
    (across steps); ``finished`` when it produced its last one."""

    sid: int
    generated: int
    finished: bool = False
    reward: float | None = None  # with a finish: the response's reward where the driver knows it (dynamic sampling)


@dataclass(slots=True)
class Marks:
    """Where the engine must stop and report a request: the next chunk boundary (``emit_at``) and the
    end of its token budget (``pause_at``), both in response tokens generated in total; None: no mark."""

    emit_at: int | None = None
    pause_at: int | None = None


@dataclass(slots=True)
class Launch:
    sid: int
    fresh: bool  # True: a new prompt admitted now; False: a carried request resumed with its tokens
    generated: int  # response tokens it already has (0 for a fresh prompt)
    marks: Marks


@dataclass(slots=True)
class Emit:
    sid: int
    start: int  # first response token not yet handed to the streamed scorers
    upto: int  # hand over tokens [start, upto)
    final: bool  # the response finished: the scorers compute their final answer
    roles: tuple[str, ...]
    next_emit_at: int | None = None  # the request's next chunk boundary (unfinished responses)


@dataclass(frozen=True)
class Pause:
    sid: int


@dataclass(frozen=True)
class EndGeneration:
    pass


@dataclass(frozen=True)
class Defer:
    sids: tuple[int, ...]


@dataclass(frozen=True)
class FormBatch:
    step: int
    sids: tuple[int, ...]


@dataclass(frozen=True)
class ScoreWhole:
    role: str
    sids: tuple[int, ...]


@dataclass(frozen=True)
class Train:
    step: int
    sids: tuple[int, ...]


Action = Union[Launch, Emit, Pause, EndGeneration, Defer, FormBatch, ScoreWhole, Train]


def describe(action: Action) -> str:
    """One short line per action (decision logs, test failure messages)."""
    if isinstance(action, Launch):
        return f"{'admit' if action.fresh else 'resume'} {action.sid} at {action.generated} {action.marks}"
    if isinstance(action, Emit):
        return f"emit {action.sid} [{action.start},{action.upto}){' final' if action.final else ''} -> {','.join(action.roles)}"
    return repr(action)
