"""What the step machine knows of one admitted sample, from admission until it is trained (or dropped):
its :class:`Track`, held by the run's :class:`~oppo_sim.core.ledger.Ledger` and checkpointed with it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Mapping


@dataclass(slots=True)
class Track:
    """What the machine knows of one admitted sample, from admission until it is trained."""

    sid: int
    admit_step: int
    admit_version: int
    target: int  # most response tokens it can generate (a forced length, or the cap)
    generated: int = 0
    emitted: int = 0  # response tokens handed to the streamed scorers
    emit_at: int | None = None  # its next chunk boundary, while it generates under a chunked plan
    pause_at: int | None = None  # in force while it generates under a token budget
    finished: bool = False
    reward: float | None = None  # its reward, once the driver reported it (dynamic sampling reads it)
    streamed: set[str] = field(default_factory=set)  # roles whose final answer comes from the stream
    scored: set[str] = field(default_factory=set)  # roles whose final answer is computed

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["streamed"], d["scored"] = sorted(self.streamed), sorted(self.scored)
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> "Track":
        d = dict(d)
        d["streamed"], d["scored"] = set(d["streamed"]), set(d["scored"])
        return cls(**d)
