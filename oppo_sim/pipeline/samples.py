"""A sample as the simulated pipeline holds it: its lengths, its engine request, what scorers computed."""

from __future__ import annotations

from oppo_sim.engine.request import Req


class SimSample:
    """A prompt admitted into the simulation: its lengths, its engine request, what scorers computed."""

    __slots__ = ("sid", "row", "prompt", "target", "req", "reward", "scored", "group")

    def __init__(self, sid: int, row: int, prompt: int, target: int, reward: float | None, group: int | None = None):
        self.sid = sid
        self.row = row
        self.prompt = prompt
        self.target = target
        self.req = Req(sid, prompt, target, prefix=group)  # a group's members share its prompt's KV blocks
        self.reward = reward
        self.scored: dict[str, int] = {}  # high-water mark of tokens prefilled per role (for recompute)
        self.group = group  # its prompt's group (n > 1: the members share the prompt); None: a prompt of its own
