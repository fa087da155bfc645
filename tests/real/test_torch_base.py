"""The torch backends' shared request bookkeeping (`backends.torch_base`): sleeping mid-flight frees the
KV and the next steps prefill the running requests again, with the same greedy tokens as without the
sleep — on all four backends, the static ones (which gained `sleep` from the base) included."""

from __future__ import annotations

import pytest

from oppo_real.backends.api import GenRequest, SamplingConfig, run_to_completion
from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig
from oppo_real.backends.torch_graph import TorchGraphActor, TorchGraphConfig
from oppo_real.backends.torch_static import TorchStaticActor, TorchStaticConfig
from oppo_real.backends.torch_static_graph import TorchStaticGraphActor
from oppo_sim.core.errors import ConfigError

GREEDY = SamplingConfig(temperature=0.0)


def _reqs():
    return [GenRequest(f"r{i}", tuple(3 + (5 * i + k) % 300 for k in range(3 + 4 * i)) + (1,), n, ignore_eos=True)
            for i, n in enumerate([6, 11, 3])]


def _backend(kind: str, model: str):
    if kind == "torch":
        return TorchActor(TorchActorConfig(model=model, sampling=GREEDY))
    if kind == "torch-graph":
        return TorchGraphActor(TorchGraphConfig(model=model, sampling=GREEDY, max_num_seqs=4, max_model_len=64))
    cfg = TorchStaticConfig(model=model, sampling=GREEDY, call_tokens=4)
    return TorchStaticActor(cfg) if kind == "torch-static" else TorchStaticGraphActor(cfg, max_num_seqs=4)


@pytest.mark.parametrize("kind", ["torch", "torch-graph", "torch-static", "torch-static-graph"])
def test_sleep_mid_flight_keeps_the_greedy_tokens(models, kind):
    ref = run_to_completion(_backend("torch", str(models.actor)), _reqs())
    a = _backend(kind, str(models.actor))
    out = {r.req_id: [] for r in _reqs()}
    for r in _reqs():
        a.add(r)
    for _ in range(3):
        for d in a.step():
            out[d.req_id] += d.token_ids
    assert a.kv_bytes() > 0
    assert a.sleep() > 0 and a.kv_bytes() == 0
    a.wake_up()
    while a.has_unfinished():
        for d in a.step():
            out[d.req_id] += d.token_ids
    assert out == {k: v[0] for k, v in ref.items()}
    assert a.num_running() == 0
    a.close()


def test_bookkeeping_errors_are_one_line(models):
    a = _backend("torch-static", str(models.actor))
    a.add(_reqs()[0])
    with pytest.raises(ConfigError, match="already running"):
        a.add(_reqs()[0])
    a.abort("r0")
    a.abort("unknown")  # nothing to do
    assert not a.has_unfinished()
    with pytest.raises(ConfigError, match="TorchGraphConfig.max_model_len must be >= 2"):
        TorchGraphConfig(model="x", max_model_len=1)
