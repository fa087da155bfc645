"""Workers that do no model work and answer at once: a score worker whose scores are 0 and a train worker
that trains nothing. With a ``lockstep`` generation backend they leave only what the driver itself
spends — the remote calls, the step machine, building requests and batches — which
``oppo_real.profiling.driver_overheads`` times, and which the decision-parity test runs."""

from __future__ import annotations

from typing import Sequence

from oppo_real.executor.messages import Score, TrainBatch
from oppo_real.workers.recorder import Recorder


class NullScoreWorker(Recorder):
    pool = "score"

    def open(self, seqs) -> None:
        pass

    def feed(self, step: int, chunks: dict[str, Sequence[int]]) -> None:
        pass

    def finish(self, step: int, sids: Sequence[str]) -> dict[str, Score]:
        return {sid: Score(0.0, ()) for sid in sids}

    def score_whole(self, step: int, items) -> dict[str, Score]:
        return {sid: Score(0.0, tuple(0.0 for _ in resp)) for sid, _, resp in items}

    def drop(self, sids: Sequence[str]) -> None:
        pass


class NullTrainWorker(Recorder):
    pool = "main"

    def train(self, batch: TrainBatch) -> dict[str, float]:
        return {}

    def weights(self, step: int) -> dict:
        return {}

    def save(self, path: str) -> None:
        pass

    def load(self, path: str) -> int:
        return 0
