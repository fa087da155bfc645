"""Which trace row each admitted sample replays: the one rule the simulator and the real executor share.

A run admits fresh samples step by step (sample ids ``sid`` 0, 1, 2, ... in admission order). Each one
takes its response length (and, for the first member of a group, its prompt length; its reward, if the
trace has one) from one trace row, chosen **when it is admitted** — a sample deferred from step t to
t + 1 keeps the row, and so the length, it was admitted with.

* **No ``step`` column** (the rule since the beginning): sample ``sid`` replays row
  ``(offset + sid) % len(trace)`` — rows in file order, cyclically.
* **A ``step`` column** (drifting lengths replay in order): the trace's distinct step values, sorted,
  are its steps ``s_0 < s_1 < ... < s_{S-1}`` (gaps between the numbers do not matter). Simulation step
  ``t`` replays trace step ``s_{(offset + t) % S}`` — when the run has more steps than the trace, it
  starts over from the first trace step. The ``k``-th fresh sample admitted in step ``t`` (counting from
  0, refills and the replacements of dropped groups included) takes that trace step's ``k % m``-th row,
  rows in file order, where ``m`` is how many rows the trace step has: a trace step with fewer rows than
  the step admits is cycled through, one with more leaves its last rows unused. With groups of ``n``
  responses per prompt, the group's prompt is its first member's row, so a verl dump (the ``n``
  responses of a prompt on consecutive lines) keeps prompts and responses paired when a step admits
  ``B x n`` samples. ``offset`` (``SimConfig.trace_offset``) counts trace steps here.

The counter ``k`` lives in :class:`TraceReplay` (one integer per step): admissions of a step never
resume from a checkpoint (a checkpoint is taken only when no step is generating), so a restored run
counts from 0 in every step it admits, as the uninterrupted run did.
"""

from __future__ import annotations

import numpy as np

from oppo_sim.core.errors import ConfigError
from oppo_sim.traces.trace import Trace


class TraceReplay:
    """The row of ``trace`` each admitted sample replays (see the module docstring for the rule)."""

    def __init__(self, trace: Trace, offset: int = 0) -> None:
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
            raise ConfigError(f"{trace.name}: trace offset must be an integer >= 0, got {offset!r}")
        self.rows = len(trace)
        self.offset = int(offset)
        self.steps: list[np.ndarray] | None = None  # per trace step (sorted), its row indices in file order
        self.step_values: np.ndarray | None = None
        if trace.step is not None:
            order = np.argsort(trace.step, kind="stable")
            values, starts = np.unique(trace.step[order], return_index=True)
            self.steps = np.split(order, starts[1:])
            self.step_values = values
        self._count: dict[int, int] = {}  # simulation step -> fresh samples it admitted so far

    @property
    def stepped(self) -> bool:
        """True when the trace has a ``step`` column (rows are chosen per step)."""
        return self.steps is not None

    def trace_step(self, step: int) -> int:
        """The trace's step value simulation step ``step`` replays (stepped traces only)."""
        if self.steps is None:
            raise ConfigError("the trace has no step column")
        return int(self.step_values[(self.offset + step) % len(self.steps)])

    def row_at(self, sid: int, step: int, k: int) -> int:
        """The row of sample ``sid``, the ``k``-th fresh sample admitted in step ``step`` (pure)."""
        if self.steps is None:
            return (self.offset + sid) % self.rows
        rows = self.steps[(self.offset + step) % len(self.steps)]
        return int(rows[k % len(rows)])

    def admit(self, sid: int, step: int) -> int:
        """Sample ``sid`` is admitted fresh in step ``step`` now: its row (counted in the step's admissions)."""
        k = self._count.get(step, 0)
        self._count[step] = k + 1
        return self.row_at(sid, step, k)
