"""The scoring worker: the frozen reward and reference models, fed incrementally (streamed chunks, KV
kept per sequence) or on whole sequences."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from oppo_real.executor.messages import Score
from oppo_real.workers.recorder import Recorder


@dataclass(frozen=True)
class ScoreWorkerConfig:
    reward: str
    reference: str
    cores: tuple[int, ...] | None = None
    pool: str = "score"
    device: str = "cpu"
    dtype: str = "float32"  # "bfloat16" on a GPU


class ScoreWorker(Recorder):
    """The frozen scorers: reward and reference, streamed (incremental prefill) or on whole sequences."""

    def __init__(self, cfg: ScoreWorkerConfig) -> None:
        super().__init__()
        from oppo_real.backends.scorer import IncrementalScorer, ScorerConfig

        self._place(cfg.pool, cfg.cores)
        place = dict(dtype=cfg.dtype, device=cfg.device)
        self.reward = IncrementalScorer(ScorerConfig(kind="reward", model=cfg.reward, **place))
        self.reference = IncrementalScorer(ScorerConfig(kind="reference", model=cfg.reference, **place))

    def open(self, seqs: Sequence[tuple[str, Sequence[int]]]) -> None:
        for sid, prompt in seqs:
            for sc in (self.reward, self.reference):
                if sid not in sc.open_ids():
                    sc.open(sid, prompt)

    def feed(self, step: int, chunks: dict[str, Sequence[int]]) -> None:
        """Prefill streamed chunks incrementally (KV kept per sequence)."""
        n = sum(len(c) for c in chunks.values())
        for role, sc in (("reward", self.reward), ("reference", self.reference)):
            t0 = time.time()
            sc.feed_many(chunks)
            self._rec("score", role, step, t0, time.time(), n)

    def finish(self, step: int, sids: Sequence[str]) -> dict[str, Score]:
        """Final reward and reference log-probs of streamed sequences (only their last chunk is left)."""
        t0 = time.time()
        rewards = {sid: self.reward.finish(sid) for sid in sids}
        t1 = time.time()
        refs = {sid: self.reference.finish(sid) for sid in sids}
        t2 = time.time()
        n = sum(r.n_response for r in rewards.values())
        self._rec("score", "reward", step, t0, t1, n)
        self._rec("score", "reference", step, t1, t2, n)
        return {sid: Score(float(rewards[sid].reward), tuple(refs[sid].logprobs)) for sid in sids}

    def score_whole(self, step: int, items: Sequence[tuple[str, Sequence[int], Sequence[int]]]) -> dict[str, Score]:
        """Reward and reference log-probs of whole sequences (no streaming), batched."""
        n = sum(len(p) + len(r) for _, p, r in items)
        t0 = time.time()
        rw = self.reward.score_batch(items)
        t1 = time.time()
        rf = self.reference.score_batch(items)
        t2 = time.time()
        self._rec("score", "reward", step, t0, t1, n)
        self._rec("score", "reference", step, t1, t2, n)
        return {it[0]: Score(float(a.reward), tuple(b.logprobs)) for it, a, b in zip(items, rw, rf)}

    def drop(self, sids: Sequence[str]) -> None:
        for sid in sids:
            for sc in (self.reward, self.reference):
                if sid in sc.open_ids():
                    sc.drop(sid)
