"""The simpy driver of one generation engine replica: it asks its engine core for a plan, spends the
plan's time on its devices, commits it, and hands the engine's events (finishes, chunk boundaries,
pauses) to a sink. A poke (a request arrived, a stop) cuts the running work after its current
iteration, so the engine sees new requests exactly when vLLM would."""

from __future__ import annotations

import bisect

import simpy

from oppo_sim.engine.continuous import EngineCore
from oppo_sim.engine.request import Chain, Plan, Req
from oppo_sim.pipeline.devices import DevicePool, Job

CHAIN_MAX_ITERS = 256
"""Most explicit (prefill / admission) iterations a replica commits as one device job."""


class GenReplica:
    """simpy driver of one :class:`EngineCore`: plans, spends the plan's time on its devices, commits."""

    def __init__(self, env: simpy.Environment, idx: int, core: EngineCore, pool: DevicePool, devices: tuple[int, ...], sink):
        self.env = env
        self.idx = idx
        self.core = core
        self.pool = pool
        self.devices = devices
        self.sink = sink  # callable(replica, events)
        self.step = -1
        self._wake: simpy.Event | None = None
        self._plan: Plan | None = None
        self._job: Job | None = None
        self._stop: simpy.Event | None = None
        self._reset = False
        self._chain: Chain | None = None
        self._pending: list[Req] = []
        self.dispatch_s = 0.0
        env.process(self._run())

    def add(self, req: Req) -> None:
        if self._chain is not None:
            self._pending.append(req)  # the committed chain must not see it; added when the chain ends
        else:
            self.core.add(req)
        self.poke()

    def load(self) -> int:
        return len(self.core.running) + len(self.core.waiting) + len(self._pending)

    def reset(self) -> None:
        """New weights arrived (a weight sync): after the current iteration the engine forgets its prefix
        cache and recomputes what is running, as vLLM's ``reset_prefix_cache`` does."""
        if hasattr(self.core, "reset_cache"):
            self._reset = True
            self.poke()

    def busy(self) -> bool:
        """Requests queued or running, or work in flight whose events are not delivered yet."""
        return self._job is not None or self.load() > 0

    def stop(self) -> simpy.Event:
        """Finish the current iteration, then take every request out; the event's value is the list."""
        ev = self.env.event()
        self._stop = ev
        self.poke()
        return ev

    def poke(self) -> None:
        """Something changed (a request arrived, a stop): cut the running work after its current iteration."""
        if self._job is None:
            if self._wake is not None and not self._wake.triggered:
                self._wake.succeed()
            return
        done = self._job.work_done(self.env.now)
        plan = self._plan
        if plan is not None:
            if plan.steady and plan.iters > 1:
                k = self.core.cost.iters_within(plan.b, plan.kv0, done, plan.iters)
                new = self.core.truncate(plan, min(plan.iters, k + 1))
                if new is not plan:
                    self._plan = new
                    job = self._job
                    job.tokens, job.flops = new.tokens, new.flops
                    self.pool.shorten(job, new.seconds)
            return
        chain = self._chain
        if chain is not None and len(chain.ends) > 1:
            keep = bisect.bisect_right(chain.ends, done) + 1  # iterations finished, plus the one in progress
            if keep < len(chain.ends):
                new = self.core.cut_chain(keep)
                self._chain = new
                job = self._job
                job.tokens, job.flops, job.recompute_flops = new.tokens, new.flops, new.recompute_flops
                self.pool.shorten(job, new.seconds)

    def _run(self):
        while True:
            if self._reset:
                self._reset = False
                self.core.reset_cache()
            if self._stop is not None:
                ev, self._stop = self._stop, None
                ev.succeed(self.core.remove_all())
                continue
            plan = self.core.plan()
            if plan is None:
                self._wake = self.env.event()
                yield self._wake
                self._wake = None
                continue
            if plan.steady:
                self._plan = plan
                self._job = self.pool.submit(self.devices, plan.seconds, "generate", "generate", self.step,
                                             plan.tokens, plan.flops, plan.recompute_flops)
                yield self._job.done
                plan, self._plan, self._job = self._plan, None, None
                events = self.core.commit(plan, self.env.now)
            else:
                chain = self._chain = self.core.run_chain(plan, self.env.now, CHAIN_MAX_ITERS)
                self._job = self.pool.submit(self.devices, chain.seconds, "generate", "generate", self.step,
                                             chain.tokens, chain.flops, chain.recompute_flops)
                yield self._job.done
                events = self._chain.events
                self._chain = self._job = None
                for req in self._pending:  # arrived while the chain ran: queued only now, as vLLM would
                    self.core.add(req)
                self._pending.clear()
            if events:
                self.sink(self, events)
                if self.dispatch_s > 0:  # the driver handles the events before the engine runs again
                    yield self.env.timeout(self.dispatch_s)


