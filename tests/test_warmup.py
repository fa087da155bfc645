"""The engine warm-up before timing (``oppo_real.backends.warmup``), the config field that asks for it, and
the local workers giving their models back when a run ends."""

from __future__ import annotations

import pytest

from oppo_real.backends import warmup
from oppo_real.backends.lockstep import LockstepActor
from oppo_real.config import RealConfig
from oppo_real.workers.handles import LocalHandle, WorkerError
from oppo_sim.core.errors import ConfigError


class _Counting(LockstepActor):
    def __init__(self) -> None:
        super().__init__()
        self.added: list[str] = []
        self.steps = 0

    def add(self, req) -> None:
        self.added.append(req.req_id)
        super().add(req)

    def step(self):
        self.steps += 1
        return super().step()


@pytest.fixture
def fresh_process(monkeypatch):
    monkeypatch.setattr(warmup, "_WARM_SINCE", None)


def test_burn_in_decodes_throwaway_requests_then_leaves_nothing_running(fresh_process):
    gen = _Counting()
    spent = warmup.burn_in(gen, 0.05, vocab=100, max_batch=8, prompt=4)
    assert spent >= 0.05 and gen.steps > 0
    assert gen.added and all(r.startswith("__warm") for r in gen.added)
    assert {len([r for r in gen.added if r.startswith(f"__warm{n}.")]) for n in range(4)} == {1, 4, 8}
    assert not gen.has_unfinished()  # nothing of the warm-up is left for the timed work


def test_burn_in_is_once_per_process(fresh_process):
    warmup.burn_in(_Counting(), 0.05, vocab=100)
    again = _Counting()
    assert warmup.burn_in(again, 0.05, vocab=100) == 0.0 and again.added == []


def test_no_burn_in_when_not_asked(fresh_process):
    gen = _Counting()
    assert warmup.burn_in(gen, 0.0, vocab=100) == 0.0 and gen.added == [] and warmup._WARM_SINCE is None


def test_negative_warmup_is_a_config_error():
    with pytest.raises(ConfigError, match="engine_warmup_s"):
        RealConfig(engine_warmup_s=-1.0)


class _Held:
    closed = 0

    def close(self) -> None:
        _Held.closed += 1

    def ping(self) -> str:
        return "up"


def test_a_killed_local_worker_lets_go_of_its_object():
    h = LocalHandle("gen", _Held)
    assert h.call("ping") == "up"
    h.kill()
    assert _Held.closed == 1 and h.obj is None
    with pytest.raises(WorkerError, match="gen"):
        h.call("ping")
