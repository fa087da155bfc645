"""Checkpoints that survive a crash (``oppo_real.checkpoints``): a crash between writing the weights and
writing the ledger resumes from the last consistent step; weights and ledger of different versions are
refused with one line; under ``async`` a checkpoint is written after every step, with the training in
flight deferred to the restart."""

from __future__ import annotations

import json

import numpy as np
import pytest

from oppo_real.checkpoints import save_restore
from oppo_real.checkpoints.layout import LEDGER_NAME, weights_name
from oppo_real.config import RealConfig
from oppo_real.executor.runner import run_real
from oppo_real.ppo.algo import PPOConfig
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import make_policy
from oppo_sim.traces.trace import Trace

B = 4
TAIL = [5, 9, 7, 70, 6, 11, 8, 4, 90, 10, 6, 8, 120, 5, 7, 9, 12, 6, 60, 8, 3, 14, 7, 45]
TRACE = Trace.from_arrays(np.full(len(TAIL), 10), np.array(TAIL), name="test-tail")
SAME = ["samples", "tokens", "admitted", "deferred", "delta", "staleness_max"]


def _cfg(models, steps: int) -> RealConfig:
    return RealConfig(batch=B, steps=steps, backend="torch", workers="inline", max_response=32, seed=0,
                      cache_dir=str(models.root.parent), ppo=PPOConfig(epochs=1, minibatches=2, lr_actor=1e-3, lr_critic=1e-3))


def _policy(name: str):
    return make_policy(name, chunk=8, delta=2, budget=8, staleness=1 if name == "async" else None)


class Crash(Exception):
    pass


def _crash_at_ledger_write(monkeypatch, n: int) -> list:
    """The n-th ledger write (1-based) raises before writing: the weights of that checkpoint are on disk."""
    calls = []
    real = save_restore.write_ledger

    def write(directory, state, weights):
        calls.append((state["step"], weights.version, len(state["training"])))
        if len(calls) == n:
            raise Crash(f"killed before writing the ledger of step {state['step']}")
        real(directory, state, weights)

    monkeypatch.setattr(save_restore, "write_ledger", write)
    return calls


def _same_steps(a, b, steps):
    x, y = a.steps[a.steps["step"].isin(steps)], b.steps[b.steps["step"].isin(steps)]
    assert x[SAME].values.tolist() == y[SAME].values.tolist()
    for c in ("reward", "rm_score", "policy_loss", "mean_kl"):
        np.testing.assert_allclose(y[c].to_numpy(float), x[c].to_numpy(float), atol=1e-6, rtol=0, err_msg=c)


@pytest.mark.parametrize("policy", ["oppo", "async"])
def test_crash_between_weights_and_ledger_resumes_from_the_last_consistent_step(models, tmp_path, monkeypatch, policy):
    straight = run_real(_cfg(models, 4), _policy(policy), TRACE, out_dir=tmp_path / "A")
    calls = _crash_at_ledger_write(monkeypatch, 2)
    with pytest.raises(Crash):
        run_real(_cfg(models, 4), _policy(policy), TRACE, out_dir=tmp_path / "B")
    monkeypatch.undo()
    ckpt = tmp_path / "B" / "checkpoint"
    (_, v1, _), (_, v2, _) = calls
    assert v2 == v1 + 1 and (ckpt / weights_name(v2)).exists()  # the new weights were written ...
    doc = json.loads((ckpt / LEDGER_NAME).read_text())
    assert doc["step"] == 1 and doc["weights"]["version"] == v1 == doc["ledger"]["version"]  # ... the ledger was not

    resumed = run_real(_cfg(models, 4), _policy(policy), TRACE, out_dir=tmp_path / "B", resume=True)
    assert list(resumed.steps["step"]) == [0, 1, 2, 3] and resumed.summary["samples_trained"] == 4 * B
    _same_steps(straight, resumed, [1, 2, 3])  # continued from step 1, exactly as the run without the crash
    last = json.loads((ckpt / LEDGER_NAME).read_text())["weights"]["file"]
    assert [p.name for p in ckpt.glob("train-v*")] == [last]  # the orphan is gone


def test_async_writes_a_checkpoint_after_every_step(models, tmp_path, monkeypatch):
    real = save_restore.write_ledger
    seen = []

    def write(directory, state, weights):
        seen.append((state["step"], weights.version, [j["step"] for j in state["training"]]))
        real(directory, state, weights)

    monkeypatch.setattr(save_restore, "write_ledger", write)
    run_real(_cfg(models, 3), _policy("async"), TRACE, out_dir=tmp_path)
    # after step t: its training is in flight, the weights are those it started from (version t); the run's
    # end adds none (a resume trains the last step again, as a longer run would have overlapped it)
    assert seen == [(1, 0, [0]), (2, 1, [1]), (3, 2, [2])]


def test_ledger_and_weights_of_different_versions_are_refused(models, tmp_path):
    run_real(_cfg(models, 1), _policy("oppo"), TRACE, out_dir=tmp_path / "one")
    run_real(_cfg(models, 2), _policy("oppo"), TRACE, out_dir=tmp_path / "two")
    ckpt = tmp_path / "two" / "checkpoint"
    # version 1's weights under the name (and size) the version-2 ledger records
    (ckpt / weights_name(2)).write_bytes((tmp_path / "one" / "checkpoint" / weights_name(1)).read_bytes())
    doc = json.loads((ckpt / LEDGER_NAME).read_text())
    doc["weights"]["bytes"] = (ckpt / weights_name(2)).stat().st_size
    (ckpt / LEDGER_NAME).write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="holds policy version 1, the ledger records 2") as e:
        run_real(_cfg(models, 3), _policy("oppo"), TRACE, out_dir=tmp_path / "two", resume=True)
    assert "\n" not in str(e.value)
    (ckpt / weights_name(2)).unlink()
    with pytest.raises(ConfigError, match="weights train-v2.pt .* are missing"):
        run_real(_cfg(models, 3), _policy("oppo"), TRACE, out_dir=tmp_path / "two", resume=True)
