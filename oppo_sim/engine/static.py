"""Generation engine model: TRL-style static batches, generated in calls of C tokens (OPPO's intra-step
overlap on top of Hugging Face ``generate``), without an event per token.

What is modelled
----------------
TRL's ``PPOTrainer`` generates a rollout batch with ``generate`` on *static, left-padded* batches: the
queries are cut into mini-batches of ``local_rollout_forward_batch_size`` (``gen_batch`` here) run one
after another, each padded to its longest prompt, and a ``generate`` call keeps every row of its batch
in the forward until the call ends, finished rows decoding padding. OPPO's intra-step overlap cuts that
generation into calls of ``max_new_tokens = C`` with the KV cache carried from call to call; after each
call the chunk of every live row goes to the reward model and the next call starts. So here:

- a *group* is one mini-batch of at most ``gen_batch`` rows with one padded KV cache of ``width``
  columns per row (every row occupies ``width`` columns, its own tokens right-aligned); the groups are
  called round-robin, one *call* per plan;
- a call first prefills the rows that have no KV yet (requests that joined, or every row when
  ``carry_kv`` is off), left-padded to the longest of them — one forward of ``rows x P`` tokens that
  also samples their first token — then runs ``m`` decode iterations in which *every* row of the group
  takes a slot and the padded KV grows by one column per row per iteration. Each row produces
  ``min(C, tokens to its target or pause mark)`` tokens; ``m`` is the most any row needs. Rows that are
  done early keep decoding padding until the call ends (TRL/HF semantics);
- a call costs ``call_overhead_s`` (the switch between ``generate`` calls and the reward model's turn,
  :class:`StaticCostParams`) + the prefill forward + the ``m`` decode iterations, each forward the larger of
  HF ``generate``'s host time (issuing its eager ops) and the GPU's, and, where a ZeRO-3 trainer generates, the gather of
  its weights once per call or per forward (``oppo_sim.engine.static_params``). The decode iterations
  all have the same shape (``rows`` sequences over ``rows x width`` cached tokens, growing by ``rows``)
  so they are summed in closed form with :meth:`DecodeCost.span`; nothing is simulated per token;
- at the end of a call, rows that reached their target leave (``FINISH``), rows that reached their
  token budget leave (``PAUSE``), and every other row reports a chunk boundary (``EMIT``, when the driver
  asked for chunk marks with ``emit_at``): **every call boundary is a chunk boundary**. The columns
  only departed rows needed are trimmed (the cache is re-sliced, which is exact);
- requests join only at the start of a *round* (before the first group's call): they fill groups with
  free rows, then new groups, while the padded worst-case KV of all groups fits the cache
  (``kv_blocks * block_size`` tokens). A request added while a call runs waits for the next round.

The call length ``C``: :meth:`StaticEngineCore.set_call_tokens` (the driver's per-step chunk size) or
``StaticConfig.call_tokens``; when neither is set, the driver's chunk marks (``emit_at`` — the furthest
next boundary among the group's rows, i.e. C for chunk-aligned rows), and with no marks either the call
runs to the group's longest remaining response (TRL's single, unchunked ``generate``).

Why the chunk size has a U-shaped optimum here and not under continuous batching
--------------------------------------------------------------------------------
Under continuous batching (``continuous.py``) a finished response leaves the batch at once whatever C is,
so the engine's time does not depend on C at all; C only decides when the scorers get work. In a static
batch the rows and the padded KV of finished responses stay until the *call* ends: with C >= the longest
response (one call) a batch pays, for every iteration up to its longest response, a decode of all its
rows over the padded KV of all of them, and the reward model sees nothing until the end (no overlap).
Smaller calls let finished rows leave sooner (fewer slots, shorter padded KV) and stream chunks to the
reward model sooner, but each call pays ``call_overhead_s`` (and each chunk is one more reward turn), so
too small a C costs ``calls x overhead``. The best C is in between — the paper's 7B/7B optimum near
C = 500, with C = 100 and C = 3000 both slower.

Accounting: ``Plan.flops`` are the FLOPs executed, padding included; ``Plan.recompute_flops`` are the
executed FLOPs that produced nothing new — padding (prefill pads, decode slots of finished rows,
attention over padded KV) plus re-prefill of tokens whose KV an earlier call or step had computed — so
a result's useful FLOPs (``flops - recompute_flops``) stay comparable with the continuous engine's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.request import EMIT, FINISH, PAUSE, Chain, EngineConfig, Plan, Req
from oppo_sim.engine.static_params import (
    DEFAULT_CALL_OVERHEAD_S,
    StaticConfig,
    StaticCostParams,
)
from oppo_sim.hw.costs.costmodel import DecodeCost

__all__ = ["StaticConfig", "StaticCostParams", "CallPlan", "StaticEngineCore", "DEFAULT_CALL_OVERHEAD_S"]


@dataclass
class CallPlan(Plan):
    """One ``generate`` call of one group. ``steady`` (one device job) but not cuttable: ``b = 0`` so a
    driver's ``iters_within`` is a no-op and :meth:`StaticEngineCore.truncate` returns it unchanged."""

    group: int = 0  # index of the called group (after this plan's admissions)
    assign: tuple[tuple[int, Req], ...] = ()  # admissions of this round: (group index, request)
    fresh: tuple[bool, ...] = ()  # per member row: prefilled by this call
    take: tuple[int, ...] = ()  # per member row: tokens it produces in this call
    rows: int = 0  # slots the call occupies (the decode batch)
    width: int = 0  # padded KV columns per row when decoding starts
    prefill_width: int = 0  # P: padded length of the prefill forward (0: none)
    call_len: int = 0  # C of this call (most tokens a row produces)
    decode_iters: int = 0
    prefill_s: float = 0.0
    overhead_s: float = 0.0


class _Group:
    """One mini-batch: rows with KV (``foot``: columns from a row's first real token to the end), the
    padded ``width`` they all occupy, and requests assigned at the round start but not yet prefilled."""

    __slots__ = ("rows", "foot", "width", "joining")

    def __init__(self) -> None:
        self.rows: list[Req] = []
        self.foot: list[int] = []
        self.width = 0
        self.joining: list[Req] = []

    def copy(self) -> "_Group":
        g = _Group()
        g.rows, g.foot, g.width, g.joining = list(self.rows), list(self.foot), self.width, list(self.joining)
        return g


_INF = 1 << 60


class StaticEngineCore:
    """State and scheduling of one static-batching generation engine replica (see the module docstring)."""

    def __init__(self, cost: DecodeCost, cfg: EngineConfig, kv_blocks: int, static: StaticConfig | None = None,
                 params: StaticCostParams | None = None):
        if kv_blocks < 1:
            raise ConfigError("no KV-cache blocks left for the generation engine")
        self.cfg = cfg
        self.static = static or StaticConfig()
        self.params = params or StaticCostParams()
        # HF generate's host time per forward is the floor under its GPU time, as an eager vLLM step's (static_params)
        self.cost = replace(cost, host_s=max(cost.host_s, self.params.host_forward_s(cost.model.layers)))
        self.capacity_tokens = kv_blocks * cfg.block_size
        self.waiting: deque[Req] = deque()
        self.groups: list[_Group] = []
        self.cursor = 0  # next group to call; 0 = a round starts (admissions)
        self.call_tokens: int | None = self.static.call_tokens
        self.iterations = 0  # forwards (prefills and decode iterations)
        self.calls = 0
        self.preemptions = 0  # a static engine never preempts
        self.padding_flops = 0.0

    # -- driver knobs ---------------------------------------------------------------------------------
    def set_call_tokens(self, c: int | None) -> None:
        """Tokens per call from now on (the step's chunk size C); None: back to ``StaticConfig.call_tokens``
        (and, if that is None too, the driver's chunk marks / unchunked)."""
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ConfigError(f"call tokens must be None or an integer >= 1, got {c!r}")
        self.call_tokens = c if c is not None else self.static.call_tokens

    # -- queue management -------------------------------------------------------------------------
    @property
    def running(self) -> list[Req]:
        """Requests admitted to a group (with KV, or assigned and waiting for their group's call)."""
        return [r for g in self.groups for r in (*g.rows, *g.joining)]

    def add(self, req: Req) -> None:
        if req.prompt + req.target > self.capacity_tokens:
            raise ConfigError(
                f"a request of {req.prompt + req.target} tokens does not fit in the engine's KV cache of "
                f"{self.capacity_tokens} tokens; lower --max-response, raise tp or use a GPU with more memory"
            )
        req.num_computed = 0
        req.blocks = 0
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.groups or self.waiting)

    def remove_all(self) -> list[Req]:
        """Take every request out (the step ended): admitted first (group order), then waiting; KV freed.
        Progress (``generated``) is kept; a request resumed later re-prefills prompt + generated."""
        out = self.running + list(self.waiting)
        for r in out:
            r.num_computed = 0
            r.blocks = 0
        self.groups = []
        self.waiting.clear()
        self.cursor = 0
        return out

    def kv_tokens(self) -> int:
        """KV-cache tokens the groups hold now, padding included."""
        return sum(len(g.rows) * g.width for g in self.groups)

    # -- planning -----------------------------------------------------------------------------------
    @staticmethod
    def _left(r: Req) -> int:
        stop = r.target if r.pause_at is None else min(r.target, r.pause_at)
        return max(1, stop - r.generated)

    def _cap(self, members: list[Req]) -> int:
        if self.call_tokens is not None:
            return self.call_tokens
        marks = [r.emit_at - r.generated for r in members if r.emit_at is not None]
        return max(1, max(marks)) if marks else _INF

    def _assignment(self) -> list[tuple[int, Req]]:
        """Which waiting requests join which group at this round start (FIFO; fill groups with free rows,
        then open new ones; stop at the first request whose padded worst case would overflow the cache)."""
        if not self.waiting:
            return []
        gmax = self.static.gen_batch or _INF
        n, width, grow = [], [], []
        for g in self.groups:
            mem = g.rows + g.joining
            n.append(len(mem))
            width.append(max([g.width] + [r.prompt + r.generated for r in g.joining]))
            grow.append(max(self._left(r) for r in mem) if mem else 0)
        reserved = sum(a * (w + x) for a, w, x in zip(n, width, grow))
        out: list[tuple[int, Req]] = []
        for r in self.waiting:
            gi = next((i for i, k in enumerate(n) if k < gmax), len(n))
            if gi == len(n):
                n.append(0)
                width.append(0)
                grow.append(0)
            w2, x2, k2 = max(width[gi], r.prompt + r.generated), max(grow[gi], self._left(r)), n[gi] + 1
            new = reserved - n[gi] * (width[gi] + grow[gi]) + k2 * (w2 + x2)
            if new > self.capacity_tokens and reserved > 0:
                break
            n[gi], width[gi], grow[gi], reserved = k2, w2, x2, new
            out.append((gi, r))
        return out

    def plan(self) -> CallPlan | None:
        if not self.groups and not self.waiting:
            return None
        cursor = self.cursor if self.cursor < len(self.groups) else 0
        assign = tuple(self._assignment()) if cursor == 0 else ()
        if cursor < len(self.groups):
            g = self.groups[cursor]
            rows, foot, width, joining = g.rows, g.foot, g.width, list(g.joining)
        else:
            rows, foot, width, joining = [], [], 0, []
        joining += [r for gi, r in assign if gi == cursor]
        assert rows or joining, "an empty engine always admits its head request; empty groups are dropped"
        return self._call_plan(cursor, assign, rows, foot, width, joining)

    def _call_plan(self, gi: int, assign, rows: list[Req], foot: list[int], width: int, joining: list[Req]) -> CallPlan:
        cost = self.cost
        members = rows + joining
        carry = self.static.carry_kv
        lefts = [self._left(r) for r in members]
        c = min(self._cap(members), max(lefts))
        take = [min(c, x) for x in lefts]
        fresh = [not carry or i >= len(rows) for i in range(len(members))]
        ctx = [r.prompt + r.generated for r in members]
        fctx = [x for x, f in zip(ctx, fresh) if f]
        nf = len(fctx)
        p = max(fctx) if fctx else 0
        b = len(members)
        # prefill of the fresh rows, left-padded to P (samples their first token of the call)
        pre_s = pre_flops = pre_useful = redo = 0.0
        if nf:
            pre_s = cost.iteration(0, 0.0, nf * p, nf * p * (p + 1) / 2.0, 0.0)
            pre_flops = cost.flops(0, 0.0, nf * p, nf * p * (p + 1) / 2.0)
            for r, x, f in zip(members, ctx, fresh):
                if f:
                    pre_useful += cost.flops(0, 0.0, x, x * (x + 1) / 2.0)
                    k = min(x, r.max_computed)
                    if k > 0:
                        redo += cost.flops(0, 0.0, k, k * (k + 1) / 2.0)
        w = max(width, p) if carry else p
        dec = [t - (1 if f else 0) for t, f in zip(take, fresh)]
        m = max(dec)
        dec_s = cost.span(b, float(b * w), m)
        pre_s, dec_s, ovh = self._host_and_gather(pre_s if nf else 0.0, dec_s, m, bool(nf))
        dec_flops = cost.span_flops(b, float(b * w), m)
        dec_useful = 0.0
        for r, x, f, d in zip(members, ctx, fresh, dec):
            if d > 0:  # its real KV when decoding starts: the context, less the pending last token if not fresh
                dec_useful += cost.span_flops(1, float(x if f else x - 1), d)
        flops = pre_flops + dec_flops
        useful = pre_useful + dec_useful
        return CallPlan(
            iters=(1 if nf else 0) + m, seconds=ovh + pre_s + dec_s, flops=flops,
            recompute_flops=max(0.0, flops - useful) + redo, tokens=sum(fctx) + sum(dec), steady=True,
            b=0, kv0=0.0, admitted=[r for _, r in assign],
            group=gi, assign=assign, fresh=tuple(fresh), take=tuple(take), rows=b, width=w, prefill_width=p,
            call_len=c, decode_iters=m, prefill_s=pre_s, overhead_s=ovh,
        )

    def _host_and_gather(self, pre_s: float, dec_s: float, m: int, prefill: bool) -> tuple[float, float, float]:
        """(prefill, decode, call overhead) seconds of a call with a ZeRO-3 trainer's gather (see ``static_params``;
        HF ``generate``'s host time is already each forward's floor, in ``self.cost``): the gather adds once to the
        call (``"call"``), or each forward costs the larger of its work and the gather (``"forward"``: prefetched
        while the layers compute; for the ``m`` decode forwards, the larger of the two sums)."""
        prm = self.params
        ovh = prm.call_overhead_s
        if prm.gather_s > 0:
            if self.static.zero3_gather == "call":
                ovh += prm.gather_s
            else:
                pre_s = max(pre_s, prm.gather_s) if prefill else pre_s
                dec_s = max(dec_s, m * prm.gather_s)
        return pre_s, dec_s, ovh

    # -- committing ---------------------------------------------------------------------------------
    def truncate(self, plan: Plan, iters: int) -> Plan:
        """A ``generate`` call cannot be cut: the plan unchanged (a stop takes effect when the call ends)."""
        return plan

    def commit(self, plan: Plan, now: float) -> list[tuple[str, Req]]:
        """Apply a call that ended at ``now``; return (event, request) pairs in row order."""
        if not isinstance(plan, CallPlan):
            raise TypeError("StaticEngineCore.commit needs a CallPlan from its own plan()")
        for gi, r in plan.assign:
            head = self.waiting.popleft()
            if head is not r:
                raise RuntimeError("static engine: the waiting queue changed between plan() and commit()")
            while gi >= len(self.groups):
                self.groups.append(_Group())
            self.groups[gi].joining.append(r)
        g = self.groups[plan.group]
        members = g.rows + g.joining
        if len(members) != plan.rows:
            raise RuntimeError("static engine: the group changed between plan() and commit()")
        start = now - plan.seconds
        first_t = start + plan.overhead_s + plan.prefill_s
        m = plan.decode_iters
        old_foot = g.foot
        events: list[tuple[str, Req]] = []
        rows: list[Req] = []
        foot: list[int] = []
        for i, (r, k, f) in enumerate(zip(members, plan.take, plan.fresh)):
            ctx = r.prompt + r.generated
            fp = (ctx if f else old_foot[i]) + m
            r.generated += k
            if r.first_token_t is None:
                r.first_token_t = first_t
            r.num_computed = r.prompt + r.generated - 1
            if r.num_computed > r.max_computed:
                r.max_computed = r.num_computed
            if r.emit_at is not None and r.generated < r.target:  # every call boundary is a chunk boundary
                events.append((EMIT, r))
            if r.generated >= r.target:
                r.finish_t = now
                events.append((FINISH, r))
            elif r.pause_at is not None and r.generated >= r.pause_at:
                events.append((PAUSE, r))
            else:
                rows.append(r)
                foot.append(fp)
                continue
            r.num_computed = 0  # left the batch: its KV rows are dropped
        g.rows, g.foot, g.joining = rows, foot, []
        g.width = max(foot) if foot else 0  # columns only departed rows needed are trimmed
        if rows:
            self.cursor = plan.group + 1
        else:
            del self.groups[plan.group]
            self.cursor = plan.group
        if self.cursor >= len(self.groups):
            self.cursor = 0
        self.iterations += plan.iters
        self.calls += 1
        self.padding_flops += plan.recompute_flops
        return events

    # -- chains (the driver's explicit path; a call is always one steady plan, kept for the protocol) --
    def snapshot(self) -> tuple:
        reqs = [*self.running, *self.waiting]
        return (
            [g.copy() for g in self.groups], list(self.waiting), self.cursor, self.call_tokens, self.iterations,
            self.calls, self.padding_flops,
            [(r, r.num_computed, r.generated, r.max_computed, r.first_token_t, r.finish_t) for r in reqs],
        )

    def restore(self, snap: tuple) -> None:
        groups, waiting, self.cursor, self.call_tokens, self.iterations, self.calls, self.padding_flops, states = snap
        self.groups = [g.copy() for g in groups]
        self.waiting = deque(waiting)
        for r, *vals in states:
            (r.num_computed, r.generated, r.max_computed, r.first_token_t, r.finish_t) = vals

    def run_chain(self, first: Plan, start: float, max_iters: int) -> Chain:
        """Commit ``first`` (one call) at once; a chain of one call, which a driver never cuts."""
        events = self.commit(first, start + first.seconds)
        return Chain([first.seconds], events, first.flops, first.recompute_flops, first.tokens)

    def cut_chain(self, keep: int) -> Chain:
        raise AssertionError("a static engine's chain is one call: a driver never cuts it")
