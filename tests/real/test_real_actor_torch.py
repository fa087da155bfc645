"""TorchActor honours the ActorBackend contract: forced lengths, EOS, abort/resume, seeds, weight sync."""

from __future__ import annotations

import pytest
import torch

from oppo_real.backends.api import (
    ActorBackend,
    GenRequest,
    SamplingConfig,
    resume_request,
    run_to_completion,
)
from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig
from oppo_real.models.tiny import load_causal_lm
from oppo_real.ppo.algo import Sample, collate, token_logprobs
from oppo_sim.core.errors import ConfigError

GREEDY = SamplingConfig(temperature=0.0)


def _prompt(i, n=12):
    return tuple(range(3 + i, 3 + i + n)) + (1,)


@pytest.fixture()
def greedy_torch(models):
    return TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY))


def test_is_an_actor_backend(greedy_torch):
    assert isinstance(greedy_torch, ActorBackend)


def test_forced_lengths_are_exact(greedy_torch):
    reqs = [GenRequest(f"f{i}", _prompt(i), n, ignore_eos=True) for i, n in enumerate([1, 5, 17, 40])]
    out = run_to_completion(greedy_torch, reqs)
    for r in reqs:
        toks, lps, reason = out[r.req_id]
        assert len(toks) == len(lps) == r.max_new_tokens
        assert reason == "length"
    assert not greedy_torch.has_unfinished() and greedy_torch.num_running() == 0


def test_eos_stops_and_is_included(models, greedy_torch):
    free = run_to_completion(greedy_torch, [GenRequest("a", _prompt(0), 30, ignore_eos=True)])["a"][0]
    stop_tok = free[7]
    first = free.index(stop_tok)
    actor = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY, eos_token_ids=(stop_tok,)))
    toks, _, reason = run_to_completion(actor, [GenRequest("a", _prompt(0), 30)])["a"]
    assert toks == free[: first + 1] and reason == "stop"
    toks, _, reason = run_to_completion(actor, [GenRequest("a", _prompt(0), 30, ignore_eos=True)])["a"]
    assert toks == free and reason == "length"


def test_abort_and_resume_reproduce_greedy_output(greedy_torch):
    reqs = [GenRequest(f"r{i}", _prompt(i), 24, ignore_eos=True) for i in range(3)]
    full = run_to_completion(greedy_torch, reqs)
    a = greedy_torch
    a.add(reqs[0])
    a.add(reqs[1])
    seen = {r.req_id: [] for r in reqs}
    for k in range(9):
        if k == 4:
            a.add(reqs[2])  # mid-flight add
        for d in a.step():
            seen[d.req_id].extend(d.token_ids)
    for r in reqs:  # defer everything
        a.abort(r.req_id)
    assert not a.has_unfinished()
    resumed = [resume_request(r, seen[r.req_id]) for r in reqs]
    assert resumed[0].max_new_tokens == 24 - 9 and len(resumed[0].prompt_ids) == len(reqs[0].prompt_ids) + 9
    rest = run_to_completion(a, resumed)
    for r in reqs:
        assert seen[r.req_id] + rest[r.req_id][0] == full[r.req_id][0]
        merged_lp = full[r.req_id][1]
        got_lp = [0.0] * len(seen[r.req_id]) + rest[r.req_id][1]
        assert got_lp[len(seen[r.req_id]) :] == pytest.approx(merged_lp[len(seen[r.req_id]) :], abs=1e-5)


def test_resume_without_budget_is_an_error():
    req = GenRequest("x", (5, 1), 3)
    with pytest.raises(ConfigError):
        resume_request(req, [7, 8, 9])
    with pytest.raises(ConfigError):
        GenRequest("y", (), 3)


def test_seeded_sampling_is_reproducible(models):
    def run(seed):
        a = TorchActor(TorchActorConfig(model=str(models.actor), sampling=SamplingConfig(temperature=1.0, seed=seed)))
        return run_to_completion(a, [GenRequest(f"s{i}", _prompt(i), 16, ignore_eos=True) for i in range(3)])

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_logprobs_match_ppo_token_logprobs(models):
    a = TorchActor(TorchActorConfig(model=str(models.actor), sampling=SamplingConfig(temperature=1.0, seed=3)))
    reqs = [GenRequest(f"l{i}", _prompt(i, 6 + i), 10, ignore_eos=True) for i in range(3)]
    out = run_to_completion(a, reqs)
    samples = [Sample(r.prompt_ids, tuple(out[r.req_id][0]), 0.0, (0.0,) * 10) for r in reqs]
    ids, attn, mask = collate(samples)
    with torch.no_grad():
        lp = token_logprobs(a.model, ids, attn, mask)
    for i, r in enumerate(reqs):
        p = len(r.prompt_ids)
        assert lp[i, p : p + 10].tolist() == pytest.approx(out[r.req_id][1], abs=1e-5)


def test_load_weights_changes_outputs_and_restarts_running_requests(models):
    a = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY))
    new = load_causal_lm(models.actor)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ref = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY), model=new)
    req = GenRequest("w", _prompt(2), 20, ignore_eos=True)
    before = run_to_completion(a, [req])["w"][0]
    expected = run_to_completion(ref, [req])["w"][0]
    assert before != expected
    assert a.load_weights(new.state_dict()) >= 0.0
    assert run_to_completion(a, [req])["w"][0] == expected
    # a request running across the sync continues on its full context with the new weights
    b = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY))
    b.add(req)
    seen = []
    for _ in range(5):
        for d in b.step():
            seen.extend(d.token_ids)
    b.load_weights(new.state_dict())
    tail = []
    while b.has_unfinished():
        for d in b.step():
            tail.extend(d.token_ids)
    assert seen == before[:5]
    assert tail == run_to_completion(ref, [resume_request(req, seen)])["w"][0]


def test_load_weights_rejects_incomplete_state_dict(greedy_torch):
    with pytest.raises(ConfigError):
        greedy_torch.load_weights({"lm_head.weight": torch.zeros(1)})


def test_sampled_output_survives_a_pause_and_other_rows(models):
    """Counter-based sampling: a request paused and resumed as prompt + tokens so far, with other requests
    around it, continues exactly as it would have alone (the noise is keyed by seed and position)."""
    cfg = TorchActorConfig(model=str(models.actor), sampling=SamplingConfig(temperature=1.0, seed=5))
    alone = run_to_completion(TorchActor(cfg), [GenRequest("r", _prompt(0), 12, ignore_eos=True)])["r"][0]
    a = TorchActor(cfg)
    for req in (GenRequest("r", _prompt(0), 12, ignore_eos=True), GenRequest("x", _prompt(4, 9), 20, ignore_eos=True)):
        a.add(req)
    got = []
    while len(got) < 5:
        got += [t for d in a.step() if d.req_id == "r" for t in d.token_ids]
    a.abort("r")
    a.add(GenRequest("r", _prompt(0) + tuple(got), 12 - len(got), ignore_eos=True))
    while a.has_unfinished():
        got += [t for d in a.step() if d.req_id == "r" for t in d.token_ids]
    assert got == list(alone)
