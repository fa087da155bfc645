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
from oppo_real.models.task import PromptSampler, rule_reward
from oppo_sim.traces.rowmap import TraceReplay
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
    row :class:`~oppo_sim.traces.rowmap.TraceReplay` gives the sample when it is admitted: the row with
    the same index, or with a ``step`` column a row of the step's trace step) and holds them until they
    are trained.

    The n members of a group (``sid // n``, n = ``cfg.algorithm.group_size``) share one prompt, drawn once
    when its first member is created: the engine gets n requests with the same prompt ids (vLLM's prefix
    cache shares their blocks). With n = 1 every sample draws its own prompt, as before."""

    def __init__(self, cfg: RealConfig, trace: Trace | None) -> None:
        self.cfg = cfg
        self.trace = trace
        self.replay = TraceReplay(trace) if trace is not None else None
        self.budgets: dict[int, int] = {}  # sid -> its budget, from admission until the sample is created
        self.n = cfg.algorithm.group_size
        self.sampler = PromptSampler(cfg.task, seed=cfg.seed)
        self.samples: dict[int, RSample] = {}
        self.group_prompts: dict[int, tuple[int, ...]] = {}  # group -> its prompt, while a member may still need it
        self.created: dict[int, int] = {}  # group -> members created so far
        self._good = cfg.task.good_mask()

    def target_of(self, sid: int, step: int) -> int:
        """Sample ``sid`` is admitted in step ``step``: the most response tokens it may generate (its forced
        length, or the cap)."""
        budget = self.cfg.max_response if self.replay is None else self.length_of(self.replay.admit(sid, step))
        self.budgets[sid] = budget
        return budget

    def length_of(self, row: int) -> int:
        """The forced length of trace row ``row``: scaled by ``length_scale``, capped, at least 1."""
        return max(1, min(self.cfg.max_response, int(round(int(self.trace.response_tokens[row]) * self.cfg.length_scale))))

    def prompt_of(self, sid: int) -> tuple[int, ...]:
        """The prompt of ``sid``'s group (drawn from the sampler when the group's first member asks)."""
        g = sid // self.n
        if g not in self.group_prompts:
            self.group_prompts[g] = self.sampler.sample(1)[0]
        return self.group_prompts[g]

    def create(self, sid: int) -> RSample:
        prompt = self.prompt_of(sid)
        g = sid // self.n
        self.created[g] = self.created.get(g, 0) + 1
        if sid not in self.budgets:
            raise RuntimeError(f"sample {sid} created before it was admitted (SampleStore.target_of gives its budget)")
        s = self.samples[sid] = RSample(sid, prompt, self.budgets.pop(sid), self.trace is not None)
        return s

    def rule_reward(self, sid: int) -> float:
        """The task's rule (:func:`oppo_real.models.task.rule_reward`) on ``sid``'s response: a real, cheap
        verifier computed on the CPU (the fraction of response tokens in the task's good set)."""
        return rule_reward(self.cfg.task, self.samples[sid].tokens, self._good)

    def __getitem__(self, sid: int) -> RSample:
        return self.samples[sid]

    def pop(self, sid: int) -> RSample:
        s = self.samples.pop(sid)
        g = sid // self.n
        if self.created.get(g, 0) >= self.n and not any(o // self.n == g for o in self.samples):
            self.group_prompts.pop(g, None)
            self.created.pop(g, None)
        return s

    def state(self) -> dict:
        """What a checkpoint keeps besides the samples: the sampler and the prompts of groups still open."""
        return {"sampler": self.sampler._rng.bit_generator.state,
                "group_prompts": [[g, list(p), self.created.get(g, 0)] for g, p in self.group_prompts.items()]}

    def load_state(self, st: dict) -> None:
        self.sampler._rng.bit_generator.state = st["sampler"]
        self.group_prompts = {int(g): tuple(p) for g, p, _ in st.get("group_prompts", [])}
        self.created = {int(g): int(c) for g, _, c in st.get("group_prompts", [])}
