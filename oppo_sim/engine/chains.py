"""Chains of explicit iterations of the continuous engine (:class:`~oppo_sim.engine.continuous.EngineCore`).

An iteration that admits, prefills or preempts cannot be summed in closed form as a decode span can; the
engine commits a run of them at once as one *chain* (one device job for the driver) and, if the driver is
poked while the chain runs, cuts it to the iterations that had finished (``cut_chain``). Almost every
chain is one iteration long, so the state a cut needs — the engine after the chain's first iteration — is
recorded only when a second iteration follows: before, the whole engine was saved before every chain,
which made a replica with thousands of queued requests quadratic (issue 18, the planner at GRPO scale).
``snapshot`` / ``restore`` save and restore the engine (the waiting queue as far as a chain can reach).
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from oppo_sim.engine.request import Chain, Plan
from oppo_sim.engine.vllm_step import step_in_full


class ChainsMixin:
    """``EngineCore``'s chains (this module's notes); it uses the core's state and planning methods."""

    def snapshot(self) -> tuple:
        """Everything :meth:`run_chain` may change, to undo a chain that must be cut short. Of the waiting
        requests only the first ``max_num_seqs - len(running)`` are recorded: a chain admits strictly in
        queue order (a request it preempts goes back to the queue's head, to be admitted again before any
        other) and ends after the iteration in which a request finishes or pauses, so the waiting requests
        it changes — those it admits — are a prefix of the queue no longer than the free running slots
        (:meth:`restore` checks it). Recording them all made a replica with thousands queued quadratic."""
        slots = max(self.cfg.max_num_seqs - len(self.running), 0)
        reqs = [*self.running, *islice(self.waiting, slots)]
        return (slots,
            list(self.running), list(self.waiting), list(self.others), list(self._dirty), self._admissions,
            self.preemptions, self.prefix_hit_tokens, self.pool.snapshot(), self.dec.snapshot(),
            [(r, r._computed, r._blocks, r._generated, r._max_computed, r.first_token_t, r.finish_t, r.preemptions,
              r.hits, r.resumed, r._dec, r._t, r._ver, r._pos) for r in reqs],
        )

    def restore(self, snap: tuple) -> None:
        (slots, running, waiting, others, dirty, self._admissions, self.preemptions, self.prefix_hit_tokens, pool,
         dec, states) = snap
        if any(r._pos > self._admissions for r in waiting[slots:]):
            raise AssertionError("a chain admitted a waiting request its snapshot did not record")
        self.running, self.waiting, self.others, self._dirty = list(running), deque(waiting), list(others), list(dirty)
        self.pool.restore(pool)
        self.dec.restore(dec)
        for r, *vals in states:
            (r._computed, r._blocks, r._generated, r._max_computed, r.first_token_t, r.finish_t, r.preemptions,
             r.hits, r.resumed, r._dec, r._t, r._ver, r._pos) = vals

    def run_chain(self, first: Plan, start: float, max_iters: int) -> Chain:
        """Commit ``first`` (an explicit iteration) and the explicit iterations that follow it, stopping
        after one that produces events, before a steady span, or after ``max_iters``. Iterations are
        committed at once; their times are ``start`` plus the running sum (the driver spends the total on
        a device, and undoes the chain with :meth:`cut_chain` if interrupted). The state after the first
        iteration is recorded only when a second follows (a driver's cut keeps at least one iteration, and
        almost every chain is one iteration long)."""
        t = start + first.seconds
        events = self.commit(first, t)
        self._resume = None
        return self._extend([t - start], start, t, events, first.flops, first.recompute_flops, first.tokens, max_iters)

    def cut_chain(self, keep: int) -> Chain:
        """The chain :meth:`run_chain` last ran, cut to its first ``keep`` (>= 1) iterations: the state after
        its first iteration comes back and the next ``keep - 1`` iterations are committed again."""
        if self._resume is None:
            raise AssertionError("cut_chain without a chain of more than one iteration")
        snap, start, t, ends, flops, recompute, tokens = self._resume
        self.restore(snap)
        return self._extend(list(ends), start, t, [], flops, recompute, tokens, max(1, keep))

    def _extend(self, ends: list[float], start: float, t: float, events: list, flops: float, recompute: float,
                tokens: int, max_iters: int) -> Chain:
        while not events and len(ends) < max_iters and (self.running or self.waiting):
            if self._dirty:
                self._rekey()
            steady = self._steady()
            plan = self.plan() if steady else None  # (plan() is pure)
            if steady and (plan is None or plan.steady):
                break
            if self._resume is None:  # another iteration follows: the state after the first, for cut_chain
                self._resume = (self.snapshot(), start, t, tuple(ends), flops, recompute, tokens)
            step = None if steady else step_in_full(self, t, events)
            if step is not None:  # the next iteration planned and applied in one go
                secs, f, rf, tok, touched = step
                t += secs
                self._finish_commit(events, touched)
            else:
                if not steady:
                    plan = self.plan()
                    if plan is None or plan.steady:
                        break
                t += plan.seconds
                f, rf, tok = plan.flops, plan.recompute_flops, plan.tokens
                events = self.commit(plan, t)
            ends.append(t - start)
            flops += f
            recompute += rf
            tokens += tok
        return Chain(ends, events, flops, recompute, tokens)


__all__ = ["ChainsMixin"]
