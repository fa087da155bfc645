"""The contract every actor (generation) backend implements: vLLM (`vllm_actor`), torch (`torch_actor`) and the
static torch decoder (`torch_static`).

A driver adds requests (also mid-flight, between `step()` calls), calls `step()` repeatedly and receives
per-request deltas: the NEW tokens produced since the previous step together with their sampling
log-probs. That is what lets chunks of C tokens stream to the scorers while decoding continues.

Deferral (OPPO's inter-step overlap) = `abort(req_id)`, keep the tokens already seen, and next step add
``resume_request(original, generated)``: a new request whose prompt is prompt + generated tokens and
whose budget is what remains. Under greedy decoding the resumed output equals the uninterrupted one.

Log-probs are those of the model's own distribution (log-softmax of the raw logits, i.e. before the
temperature is applied; vLLM's default ``raw_logprobs``). With the default temperature 1.0 they are the
sampling distribution's log-probs, which is what PPO's importance ratios need.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

from oppo_sim.core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

FINISH_LENGTH = "length"
FINISH_STOP = "stop"
FINISH_ABORT = "abort"


@dataclass(frozen=True)
class GenRequest:
    """One generation request. ``ignore_eos`` + ``max_new_tokens`` force an exact response length."""

    req_id: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not self.req_id:
            raise ConfigError("GenRequest.req_id must be a non-empty string")
        if len(self.prompt_ids) == 0:
            raise ConfigError(f"GenRequest {self.req_id}: prompt_ids must not be empty")
        if self.max_new_tokens < 1:
            raise ConfigError(f"GenRequest {self.req_id}: max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not isinstance(self.prompt_ids, tuple):
            object.__setattr__(self, "prompt_ids", tuple(int(t) for t in self.prompt_ids))


@dataclass(frozen=True)
class Delta:
    """New tokens of one request since the previous `step()`; ``finished`` with a reason on the last one."""

    req_id: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finished: bool
    finish_reason: str | None  # "length" | "stop" (EOS) | None while running


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling shared by both backends. ``temperature == 0`` means greedy (argmax)."""

    temperature: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"SamplingConfig.temperature must be >= 0, got {self.temperature}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def request_seed(self, req_id: str) -> int:
        """Per-request seed: outputs do not depend on which other requests share the batch."""
        digest = hashlib.sha256(f"{self.seed}:{req_id}".encode()).digest()
        return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@runtime_checkable
class ActorBackend(Protocol):
    def add(self, req: GenRequest) -> None:
        """Queue a request; may be called mid-flight between `step()` calls."""

    def step(self) -> list[Delta]:
        """One engine iteration: each running request's new tokens with their sampling log-probs."""

    def abort(self, req_id: str) -> None:
        """Stop a request and free its slot; the caller keeps the partial tokens it has seen."""

    def has_unfinished(self) -> bool:
        """True while any added request has neither finished nor been aborted."""

    def num_running(self) -> int:
        """Number of added requests that have neither finished nor been aborted."""

    def load_weights(self, state_dict: "dict[str, torch.Tensor]") -> float:
        """Replace the policy weights (HF parameter names); returns the seconds spent."""

    def close(self) -> None:
        """Release the engine."""


def resume_request(original: GenRequest, generated: Sequence[int], req_id: str | None = None) -> GenRequest:
    """The request that continues `original` after `generated` tokens were produced (deferral)."""
    remaining = original.max_new_tokens - len(generated)
    if remaining < 1:
        raise ConfigError(
            f"request {original.req_id} has no budget left to resume ({len(generated)} of {original.max_new_tokens} generated)"
        )
    return GenRequest(
        req_id=req_id or original.req_id,
        prompt_ids=tuple(original.prompt_ids) + tuple(int(t) for t in generated),
        max_new_tokens=remaining,
        ignore_eos=original.ignore_eos,
    )


def run_to_completion(backend: ActorBackend, requests: Sequence[GenRequest], max_steps: int = 1_000_000):
    """Convenience for tests and scripts: add all, step until done; returns {req_id: (tokens, logprobs, reason)}."""
    out: dict[str, tuple[list[int], list[float], str | None]] = {r.req_id: ([], [], None) for r in requests}
    for r in requests:
        backend.add(r)
    steps = 0
    while backend.has_unfinished():
        for d in backend.step():
            toks, lps, _ = out[d.req_id]
            toks.extend(d.token_ids)
            lps.extend(d.logprobs)
            if d.finished:
                out[d.req_id] = (toks, lps, d.finish_reason)
        steps += 1
        if steps > max_steps:
            raise RuntimeError(f"backend did not finish within {max_steps} steps")
    return out
