"""dapo's dynamic sampling as verl runs it (``recipe/dapo/dapo_ray_trainer.py``): rounds of ``gen_batch_size``
prompts, the groups whose rewards differ kept, further rounds until B are kept, the surplus trimmed -- checked
against sequences of rounds computed by hand; the over-commit policies on top of the rounds; verl's
``max_num_gen_batches`` error; the options that set it.

The script (B = 2 prompts, n = 2 responses, ``gen_batch_size`` G = 3): every generating response gains one
token per report, response lengths by sample id ``LENGTHS``, groups 0, 1 and 2 all-equal (dropped), the
others informative."""

from __future__ import annotations

import pytest

from oppo_sim.cli import build_parser, main
from oppo_sim.cli_setup import sim_config
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.ledger import Ledger
from oppo_sim.core.policies import make_policy
from oppo_sim.core.protocol import EndGeneration, Launch, Progress

B, N, G = 2, 2, 3
LENGTHS = [3, 3, 3, 3, 3, 3, 9, 9, 4, 4, 2, 2]  # by sample id (cyclic): group 3 is the round's straggler
UNIFORM = {0, 1, 2}


def reward(sid: int) -> float:
    return 0.5 if sid // N in UNIFORM else float(sid % N)


def step0(policy_name: str, gen_batch: int | None = G, max_rounds: int = 0, **knobs):
    """Step 0 on a bare ledger: the ledger, and per report the sample ids launched fresh and whether generation
    ended (report 0: the step's start)."""
    ledger = Ledger(make_policy(policy_name, **knobs), B, ("reference",), (), lambda sid, step: LENGTHS[sid % len(LENGTHS)],
                    **Algorithm("dapo", n=N, reward="rule", gen_batch_size=gen_batch, max_gen_batches=max_rounds).ledger_groups())
    m = ledger.begin(0, ledger.plan(0))
    log = [m.start()]
    while not m.ended:
        evs = []
        for s in m.active:
            g = ledger.tracks[s].generated + 1
            done = g >= ledger.tracks[s].target
            evs.append(Progress(s, g, done, reward(s) if done else None))
        log.append(m.report(evs))
    m.stopped({s: ledger.tracks[s].generated for s in m.active})
    launched = {i: [a.sid for a in acts if isinstance(a, Launch) and a.fresh] for i, acts in enumerate(log)}
    ended = [i for i, acts in enumerate(log) if any(isinstance(a, EndGeneration) for a in acts)]
    return ledger, m, {i: v for i, v in launched.items() if v}, ended


def test_baseline_runs_verls_rounds():
    """Round 1: groups 0-2 (all dropped, at report 3: the round waits for its slowest, 3 tokens). Round 2:
    groups 3-5, admitted at report 3, all kept; it ends at report 3 + 9 (group 3's 9 tokens). 3 kept >= B: the
    first two *sampled* (groups 3 and 4; group 5 finished first, at report 5) train, group 5 is trimmed."""
    ledger, m, launched, ended = step0("baseline")
    assert launched == {0: list(range(0, 6)), 3: list(range(6, 12))}
    assert ended == [12] and m.rounds == 2
    assert m.dropped == list(range(0, 6))
    assert m.batch == (6, 7, 8, 9)  # verl's batch[:B*n] over the rounds in sampling order
    assert m.trimmed == [10, 11] and ledger.trimmed == [10, 11]
    assert m.deferred == () and not ledger.ready
    d = ledger.decision(0)
    assert (d.rounds, d.dropped, d.trimmed, d.admitted) == (2, tuple(range(6)), (10, 11), tuple(range(12)))
    c = ledger.check_conservation(0)
    assert (c.trained, c.dropped, c.trimmed, c.admitted_total) == (4, 6, 2, 12) and c.balanced


def test_default_rounds_are_b_prompts():
    """gen_batch_size left out: rounds of B. Round 1: groups 0, 1 (dropped at 3); round 2: groups 2 (dropped)
    and 3 (kept at 3 + 9); round 3 at report 12: groups 4, 5, both kept at 12 + 4: 3 kept, the first two sampled
    (groups 3, 4) train and group 5 is trimmed."""
    ledger, m, launched, ended = step0("baseline", gen_batch=None)
    assert launched == {0: [0, 1, 2, 3], 3: [4, 5, 6, 7], 12: [8, 9, 10, 11]}
    assert ended == [16] and m.rounds == 3
    assert m.batch == (6, 7, 8, 9) and m.trimmed == [10, 11] and m.dropped == list(range(6))


def test_inter_ends_mid_round_and_defers_instead_of_trimming():
    """inter (Δ = 1) over the same rounds: its first round is G + Δ = 4 groups (0-3); groups 0-2 are dropped at
    report 3, group 3 is kept at 9 and the round ends; round 2 (groups 4-6) is admitted then; group 5 completes
    at 9 + 2 = 11: B kept, generation ends mid-round and groups 4 and 6 are deferred with their 2 tokens."""
    ledger, m, launched, ended = step0("inter", delta=1)
    assert launched == {0: list(range(0, 8)), 9: list(range(8, 14))}
    assert ended == [11] and m.rounds == 2
    assert m.batch == (6, 7, 10, 11)  # the first B groups complete
    assert m.deferred == (8, 9, 12, 13) and all(ledger.tracks[s].generated == 2 for s in m.deferred)
    assert m.trimmed == [] and m.dropped == list(range(6))


def test_max_gen_batches_is_verls_error():
    with pytest.raises(ConfigError, match=r"kept 0 of 2 groups in 1 round of 3 prompts, the most max_gen_batches"):
        step0("baseline", max_rounds=1)
    assert step0("baseline", max_rounds=2)[1].rounds == 2  # verl: num_gen_batches >= max_num_gen_batches raises


def test_rounds_smaller_than_the_batch():
    """gen_batch_size 1 < B: one prompt per round, round after round, until B are kept."""
    ledger, m, launched, ended = step0("baseline", gen_batch=1)
    assert m.rounds == 5 and [v for v in launched.values()] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert m.batch == (6, 7, 8, 9) and m.trimmed == []


@pytest.mark.parametrize("kw, msg", [
    (dict(name="grpo", n=2, gen_batch_size=4), "apply to dapo only"),
    (dict(name="grpo", n=2, max_gen_batches=3), "apply to dapo only"),
    (dict(name="dapo", n=2, gen_batch_size=0), "gen_batch_size (prompts per generation round) must be >= 1"),
    (dict(name="dapo", n=2, max_gen_batches=-1), "max_gen_batches must be >= 0"),
])
def test_bad_round_settings_are_refused(kw, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        Algorithm(**kw)


def test_the_options_reach_the_algorithm(capsys):
    a = build_parser().parse_args(["run", "--algorithm", "dapo", "--n", "4", "--reward", "rule", "--gen-batch-size", "48",
                                   "--max-num-gen-batches", "10"])
    alg = sim_config(a).algorithm
    assert (alg.gen_batch_size, alg.max_gen_batches) == (48, 10)
    assert Algorithm("dapo", n=4).ledger_groups() == {"group_size": 4, "filter_groups": True, "gen_batch_size": None,
                                                      "max_gen_batches": 0}
    code = main(["run", "--algorithm", "grpo", "--n", "4", "--gen-batch-size", "48", "--steps", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "--gen-batch-size sizes dapo's rounds" in err and err.count("\n") == 1


def test_oppo_real_takes_the_round_settings():
    """``oppo-real run/validate`` read --gen-batch-size/--max-gen-batches into the same Algorithm; other algorithms refuse."""
    import argparse

    from oppo_real.commands.common import add_algorithm_args, algorithm_of

    p = argparse.ArgumentParser()
    add_algorithm_args(p)
    alg = algorithm_of(p.parse_args(["--algorithm", "dapo", "--n", "2", "--gen-batch-size", "6", "--max-num-gen-batches", "3"]))
    assert (alg.gen_batch_size, alg.max_gen_batches) == (6, 3)
    with pytest.raises(ConfigError, match="--gen-batch-size sizes dapo's rounds"):
        algorithm_of(p.parse_args(["--algorithm", "grpo", "--n", "2", "--gen-batch-size", "6"]))
