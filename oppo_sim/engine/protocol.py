"""What a generation driver may ask of an engine core, whichever batching it models.

Both :class:`oppo_sim.engine.continuous.EngineCore` (vLLM-style continuous batching) and
:class:`oppo_sim.engine.static.StaticEngineCore` (TRL-style static batches, generation in calls of C
tokens) satisfy :class:`GenerationEngine`, so the simpy ``GenReplica`` (and any other driver) drives
either without knowing which. The contract, as ``GenReplica`` relies on it:

- ``plan()`` is pure: it says what the engine would do next (``None``: nothing to do) without changing
  state; ``commit(plan, now)`` applies it, ending at simulated time ``now``, and returns the
  ``(event, request)`` pairs (``FINISH`` / ``EMIT`` / ``PAUSE`` from ``continuous``);
- a *steady* plan is one device job; ``truncate(plan, iters)`` may cut it when the driver is poked
  (an engine whose work cannot be cut returns the plan unchanged), and ``cost.iters_within(plan.b,
  plan.kv0, ...)`` must be safe to call on it (``b == 0`` makes it a no-op);
- a non-steady plan goes through ``run_chain()``: the chain is committed at once, and
  ``cut_chain(keep)`` cuts it to its first ``keep`` iterations if the driver is poked while it runs
  (``snapshot()`` / ``restore()`` save and restore the whole engine);
- ``add`` queues a request (also between ``plan`` and ``commit``: it must not change the planned work);
  ``remove_all`` takes every request out with its progress (``generated``) kept;
- ``running`` and ``waiting`` are sized collections (the driver balances replicas by their lengths);
  ``iterations`` and ``preemptions`` are counters reported in a simulation's summary.
"""

from __future__ import annotations

from typing import Protocol, Sized, runtime_checkable

from oppo_sim.engine.request import Chain, Plan, Req
from oppo_sim.hw.costs.costmodel import DecodeCost


@runtime_checkable
class GenerationEngine(Protocol):
    cost: DecodeCost
    iterations: int
    preemptions: int

    @property
    def running(self) -> Sized: ...

    @property
    def waiting(self) -> Sized: ...

    def add(self, req: Req) -> None: ...

    def has_work(self) -> bool: ...

    def remove_all(self) -> list[Req]: ...

    def plan(self) -> Plan | None: ...

    def truncate(self, plan: Plan, iters: int) -> Plan: ...

    def commit(self, plan: Plan, now: float) -> list[tuple[str, Req]]: ...

    def run_chain(self, first: Plan, start: float, max_iters: int) -> Chain: ...

    def cut_chain(self, keep: int) -> Chain: ...

    def snapshot(self) -> tuple: ...

    def restore(self, snap: tuple) -> None: ...
