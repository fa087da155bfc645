"""Typed messages between the driver and its role workers (what crosses a Ray call)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GenOutput:
    """What one ``generate`` call produced: new tokens per request, and which requests finished."""

    tokens: dict[str, list[int]]
    logprobs: dict[str, list[float]]
    finished: dict[str, str]  # req_id -> finish reason
    iterations: int
    version: int  # policy version of the weights that generated these tokens


@dataclass(frozen=True)
class Score:
    """The frozen scorers' answer for one sequence: the reward and the reference log-prob of each
    response token (for the KL term)."""

    reward: float
    ref_logprobs: tuple[float, ...]


@dataclass(frozen=True)
class TrainBatch:
    """The batch of one update, one entry per sample; per-token lists are per response token.
    ``behaviour_logprobs`` are the generator's log-probs (the policy that produced each token); ``scores``
    the reward of each sample (the reward model's, or the rule's)."""

    step: int
    prompts: tuple[tuple[int, ...], ...]
    responses: tuple[tuple[int, ...], ...]
    scores: tuple[float, ...]
    ref_logprobs: tuple[tuple[float, ...], ...]
    behaviour_logprobs: tuple[tuple[float, ...], ...]
    groups: tuple[int, ...] = ()  # each sample's group (sid // n) for a grouped algorithm; () for ppo

    def __post_init__(self) -> None:
        n = len(self.prompts)
        if not all(len(x) == n for x in (self.responses, self.scores, self.ref_logprobs, self.behaviour_logprobs)):
            raise ValueError("TrainBatch fields must have one entry per sample")
        if self.groups and len(self.groups) != n:
            raise ValueError("TrainBatch.groups must have one entry per sample")

    @property
    def tokens(self) -> int:
        return sum(len(p) + len(r) for p, r in zip(self.prompts, self.responses))
