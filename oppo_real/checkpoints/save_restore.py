"""A real run's checkpoint after every step, and the restore that continues it exactly.

A checkpoint holds the completed steps and, under a policy that keeps trainings in flight (``async``:
generation of step t+1 overlaps training of step t), the steps whose batch was formed and handed to the
trainer but whose update has not been synced yet. Their trainings are *deferred to the restart*: the
checkpoint keeps the trainer's state from just before the oldest of them (saved by the train worker,
which runs its calls in order, right before that training — :meth:`Checkpointer.before_train`), their
batches (the samples stay in the checkpoint until trained) and their timings; a resume loads those
weights, re-opens those steps and trains them again, in order, exactly as the run would have. Nothing
is drained to take a checkpoint, so checkpointing does not change what a policy decides.

Files and write order (crash safety): :mod:`oppo_real.checkpoints.layout`.

The ledger writes and re-opens the open steps itself (``Ledger.to_json`` / ``load_json``: a step whose
batch is training); this module keeps what only the real run has — the trainings' timings, the samples,
the sampler, the records so far.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oppo_real.checkpoints.layout import (
    WeightsRef,
    check_version,
    read_ledger,
    weights_name,
    write_ledger,
)
from oppo_real.executor.sample_store import RSample

if TYPE_CHECKING:  # pragma: no cover
    from oppo_real.executor.real_driver import Driver, TrainingJob
    from oppo_sim.core.stepmachine import StepMachine


def _job_json(job: "TrainingJob") -> dict:
    """A training in flight: its timings and the weights saved before it (its plan and batch are the ledger's)."""
    return {"step": job.step, "start": job.start, "gen_end": job.gen_end, "score_end": job.score_end,
            "admitted": job.admitted, "deferred_n": job.deferred, "gen_calls": job.gen_calls, "weights": job.saved}


def _job_from_json(d: dict, step: "StepMachine") -> "TrainingJob":
    """The training of an open step (the ledger re-opened it with its plan and batch)."""
    from oppo_real.executor.real_driver import TrainingJob

    return TrainingJob(d["step"], step.plan, step.batch, d["start"], d["gen_end"], d["score_end"], d["admitted"],
                       d["deferred_n"], d["gen_calls"], None, d["weights"])


class Checkpointer:
    """Checkpoints of driver ``d`` in ``directory``: :meth:`save` after every step, :meth:`restore` once."""

    def __init__(self, d: "Driver", directory: Path) -> None:
        self.d = d
        self.dir = Path(directory)
        self.pending: list[tuple[int, Any, Any]] = []  # (step, save ref, timeline ref) taken before a training
        d.before_train = self.before_train

    def before_train(self, step: int) -> str:
        """Before step ``step``'s training, which stays in flight past the step: the train worker saves its
        state (policy version ``step``) and hands over its timeline rows so far (a checkpoint then never
        waits for a training)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        name = weights_name(step)
        train = self.d.train
        self.pending.append((step, train.submit("save", str(self.dir / name)), train.submit("take_timeline")))
        return name

    def flush(self) -> None:
        """At the run's end (no training in flight): the timeline rows handed over before trainings."""
        self._collect(None)

    def _collect(self, upto: int | None) -> None:
        """Wait for the pre-training saves of steps <= ``upto`` (all when None); keep their timeline rows."""
        keep = []
        for step, save, rows in self.pending:
            if upto is not None and step > upto:
                keep.append((step, save, rows))
                continue
            version, got = self.d.train.wait([save, rows])
            if version != step:
                raise RuntimeError(f"the trainer saved version {version} before training step {step}")
            self.d.add_timeline(got)
        self.pending = keep

    def save(self) -> None:
        """A checkpoint of what is done now (the ledger written last, see ``layout``). Trainings in flight
        keep running; the weights are the trainer's state before the oldest of them."""
        d = self.d
        clock = d.now()  # where a resumed run's clock continues
        d.settle(list(d.ledger.ready))  # finished samples carry their streamed scores into the checkpoint
        self.dir.mkdir(parents=True, exist_ok=True)
        if d.training and d.training[0].saved is None:  # no state saved before it (not expected): finish it
            d.drain()
        if d.training:
            oldest = d.training[0]
            self._collect(oldest.step)
            version = oldest.step
            d.take_timeline((d.gen, d.score))
        else:
            self._collect(None)
            version = d.train.call("save", str(self.dir / weights_name(d.ledger.version)))
            d.take_timeline()
        if version != d.ledger.version:
            raise RuntimeError(f"checkpoint: weights of version {version}, ledger at version {d.ledger.version}")
        state = {
            "step": d.step, "clock": clock, "ledger": d.ledger.to_json(),
            "training": [_job_json(j) for j in d.training],
            "samples": [asdict(s) for s in d.store.samples.values()],
            **d.store.state(),  # the prompt sampler, and the prompts of groups still open
            "records": d.records, "rollouts": d.rollouts, "timeline": d.timeline,
        }
        write_ledger(self.dir, state, WeightsRef.of(self.dir, version))

    def restore(self) -> None:
        """Continue from the checkpoint: models, optimizers and RNG, the generator's weights, ledger and
        samples, the clock; then the trainings that were in flight are trained again."""
        d = self.d
        st, ref = read_ledger(self.dir)
        d.ledger.load_json(st["ledger"])
        loaded = d.train.call("load", str(self.dir / ref.file))
        check_version(ref, d.ledger.version, loaded)
        d.store.samples = {s["sid"]: RSample.from_json(s) for s in st["samples"]}
        d.store.load_state(st)
        for s in d.store.samples.values():  # the scorer's KV did not survive the restart: streams start over
            s.opened = False
        for sid in d.ledger.deferred:
            d.ledger.tracks[sid].emitted = 0
        step = st["step"]
        d.gen.call("load_weights", step - 1, ref.version, d.train.submit("weights", step - 1))
        for h in (d.gen, d.train, d.score):
            h.call("take_timeline")  # loading is not part of any step
        d.step, d.records, d.rollouts, d.timeline = step, st["records"], st["rollouts"], st["timeline"]
        d.shift = time.time() - st["clock"]  # the outage is taken out of every time from here on
        for j in st["training"]:
            d.resubmit(_job_from_json(j, d.ledger.open[j["step"]]))
