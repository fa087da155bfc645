"""The vLLM side of ``engine-check``: run a :class:`~oppo_real.enginecheck.Scenario` on real vLLM, in process,
and record every ``SchedulerOutput``.

The engine is built by :class:`~oppo_real.backends.vllm_actor.VLLMActor` (the project's CPU/GPU backend: greedy
sampling, ``ignore_eos`` + ``max_tokens`` force the lengths) with ``num_gpu_blocks_override``; deferrals go
through ``abort`` + :func:`~oppo_real.backends.api.resume_request` exactly as ``oppo_real`` defers, and resets
through ``VLLMActor.reset_prefix_cache`` (the weight-sync reset). The hook wraps the scheduler's ``schedule``
and ``update_from_output`` as instance attributes (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the scheduler in
this process): the scheduled requests and token counts in scheduling order (``num_scheduled_tokens`` keeps it),
new vs resumed vs running, their prefix-cache hits (``num_computed_tokens`` before the step), the preempted
requests, the blocks in use after scheduling, and the requests that finished in the step.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from oppo_real.enginecheck.workload import (
    NEW,
    RESUMED,
    RUNNING,
    IterRecord,
    Scenario,
    _Workload,
)


def _ext(internal_id: str) -> str:
    """vLLM's internal request id is ``<external>-<8 hex>``."""
    return internal_id.rsplit("-", 1)[0]


class SchedulerRecorder:
    """Wraps one scheduler's ``schedule`` / ``update_from_output`` and keeps one :class:`IterRecord` per call."""

    def __init__(self, scheduler) -> None:
        self.pool = scheduler.kv_cache_manager.block_pool
        self.usable = self.pool.num_gpu_blocks - 1  # block 0 is the null block
        self.records: list[IterRecord] = []
        self._ended: list[str] = []
        orig_schedule, orig_update = scheduler.schedule, scheduler.update_from_output

        def schedule(*args, **kwargs):
            out = orig_schedule(*args, **kwargs)
            self._on_schedule(out)
            return out

        def update_from_output(scheduler_output, model_runner_output):
            res = orig_update(scheduler_output, model_runner_output)
            self._on_update(res)
            return res

        scheduler.schedule = schedule
        scheduler.update_from_output = update_from_output

    def _on_schedule(self, so) -> None:
        cr = so.scheduled_cached_reqs
        hit = {r.req_id: (NEW, r.num_computed_tokens) for r in so.scheduled_new_reqs}
        for i, rid in enumerate(cr.req_ids):
            hit[rid] = (RESUMED, cr.num_computed_tokens[i]) if rid in cr.resumed_req_ids else (RUNNING, 0)
        sched = tuple((_ext(rid), hit[rid][0], n, hit[rid][1]) for rid, n in so.num_scheduled_tokens.items())
        pre = tuple(sorted(_ext(r) for r in (so.preempted_req_ids or ())))
        used = self.usable - self.pool.get_num_free_blocks()
        self.records.append(IterRecord(len(self.records) + 1, sched, pre, used, ()))

    def _on_update(self, res) -> None:
        ended = [o.request_id for eco in res.values() for o in eco.outputs if o.finish_reason is not None]
        self._end(ended)

    def _end(self, rids: list[str]) -> None:
        last = self.records[-1]
        self.records[-1] = IterRecord(last.it, last.scheduled, last.preempted, last.kv_used,
                                      last.ended + tuple(_ext(r) for r in rids))


@dataclass(frozen=True)
class VllmRun:
    records: list[IterRecord]
    num_gpu_blocks: int  # what vLLM actually allocated (null block included)
    version: str


@contextlib.contextmanager
def output_to(log_path: Path | None) -> Iterator[None]:
    """Send everything written to file descriptors 1 and 2 (vLLM's logs, C++ warnings) to ``log_path``."""
    if log_path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def run_vllm(sc: Scenario, model_dir: Path, cores: str | None = None) -> VllmRun:
    """Run ``sc`` on an in-process vLLM engine over the local model directory ``model_dir``."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm

    from oppo_real.backends.api import SamplingConfig
    from oppo_real.backends.vllm_actor import VLLMActor, VLLMActorConfig

    s = sc.settings
    # Async scheduling (vLLM's default on GPUs; forced off on CPU) overlaps schedule(t+1) with step t, so frees
    # and admissions land one iteration later: the simulator models the synchronous scheduler.
    extra = [("num_gpu_blocks_override", s.num_gpu_blocks), ("async_scheduling", False)]
    if s.long_prefill_token_threshold:
        extra.append(("long_prefill_token_threshold", s.long_prefill_token_threshold))
    actor = VLLMActor(VLLMActorConfig(
        model=str(model_dir), sampling=SamplingConfig(temperature=0.0), max_model_len=sc.max_model_len,
        max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
        enable_chunked_prefill=s.enable_chunked_prefill, enable_prefix_caching=s.enable_prefix_caching,
        block_size=s.block_size, cpu_threads_bind=cores, extra_engine_args=tuple(extra),
    ))
    try:
        sched = actor.engine.engine_core.engine_core.scheduler
        rec = SchedulerRecorder(sched)
        vocab = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
        _drive(actor, sc, rec, vocab)
        return VllmRun(rec.records, rec.pool.num_gpu_blocks, vllm.__version__)
    finally:
        actor.close()


def _drive(actor, sc: Scenario, rec: SchedulerRecorder, vocab: int) -> None:
    """Add requests at their iterations, step, abort and resume deferred requests, reset the cache."""
    from oppo_real.backends.api import GenRequest, resume_request

    work = _Workload(sc)
    originals: dict[str, GenRequest] = {}
    produced: dict[str, list[int]] = {}
    while actor.has_unfinished() or work.pending():
        reset, add, res = work.due(len(rec.records), idle=not actor.has_unfinished())
        if reset:
            actor.reset_prefix_cache()
        for q in add:
            originals[q.rid] = GenRequest(q.rid, sc.prompt_ids(q.rid, vocab), q.output, ignore_eos=True)
            actor.add(originals[q.rid])
        for d in res:
            actor.add(resume_request(originals[d.rid], produced[d.rid], req_id=d.resumed_rid))
        if not actor.has_unfinished():
            continue
        before = len(rec.records)
        for delta in actor.step():
            produced.setdefault(delta.req_id, []).extend(delta.token_ids)
        if len(rec.records) != before + 1:
            raise RuntimeError(f"one engine step ran {len(rec.records) - before} schedule() calls, expected 1")
        for rid, d in work.defer.items():
            if rid in originals and rid not in work.aborted and len(produced.get(rid, ())) >= d.after:
                actor.abort(rid)
                work.aborted[rid] = len(produced[rid])
                rec._end([rid])
