"""The static decoder on static KV slots (``--backend torch-static-graph``, eager on the CPU): step for step the
same deltas as `TorchStaticActor` — the same calls, groups, hand-outs and tokens — greedy and sampled, through
mid-call aborts and adds and a weight sync."""

from __future__ import annotations

import pytest
import torch

from oppo_real.backends.api import ActorBackend, GenRequest, SamplingConfig
from oppo_real.backends.torch_static import TorchStaticActor, TorchStaticConfig
from oppo_real.backends.torch_static_graph import TorchStaticGraphActor
from oppo_real.models.tiny import load_causal_lm
from oppo_sim.core.errors import ConfigError

LENGTHS = [1, 5, 17, 23, 9, 12]


def _reqs(lengths=LENGTHS):
    return [GenRequest(f"r{i}", tuple(3 + (7 * i + k) % 500 for k in range(4 + 5 * i)) + (1,), n, ignore_eos=True)
            for i, n in enumerate(lengths)]


def _steps(actor, reqs, events=None):
    """Every step's deltas (id, tokens, rounded log-probs, reason) until done; ``events[k](actor)`` before step k."""
    for r in reqs:
        actor.add(r)
    out, k = [], 0
    while actor.has_unfinished() or (events and k <= max(events)):
        if events and k in events:
            events[k](actor)
        out.append(sorted((d.req_id, d.token_ids, tuple(round(x, 3) for x in d.logprobs), d.finish_reason) for d in actor.step()))
        k += 1
        assert k < 2000
    return out


def _pair(models, **kw):
    cfg = TorchStaticConfig(model=str(models.actor), **kw)
    return TorchStaticActor(cfg), TorchStaticGraphActor(cfg, max_num_seqs=8)


@pytest.mark.parametrize("temperature,C,gen_batch,carry_kv", [(0.0, None, None, True), (1.0, 3, 3, True), (0.0, 8, None, False),
                                                         (1.0, 1, 2, True)])
def test_same_deltas_step_for_step(models, temperature, C, gen_batch, carry_kv):
    ref, new = _pair(models, sampling=SamplingConfig(temperature=temperature, seed=4), call_tokens=C, gen_batch=gen_batch,
                     carry_kv=carry_kv)
    assert isinstance(new, ActorBackend)
    assert _steps(new, _reqs()) == _steps(ref, _reqs())
    assert len(new._pool) <= -(-len(LENGTHS) // (gen_batch or 8))  # decoders are reused, not made per call


def test_aborts_adds_and_weight_sync_mid_call(models):
    other = load_causal_lm(models.actor)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    sd = other.state_dict()
    late = GenRequest("late", (5, 6, 7, 1), 12, ignore_eos=True)
    events = {3: lambda a: a.abort("r3"), 5: lambda a: a.add(late), 9: lambda a: a.load_weights(sd), 12: lambda a: a.abort("r1")}
    ref, new = _pair(models, sampling=SamplingConfig(temperature=0.0), call_tokens=4, gen_batch=3)
    assert _steps(new, _reqs(), events) == _steps(ref, _reqs(), events)


def test_bad_slot_count_is_one_line(models):
    with pytest.raises(ConfigError, match="max_num_seqs"):
        TorchStaticGraphActor(TorchStaticConfig(model=str(models.actor)), max_num_seqs=0)
