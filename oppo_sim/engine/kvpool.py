"""The KV-cache block pool of one engine, as vLLM v1 (0.32) keeps it, at block level.

vLLM's ``BlockPool`` (``vllm/v1/core/block_pool.py``) holds ``num_gpu_blocks`` blocks; block 0 is its *null
block*, so ``num_gpu_blocks - 1`` are usable. Free blocks sit in one queue:

- allocation pops from the **front** and evicts a popped block's prefix-cache hash;
- a request's blocks are freed in **reverse** order; those without a hash (the partial last block, or all of
  them without prefix caching) go to the **front** (reused first), hashed ones to the **back** (LRU: evicted
  last, a sequence's tail before its head);
- a freed hashed block stays in the prefix cache and counts as free until it is popped;
- a prefix-cache hit *touches* the block: it leaves the free queue (without eviction).

What is modelled here, and how:

- **Block content.** A full block's hash in vLLM chains every token up to it. Here block ``j`` of a request
  is identified by ``(lineage, j)``: a request resumed as prompt + tokens so far (vLLM preemption, or
  ``oppo_real``'s deferral via ``resume_request``) carries exactly its earlier token stream, so it shares its
  lineage. Requests that declare one ``prefix`` (the n responses of one prompt: GRPO's group) share the full
  blocks of that prompt: block ``j < prompt // block_size`` is ``(("prefix", p), j)`` for all of them. Such
  *shared* blocks are reference-counted (vLLM's ``ref_cnt``): a hit on a block another request holds takes
  no free block, and a shared block returns to the free queue (hashed, to the back) when its last holder
  frees it. A prefix run's blocks are registered when the request that computes them is admitted (vLLM
  hashes full blocks at schedule time, so a request admitted later in the same iteration already hits them);
  the prompt blocks a chunked prefill computes in later iterations stay the request's own.
- **Runs, not blocks.** The cached blocks one release puts in the cache (``(lineage, j)`` for ``j`` in
  ``[lo, hi)``) are one :class:`CachedRun`; a block is ``(run, j)``. The queue holds run lengths: ``int``
  entries are interchangeable *anonymous* blocks (content never hit again), ``(run, lo, hi)`` entries are the
  cached blocks ``hi - 1, ..., lo`` of a run in queue order. Which blocks of a run are still cached is a bit
  mask. So freeing, evicting and forgetting cost per run, not per block (a 100k-token sequence is one entry).
- **Anonymous blocks.** Only *cached* blocks of a lineage that may come back (preempted, paused or aborted
  requests) are kept as content. A finished request's lineage is dead: its blocks go where vLLM puts them
  (hashed ones to the back) but anonymously, which changes no later decision.
- **Held blocks** are counts on the request, except its prefix-cache hits (:class:`Hits`, freed as hashed
  blocks). A request's own full blocks are hashed at schedule time in vLLM; they can only be hit by the same
  lineage, which cannot look them up while it runs, so they are materialised when the request frees them.

Duplicate content (a lineage recomputes block ``j`` while an older cached copy of it is still in the queue
because the hit stopped at an earlier, evicted block) is kept as vLLM keeps it: both copies are cached and a
lookup returns the older one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable


class CachedRun:
    """Blocks ``(lineage, j)`` one release put in the prefix cache; a cached block is ``(run, j)``."""

    __slots__ = ("lineage",)

    def __init__(self, lineage: Hashable):
        self.lineage = lineage

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"CachedRun({self.lineage!r})"


class Hits:
    """Prefix-cache blocks ``0 .. n-1`` of a lineage held by a request: ``pieces`` are ``(run, lo, hi)`` in
    ascending ``j``. ``len()`` is the number of blocks."""

    __slots__ = ("pieces", "n")

    def __init__(self, pieces: tuple[tuple[CachedRun, int, int], ...], n: int):
        self.pieces = pieces
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Hits({self.pieces!r})"


NO_HITS = Hits((), 0)


def _mask(lo: int, hi: int) -> int:
    return ((1 << (hi - lo)) - 1) << lo


def _ones(x: int) -> int:
    """Trailing one bits of ``x``."""
    return (~x & (x + 1)).bit_length() - 1


def _intervals(run: CachedRun, m: int) -> list[tuple[CachedRun, int, int]]:
    out = []
    while m:
        lo = (m & -m).bit_length() - 1
        hi = lo + _ones(m >> lo)
        out.append((run, lo, hi))
        m &= ~_mask(lo, hi)
    return out


class KVBlockPool:
    """Free-block queue and prefix cache of one engine replica (``usable`` = vLLM's blocks minus the null
    block). Without prefix caching only the free count matters."""

    def __init__(self, usable: int, block_size: int, caching: bool):
        self.usable = usable
        self.block_size = block_size
        self.caching = caching
        self.free = usable
        self._queue: deque[int | tuple[CachedRun, int, int]] = deque([usable]) if usable > 0 else deque()
        self._alive: dict[CachedRun, int] = {}  # run -> mask of its blocks still cached (free or held as hits)
        self._runs: dict[Hashable, list[CachedRun]] = {}  # lineage -> its runs with cached blocks, oldest first
        self._refs: dict[CachedRun, list[int]] = {}  # a shared prefix's run -> holders of each of its blocks

    # -- lookups (pure) ---------------------------------------------------------------------------------------
    def holds(self, lineage: Hashable) -> bool:
        """Whether any block of ``lineage`` is cached."""
        return lineage in self._runs

    def lookup(self, lineage: Hashable, max_blocks: int, doomed: dict | None = None, start: int = 0) -> Hits:
        """The longest run of cached blocks ``(lineage, start..)`` (at most ``max_blocks``), each the oldest copy
        not in ``doomed`` (blocks that allocations earlier in the same iteration will have evicted)."""
        runs = self._runs.get(lineage) if self.caching else None
        if not runs or max_blocks <= 0:
            return NO_HITS
        limit = ((1 << max_blocks) - 1) << start
        alive = self._alive
        if len(runs) == 1 and not doomed and not start:
            run = runs[0]
            h = _ones(alive[run] & limit)
            return Hits(((run, 0, h),), h) if h else NO_HITS
        avail = [alive[r] & limit & ~doomed.get(r, 0) if doomed else alive[r] & limit for r in runs]
        cover = 0
        for a in avail:
            cover |= a
        h = _ones(cover >> start)
        if not h:
            return NO_HITS
        rem = ((1 << h) - 1) << start
        pieces: list[tuple[CachedRun, int, int]] = []
        for run, a in zip(runs, avail, strict=True):
            mine = a & rem
            if mine:
                rem &= ~mine
                pieces += _intervals(run, mine)
                if not rem:
                    break
        pieces.sort(key=lambda p: p[1])
        return Hits(tuple(pieces), h)

    def doomed(self, pops: int, skip: list[Hits]) -> dict[CachedRun, int]:
        """Cached blocks among the first ``pops`` entries of the free queue (run -> mask), not counting blocks
        in ``skip`` (touched earlier in the same iteration, so no longer in the queue when the pops happen)."""
        out: dict[CachedRun, int] = {}
        if pops <= 0 or not self._alive:
            return out
        skipm: dict[CachedRun, int] = {}
        for hits in skip:
            for run, lo, hi in hits.pieces:
                skipm[run] = skipm.get(run, 0) | _mask(lo, hi)
        for e in self._queue:
            if type(e) is int:
                pops -= e
            else:
                run, lo, hi = e
                m = _mask(lo, hi) & ~skipm.get(run, 0)
                c = m.bit_count()
                if c > pops:  # only the first pops of them (highest j first)
                    keep = 0
                    for _ in range(pops):
                        b = 1 << (m.bit_length() - 1)
                        keep |= b
                        m ^= b
                    m, c = keep, pops
                if m:
                    out[run] = out.get(run, 0) | m
                pops -= c
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
            if type(e) is int:
                if e > n:
                    q[0] = e - n
                    return
                q.popleft()
                n -= e
            else:
                run, lo, hi = e
                if hi - lo > n:
                    q[0] = (run, lo, hi - n)
                    self._evict(run, _mask(hi - n, hi))
                    return
                q.popleft()
                self._evict(run, _mask(lo, hi))
                n -= hi - lo

    def held_in(self, hits: Hits, unref: dict | None = None) -> int:
        """Blocks of ``hits`` another request holds (shared prefix blocks with holders): they take no free block.
        With ``unref`` (planned releases, ``(run, j) -> count``, updated): the blocks of ``hits`` that a release
        by their holder would leave held by others."""
        refs, n = self._refs, 0
        for run, lo, hi in hits.pieces if refs else ():
            rc = refs.get(run)
            for j in range(lo, hi) if rc is not None else ():
                if unref is not None:
                    u = unref[(run, j)] = unref.get((run, j), 0) + 1
                    n += rc[j] > u
                else:
                    n += rc[j] > 0
        return n

    def share(self, hits: Hits) -> None:
        """A request takes ``hits``: free ones leave the free queue, and shared prefix blocks gain a holder."""
        refs = self._refs
        if not refs or not any(run in refs for run, _, _ in hits.pieces):
            self.touch(hits)
            return
        free = []
        for run, lo, hi in hits.pieces:
            rc = refs.get(run)
            if rc is None:
                free.append((run, lo, hi))
                continue
            for j in range(lo, hi):
                if not rc[j]:
                    free.append((run, j, j + 1))
                rc[j] += 1
        self.touch(Hits(tuple(free), sum(hi - lo for _, lo, hi in free)))

    def register(self, prefix: Hashable, lo: int, hi: int) -> tuple[CachedRun, int, int]:
        """Blocks ``lo .. hi-1`` of prefix ``prefix``, just allocated by the request that computes them, become
        shared content (held by it); returns the piece to add to its hits."""
        run = CachedRun(("prefix", prefix))
        self._alive[run] = _mask(lo, hi)
        self._runs.setdefault(run.lineage, []).append(run)
        self._refs[run] = [0] * lo + [1] * (hi - lo)
        return run, lo, hi

    def touch(self, hits: Hits) -> None:
        """Prefix-cache hits leave the free queue (they are all free here: see :meth:`share`)."""
        q = self._queue
        for run, lo, hi in hits.pieces:
            left, i = hi - lo, 0
            while left:  # each block is in exactly one entry: the overlaps are disjoint intervals
                if i >= len(q):
                    raise AssertionError(f"KV pool: touched block of {run.lineage!r} is not in the free queue")
                e = q[i]
                if type(e) is int or e[0] is not run or e[2] <= lo or e[1] >= hi:
                    i += 1
                    continue
                _, slo, shi = e
                olo, ohi = max(lo, slo), min(hi, shi)
                del q[i]
                if ohi < shi:
                    q.insert(i, (run, ohi, shi))
                    i += 1
                if slo < olo:
                    q.insert(i, (run, slo, olo))
                    i += 1
                left -= ohi - olo
        self.free -= len(hits)

    def release(self, lineage: Hashable, held: int, hits: Hits, hashed: int, live: bool) -> None:
        """Free a request's ``held`` blocks in reverse order: the first ``len(hits)`` are its prefix-cache hits,
        blocks below ``hashed`` are full and hashed, the rest are not. ``live``: the lineage may come back."""
        if held <= 0:
            return
        if self._refs and any(run in self._refs for run, _, _ in hits.pieces):
            self._release_shared(lineage, held, hits, hashed, live)
            return
        self.free += held
        if not self.caching:
            self._prepend(held)
            return
        nh = len(hits)
        hashed = max(min(hashed, held), nh)
        front = held - hashed  # unhashed (partial or not yet full) blocks: reused first
        if front:
            self._prepend(front)
        if not live:  # dead lineage: the same places in the queue, content forgotten
            for run, lo, hi in hits.pieces:
                self._evict(run, _mask(lo, hi))
            self._append_anon(hashed)
            return
        q = self._queue
        if hashed > nh:
            run = CachedRun(lineage)
            self._alive[run] = _mask(nh, hashed)
            self._runs.setdefault(lineage, []).append(run)
            q.append((run, nh, hashed))
        if nh:
            q.extend(reversed(hits.pieces))

    def _release_shared(self, lineage: Hashable, held: int, hits: Hits, hashed: int, live: bool) -> None:
        """:meth:`release` of a request holding shared prefix blocks: only those it was the last holder of
        return to the free queue (hashed, cached: the prefix stays valid for its group)."""
        refs, back, kept, shared = self._refs, [], 0, 0
        own = [p for p in hits.pieces if p[0] not in refs]
        for run, lo, hi in hits.pieces:
            rc = refs.get(run)
            if rc is None:
                continue
            shared += hi - lo
            for j in range(lo, hi):
                rc[j] -= 1
                if rc[j]:
                    kept += 1
                elif back and back[-1][0] is run and back[-1][2] == j:
                    back[-1] = (run, back[-1][1], j + 1)
                else:
                    back.append((run, j, j + 1))
        self.free += held - kept
        nh = len(hits)
        hashed = max(min(hashed, held), nh)
        self._prepend(held - hashed)
        q = self._queue
        if not live:
            for run, lo, hi in own:
                self._evict(run, _mask(lo, hi))
            self._append_anon(hashed - shared)
            q.extend(reversed(back))
            return
        if hashed > nh:
            run = CachedRun(lineage)
            self._alive[run] = _mask(nh, hashed)
            self._runs.setdefault(lineage, []).append(run)
            q.append((run, nh, hashed))
        q.extend(reversed(sorted(own + back, key=lambda p: p[1])))

    def reset(self) -> None:
        """Forget every hash (vLLM's ``reset_prefix_cache``); every block must be free."""
        if self.free != self.usable:
            raise AssertionError("KV pool: reset with blocks still held")
        self._alive.clear()
        self._runs.clear()
        self._refs.clear()
        self._queue = deque([self.usable]) if self.usable else deque()

    # -- snapshots ----------------------------------------------------------------------------------------------
    def snapshot(self) -> tuple:
        return (self.free, list(self._queue), dict(self._alive), {k: list(v) for k, v in self._runs.items()},
                {k: list(v) for k, v in self._refs.items()})

    def restore(self, snap: tuple) -> None:
        self.free, queue, alive, runs, refs = snap
        self._queue = deque(queue)
        self._alive = dict(alive)
        self._runs = {k: list(v) for k, v in runs.items()}
        self._refs = {k: list(v) for k, v in refs.items()}

    @property
    def cached_blocks(self) -> int:
        """Blocks whose content is still in the prefix cache (free or held as hits)."""
        return sum(m.bit_count() for m in self._alive.values())

    # -- internals ------------------------------------------------------------------------------------------------
    def _evict(self, run: CachedRun, m: int) -> None:
        a = self._alive.get(run)
        if a is None:
            return
        a &= ~m
        if a:
            self._alive[run] = a
            return
        del self._alive[run]
        self._refs.pop(run, None)
        runs = self._runs[run.lineage]
        runs.remove(run)
        if not runs:
            del self._runs[run.lineage]

    def _prepend(self, n: int) -> None:
        if n <= 0:
            return
        q = self._queue
        if q and type(q[0]) is int:
            q[0] += n
        else:
            q.appendleft(n)

    def _append_anon(self, n: int) -> None:
        if n <= 0:
            return
        q = self._queue
        if q and type(q[-1]) is int:
            q[-1] += n
        else:
            q.append(n)
