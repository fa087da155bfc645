"""Scheduling parity, iteration by iteration: real vLLM vs the simulator's :class:`EngineCore`.

A :class:`Scenario` is a workload with forced response lengths (``ignore_eos`` + ``max_tokens``): requests that
arrive at given iteration indices, optional deferrals (a request aborted once it has produced ``after`` tokens
and re-added as prompt + tokens so far, as ``oppo_real`` defers with ``resume_request``) and optional weight-sync
cache resets. :func:`replay_sim` runs it through ``EngineCore`` (costs do not matter, only decisions);
``oppo_real.enginecheck.vllm_run.run_vllm`` runs it on real vLLM in process and records each ``SchedulerOutput``.
Both yield one :class:`IterRecord` per scheduler iteration; ``oppo_real.enginecheck.iteration_compare`` finds the first
divergence and the totals (``check`` runs both); ``oppo_real.enginecheck.scenarios`` holds the built-in workloads. Iteration indices count ``schedule()`` calls: a request with ``arrival=a`` is added once ``a`` iterations
have run (at once if the engine is idle, in both engines).

What the comparison does not cover, and why (the simulator models vLLM 0.32's synchronous FCFS scheduler):

- async scheduling (vLLM's default on GPUs, off on CPU): ``schedule()`` for step t+1 runs before step t's
  output is processed, so frees and admissions land one iteration later; the vLLM run turns it off;
- identical prompts across requests: vLLM shares their cached blocks, the simulator does not (block content is
  (lineage, index)); the scenarios draw distinct random prompts;
- ``max_model_len`` truncation (every request fits here), priority scheduling, speculative decoding, KV
  connectors, the KV watermark (0 by default);
- idle time: iterations count ``schedule()`` calls, so an idle engine jumps to the next arrival.

No vLLM or torch import here: the simulator side runs anywhere.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.continuous import EngineCore
from oppo_sim.engine.request import ADMIT, FINISH, PAUSE, EngineConfig, Req

NEW, RESUMED, RUNNING = "new", "resumed", "run"


@dataclass(frozen=True)
class EngineSettings:
    """The knobs both engines get (vLLM engine-argument names). ``num_gpu_blocks`` goes to vLLM as
    ``num_gpu_blocks_override``; one block is vLLM's null block."""

    max_num_seqs: int = 4
    max_num_batched_tokens: int = 2048
    block_size: int = 32
    num_gpu_blocks: int = 16
    enable_chunked_prefill: bool = False
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
            block_size=self.block_size, enable_prefix_caching=self.enable_prefix_caching,
            enable_chunked_prefill=self.enable_chunked_prefill,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
        )


@dataclass(frozen=True)
class ScenarioRequest:
    rid: str
    prompt: int  # prompt tokens
    output: int  # forced response length
    arrival: int = 0  # added once this many iterations have run


@dataclass(frozen=True)
class Deferral:
    """``rid`` is aborted once it has produced ``after`` tokens and re-added as ``<rid>.resumed`` (prompt +
    those tokens, the rest of the budget) once ``resume_at`` iterations have run (or at its abort if later)."""

    rid: str
    after: int
    resume_at: int = 0

    @property
    def resumed_rid(self) -> str:
        return f"{self.rid}.resumed"


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    settings: EngineSettings
    requests: tuple[ScenarioRequest, ...]
    deferrals: tuple[Deferral, ...] = ()
    resets: tuple[int, ...] = ()  # weight-sync prefix-cache resets, once this many iterations have run

    def __post_init__(self) -> None:
        s = self.settings
        s.engine_config()  # validates the engine knobs
        rids = [r.rid for r in self.requests]
        if not rids or len(set(rids)) != len(rids):
            raise ConfigError(f"scenario {self.name}: request ids must be unique and non-empty")
        for r in self.requests:
            if r.prompt < 1 or r.output < 1 or r.arrival < 0 or "-" in r.rid:
                raise ConfigError(f"scenario {self.name}: bad request {r} (prompt/output >= 1, arrival >= 0, no '-')")
        by_id = {r.rid: r for r in self.requests}
        for d in self.deferrals:
            if d.rid not in by_id or not 1 <= d.after < by_id[d.rid].output or d.resume_at < 0:
                raise ConfigError(f"scenario {self.name}: bad deferral {d}")
        if len({d.rid for d in self.deferrals}) != len(self.deferrals):
            raise ConfigError(f"scenario {self.name}: at most one deferral per request")
        if -(-self.max_model_len // s.block_size) > s.num_gpu_blocks - 1:
            raise ConfigError(f"scenario {self.name}: a {self.max_model_len}-token sequence must fit in "
                              f"num_gpu_blocks - 1 = {s.num_gpu_blocks - 1} blocks (vLLM checks at startup)")
        if not s.enable_chunked_prefill and s.max_num_batched_tokens < self.max_model_len:
            raise ConfigError(f"scenario {self.name}: without chunked prefill max_num_batched_tokens must be >= "
                              f"max_model_len ({self.max_model_len})")

    @property
    def max_model_len(self) -> int:
        return max(r.prompt + r.output for r in self.requests)

    def scaled(self, k: int) -> Scenario:
        """``k`` copies of the workload on ``k`` times the blocks, sequences and token budget."""
        if k == 1:
            return self
        if k < 1:
            raise ConfigError(f"scale must be >= 1, got {k}")
        s = self.settings
        reqs = tuple(replace(r, rid=f"{r.rid}x{i}") for i in range(k) for r in self.requests)
        defs = tuple(replace(d, rid=f"{d.rid}x{i}") for i in range(k) for d in self.deferrals)
        bigger = replace(s, max_num_seqs=s.max_num_seqs * k, max_num_batched_tokens=s.max_num_batched_tokens * k,
                         num_gpu_blocks=(s.num_gpu_blocks - 1) * k + 1)
        return replace(self, name=f"{self.name}@x{k}", settings=bigger, requests=reqs, deferrals=defs)

    def prompt_ids(self, rid: str, vocab: int) -> tuple[int, ...]:
        """Distinct random prompt tokens per request (no two requests share a cached block)."""
        r = next(q for q in self.requests if q.rid == rid)
        rng = random.Random(f"{self.name}/{rid}")
        return tuple(rng.randrange(3, vocab) for _ in range(r.prompt))


@dataclass(frozen=True)
class IterRecord:
    """One scheduler iteration. ``scheduled``: (request, kind, tokens, prefix-cache hit tokens) in scheduling
    order; ``kv_used``: blocks held after scheduling (evictable cached blocks count as free); ``ended``:
    requests that finished (or were aborted for a deferral) at its end."""

    it: int
    scheduled: tuple[tuple[str, str, int, int], ...]
    preempted: tuple[str, ...]
    kv_used: int
    ended: tuple[str, ...]

    @property
    def tokens(self) -> int:
        return sum(s[2] for s in self.scheduled)


class _Workload:
    """Arrival bookkeeping shared by both runners: what to add (or reset) once ``it`` iterations have run."""

    def __init__(self, sc: Scenario):
        self.sc = sc
        self.todo = sorted(sc.requests, key=lambda r: r.arrival)
        self.resets = sorted(sc.resets)
        self.defer = {d.rid: d for d in sc.deferrals}
        self.aborted: dict[str, int] = {}  # rid -> tokens produced when aborted
        self.resumed: set[str] = set()

    def due(self, it: int, idle: bool) -> tuple[bool, list[ScenarioRequest], list[Deferral]]:
        """(reset now?, requests to add, deferrals to resume) before iteration ``it + 1``; when the engine is
        idle the next pending arrival is due at once."""
        if idle and self.todo and not self._resumable(it, True):
            it = max(it, self.todo[0].arrival)
        reset = bool(self.resets) and self.resets[0] <= it
        while self.resets and self.resets[0] <= it:
            self.resets.pop(0)
        add = [r for r in self.todo if r.arrival <= it]
        self.todo = [r for r in self.todo if r.arrival > it]
        res = self._resumable(it, idle)
        self.resumed.update(d.rid for d in res)
        return reset, add, res

    def _resumable(self, it: int, idle: bool) -> list[Deferral]:
        return [d for rid, d in self.defer.items()
                if rid in self.aborted and rid not in self.resumed and (idle or d.resume_at <= it)]

    def next_due(self) -> int | None:
        """The earliest iteration count at which something is due (to cut a simulator span there)."""
        cands = [r.arrival for r in self.todo] + self.resets
        cands += [d.resume_at for rid, d in self.defer.items() if rid in self.aborted and rid not in self.resumed]
        return min(cands) if cands else None

    def pending(self) -> bool:
        return bool(self.todo) or any(rid not in self.resumed for rid in self.defer)


# ---------------------------------------------------------------------------------------------- simulator
def replay_sim(sc: Scenario, num_gpu_blocks: int | None = None) -> list[IterRecord]:
    """Run ``sc`` through :class:`EngineCore` (``num_gpu_blocks``: what vLLM actually allocated, if known)."""
    from oppo_sim.hw.costs.costmodel import DecodeCost
    from oppo_sim.hw.devices.hardware import get_hardware
    from oppo_sim.hw.models.lookup import get_model

    blocks = num_gpu_blocks or sc.settings.num_gpu_blocks
    core = EngineCore(DecodeCost(get_model("qwen2.5-0.5b"), get_hardware("h100-sxm")), sc.settings.engine_config(), blocks)
    work = _Workload(sc)
    by_id = {r.rid: r for r in sc.requests}
    records: list[IterRecord] = []
    pre_preempted: list[str] = []
    while core.has_work() or work.pending():
        reset, add, res = work.due(core.iterations, idle=not core.has_work())
        if reset:
            before = {r.rid for r in core.running}
            core.reset_cache()
            pre_preempted += sorted(before)
        for q in add:
            r = Req(q.rid, q.prompt, q.output)
            if q.rid in work.defer:
                r.pause_at = work.defer[q.rid].after
            core.add(r)
        for d in res:
            q = by_id[d.rid]
            core.add(Req(d.resumed_rid, q.prompt, q.output, generated=work.aborted[d.rid], lineage=d.rid))
        if not core.has_work():
            if not work.pending():
                break
            continue
        records += _sim_iterations(core, work, pre_preempted)
        pre_preempted = []
    return records


def _sim_iterations(core: EngineCore, work: _Workload, pre_preempted: list[str]) -> list[IterRecord]:
    """Plan and commit one plan (a span is cut where the workload has something due); its records."""
    plan = core.plan()
    it0 = core.iterations
    nxt = work.next_due()
    if plan.steady and nxt is not None and nxt > it0:
        plan = core.truncate(plan, nxt - it0)
    bs = core.cfg.block_size
    state = [(r.rid, r.num_computed, r.blocks) for r in core.running]
    used0 = core.used
    kinds = {id(r): (RESUMED if r.resumed else NEW, h * bs) for k, r, _, h in plan.ops if k == ADMIT}
    events = core.commit(plan, 0.0)
    ended = tuple(r.rid for e, r in events if e in (FINISH, PAUSE))
    for e, r in events:
        if e == PAUSE:
            work.aborted[r.rid] = r.generated
    if not plan.steady:
        sched = []
        for r, n in plan.schedule:
            kind, hit = kinds.get(id(r), (RUNNING, 0))
            sched.append((r.rid, kind, n, hit))
        pre = tuple(sorted(pre_preempted + [r.rid for r in plan.preempted]))
        return [IterRecord(it0 + 1, tuple(sched), pre, core.capacity - plan.free_after, ended)]
    recs = []
    for i in range(1, plan.iters + 1):
        used = used0 + sum(-(-(c + i) // bs) - b for _, c, b in state)
        recs.append(IterRecord(it0 + i, tuple((rid, RUNNING, 1, 0) for rid, _, _ in state),
                               tuple(sorted(pre_preempted)) if i == 1 else (), used, ended if i == plan.iters else ()))
    return recs
