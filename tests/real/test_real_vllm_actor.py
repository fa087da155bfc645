"""VLLMActor (vLLM V1 LLMEngine, in-process) honours the ActorBackend contract and agrees with torch.

Skipped, with the reason, when vLLM is not importable (install with scripts/install_real.sh).
"""

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
from oppo_sim.core.errors import ConfigError

GREEDY = SamplingConfig(temperature=0.0)


def _prompt(i, n=12):
    return tuple(range(3 + i, 3 + i + n)) + (1,)


def _drain(actor, seen=None):
    seen = {} if seen is None else seen
    reasons = {}
    while actor.has_unfinished():
        for d in actor.step():
            seen.setdefault(d.req_id, []).extend(d.token_ids)
            if d.finished:
                reasons[d.req_id] = d.finish_reason
    return seen, reasons


def test_contract_and_forced_lengths(greedy_vllm):
    assert isinstance(greedy_vllm, ActorBackend)
    reqs = [GenRequest(f"f{i}", _prompt(i), n, ignore_eos=True) for i, n in enumerate([1, 5, 17, 40])]
    out = run_to_completion(greedy_vllm, reqs)
    for r in reqs:
        toks, lps, reason = out[r.req_id]
        assert len(toks) == len(lps) == r.max_new_tokens and reason == "length"
        assert all(lp <= 0.0 for lp in lps)
    assert greedy_vllm.num_running() == 0


def test_greedy_matches_torch_backend(greedy_vllm, models):
    torch_actor = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY))
    reqs = [GenRequest(f"g{i}", _prompt(i, 8 + 3 * i), 24, ignore_eos=True) for i in range(4)]
    v, t = run_to_completion(greedy_vllm, reqs), run_to_completion(torch_actor, reqs)
    for r in reqs:
        assert v[r.req_id][0] == t[r.req_id][0]
        assert v[r.req_id][1] == pytest.approx(t[r.req_id][1], abs=1e-4)


def test_abort_and_resume_reproduce_greedy_output(greedy_vllm):
    reqs = [GenRequest(f"r{i}", _prompt(i, 20), 30, ignore_eos=True) for i in range(3)]
    full = run_to_completion(greedy_vllm, reqs)
    a = greedy_vllm
    a.add(reqs[0])
    a.add(reqs[1])
    seen: dict[str, list[int]] = {r.req_id: [] for r in reqs}
    for k in range(11):
        if k == 3:
            a.add(reqs[2])  # mid-flight add
        for d in a.step():
            seen[d.req_id].extend(d.token_ids)
    for r in reqs:
        a.abort(r.req_id)
    assert not a.has_unfinished()
    assert a.step() == []  # nothing leaks from aborted requests
    rest, _ = _drain_added(a, [resume_request(r, seen[r.req_id]) for r in reqs])
    for r in reqs:
        assert 0 < len(seen[r.req_id]) < 30
        assert seen[r.req_id] + rest[r.req_id] == full[r.req_id][0]


def _drain_added(actor, reqs):
    for r in reqs:
        actor.add(r)
    return _drain(actor)


def test_weight_sync_makes_outputs_match_torch(greedy_vllm, models):
    original = load_causal_lm(models.actor)
    new = load_causal_lm(models.actor)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ref = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY), model=new)
    reqs = [GenRequest(f"w{i}", _prompt(i), 20, ignore_eos=True) for i in range(3)]
    before = run_to_completion(greedy_vllm, reqs)
    expected = run_to_completion(ref, reqs)
    try:
        assert greedy_vllm.load_weights(new.state_dict()) >= 0.0
        after = run_to_completion(greedy_vllm, reqs)
        assert any(before[r.req_id][0] != after[r.req_id][0] for r in reqs)
        for r in reqs:
            assert after[r.req_id][0] == expected[r.req_id][0]
            assert after[r.req_id][1] == pytest.approx(expected[r.req_id][1], abs=1e-4)
        # A request running across the sync is recomputed with the new weights and continues.
        greedy_vllm.load_weights(original.state_dict())
        greedy_vllm.add(reqs[0])
        seen: dict[str, list[int]] = {reqs[0].req_id: []}
        for _ in range(6):
            for d in greedy_vllm.step():
                seen[d.req_id].extend(d.token_ids)
        greedy_vllm.load_weights(new.state_dict())
        tail, _ = _drain(greedy_vllm)
        head = seen[reqs[0].req_id]
        assert head == before[reqs[0].req_id][0][: len(head)]
        cont = run_to_completion(ref, [resume_request(reqs[0], head)])[reqs[0].req_id][0]
        assert tail[reqs[0].req_id] == cont
    finally:
        greedy_vllm.load_weights(original.state_dict())
    assert run_to_completion(greedy_vllm, reqs) == before


def test_eos_stops_and_is_included(vllm_pool):
    free = run_to_completion(vllm_pool.get(), [GenRequest("a", _prompt(0), 30, ignore_eos=True)])["a"][0]
    stop_tok = free[7]
    first = free.index(stop_tok)
    actor = vllm_pool.get(eos_token_ids=(stop_tok,), enable_prefix_caching=False)
    toks, _, reason = run_to_completion(actor, [GenRequest("a", _prompt(0), 30)])["a"]
    assert toks == free[: first + 1] and reason == "stop"
    toks, _, reason = run_to_completion(actor, [GenRequest("a", _prompt(0), 30, ignore_eos=True)])["a"]
    assert toks == free and reason == "length"


def test_seeded_sampling_is_reproducible_per_request(vllm_pool):
    actor = vllm_pool.get(sampling=SamplingConfig(temperature=1.0, seed=4))
    reqs = [GenRequest(f"s{i}", _prompt(i), 16, ignore_eos=True) for i in range(3)]
    a = run_to_completion(actor, reqs)
    b = run_to_completion(actor, reqs[::-1])  # batch order does not matter: per-request seeds
    assert a == b
    assert len({tuple(v[0]) for v in a.values()}) == 3


def test_config_validation(tmp_path):
    from oppo_real.backends.vllm_actor import VLLMActorConfig

    with pytest.raises(ConfigError):
        VLLMActorConfig(model=str(tmp_path / "missing"))
    with pytest.raises(ConfigError):
        VLLMActorConfig(model=str(tmp_path), dtype="int8")
    with pytest.raises(ConfigError):
        VLLMActorConfig(model=str(tmp_path), max_model_len=4096, max_num_batched_tokens=2048)
