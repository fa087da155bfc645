"""The scoring worker: the frozen reward and reference models, fed incrementally (streamed chunks, KV
kept per sequence) or on whole sequences. Either may be absent: no reward model under a rule reward
(``reward=None``), no reference without the KL term (``reference=None``) -- it is then never loaded."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

from oppo_real.executor.messages import Score
from oppo_real.workers.recorder import Recorder


@dataclass(frozen=True)
class ScoreWorkerConfig:
    reward: str | None  # the reward model's directory; None: the run's reward is a rule (computed by the driver)
    reference: str | None  # the reference model's directory; None: no KL term (--no-reference)
    cores: tuple[int, ...] | None = None
    pool: str = "score"
    device: str = "cpu"
    dtype: str = "float32"  # "bfloat16" on a GPU


class ScoreWorker(Recorder):
    """The frozen scorers: reward and reference, streamed (incremental prefill) or on whole sequences.
    A missing reward model answers ``nan`` as the reward; a missing reference answers no log-probs."""

    def __init__(self, cfg: ScoreWorkerConfig) -> None:
        super().__init__()
        from oppo_real.backends.scorer import IncrementalScorer, ScorerConfig

        self._place(cfg.pool, cfg.cores)
        place = dict(dtype=cfg.dtype, device=cfg.device)
        self.reward = IncrementalScorer(ScorerConfig(kind="reward", model=cfg.reward, **place)) if cfg.reward else None
        self.reference = (IncrementalScorer(ScorerConfig(kind="reference", model=cfg.reference, **place))
                          if cfg.reference else None)

    def _scorers(self):
        return [(role, sc) for role, sc in (("reward", self.reward), ("reference", self.reference)) if sc is not None]

    def open(self, seqs: Sequence[tuple[str, Sequence[int]]]) -> None:
        for sid, prompt in seqs:
            for _, sc in self._scorers():
                if sid not in sc.open_ids():
                    sc.open(sid, prompt)

    def feed(self, step: int, chunks: dict[str, Sequence[int]]) -> None:
        """Prefill streamed chunks incrementally (KV kept per sequence)."""
        n = sum(len(c) for c in chunks.values())
        for role, sc in self._scorers():
            t0 = time.time()
            sc.feed_many(chunks)
            self._rec("score", role, step, t0, time.time(), n)

    def finish(self, step: int, sids: Sequence[str]) -> dict[str, Score]:
        """Final reward and reference log-probs of streamed sequences (only their last chunk is left)."""
        out: dict[str, dict] = {sid: {} for sid in sids}
        for role, sc in self._scorers():
            t0 = time.time()
            res = {sid: sc.finish(sid) for sid in sids}
            self._rec("score", role, step, t0, time.time(), sum(r.n_response for r in res.values()))
            for sid, r in res.items():
                out[sid][role] = r
        return {sid: _score(d.get("reward"), d.get("reference")) for sid, d in out.items()}

    def score_whole(self, step: int, items: Sequence[tuple[str, Sequence[int], Sequence[int]]]) -> dict[str, Score]:
        """Reward and reference log-probs of whole sequences (no streaming), batched."""
        n = sum(len(p) + len(r) for _, p, r in items)
        res: dict[str, list] = {}
        for role, sc in self._scorers():
            t0 = time.time()
            res[role] = sc.score_batch(items)
            self._rec("score", role, step, t0, time.time(), n)
        rw, rf = res.get("reward"), res.get("reference")
        return {it[0]: _score(rw[i] if rw else None, rf[i] if rf else None) for i, it in enumerate(items)}

    def drop(self, sids: Sequence[str]) -> None:
        for sid in sids:
            for _, sc in self._scorers():
                if sid in sc.open_ids():
                    sc.drop(sid)


def _score(reward, reference) -> Score:
    return Score(float(reward.reward) if reward is not None else math.nan,
                 tuple(reference.logprobs) if reference is not None else ())
