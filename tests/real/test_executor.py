"""Behaviour of the real executor (`oppo_real.executor.real_driver` on a `Session`): sample accounting across deferrals, forced
lengths from a trace, streamed scoring equal to whole scoring, exact resume from a checkpoint, and dead
workers reported as one-line errors.

Logic tests use the torch backend on local (in-process) workers: deterministic and a few seconds each.
One test kills a Ray worker mid-run (torch backend, so no vLLM start-up).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from oppo_real.config import RealConfig
from oppo_real.executor.real_driver import Driver
from oppo_real.executor.real_result import build_result
from oppo_real.executor.runner import run_real
from oppo_real.executor.session import Session
from oppo_real.ppo.algo import PPOConfig
from oppo_real.workers.handles import WorkerError
from oppo_sim.core.errors import OppoError
from oppo_sim.core.policies import make_policy
from oppo_sim.traces.trace import Trace

B = 4
MAX_RESPONSE = 32
# A short body and a long tail: with B + Δ in flight the long responses are still decoding when B have
# finished, so they are deferred with partial tokens and resumed in later steps.
TAIL = [5, 9, 7, 70, 6, 11, 8, 4, 90, 10, 6, 8, 120, 5, 7, 9, 12, 6, 60, 8, 3, 14, 7, 45]


@pytest.fixture(scope="module")
def tail_trace() -> Trace:
    return Trace.from_arrays(np.full(len(TAIL), 10), np.array(TAIL), name="test-tail")


def _cfg(models, **kw) -> RealConfig:
    base = dict(
        batch=B, steps=4, backend="torch", workers="local", max_response=MAX_RESPONSE,
        cache_dir=str(models.root.parent), seed=0,
        ppo=PPOConfig(epochs=1, minibatches=2, lr_actor=1e-3, lr_critic=1e-3),
    )
    base.update(kw)
    return RealConfig(**base)


def _forced(trace: Trace, sid: int, scale: float, cap: int = MAX_RESPONSE) -> int:
    return max(1, min(cap, round(trace.row(sid)[1] * scale)))


def _policy(name: str):
    return make_policy(name, chunk=8, delta=2, budget=8)


class _Open:
    """A session and its driver, driven step by step by the test."""

    def __init__(self, cfg: RealConfig, policy, trace) -> None:
        self.session = Session(cfg)
        self.d = Driver(cfg, policy, trace, self.session.start())

    def result(self):
        self.d.drain()
        self.d.take_timeline()
        return build_result(self.d, self.session.paths)

    def close(self):
        self.session.close()


class _Driven:
    """A driver run step by step, recording what it trains and what it defers after each step."""

    def __init__(self, cfg: RealConfig, policy, trace: Trace) -> None:
        self.cfg, self.policy, self.trace = cfg, policy, trace
        self.trained_batches: list = []  # the batch handed to the train worker, per step
        self.deferred_after: list[dict[int, list[int]]] = []  # sid -> tokens so far, after each step
        self.conservation: list[tuple[int, int, int]] = []  # (admitted, trained, in flight) after each step

    def run(self):
        run = _Open(self.cfg, self.policy, self.trace)
        self.d = d = run.d
        try:
            worker = run.session.handles["train"].obj
            real_train = worker.train

            def train(batch):
                self.trained_batches.append(batch)
                return real_train(batch)

            worker.train = train
            while d.step < self.cfg.steps:
                d.run_step()
                lg = d.ledger
                self.conservation.append((lg.admitted_total, lg.trained_total, lg.in_flight()))
                self.deferred_after.append({sid: list(d.store[sid].tokens) for sid in lg.deferred})
            return run.result()
        finally:
            run.close()


@pytest.mark.parametrize("policy", ["inter", "oppo", "partial-rollout"])
def test_no_sample_lost_or_trained_twice_across_deferrals(models, tail_trace, policy):
    steps = 5
    d = _Driven(_cfg(models, steps=steps), _policy(policy), tail_trace)
    res = d.run()
    lg = d.d.ledger

    for admitted, trained, in_flight in d.conservation:
        assert admitted == trained + in_flight
    assert [c[1] for c in d.conservation] == [B * (t + 1) for t in range(steps)]
    # every admitted sample is either trained (once) or still in flight, by identity
    in_flight = set(lg.deferred + lg.ready)
    trained = {sid for sids in res.decisions["trained"] for sid in sids}
    assert trained.isdisjoint(in_flight)
    assert trained | in_flight == set(range(lg.next_sid))

    ro = res.rollouts
    assert list(res.steps["samples"]) == [B] * steps
    assert ro.groupby("step").size().tolist() == [B] * steps
    assert ro["sid"].is_unique and set(ro["sid"]) == trained

    # deferral really happened, with partial work kept
    assert any(any(len(toks) > 0 for toks in snap.values()) for snap in d.deferred_after)
    assert (ro["segments"] > 1).any() and (ro["staleness"] > 0).any()

    # a deferred sample resumes with its tokens: what is trained later extends what was kept
    responses = {}
    for t, batch in enumerate(d.trained_batches):
        sids = ro.loc[ro["step"] == t, "sid"].tolist()
        for sid, resp, blp, rlp in zip(sids, batch.responses, batch.behaviour_logprobs, batch.ref_logprobs):
            resp = list(resp)
            assert len(resp) == len(blp) == len(rlp)
            responses[sid] = resp
    resumed = 0
    for snap in d.deferred_after:
        for sid, toks in snap.items():
            if sid in responses:
                assert responses[sid][: len(toks)] == toks, f"sample {sid} lost its partial tokens"
                resumed += bool(toks)
    assert resumed > 0
    # ... and ends at exactly its forced length
    for sid, n in zip(ro["sid"], ro["response_tokens"]):
        assert n == _forced(tail_trace, sid, 1.0)


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_forced_lengths_follow_the_trace(models, tail_trace, scale):
    res = run_real(_cfg(models, steps=3, length_scale=scale), _policy("oppo"), tail_trace)
    ro = res.rollouts
    assert len(ro) == 3 * B
    expected = [_forced(tail_trace, sid, scale) for sid in ro["sid"]]
    assert ro["response_tokens"].tolist() == expected
    assert (ro["finish_reason"] == "length").all()
    assert res.steps["tokens"].tolist() == ro.groupby("step")["response_tokens"].sum().tolist()


def test_streamed_scores_equal_whole_scores(models, tail_trace):
    """Greedy, same seed: chunked streaming (incremental prefill) scores as one-shot scoring does."""
    runs = {p: run_real(_cfg(models, steps=1, temperature=0.0), _policy(p), tail_trace) for p in ("baseline", "stream", "intra")}
    ref = runs["baseline"]
    for name in ("stream", "intra"):
        res = runs[name]
        assert res.steps["reward"].iloc[0] == pytest.approx(ref.steps["reward"].iloc[0], abs=1e-5)
        assert res.steps["rm_score"].iloc[0] == pytest.approx(ref.steps["rm_score"].iloc[0], abs=1e-5)
        a = ref.rollouts.set_index("sid").sort_index()
        b = res.rollouts.set_index("sid").sort_index()
        assert list(a.index) == list(b.index)
        assert (a["response_tokens"] == b["response_tokens"]).all()
        np.testing.assert_allclose(b["rm_score"], a["rm_score"], atol=1e-5)
        np.testing.assert_allclose(b["reward"], a["reward"], atol=1e-5)
    # intra really streamed: its scoring after generation is the last chunks only
    assert runs["intra"].steps["chunk"].iloc[0] == 8


@pytest.mark.parametrize("policy", ["oppo", "partial-rollout", "async"])
def test_resume_from_checkpoint_continues_exactly(models, tail_trace, tmp_path, policy):
    """4 steps straight == 2 steps, then resume to 4 (seeded sampling at temperature 1, deferred samples
    and streamed scorer state crossing the checkpoint; under async, the training in flight at the
    checkpoint is trained again after the resume). Inline workers: with a thread per role, when async's
    training completes — and so which weights the next generation uses — depends on timing, as under Ray."""
    cfg2, cfg4 = _cfg(models, steps=2, workers="inline"), _cfg(models, steps=4, workers="inline")
    straight = run_real(cfg4, _policy(policy), tail_trace, out_dir=tmp_path / "A")
    run_real(cfg2, _policy(policy), tail_trace, out_dir=tmp_path / "B")
    resumed = run_real(cfg4, _policy(policy), tail_trace, out_dir=tmp_path / "B", resume=True)

    assert len(resumed.steps) == 4 and resumed.summary["samples_trained"] == 4 * B
    cols = ["samples", "tokens", "admitted", "deferred", "delta", "staleness_max"]
    a, b = straight.steps.iloc[2:4], resumed.steps.iloc[2:4]
    assert a[cols].values.tolist() == b[cols].values.tolist()
    for c in ("reward", "rm_score", "policy_loss", "mean_kl"):
        np.testing.assert_allclose(b[c].to_numpy(float), a[c].to_numpy(float), atol=1e-6, rtol=0, err_msg=c)
    ra = straight.rollouts[straight.rollouts["step"] >= 2].reset_index(drop=True)
    rb = resumed.rollouts[resumed.rollouts["step"] >= 2].reset_index(drop=True)
    assert ra[["sid", "response_tokens", "segments", "staleness"]].equals(rb[["sid", "response_tokens", "segments", "staleness"]])
    np.testing.assert_allclose(rb["rm_score"], ra["rm_score"], atol=1e-6, rtol=0)
    assert straight.summary["in_flight_end"] == resumed.summary["in_flight_end"]
    # the first resumed step's time does not include the restart (process start, model loading)
    first = resumed.steps.iloc[2]
    assert first["step_time_s"] <= first["end"] - first["start"] + 1e-6


def test_resume_without_checkpoint_is_a_config_error(models, tail_trace, tmp_path):
    with pytest.raises(OppoError, match="no checkpoint"):
        run_real(_cfg(models, steps=1), _policy("baseline"), tail_trace, out_dir=tmp_path, resume=True)


@pytest.mark.parametrize("role,method", [("score", "score_whole"), ("gen", "generate"), ("train", "train")])
def test_failing_local_worker_is_a_one_line_worker_error(models, tail_trace, role, method):
    run = _Open(_cfg(models, steps=2), _policy("baseline"), tail_trace)
    try:
        def boom(*args, **kwargs):
            raise RuntimeError("simulated failure\nwith a second line")

        setattr(run.session.handles[role].obj, method, boom)
        with pytest.raises(OppoError) as err:
            run.d.run_step()
            run.d.drain()
    finally:
        run.close()
    assert isinstance(err.value, WorkerError)
    msg = str(err.value)
    assert "\n" not in msg and role in msg and "simulated failure" in msg


def test_killed_ray_worker_is_a_one_line_worker_error(models, tail_trace, ray_started):
    import ray

    run = _Open(_cfg(models, steps=3, workers="ray"), _policy("oppo"), tail_trace)
    try:
        run.d.run_step()
        ray.kill(run.session.handles["score"].actor, no_restart=True)
        with pytest.raises(OppoError) as err:
            run.d.run_step()
    finally:
        run.close()
    assert isinstance(err.value, WorkerError)
    msg = str(err.value)
    assert "\n" not in msg and "'score'" in msg and "died" in msg


def test_result_has_the_simulator_schema(models, tail_trace):
    from oppo_sim.core.results import STEP_COLUMNS, TIMELINE_COLUMNS

    res = run_real(_cfg(models, steps=2), _policy("oppo"), tail_trace)
    assert list(res.steps.columns[: len(STEP_COLUMNS)]) == STEP_COLUMNS
    assert list(res.timeline.columns) == list(TIMELINE_COLUMNS)
    assert set(res.timeline["pool"]) == {"main", "score"}
    assert (res.timeline["end"] >= res.timeline["start"]).all()
    s = res.summary
    assert s["steps"] == 2 and s["samples_trained"] == 2 * B
    assert set(s["utilization"]) == {"main", "score"} and all(0 <= v <= 1 for v in s["utilization"].values())
    assert len(s["reward_curve"]) == 2 and all(math.isfinite(x) for x in s["reward_curve"])
    assert s["admitted"] == s["samples_trained"] + s["in_flight_end"]
    assert isinstance(res.rollouts, pd.DataFrame) and len(res.rollouts) == 2 * B


def test_async_trains_with_bounded_staleness(models):
    """The async policy keeps one PPO update in flight: samples are at most k=1 version stale, none lost."""
    from oppo_sim.core.policies import make_policy
    from oppo_sim.traces.trace import Trace

    trace = Trace.from_arrays([10] * 6, [4, 30, 5, 6, 3, 7], name="tail")
    cfg = RealConfig(batch=4, steps=4, backend="torch", workers="local", max_response=32,
                     cache_dir=str(models.root.parent), main_cores=None, score_cores=None)
    run = _Open(cfg, make_policy("async", staleness=1), trace)
    try:
        while run.d.step < cfg.steps:
            run.d.run_step()
        res = run.result()
    finally:
        run.close()
    assert list(res.steps["step"]) == [0, 1, 2, 3]
    assert res.steps["staleness_max"].max() <= 1
    assert res.steps["staleness_max"].iloc[1:].max() == 1
    s = res.summary
    assert s["admitted"] == s["samples_trained"] + s["in_flight_end"]
