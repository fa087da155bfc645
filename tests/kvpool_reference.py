"""Reference for tests/test_kvpool.py: the KV block pool as it was first written, one object per cached block
(slow, plainly correct). ``oppo_sim.engine.kvpool`` keeps runs of blocks instead and must decide the same;
vLLM's rules that both follow (free queue order, prefix-cache hits, lineages) are described there.

Here, unlike there: anonymous blocks are run lengths (ints) in the queue, and every *cached* block of a
lineage that may come back (preempted, paused or aborted requests) is an object of its own. Held blocks
are counts on the request, except its prefix-cache hits (objects, freed as hashed blocks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable


class CachedBlock:
    """A free-able block whose content ``(lineage, index)`` is in the prefix cache."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[Hashable, int]):
        self.key = key

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"CachedBlock{self.key}"


class KVBlockPool:
    """Free-block queue and prefix cache of one engine replica (``usable`` = vLLM's blocks minus the null
    block). Without prefix caching only the free count matters."""

    def __init__(self, usable: int, block_size: int, caching: bool):
        self.usable = usable
        self.block_size = block_size
        self.caching = caching
        self.free = usable
        self._queue: deque[int | CachedBlock] = deque([usable]) if usable > 0 else deque()
        self._cached: dict[tuple[Hashable, int], list[CachedBlock]] = {}

    # -- lookups (pure) ---------------------------------------------------------------------------------------
    def lookup(self, lineage: Hashable, max_blocks: int, doomed: frozenset | set = frozenset()) -> list[CachedBlock]:
        """The longest run of cached blocks ``(lineage, 0..)`` (at most ``max_blocks``), skipping copies in
        ``doomed`` (blocks that allocations earlier in the same iteration will have evicted)."""
        out: list[CachedBlock] = []
        if not self.caching:
            return out
        cached = self._cached
        for j in range(max_blocks):
            copies = cached.get((lineage, j))
            if not copies:
                break
            blk = copies[0]
            if doomed and blk in doomed:
                blk = next((c for c in copies if c not in doomed), None)
                if blk is None:
                    break
            out.append(blk)
        return out

    def doomed(self, pops: int, skip: set) -> set[CachedBlock]:
        """Cached blocks among the first ``pops`` entries of the free queue, not counting blocks in ``skip``
        (touched earlier in the same iteration, so no longer in the queue when the pops happen)."""
        out: set[CachedBlock] = set()
        if pops <= 0 or not self._cached:
            return out
        for e in self._queue:
            if isinstance(e, int):
                pops -= e
            elif e not in skip:
                out.add(e)
                pops -= 1
            if pops <= 0:
                break
        return out

    # -- mutations ----------------------------------------------------------------------------------------------
    def take(self, n: int) -> None:
        """Allocate ``n`` blocks from the front of the free queue, evicting cached ones."""
        if n <= 0:
            return
        if n > self.free:
            raise AssertionError(f"KV pool: cannot allocate {n} blocks, {self.free} free")
        self.free -= n
        q = self._queue
        while n:
            e = q[0]
            if isinstance(e, int):
                if e > n:
                    q[0] = e - n
                    return
                q.popleft()
                n -= e
            else:
                q.popleft()
                self._evict(e)
                n -= 1

    def touch(self, blocks: list[CachedBlock]) -> None:
        """Prefix-cache hits leave the free queue (they are all free: content is never shared)."""
        for b in blocks:
            self._queue.remove(b)
        self.free -= len(blocks)

    def release(self, lineage: Hashable, held: int, hits: list[CachedBlock], hashed: int, live: bool) -> None:
        """Free a request's ``held`` blocks in reverse order: the first ``len(hits)`` are its prefix-cache hits,
        blocks below ``hashed`` are full and hashed, the rest are not. ``live``: the lineage may come back."""
        if held <= 0:
            return
        self.free += held
        if not self.caching:
            self._prepend(held)
            return
        hashed = max(min(hashed, held), len(hits))
        front = held - hashed  # unhashed (partial or not yet full) blocks: reused first
        if front:
            self._prepend(front)
        if not live:  # dead lineage: the same places in the queue, content forgotten
            for blk in hits:
                self._evict(blk)
            self._append_anon(hashed)
            return
        q = self._queue
        nh = len(hits)
        for j in range(hashed - 1, -1, -1):
            q.append(hits[j] if j < nh else self._insert((lineage, j)))

    def reset(self) -> None:
        """Forget every hash (vLLM's ``reset_prefix_cache``); every block must be free."""
        if self.free != self.usable:
            raise AssertionError("KV pool: reset with blocks still held")
        self._cached.clear()
        self._queue = deque([self.usable]) if self.usable else deque()

    # -- snapshots ----------------------------------------------------------------------------------------------
    def snapshot(self) -> tuple:
        return self.free, list(self._queue), {k: list(v) for k, v in self._cached.items()}

    def restore(self, snap: tuple) -> None:
        self.free, queue, cached = snap
        self._queue = deque(queue)
        self._cached = {k: list(v) for k, v in cached.items()}

    @property
    def cached_blocks(self) -> int:
        """Blocks whose content is still in the prefix cache (free or held as hits)."""
        return sum(len(v) for v in self._cached.values())

    # -- internals ------------------------------------------------------------------------------------------------
    def _insert(self, key: tuple[Hashable, int]) -> CachedBlock:
        blk = CachedBlock(key)
        self._cached.setdefault(key, []).append(blk)
        return blk

    def _evict(self, blk: CachedBlock) -> None:
        copies = self._cached.get(blk.key)
        if copies is None:
            return
        for i, c in enumerate(copies):
            if c is blk:
                del copies[i]
                break
        if not copies:
            del self._cached[blk.key]

    def _prepend(self, n: int) -> None:
        if n <= 0:
            return
        q = self._queue
        if q and isinstance(q[0], int):
            q[0] += n
        else:
            q.appendleft(n)

    def _append_anon(self, n: int) -> None:
        if n <= 0:
            return
        q = self._queue
        if q and isinstance(q[-1], int):
            q[-1] += n
        else:
            q.append(n)
