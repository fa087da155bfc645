"""The KV block pool keeps runs of cached blocks (bit masks), not one object per block: it must make exactly
the decisions of the plain per-block pool it replaced (``tests/kvpool_reference.py``) — the same free queue,
block for block, the same prefix-cache hits (which copy included), the same doomed blocks — under any
sequence of allocations, lookups, touches, releases (live or dead), resets and snapshot/restore."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kvpool_reference import KVBlockPool as RefPool

from oppo_sim.engine.kvpool import KVBlockPool


class Pair:
    """The same operations on both pools; blocks named (lineage, j, release that cached it) on both sides."""

    def __init__(self, usable: int, caching: bool):
        self.ref, self.new = RefPool(usable, 16, caching), KVBlockPool(usable, 16, caching)
        self.release_no = 0
        self.ref_name: dict[int, tuple] = {}
        self.new_name: dict[object, tuple] = {}
        self.keep: list = []  # reference blocks stay alive so their ids stay unique
        self.anon = 0
        self.held: dict[int, tuple[int, list, object, int]] = {}  # lineage -> (blocks, ref hits, new hits, hashed)

    def ref_queue(self) -> list:
        out = []
        for e in self.ref._queue:
            out += [None] * e if isinstance(e, int) else [self.ref_name[id(e)]]
        return out

    def new_queue(self) -> list:
        out = []
        for e in self.new._queue:
            if isinstance(e, int):
                out += [None] * e
            else:
                run, lo, hi = e
                out += [self.new_name[run][:1] + (j,) + self.new_name[run][1:] for j in range(hi - 1, lo - 1, -1)]
        return out

    def ref_hits(self, hits) -> list:
        return [self.ref_name[id(b)] for b in hits]

    def new_hits(self, hits) -> list:
        return [self.new_name[run][:1] + (j,) + self.new_name[run][1:] for run, lo, hi in hits.pieces for j in range(lo, hi)]

    def check(self) -> None:
        assert self.ref.free == self.new.free
        assert self.ref.cached_blocks == self.new.cached_blocks
        assert self.ref_queue() == self.new_queue()

    def release(self, lineage: int, live: bool) -> None:
        blocks, rh, nh, hashed = self.held.pop(lineage)
        self.release_no += 1
        before = set(self.new._alive)
        seen = {id(b) for v in self.ref._cached.values() for b in v}
        self.ref.release(lineage, blocks, rh, hashed, live)
        self.new.release(lineage, blocks, nh, hashed, live)
        for v in self.ref._cached.values():
            for b in v:
                if id(b) not in seen:
                    self.ref_name[id(b)] = (b.key[0], b.key[1], self.release_no)
                    self.keep.append(b)
        for run in set(self.new._alive) - before:
            self.new_name[run] = (run.lineage, self.release_no)

    def admit(self, lineage: int, max_blocks: int, pops: int, extra: int, hashed_frac: float) -> None:
        """Look the lineage up (with the blocks ``pops`` allocations would evict as doomed), touch its hits,
        take ``extra`` new blocks and hold them all."""
        rd, nd = self.ref.doomed(pops, set()), self.new.doomed(pops, [])
        assert sorted(self.ref_name[id(b)] for b in rd) == sorted(
            self.new_name[run][:1] + (j,) + self.new_name[run][1:]
            for run, m in nd.items() for j in range(m.bit_length()) if m >> j & 1)
        rh, nh = self.ref.lookup(lineage, max_blocks, rd), self.new.lookup(lineage, max_blocks, nd)
        assert self.ref_hits(rh) == self.new_hits(nh)
        plain_r, plain_n = self.ref.lookup(lineage, max_blocks), self.new.lookup(lineage, max_blocks)
        assert self.ref_hits(plain_r) == self.new_hits(plain_n)
        self.ref.touch(rh)
        self.new.touch(nh)
        extra = min(extra, self.ref.free)
        self.ref.take(extra)
        self.new.take(extra)
        blocks = len(rh) + extra
        self.held[lineage] = (blocks, rh, nh, len(rh) + int(hashed_frac * extra))


ops = st.lists(st.tuples(st.sampled_from(["step"] * 8 + ["take", "snap", "reset"]),
                         st.integers(0, 4), st.integers(0, 40), st.integers(0, 30), st.integers(0, 20),
                         st.sampled_from([0.0, 0.5, 1.0, 1.0]), st.sampled_from([True, True, True, False])), max_size=80)


@settings(max_examples=300, deadline=None)
@given(usable=st.integers(1, 120), caching=st.booleans(), ops=ops)
def test_run_pool_decides_as_the_per_block_pool(usable, caching, ops):
    p = Pair(usable, caching)
    snap = None
    for op, lin, a, b, c, frac, flag in ops:
        if op == "step" and lin not in p.held:
            p.admit(lin, a, b, c, frac)
        elif op == "step":
            p.release(lin, live=flag)
        elif op == "take":
            n = min(a, p.ref.free)
            p.ref.take(n)
            p.new.take(n)
            p.anon += 1
            p.held[1000 + p.anon] = (n, [], p.new.lookup(-1, 0), 0)  # anonymous holder, released dead or live
        elif op == "snap":
            if snap is None or flag:
                snap = (p.ref.snapshot(), p.new.snapshot(), dict(p.held))
            else:
                p.ref.restore(snap[0])
                p.new.restore(snap[1])
                p.held = dict(snap[2])
        elif op == "reset" and not p.held:
            p.ref.reset()
            p.new.reset()
        p.check()
    for lin in sorted(p.held):
        p.release(lin, live=True)
        p.check()
    assert p.new.free == usable


def test_shared_prefix_blocks_are_reference_counted():
    """A group's prompt blocks: registered by the request that computes them, hit by the others without taking
    free blocks, back in the free queue (cached, at the back) only when the last holder frees them."""
    pool = KVBlockPool(20, 16, True)
    pool.take(4)  # request a: 4 prompt blocks, computed
    a = pool.register("g", 0, 4)
    a_hits = type(pool.lookup("x", 0))((a,), 4)
    pool.take(1)  # a's own partial block
    b_hits = pool.lookup(("prefix", "g"), 3)  # b may hit at most 3 (its last prompt token is computed)
    assert len(b_hits) == 3 and pool.held_in(b_hits) == 3
    pool.share(b_hits)  # held by a: no free block taken
    pool.take(2)  # b's own blocks
    assert pool.free == 20 - 4 - 1 - 2
    pool.release("a", 5, a_hits, 4, live=True)  # blocks 0-2 stay with b; block 3 and a's partial block come back
    assert pool.free == 20 - 2 - 3
    assert pool.held_in(b_hits) == 3 and pool.held_in(b_hits, {}) == 0  # b alone holds them now
    pool.release("b", 5, b_hits, 3, live=False)
    assert pool.free == 20
    again = pool.lookup(("prefix", "g"), 4)  # still cached for a later member of the group
    assert len(again) == 4 and pool.held_in(again) == 0
    pool.reset()
    assert len(pool.lookup(("prefix", "g"), 4)) == 0
