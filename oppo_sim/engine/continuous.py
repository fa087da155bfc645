"""Generation engine model: continuous batching as vLLM v1 schedules it, without an event per token.

One :class:`EngineCore` models one engine replica (``tp`` devices). Each scheduler iteration computes
``num_tokens - num_computed`` tokens per request under a token budget (decodes take one token, prompts are
prefilled in chunks), admits waiting requests while sequence slots and KV blocks allow, and preempts the
most recently admitted request (recompute mode) when a KV block cannot be allocated.

While every running request is plainly decoding and nothing can be admitted, consecutive iterations
differ only by their KV length, so :meth:`EngineCore.plan` returns one *span* that jumps straight to the
next interesting point (a request finishing, reaching a chunk boundary or its token budget, or a KV block
allocation failing) with the cost summed in closed form. Everything else is planned one iteration at a
time. The engine never sees simpy: a driver asks for a plan, spends its ``seconds`` on a device, then
commits it (possibly truncated to fewer iterations when the driver interrupts it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costmodel import DecodeCost


@dataclass(frozen=True)
class EngineConfig:
    """vLLM-style engine knobs (names follow vLLM's engine arguments). The token budget default, 16384, is
    what vLLM v1 picks for the offline ``LLM`` class (how RLHF frameworks drive rollouts) on large-memory
    GPUs; its OpenAI server uses 8192 (``oppo-sim replay``'s default)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 16384
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    tp: int = 1
    num_gpu_blocks_override: int | None = None  # KV blocks per replica, instead of sizing them from memory

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "tp"):
            if getattr(self, name) < 1:
                raise ConfigError(f"engine {name} must be >= 1, got {getattr(self, name)}")
        if self.num_gpu_blocks_override is not None and self.num_gpu_blocks_override < 1:
            raise ConfigError(f"engine num_gpu_blocks_override must be >= 1, got {self.num_gpu_blocks_override}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")


class Req:
    """One generation request as the engine sees it."""

    __slots__ = (
        "rid", "prompt", "target", "generated", "num_computed", "blocks", "emit_at", "pause_at",
        "payload", "arrival", "first_token_t", "finish_t", "max_computed", "preemptions",
    )

    def __init__(self, rid: int, prompt: int, target: int, generated: int = 0, payload: Any = None, arrival: float = 0.0):
        if prompt < 1 or target < 1 or generated < 0 or generated >= target:
            raise ConfigError(f"request {rid}: need prompt >= 1, target >= 1 and 0 <= generated < target")
        self.rid = rid
        self.prompt = prompt
        self.target = target  # response tokens to generate in total
        self.generated = generated  # response tokens sampled so far (across steps)
        self.num_computed = 0  # tokens whose KV is cached in this engine
        self.blocks = 0
        self.emit_at: int | None = None  # report when generated reaches this (chunk boundary)
        self.pause_at: int | None = None  # pause when generated reaches this (token budget)
        self.payload = payload
        self.arrival = arrival
        self.first_token_t: float | None = None
        self.finish_t: float | None = None
        self.max_computed = 0  # high-water mark of computed tokens (re-prefill beyond it is new work)
        self.preemptions = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.generated


FINISH, EMIT, PAUSE = "finish", "emit", "pause"


@dataclass
class Plan:
    """What the engine will do next: ``iters`` iterations costing ``seconds`` in total."""

    iters: int
    seconds: float
    flops: float
    recompute_flops: float
    tokens: int
    steady: bool
    b: int = 0
    kv0: float = 0.0
    schedule: list[tuple[Req, int]] = field(default_factory=list)  # explicit iteration: (request, tokens)
    admitted: list[Req] = field(default_factory=list)
    preempted: list[Req] = field(default_factory=list)


@dataclass
class Chain:
    """Explicit iterations committed back to back: cumulative end offsets, the last one's events."""

    ends: list[float]
    events: list[tuple[str, Req]]
    flops: float
    recompute_flops: float
    tokens: int

    @property
    def seconds(self) -> float:
        return self.ends[-1]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class EngineCore:
    """State and scheduling of one generation engine replica."""

    def __init__(self, cost: DecodeCost, cfg: EngineConfig, kv_blocks: int):
        if kv_blocks < 1:
            raise ConfigError("no KV-cache blocks left for the generation engine")
        self.cost = cost
        self.cfg = cfg
        self.capacity = kv_blocks
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.used = 0
        self.iterations = 0
        self.preemptions = 0

    # -- queue management -------------------------------------------------------------------------
    def add(self, req: Req) -> None:
        need = _cdiv(req.prompt + req.target, self.cfg.block_size)
        if need > self.capacity:
            raise ConfigError(
                f"a request of {req.prompt + req.target} tokens needs {need} KV blocks but the engine has only "
                f"{self.capacity}; lower --max-response, raise tp or use a GPU with more memory"
            )
        req.num_computed = 0
        req.blocks = 0
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def remove_all(self) -> list[Req]:
        """Take every request out (the step ended): running first, then waiting; KV freed."""
        out = self.running + list(self.waiting)
        for r in out:
            r.num_computed = 0
            r.blocks = 0
        self.running = []
        self.waiting.clear()
        self.used = 0
        return out

    # -- planning -----------------------------------------------------------------------------------
    def plan(self) -> Plan | None:
        if not self.running and not self.waiting:
            return None
        if self._steady():
            return self._plan_span()
        return self._plan_iteration()

    def _steady(self) -> bool:
        if not self.running:
            return False
        for r in self.running:
            if r.prompt + r.generated - r.num_computed != 1:
                return False
        if self.waiting and len(self.running) < self.cfg.max_num_seqs:
            head = self.waiting[0]
            n = min(head.num_tokens - head.num_computed, self.cfg.max_num_batched_tokens - len(self.running))
            if n > 0 and _cdiv(n, self.cfg.block_size) <= self.capacity - self.used:
                return False
        return len(self.running) <= self.cfg.max_num_batched_tokens

    def _plan_span(self) -> Plan:
        run = self.running
        m = 1 << 60
        kv0 = 0
        for r in run:
            g = r.generated
            left = r.target - g
            if r.emit_at is not None and r.emit_at - g < left:
                left = r.emit_at - g
            if r.pause_at is not None and r.pause_at - g < left:
                left = r.pause_at - g
            if left < m:
                m = left
            kv0 += r.num_computed
        m = max(1, m)
        m = self._kv_limit(m)
        b = len(run)
        if m == 0:  # the very next iteration needs a block we do not have: schedule it explicitly
            return self._plan_iteration()
        secs = self.cost.span(b, kv0, m)
        return Plan(m, secs, self.cost.span_flops(b, kv0, m), 0.0, b * m, True, b, float(kv0))

    def _kv_limit(self, m: int) -> int:
        """Largest i <= m such that i more decode iterations fit in the KV cache."""
        bs = self.cfg.block_size
        free = self.capacity - self.used
        run = self.running
        # cheap bound: each request needs at most ceil(m / bs) + 1 new blocks
        if len(run) * (_cdiv(m, bs) + 1) <= free:
            return m

        def need(i: int) -> int:
            return sum(_cdiv(r.num_computed + i, bs) - r.blocks for r in run)

        if need(m) <= free:
            return m
        lo, hi = 0, m  # need(lo) <= free < need(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if need(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def _plan_iteration(self) -> Plan:
        cfg = self.cfg
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        free = self.capacity - self.used
        sched: list[tuple[Req, int]] = []
        preempted: list[Req] = []
        running = list(self.running)
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = r.prompt + r.generated - r.num_computed
            if n > budget:
                n = budget
            need = _cdiv(r.num_computed + n, bs) - r.blocks
            while need > free and running[-1] is not r:
                victim = running.pop()  # lowest priority (admitted last), not scheduled yet this iteration
                preempted.append(victim)
                free += victim.blocks
            if need > free:  # r itself must go (vLLM v1: preempting the request stops scheduling)
                running.pop()
                preempted.append(r)
                free += r.blocks
                break
            free -= need
            sched.append((r, n))
            budget -= n
            i += 1
        admitted: list[Req] = []
        if not preempted:
            slots = cfg.max_num_seqs - len(running)
            for r in self.waiting:
                if budget <= 0 or slots <= 0:
                    break
                n = min(r.num_tokens - r.num_computed, budget)
                need = _cdiv(r.num_computed + n, bs) - r.blocks
                if need > free:
                    break
                free -= need
                sched.append((r, n))
                admitted.append(r)
                budget -= n
                slots -= 1
        b = 0
        kv_dec = 0.0
        n_pre = 0
        pairs = 0.0
        kv_pre = 0.0
        recompute = 0.0
        for r, n in sched:
            c = r.num_computed
            if n == 1 and r.prompt + r.generated - c == 1:
                b += 1
                kv_dec += c
            else:
                n_pre += n
                pairs += n * c + n * (n + 1) / 2.0
                kv_pre += c
                redo = min(n, r.max_computed - c)
                if redo > 0:
                    recompute += self.cost.flops(0, 0.0, redo, redo * c + redo * (redo + 1) / 2.0)
        secs = self.cost.iteration(b, kv_dec, n_pre, pairs, kv_pre)
        flops = self.cost.flops(b, kv_dec, n_pre, pairs)
        return Plan(1, secs, flops, recompute, b + n_pre, False, schedule=sched, admitted=admitted, preempted=preempted)

    # -- chains of explicit iterations ---------------------------------------------------------------
    def snapshot(self) -> tuple:
        """Everything :meth:`run_chain` may change, to undo a chain that must be cut short."""
        reqs = [*self.running, *self.waiting]
        return (
            list(self.running), list(self.waiting), self.used, self.iterations, self.preemptions,
            [(r, r.num_computed, r.blocks, r.generated, r.max_computed, r.first_token_t, r.finish_t, r.preemptions) for r in reqs],
        )

    def restore(self, snap: tuple) -> None:
        running, waiting, self.used, self.iterations, self.preemptions, states = snap
        self.running = list(running)
        self.waiting = deque(waiting)
        for r, *vals in states:
            (r.num_computed, r.blocks, r.generated, r.max_computed, r.first_token_t, r.finish_t, r.preemptions) = vals

    def run_chain(self, first: Plan, start: float, max_iters: int) -> Chain:
        """Commit ``first`` (an explicit iteration) and the explicit iterations that follow it, stopping
        after one that produces events, before a steady span, or after ``max_iters``. Iterations are
        committed at once; their times are ``start`` plus the running sum (the driver spends the total on
        a device, and undoes the chain with :meth:`restore` + a shorter ``run_chain`` if interrupted)."""
        ends: list[float] = []
        flops = recompute = 0.0
        tokens = 0
        t = start
        plan: Plan | None = first
        events: list[tuple[str, Req]] = []
        while plan is not None and not plan.steady:
            t += plan.seconds
            ends.append(t - start)
            flops += plan.flops
            recompute += plan.recompute_flops
            tokens += plan.tokens
            events = self.commit(plan, t)
            if events or len(ends) >= max_iters:
                break
            plan = self.plan()
        return Chain(ends, events, flops, recompute, tokens)

    # -- committing ---------------------------------------------------------------------------------
    def truncate(self, plan: Plan, iters: int) -> Plan:
        """The same span cut to its first ``iters`` iterations (a driver interrupted it)."""
        if not plan.steady or iters >= plan.iters:
            return plan
        iters = max(1, iters)
        return Plan(
            iters, self.cost.span(plan.b, plan.kv0, iters), self.cost.span_flops(plan.b, plan.kv0, iters), 0.0,
            plan.b * iters, True, plan.b, plan.kv0,
        )

    def commit(self, plan: Plan, now: float) -> list[tuple[str, Req]]:
        """Apply a (possibly truncated) plan that ended at ``now``; return (event, request) pairs."""
        self.iterations += plan.iters
        bs = self.cfg.block_size
        events: list[tuple[str, Req]] = []
        if plan.steady:
            k = plan.iters
            first_t = now - plan.seconds + self.cost.span(plan.b, plan.kv0, 1)
            used = self.used
            for r in self.running:
                if r.first_token_t is None:  # its last prompt token was computed in the span's first iteration
                    r.first_token_t = first_t
                c = r.num_computed + k
                r.num_computed = c
                g = r.generated + k
                r.generated = g
                nb = -(-c // bs)
                used += nb - r.blocks
                r.blocks = nb
                if c > r.max_computed:
                    r.max_computed = c
                if g >= r.target or (r.emit_at is not None and g >= r.emit_at) or (r.pause_at is not None and g >= r.pause_at):
                    self._check_events(r, now, events)
            self.used = used
        else:
            for v in plan.preempted:
                self.running.remove(v)
                self.used -= v.blocks
                v.blocks = 0
                v.num_computed = 0
                v.preemptions += 1
                self.preemptions += 1
                self.waiting.appendleft(v)
            for r in plan.admitted:  # admitted in queue order from the head
                self.waiting.popleft()
                self.running.append(r)
            for r, n in plan.schedule:
                c = r.num_computed + n
                r.num_computed = c
                nb = -(-c // bs)
                self.used += nb - r.blocks
                r.blocks = nb
                if c > r.max_computed:
                    r.max_computed = c
                if c == r.prompt + r.generated:  # caught up: a new token is sampled
                    r.generated += 1
                    if r.first_token_t is None:
                        r.first_token_t = now
                    self._check_events(r, now, events)
        done = [r for e, r in events if e in (FINISH, PAUSE)]
        if done:
            for r in done:
                self.used -= r.blocks
                r.blocks = 0
                r.num_computed = 0
            ids = {id(r) for r in done}
            self.running = [r for r in self.running if id(r) not in ids]
        return events

    @staticmethod
    def _check_events(r: Req, now: float, events: list[tuple[str, Req]]) -> None:
        g = r.generated
        if g >= r.target:
            r.finish_t = now
            events.append((FINISH, r))
            return
        if r.emit_at is not None and g >= r.emit_at:
            events.append((EMIT, r))
        if r.pause_at is not None and g >= r.pause_at:
            events.append((PAUSE, r))


def kv_blocks_for(model_weight_bytes: float, kv_bytes_per_token: int, mem_bytes: float, cfg: EngineConfig, where: str) -> int:
    """KV-cache blocks left on a replica of ``cfg.tp`` devices after the weights (as vLLM sizes it), or
    ``cfg.num_gpu_blocks_override`` when set."""
    if cfg.num_gpu_blocks_override is not None:
        return cfg.num_gpu_blocks_override
    free = cfg.tp * mem_bytes * cfg.gpu_memory_utilization - model_weight_bytes
    if free <= 0:
        raise ConfigError(
            f"the model ({model_weight_bytes / 1e9:.1f} GB of weights) does not fit on {where} "
            f"({cfg.tp} x {mem_bytes / 1e9:.0f} GB x {cfg.gpu_memory_utilization}); raise tp or use a larger GPU"
        )
    return int(free // (kv_bytes_per_token * cfg.block_size))
