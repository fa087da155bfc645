"""Groups in the step machine (``Ledger.group_size`` = n > 1): admission, the batch and deferral take whole
groups, dynamic sampling (dapo) drops the groups whose rewards are all equal and samples on, and
conservation holds per response and per group -- on a bare ledger driven in lockstep and in the simulator."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oppo_sim.core.algorithms import ALGORITHM_NAMES, Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.ledger import Ledger
from oppo_sim.core.placement import Placement, Pool
from oppo_sim.core.policies import POLICY_NAMES, make_policy
from oppo_sim.core.protocol import Progress
from oppo_sim.core.stepmachine import informative
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.driver import Pipeline
from oppo_sim.pipeline.simulate import simulate
from oppo_sim.traces.trace import Trace

ROLES, STREAMED = ("reward", "reference"), ("reward",)


def policy_of(name: str, chunk: int = 4, delta: int = 2, budget: int = 5, staleness: int = 1):
    return make_policy(name, chunk=chunk, delta=delta, budget=budget, staleness=staleness, candidates=(chunk, 2 * chunk),
                       every=3)


def drive(policy, lengths: list[int], batch: int, n: int, steps: int, reward_of: Callable[[int], float] | None = None,
          train_after: int = 0, gen_batch: int | None = None) -> Ledger:
    """A lockstep driver on a bare ledger: every generating response gains one token per report; rewards (for
    dynamic sampling, in rounds of ``gen_batch`` prompts) come with each finish from ``reward_of``; a step's
    training completes after ``train_after`` reports of the next step (or when the staleness gate needs it)."""
    ledger = Ledger(policy, batch, ROLES, STREAMED, lambda sid, step: lengths[sid % len(lengths)], group_size=n,
                    filter_groups=reward_of is not None, gen_batch_size=gen_batch if reward_of is not None else None)
    ledger.log = []
    training: list[int] = []
    for t in range(steps):
        while not ledger.may_start(t):
            ledger.complete(training.pop(0), 0.0, 1.0, 0.0)
        m = ledger.begin(t, ledger.plan(t))
        m.start()
        reports = 0
        while not m.ended:
            if training and reports == train_after:
                ledger.complete(training.pop(0), 0.0, 1.0, 0.0)
            tr = ledger.tracks
            evs = []
            for s in m.active:
                g = tr[s].generated + 1
                done = g >= tr[s].target
                evs.append(Progress(s, g, done, reward_of(s) if done and reward_of else None))
            m.report(evs)
            reports += 1
        m.stopped({s: ledger.tracks[s].generated for s in m.active})
        for role in ROLES:
            ledger.scored(role, m.batch)
        assert m.trained
        training.append(t)
    while training:
        ledger.complete(training.pop(0), 0.0, 1.0, 0.0)
    return ledger


def assert_whole_groups(sids, n: int) -> None:
    counts = Counter(s // n for s in sids)
    assert all(c == n for c in counts.values()), f"not whole groups of {n}: {sorted(sids)}"


def assert_groups_conserved(ledger: Ledger, batch: int, n: int, steps: int) -> None:
    rows = ledger.conservation
    assert [r.step for r in rows] == list(range(steps))
    for r in rows:
        assert r.balanced and not r.split, r.describe()
        assert r.trained == batch * n  # a step trains exactly B*n responses
    for d in ledger.decisions:
        for sids in (d.trained, d.deferred, d.admitted):
            assert_whole_groups(sids, n)
        # the batch: whole groups, each contiguous, members in sid order
        groups = [d.trained[i:i + n] for i in range(0, len(d.trained), n)]
        assert all(list(g) == list(range(g[0], g[0] + n)) and g[0] % n == 0 for g in groups)
    last = rows[-1]
    assert last.admitted_total == last.trained_total + last.deferred + last.ready + last.dropped + last.trimmed
    assert last.dropped == len(ledger.dropped) and last.dropped % n == 0
    assert last.trimmed == len(ledger.trimmed) and last.trimmed % n == 0


@pytest.mark.parametrize("name", POLICY_NAMES)
@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=10), n=st.integers(2, 4), batch=st.integers(1, 3),
       steps=st.integers(1, 4), train_after=st.integers(0, 6), dapo=st.booleans(), seed=st.integers(0, 1000),
       gen_batch=st.sampled_from([None, 1, 2, 5]))
def test_scripted_grouped_runs_conserve_responses_and_groups(name, lengths, n, batch, steps, train_after, dapo, seed,
                                                             gen_batch):
    rng = np.random.default_rng(seed)
    rewards = rng.integers(0, 2, size=4096).astype(float)  # 0/1 rewards: some groups are all equal
    reward_of = (lambda sid: rewards[sid % len(rewards)]) if dapo else None
    ledger = drive(policy_of(name), lengths, batch, n, steps, reward_of, train_after, gen_batch)
    assert_groups_conserved(ledger, batch, n, steps)
    if not dapo:
        assert not ledger.dropped and not ledger.trimmed


def test_deferral_keeps_groups_whole_with_their_finished_members():
    """inter: the unfinished groups are deferred whole -- finished members included, not relaunched -- and
    complete in the next step, where the finished members wait for their group."""
    n, lengths = 3, [2, 2, 40, 3, 3, 3, 2, 50, 2, 4, 4, 4]
    ledger = drive(policy_of("inter", delta=2), lengths, 2, n, 4)
    d0, d1 = ledger.decision(0), ledger.decision(1)
    assert d0.deferred, "the script defers"
    assert_whole_groups(d0.deferred, n)
    finished_members = [s for s in d0.deferred if lengths[s % len(lengths)] < 40]
    assert finished_members, "a deferred group has finished members"
    assert not set(finished_members) & set(d1.resumed)  # carried, not relaunched
    assert set(d0.deferred) - set(finished_members) <= set(d1.resumed)
    assert all(r.balanced and not r.split for r in ledger.conservation)


def test_informative_rule():
    assert informative([1.0, 0.0]) and informative([0.2, 0.2, 0.3]) and informative([None, 1.0])
    assert not informative([1.0, 1.0, 1.0]) and not informative([0.0, 0.0])


def test_dapo_drops_all_equal_groups_and_samples_on():
    """Groups 1 and 3 have equal rewards: they are dropped, never trained, and further rounds of B (fresh
    groups 2, 3) are generated until B informative groups are kept (tests/test_dapo_rounds.py: the rounds)."""
    n, B = 2, 2
    uniform = {1, 3}
    ledger = drive(policy_of("baseline"), [5], B, n, 2, lambda sid: 0.5 if sid // n in uniform else float(sid % n))
    trained = {s // n for d in ledger.decisions for s in d.trained}
    dropped = {s // n for s in ledger.dropped}
    assert dropped == uniform and not trained & dropped
    assert ledger.decision(0).trained == (0, 1, 4, 5)  # groups 0 and 2: the first two informative
    admitted = [s for d in ledger.decisions for s in d.admitted]
    assert len(admitted) == len(ledger.dropped) + sum(len(d.trained) for d in ledger.decisions)  # over-sampled
    assert all(r.balanced and not r.split for r in ledger.conservation)


# -- the simulator --------------------------------------------------------------------------------------
LENGTHS = [5, 9, 7, 70, 6, 11, 8, 4, 90, 10, 6, 8, 120, 5, 7, 9, 12, 6, 60, 8, 3, 14, 7, 45, 33, 2, 17, 80]
TRACE = Trace.from_arrays([12] * len(LENGTHS), LENGTHS, name="groups")
SIM = SimConfig(batch=3, steps=4, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", gpu="h100-sxm", ppo_epochs=1,
                placement=Placement((Pool("main", 1), Pool("score", 1)), reward="score", reference="score"),
                max_response=200)


def sim(policy, algorithm: Algorithm, trace: Trace = TRACE, **kw):
    return simulate(trace, policy, replace(SIM, algorithm=algorithm, **kw))


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_a_step_trains_exactly_b_times_n_responses_in_whole_groups(name):
    r = sim(policy_of(name, chunk=8, budget=16), Algorithm("grpo", n=4))
    assert (r.steps["samples"] == SIM.batch * 4).all()
    for sids in r.decisions["trained"]:
        assert len(sids) == SIM.batch * 4
        assert_whole_groups(sids, 4)
    for sids in r.decisions["deferred"]:
        assert_whole_groups(sids, 4)
    assert r.conservation["balanced"].all() and (r.conservation["split"].map(len) == 0).all()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(POLICY_NAMES), algorithm=st.sampled_from(ALGORITHM_NAMES), n=st.integers(2, 3),
       rule=st.booleans(), kl=st.booleans(), batch=st.integers(1, 3))
def test_simulated_runs_conserve_per_group_for_every_policy_and_algorithm(policy, algorithm, n, rule, kl, batch):
    alg = Algorithm(algorithm, n=n, reward="rule" if rule else "model", kl=kl,
                    informative=0.5 if algorithm == "dapo" else None)
    p = Pipeline(replace(SIM, batch=batch, algorithm=alg), TRACE, policy_of(policy, chunk=8, budget=16))
    p.run()
    g = alg.group_size
    assert_groups_conserved(p.ledger, batch, g, SIM.steps)


def test_dapo_over_samples_at_the_stated_informative_fraction():
    alg = Algorithm("dapo", n=4, reward="rule", informative=0.5)
    r = sim("baseline", alg, steps=12)
    dropped_groups = r.summary["dropped"] // 4
    trained_groups = r.summary["samples_trained"] // 4
    assert r.summary["admitted"] > r.summary["samples_trained"]
    assert 0.35 <= trained_groups / (trained_groups + dropped_groups) <= 0.65
    assert sim("baseline", replace(alg, informative=1.0), steps=12).summary["dropped"] == 0


def test_dapo_reads_the_trace_reward_column():
    """Rewards from the trace: groups (n=2, rows in pairs) whose two rows carry equal rewards are dropped."""
    rewards = [0.0, 1.0, 0.5, 0.5] * 7  # every second group is all-equal
    trace = Trace.from_arrays([12] * len(LENGTHS), LENGTHS, reward=rewards, name="rewards")
    p = Pipeline(replace(SIM, algorithm=Algorithm("dapo", n=2, reward="rule")), trace, policy_of("baseline"))
    p.run()
    trained = {s // 2 for d in p.ledger.decisions for s in d.trained}
    assert p.ledger.dropped and all((s // 2) % 2 == 1 for s in p.ledger.dropped)
    assert all(g % 2 == 0 for g in trained)


def test_no_critic_rows_under_grpo_and_the_rule_reward_is_cpu_time():
    r = sim("oppo", Algorithm("grpo", n=4, reward="rule"))
    assert "critic" not in set(r.timeline["role"])
    rule = r.timeline[r.timeline["role"] == "rule"]
    assert len(rule) and set(rule["pool"]) == {"cpu"} and set(rule["activity"]) == {"score"}
    assert "cpu" not in r.summary["utilization"]
    assert "reward" not in set(r.timeline["role"])


def test_intra_with_nothing_to_stream_to_streams_nothing():
    """A rule reward and no reference: no frozen scorer off the generation pool, so intra emits no chunk."""
    pol = policy_of("intra", chunk=8)
    r = sim(pol, Algorithm("grpo", n=2, reward="rule", kl=False))
    assert r.summary["streamed_roles"] == [] and r.summary["policy"] == pol.label()
    p = Pipeline(replace(SIM, algorithm=Algorithm("grpo", n=2, reward="rule", kl=False)), TRACE, pol)
    p.ledger.log = []
    p.run()
    assert not [a for _, a in p.ledger.log if type(a).__name__ == "Emit"]
    assert sim(pol, Algorithm("grpo", n=2)).summary["streamed_roles"] == ["reward", "reference"]


def test_grpo_with_one_response_differs_from_ppo_only_by_the_critic():
    """n=1: the same decisions, and step by step the same work on every pool and role but the critic's."""
    ppo, grpo = (Pipeline(replace(SIM, algorithm=a), TRACE, policy_of("baseline")) for a in (Algorithm(), Algorithm("grpo")))
    for p in (ppo, grpo):
        p.ledger.log = []
        p.run()
    assert [a for _, a in ppo.ledger.log if getattr(a, "role", None) != "critic"] == \
        [a for _, a in grpo.ledger.log if getattr(a, "role", None) != "critic"]
    assert any(getattr(a, "role", None) == "critic" for _, a in ppo.ledger.log)

    def work(p, critic: bool):
        rows = [r for r in p.timeline.rows if (r[3] == "critic") == critic]
        out: dict = {}
        for r in rows:
            key = (r[4], r[0], r[2], r[3])  # step, pool, activity, role
            tok, fl = out.get(key, (0, 0.0))
            out[key] = (tok + r[7], fl + r[8])
        return out

    assert work(grpo, True) == {} and work(ppo, True)
    a, b = work(ppo, False), work(grpo, False)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k][0] == b[k][0], k
        assert a[k][1] == pytest.approx(b[k][1], rel=1e-9), k


def test_a_group_prefills_its_shared_prompt_once_in_the_scorers():
    """n=4 members of one prompt cost the reward scorer one prompt prefill: 3 prompts fewer per group than
    4 unrelated prompts of the same lengths."""
    prompts = [400] * len(LENGTHS)
    trace = Trace.from_arrays(prompts, LENGTHS, name="prompts")
    grouped = sim("baseline", Algorithm("grpo", n=4), trace, batch=2, steps=1)
    unrelated = sim("baseline", Algorithm("ppo"), trace, batch=8, steps=1)
    tok = {name: int(r.timeline[r.timeline["role"] == "reward"]["tokens"].sum())
           for name, r in (("grouped", grouped), ("unrelated", unrelated))}
    assert tok["unrelated"] - tok["grouped"] == 2 * 3 * 400


def test_dapo_prices_the_reward_of_the_groups_it_drops():
    """Every response a dapo step generates is verified, kept, dropped or trimmed: the rule pool's calls cover
    the dropped and the trimmed ones too."""
    alg = Algorithm("dapo", n=4, reward="rule", informative=0.5, reward_cost_ms=10.0)
    r = sim("baseline", alg, steps=6)
    assert r.summary["dropped"] > 0
    rule = r.timeline[r.timeline["role"] == "rule"]
    busy = float((rule["end"] - rule["start"]).sum())
    assert r.summary["trimmed"] > 0
    calls = r.summary["samples_trained"] + r.summary["dropped"] + r.summary["trimmed"]
    assert busy == pytest.approx(calls * 0.010)


def test_dapo_on_rewards_without_signal_is_refused():
    with pytest.raises(ConfigError, match="dynamic sampling dropped"):
        drive(policy_of("baseline"), [3], 1, 2, 1, lambda sid: 1.0)


def test_a_grouped_ledger_round_trips_through_json():
    """A checkpoint of a grouped run (deferred groups with finished members, dropped and trimmed groups) reloads
    as it was."""
    n, lengths = 3, [2, 2, 40, 3, 3, 3, 2, 50, 2, 4, 4, 4]
    ledger = drive(policy_of("inter", delta=2), lengths, 2, n, 4, lambda sid: float(sid % 5 == 0))
    assert ledger.deferred and ledger.dropped and max(d.rounds for d in ledger.decisions) == 2
    doc = ledger.to_json()
    again = Ledger(policy_of("inter", delta=2), 2, ROLES, STREAMED, lambda sid, step: lengths[sid % len(lengths)], group_size=n,
                   filter_groups=True)
    again.load_json(doc)
    assert again.to_json() == doc

    trimmed = drive(policy_of("baseline"), lengths, 2, n, 3, lambda sid: float(sid % 5 == 0), gen_batch=4)
    assert trimmed.trimmed and trimmed.dropped and any(d.trimmed for d in trimmed.decisions)
    doc = trimmed.to_json()
    again = Ledger(policy_of("baseline"), 2, ROLES, STREAMED, lambda sid, step: lengths[sid % len(lengths)], group_size=n,
                   filter_groups=True, gen_batch_size=4)
    again.load_json(doc)
    assert again.to_json() == doc and again.decisions == trimmed.decisions
