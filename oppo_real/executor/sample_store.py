"""Samples of a real run.

The step machine (``oppo_sim.core``) decides *which* samples run, stream, defer and train; this module
holds what only the real run has — each sample's prompt ids, the tokens and log-probs it generated,
its scores — from admission until the sample is trained. Checkpoints write them (JSON, one object per
sample): :mod:`oppo_real.checkpoints.save_restore`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oppo_real.backends.api import GenRequest
from oppo_real.config import RealConfig
from oppo_real.models.task import PromptSampler
from oppo_sim.traces.trace import Trace


@dataclass
class RSample:
    """A prompt admitted into the run, from admission until it is trained."""

    sid: int
    prompt: tuple[int, ...]
    budget: int  # response tokens allowed in total (forced length, or the cap)
    forced: bool  # ignore EOS: the response is exactly `budget` tokens
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    segment: int = 0  # launches so far (each one is a new engine request)
    opened: bool = False  # the score worker holds its KV
    finish_reason: str | None = None
    score: float | None = None
    ref_logprobs: tuple[float, ...] | None = None

    @property
    def req_id(self) -> str:
        return f"s{self.sid}.{self.segment}"

    def request(self) -> GenRequest:
        """The engine request that continues this sample: prompt + tokens so far, the budget left."""
        return GenRequest(self.req_id, self.prompt + tuple(self.tokens), self.budget - len(self.tokens), ignore_eos=self.forced)

    @classmethod
    def from_json(cls, d: dict) -> "RSample":
        d = dict(d)
        d["prompt"] = tuple(d["prompt"])
        if d.get("ref_logprobs") is not None:
            d["ref_logprobs"] = tuple(d["ref_logprobs"])
        return cls(**d)


class SampleStore:
    """Creates samples in sample-id order (prompts from the task's sampler, forced lengths from the trace
    row with the same index) and holds them until they are trained."""

    def __init__(self, cfg: RealConfig, trace: Trace | None) -> None:
        self.cfg = cfg
        self.trace = trace
        self.sampler = PromptSampler(cfg.task, seed=cfg.seed)
        self.samples: dict[int, RSample] = {}

    def target_of(self, sid: int) -> int:
        """Most response tokens sample ``sid`` may generate: its forced length, or the cap."""
        if self.trace is None:
            return self.cfg.max_response
        return max(1, min(self.cfg.max_response, int(round(self.trace.row(sid)[1] * self.cfg.length_scale))))

    def create(self, sid: int) -> RSample:
        prompt = self.sampler.sample(1)[0]
        s = self.samples[sid] = RSample(sid, prompt, self.target_of(sid), self.trace is not None)
        return s

    def __getitem__(self, sid: int) -> RSample:
        return self.samples[sid]

    def pop(self, sid: int) -> RSample:
        return self.samples.pop(sid)
