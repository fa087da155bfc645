"""The trace's ``step`` column honoured: step t's samples replay trace step t's rows (in order, cycling),
deferred samples keep the lengths they were admitted with, and the real executor uses the same rule
(:mod:`oppo_sim.traces.rowmap`)."""

from __future__ import annotations

import numpy as np
import pytest

from oppo_real.config import RealConfig
from oppo_real.executor.sample_store import SampleStore
from oppo_real.validation.mirror import mirror_trace
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import Placement, Pool
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.rowmap import TraceReplay
from oppo_sim.traces.trace import Trace

B, STEPS = 8, 6
DRIFT = [100, 180, 260, 340, 420, 500]  # trace step s: responses around DRIFT[s]


def drifting(order=range(STEPS), rows=B, base=DRIFT) -> Trace:
    """Trace step s (listed in ``order``) holds ``rows`` responses in [base[s], base[s] + 40)."""
    steps = np.repeat(np.array(list(order)), rows)
    resp = np.array([base[s] + (5 * i) % 40 for s in order for i in range(rows)])
    return Trace.from_arrays(np.full(len(steps), 64), resp, step=steps, name="drift")


def cfg(**kw) -> SimConfig:
    base = dict(batch=B, steps=STEPS, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu="h100-sxm",
                placement=Placement((Pool("main", 1), Pool("score", 1)), reward="score", reference="score"))
    return SimConfig(**{**base, **kw})


# -- the rule -------------------------------------------------------------------------------------------


def test_without_a_step_column_rows_are_taken_in_order_cyclically():
    r = TraceReplay(Trace.from_arrays([1] * 5, [1] * 5), offset=2)
    assert [r.admit(sid, sid // 3) for sid in range(8)] == [2, 3, 4, 0, 1, 2, 3, 4]
    assert not r.stepped


def test_a_step_column_picks_each_steps_rows_in_order_cycling():
    # rows interleaved in the file, step numbers with gaps; trace step 10 has 3 rows, step 4 has 2
    t = Trace.from_arrays([1] * 5, [1] * 5, step=[10, 4, 10, 4, 10])
    r = TraceReplay(t)
    step0 = [r.admit(sid, 0) for sid in range(3)]  # simulation step 0 replays trace step 4: rows 1, 3, then again 1
    step1 = [r.admit(sid, 1) for sid in range(3, 7)]  # step 1 replays trace step 10: rows 0, 2, 4, 0
    step2 = [r.admit(sid, 2) for sid in range(7, 9)]  # more steps than the trace has: start over
    assert (step0, step1, step2) == ([1, 3, 1], [0, 2, 4, 0], [1, 3])
    assert [r.trace_step(s) for s in range(3)] == [4, 10, 4]
    assert TraceReplay(t, offset=1).row_at(0, 0, 0) == 0  # the offset counts trace steps
    with pytest.raises(ConfigError):
        TraceReplay(t, offset=-1)


# -- the simulator ----------------------------------------------------------------------------------------


def step_means(trace: Trace, **kw) -> list[float]:
    steps = simulate(trace, "baseline", cfg(**kw)).steps
    return (steps["tokens"] / steps["samples"]).tolist()


def test_simulated_lengths_follow_the_trace_steps_in_order():
    means = step_means(drifting())
    expected = [DRIFT[s] + np.mean([(5 * i) % 40 for i in range(B)]) for s in range(STEPS)]
    assert means == pytest.approx(expected)
    perm = [3, 0, 5, 1, 4, 2]  # the same lengths under shuffled step numbers replay in the shuffled order
    shuffled = step_means(drifting(base=[DRIFT[p] for p in perm]))
    assert shuffled == pytest.approx([expected[p] for p in perm]) and shuffled != pytest.approx(means)
    # the file's row order does not matter, the step numbers do
    assert step_means(drifting(order=perm)) == pytest.approx(means)


def test_more_steps_than_the_trace_and_short_trace_steps_cycle():
    means = step_means(drifting(rows=3), steps=8)  # 3 rows per trace step for a batch of 8: cycled
    cycle3 = [DRIFT[s] + np.mean([(5 * (i % 3)) % 40 for i in range(B)]) for s in range(STEPS)]
    assert means == pytest.approx(cycle3 + cycle3[:2])


def test_deferred_samples_keep_the_lengths_they_were_admitted_with():
    trace = drifting(base=[100, 1100, 2100, 3100, 4100, 5100], rows=16)  # every trace step its own band
    p = Pipeline(cfg(), trace, __import__("oppo_sim.core.policies", fromlist=["make_policy"]).make_policy("oppo"))
    seen: list[tuple[int, int, int]] = []  # (step trained, step admitted, length)
    complete = p.ledger.complete

    def record(step, *args):
        seen.extend((step, p.ledger.tracks[sid].admit_step, p.ledger.tracks[sid].target) for sid in p.ledger.open[step].batch)
        return complete(step, *args)

    p.ledger.complete = record
    p.run()
    assert any(admitted < step for step, admitted, _ in seen)  # some samples were carried over
    for _, admitted, length in seen:
        assert 1000 * admitted + 100 <= length < 1000 * admitted + 140


def test_groups_take_the_steps_rows_in_order():
    grpo = Algorithm(name="grpo", n=2)
    trace = drifting(rows=2 * B)
    steps = simulate(trace, "baseline", cfg(algorithm=grpo)).steps
    expected = [DRIFT[s] + np.mean([(5 * i) % 40 for i in range(2 * B)]) for s in range(STEPS)]
    assert (steps["tokens"] / steps["samples"]).tolist() == pytest.approx(expected)


# -- the real executor --------------------------------------------------------------------------------


def test_the_real_executor_uses_the_same_rule():
    trace = drifting(order=[2, 0, 1, 3, 4, 5], rows=3)
    store = SampleStore(RealConfig(batch=B, steps=STEPS, max_response=1000), trace)
    replay = TraceReplay(trace)
    admissions = [(sid, sid // 4) for sid in range(20)]  # 4 fresh samples a step
    assert [store.target_of(sid, step) for sid, step in admissions] == \
        [int(trace.response_tokens[replay.admit(sid, step)]) for sid, step in admissions]


def test_the_mirror_replays_the_rows_the_real_run_admitted():
    trace = drifting(rows=4)
    rc = RealConfig(batch=2, steps=STEPS, max_response=1000)
    # baseline admits B x n = 2 a step: sids 0, 1 in step 0, 2, 3 in step 1, ...
    assert mirror_trace(rc, trace, 6).response_tokens.tolist() == [100, 105, 180, 185, 260, 265]
    import pandas as pd

    decisions = pd.DataFrame({"step": [0, 1], "admitted": [(0, 1, 2), (3, 4, 5)]})  # over-admitting
    assert mirror_trace(rc, trace, 6, decisions=decisions).response_tokens.tolist() == [100, 105, 110, 180, 185, 190]
