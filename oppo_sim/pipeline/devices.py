"""Device pools on a simpy clock: processor sharing between jobs that land on the same device.

A job is an amount of *work* (seconds it would take alone) on a set of a pool's devices. Jobs that share
a device split it: with ``n`` jobs on a device each progresses at ``1 / (n * (1 + contention))``
(``contention`` is the explicit switching/interference penalty; 0 = ideal time slicing). A job spanning
several devices progresses at the rate of its most loaded device. Completion times are recomputed
whenever a job arrives, leaves or is shortened, so nothing is simulated per token.

The pool also keeps each device's busy time (for utilization) and writes one timeline row per job,
merging back-to-back jobs of the same activity and step on the same devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.events import Event, Timeout


class Job:
    """``work`` seconds (alone) on ``devices``; what it is (activity, role, step) and what it computes (tokens,
    FLOPs, recompute FLOPs) go to the timeline when it completes."""

    __slots__ = ("devices", "remaining", "work", "rate", "done", "start", "last", "timer",
                 "activity", "role", "step", "tokens", "flops", "recompute_flops")

    def __init__(self, devices: tuple[int, ...], work: float, done: simpy.Event, start: float, activity: str, role: str,
                 step: int, tokens: int, flops: float, recompute_flops: float):
        self.devices = devices
        self.work = work
        self.remaining = work
        self.rate = 1.0
        self.done = done
        self.start = start
        self.last = start
        self.timer: Timeout | None = None  # the completion in force (rate or work changes supersede it)
        self.activity = activity
        self.role = role
        self.step = step
        self.tokens = tokens
        self.flops = flops
        self.recompute_flops = recompute_flops

    def work_done(self, now: float) -> float:
        """Seconds of (solo) work completed by ``now``."""
        return self.work - (self.remaining - self.rate * (now - self.last))


@dataclass
class Timeline:
    """Rows of (pool, devices, activity, role, step, start, end, tokens, flops, recompute_flops)."""

    rows: list[list[Any]] = field(default_factory=list)
    _open: dict[tuple, list[Any]] = field(default_factory=dict)

    def add(self, pool: str, devices: str, job: Job, end: float) -> None:
        key = (pool, devices, job.activity, job.role, job.step)
        row = self._open.get(key)
        if row is not None and abs(row[6] - job.start) <= 1e-9:
            row[6] = end
            row[7] += job.tokens
            row[8] += job.flops
            row[9] += job.recompute_flops
            return
        row = [pool, devices, job.activity, job.role, job.step, job.start, end, job.tokens, job.flops, job.recompute_flops]
        self._open[key] = row
        self.rows.append(row)


class DevicePool:
    """``n`` identical devices shared by the jobs submitted to them."""

    def __init__(self, env: simpy.Environment, name: str, n: int, peak_flops: float, contention: float, timeline: Timeline):
        self.env = env
        self.name = name
        self.n = n
        self.peak_flops = peak_flops
        self.contention = contention
        self.timeline = timeline
        self.jobs: list[Job] = []
        self.load = [0] * n
        self.busy = [0.0] * n
        self._busy_since = [0.0] * n
        self.all = tuple(range(n))
        self._names: dict[tuple[int, ...], str] = {}  # devices -> the timeline's name for them
        self._on_due = self._due  # (bound once: a callback per scheduled completion)

    # -- public ---------------------------------------------------------------------------------
    def submit(self, devices: tuple[int, ...], work: float, activity: str, role: str = "", step: int = -1,
               tokens: int = 0, flops: float = 0.0, recompute_flops: float = 0.0) -> Job:
        now = self.env.now
        job = Job(devices, max(0.0, work), Event(self.env), now, activity, role, step, tokens, flops, recompute_flops)
        load = self.load
        if len(devices) == 1 and load[devices[0]] == 0:  # alone on its device: full rate
            self.jobs.append(job)
            self._busy_since[devices[0]] = now
            load[devices[0]] = 1
            self._schedule(job)
            return job
        affected = self._sharing(devices)
        if affected:
            self._advance(affected, now)
        self.jobs.append(job)
        for d in devices:
            if load[d] == 0:
                self._busy_since[d] = now
            load[d] += 1
        affected.append(job)
        self._rerate(affected)
        return job

    def shorten(self, job: Job, new_work: float) -> None:
        """Change a running job's total work (e.g. an interrupted decode span); never below work done."""
        if job.done.triggered:
            return
        self._advance([job], self.env.now)
        done = job.work - job.remaining
        job.work = max(new_work, done)
        job.remaining = job.work - done
        self._schedule(job)

    def utilization(self, wall: float) -> float:
        now = self.env.now
        busy = sum(self.busy[d] + (now - self._busy_since[d] if self.load[d] else 0.0) for d in range(self.n))
        return busy / (self.n * wall) if wall > 0 else 0.0

    # -- processor sharing ----------------------------------------------------------------------
    def _sharing(self, devices: tuple[int, ...]) -> list[Job]:
        """Running jobs on any of ``devices`` (their rate changes when a job arrives or leaves there)."""
        load = self.load
        if len(devices) == 1:
            d = devices[0]
            return [j for j in self.jobs if d in j.devices] if load[d] else []
        if not any(map(load.__getitem__, devices)):
            return []
        if len(devices) == self.n:
            return list(self.jobs)
        ds = set(devices)
        return [j for j in self.jobs if not ds.isdisjoint(j.devices)]

    @staticmethod
    def _advance(jobs: list[Job], now: float) -> None:
        for j in jobs:
            j.remaining -= j.rate * (now - j.last)
            j.last = now

    def _rerate(self, jobs: list[Job]) -> None:
        c = self.contention
        load = self.load
        for j in jobs:
            worst = max(map(load.__getitem__, j.devices)) if len(j.devices) > 1 else load[j.devices[0]]
            j.rate = 1.0 if worst <= 1 else 1.0 / (worst * (1.0 + c))
            self._schedule(j)

    def _schedule(self, job: Job) -> None:
        """(Re)schedule the job's completion; a completion scheduled before is superseded (ignored when due)."""
        ev = Timeout(self.env, max(job.remaining, 0.0) / job.rate)
        ev.job = job
        job.timer = ev
        ev.callbacks.append(self._on_due)

    def _due(self, ev: Timeout) -> None:
        job = ev.job
        if job.timer is ev:  # not superseded by a later rate or work change
            self._complete(job)

    def _complete(self, job: Job) -> None:
        now = self.env.now
        job.remaining = 0.0
        job.timer = None  # (no reference cycle left for the garbage collector)
        self.jobs.remove(job)
        load = self.load
        for d in job.devices:
            load[d] -= 1
            if load[d] == 0:
                self.busy[d] += now - self._busy_since[d]
        devs = self._names.get(job.devices)
        if devs is None:
            devs = self._names[job.devices] = "all" if len(job.devices) == self.n else ",".join(map(str, job.devices))
        self.timeline.add(self.name, devs, job, now)
        affected = self._sharing(job.devices)
        if affected:
            self._advance(affected, now)
            self._rerate(affected)
        job.done.succeed()
