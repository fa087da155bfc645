"""The running requests of one engine that are plainly decoding, advanced lazily.

A running request whose only uncomputed token is its last sampled one (``num_tokens - num_computed == 1``)
gets exactly one token in every iteration that schedules every running request in full — a decode span, or
an explicit iteration without preemption or a budget that runs short. Its state then depends only on how many
iterations passed, so :class:`Decoders` keeps each such request's progress as of the iteration it joined
(``Req._t``) and reads it off the engine's iteration counter (``tick``), instead of touching every running
request in every iteration. What the engine needs of them all is kept as aggregates:

- ``kv()``: their total computed tokens (the decode batch's KV length) — ``sum(c_r - t_r) + n * tick``;
- ``need(i)``: KV blocks they allocate over the next ``i`` iterations — a request with ``c`` computed tokens
  holds ``cdiv(c, bs)`` blocks and takes a new one whenever ``c`` passes a multiple of ``bs``, so only
  ``(c - 1) mod bs`` matters: a histogram of it (``c - t`` is fixed while it decodes) gives ``need`` in
  ``O(bs)``;
- ``due()``: the requests that reached their target or a mark (chunk boundary, token budget) — a heap keyed by
  the iteration at which each gets there.

A request leaves (``leave``: its stored fields made exact) when it finishes, pauses, is preempted or taken
out, and before anything that is not a plain decode is applied to it.
"""

from __future__ import annotations

from heapq import heappop, heappush

from oppo_sim.engine.request import Req


class Decoders:
    """The lazily advanced decoding requests of one engine; ``tick`` is the engine's iteration count."""

    __slots__ = ("bs", "tick", "n", "base", "hist", "heap", "fresh")

    def __init__(self, block_size: int):
        self.bs = block_size
        self.tick = 0
        self.n = 0
        self.base = 0  # sum over members of (computed tokens - tick), fixed while they decode
        self.hist = [0] * block_size  # members by (computed - tick - 1) mod bs
        self.heap: list[tuple[int, int, int, Req]] = []  # (iteration it reaches a mark, admission order, version, req)
        self.fresh: list[Req] = []  # members that have not sampled a token yet (their first one comes next)

    # -- membership -------------------------------------------------------------------------------------
    def join(self, r: Req) -> None:
        """``r`` (exact as of now, decoding) is advanced lazily from now on."""
        r._dec = self
        r._t = self.tick
        x = r._computed - self.tick
        self.n += 1
        self.base += x
        self.hist[(x - 1) % self.bs] += 1
        if r.first_token_t is None:
            self.fresh.append(r)
        self.push(r)

    def leave(self, r: Req) -> None:
        """``r``'s stored fields made exact; it is no longer advanced lazily."""
        self.sync(r)
        x = r._computed - self.tick
        self.n -= 1
        self.base -= x
        self.hist[(x - 1) % self.bs] -= 1
        r._dec = None
        r._ver += 1
        if self.fresh and r in self.fresh:
            self.fresh.remove(r)

    def sync(self, r: Req) -> None:
        """Bring ``r``'s stored fields up to now (it stays a member)."""
        d = self.tick - r._t
        if d:
            c = r._computed + d
            r._computed = c
            r._generated += d
            r._t = self.tick
            if c > r._max_computed:
                r._max_computed = c
        r._blocks = -(-r._computed // self.bs)

    def push(self, r: Req) -> None:
        """(Re-)key ``r`` by the iteration at which it reaches its target or a mark (its marks as they are now)."""
        g = r._generated + self.tick - r._t
        left = r.target - g
        e = r.emit_at
        if e is not None and e - g < left:
            left = e - g
        p = r.pause_at
        if p is not None and p - g < left:
            left = p - g
        r._ver += 1
        heappush(self.heap, (self.tick + left, r._pos, r._ver, r))

    # -- aggregates -------------------------------------------------------------------------------------
    def kv(self) -> int:
        return self.base + self.n * self.tick

    def need(self, i: int) -> int:
        """KV blocks the members allocate over the next ``i`` iterations."""
        if i <= 0 or not self.n:
            return 0
        bs = self.bs
        q, s = divmod(i, bs)
        total = self.n * q
        if s:  # members whose (c - 1) mod bs >= bs - s cross one more block boundary: a cyclic run of s bins
            hist = self.hist
            a = (-s - self.tick) % bs
            e = a + s
            total += sum(hist[a:e]) if e <= bs else sum(hist[a:]) + sum(hist[:e - bs])
        return total

    def fit(self, m: int, free: int, running: int) -> int:
        """Largest i <= m such that i more decode iterations fit in ``free`` blocks (``running``: requests)."""
        if running * (-(-m // self.bs) + 1) <= free:  # cheap bound: at most ceil(m / bs) + 1 new blocks each
            return m
        if self.need(m) <= free:
            return m
        lo, hi = 0, m  # need(lo) <= free < need(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.need(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    def need1(self) -> int:
        """KV blocks the members allocate in the next iteration (those whose computed tokens fill their blocks)."""
        return self.hist[(-1 - self.tick) % self.bs] if self.n else 0

    def next_event(self) -> int:
        """The first iteration at which a member reaches its target or a mark (a large number if none)."""
        heap = self.heap
        while heap:
            _, _, ver, r = heap[0]
            if r._dec is self and r._ver == ver:
                return heap[0][0]
            heappop(heap)
        return 1 << 60

    def due(self) -> list[Req]:
        """Members that reached their target or a mark by now, exact, in admission order (their keys are spent:
        the engine re-keys them, with the marks its driver gives them, before it plans again)."""
        heap, tick = self.heap, self.tick
        out = []
        while heap and heap[0][0] <= tick:
            _, _, ver, r = heappop(heap)
            if r._dec is self and r._ver == ver:
                self.sync(r)
                out.append(r)
        if len(out) > 1:
            out.sort(key=_pos)
        return out

    # -- snapshots --------------------------------------------------------------------------------------
    def snapshot(self) -> tuple:
        return self.tick, self.n, self.base, list(self.hist), list(self.heap), list(self.fresh)

    def restore(self, snap: tuple) -> None:
        self.tick, self.n, self.base, hist, heap, fresh = snap
        self.hist, self.heap, self.fresh = list(hist), list(heap), list(fresh)


def _pos(r: Req) -> int:
    return r._pos
