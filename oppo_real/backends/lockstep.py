"""``LockstepActor``: an ``ActorBackend`` with no model. Every live request gains one token per ``step()``
(forced lengths: a request ends at its ``max_new_tokens``), instantly. It exercises everything around
generation — the worker's report marks, the driver, the step machine — without an engine, which is what
profiling the driver's own costs and the decision-parity test need."""

from __future__ import annotations

from oppo_real.backends.api import FINISH_LENGTH, Delta, GenRequest

TOKEN_ID = 7  # what every generated token is
LOGPROB = -1.0


class LockstepActor:
    def __init__(self) -> None:
        self.live: dict[str, int] = {}

    def add(self, req: GenRequest) -> None:
        self.live[req.req_id] = req.max_new_tokens

    def step(self) -> list[Delta]:
        out = []
        for rid in list(self.live):
            self.live[rid] -= 1
            done = self.live[rid] == 0
            out.append(Delta(rid, (TOKEN_ID,), (LOGPROB,), done, FINISH_LENGTH if done else None))
            if done:
                del self.live[rid]
        return out

    def abort(self, req_id: str) -> None:
        self.live.pop(req_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.live)

    def num_running(self) -> int:
        return len(self.live)

    def load_weights(self, state_dict) -> float:
        return 0.0

    def close(self) -> None:
        self.live.clear()
