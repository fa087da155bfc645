"""The graph-captured torch engine (``--backend torch-graph``): on the CPU its decode runs eagerly — the same
functions a GPU captures — and must give `TorchActor`'s outputs token for token, greedy and sampled, through
slot reuse, waiting for a free slot, mid-flight adds, aborts, weight syncs and sleep."""

from __future__ import annotations

import pytest
import torch

from oppo_real.backends.api import ActorBackend, GenRequest, SamplingConfig, run_to_completion
from oppo_real.backends.graph_decoder import batch_buckets, bucket_of, length_buckets, slots_for
from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig
from oppo_real.backends.torch_graph import TorchGraphActor, TorchGraphConfig
from oppo_real.models.tiny import load_causal_lm
from oppo_sim.core.errors import ConfigError

GREEDY = SamplingConfig(temperature=0.0)


def _reqs(n=7, base=10):
    """Prompts of different lengths and budgets, so sequences finish at different steps."""
    return [GenRequest(f"r{i}", tuple(3 + (5 * i + 3 * j) % 400 for j in range(4 + 3 * i)) + (1,), base + 5 * i, ignore_eos=True)
            for i in range(n)]


def _both(models, sampling, **graph_kw):
    ref = TorchActor(TorchActorConfig(model=str(models.actor), sampling=sampling))
    new = TorchGraphActor(TorchGraphConfig(model=str(models.actor), sampling=sampling, **graph_kw))
    return ref, new


def _assert_same(a, b, reqs, abs_lp=1e-4):
    for r in reqs:
        assert b[r.req_id][0] == a[r.req_id][0], r.req_id
        assert b[r.req_id][2] == a[r.req_id][2]
        assert b[r.req_id][1] == pytest.approx(a[r.req_id][1], abs=abs_lp)


def test_is_an_actor_backend_and_runs_eagerly_on_the_cpu(models):
    g = TorchGraphActor(TorchGraphConfig(model=str(models.actor), sampling=GREEDY))
    assert isinstance(g, ActorBackend)
    assert not g.dec.graphs_on  # cuda_graphs is on by default, but there is no CUDA device here
    assert g.capture_graphs() == 0 and g.dec.graph_count() == 0
    g.add(_reqs(1)[0])
    g.step()
    with pytest.raises(ConfigError, match="idle engine"):
        g.capture_graphs()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_same_tokens_as_the_torch_backend(models, temperature):
    """Greedy and counter-based sampled output equal TorchActor's, with fewer slots than requests (requests
    wait for a slot, slots are reused as sequences finish and the last ones move into the holes)."""
    sampling = SamplingConfig(temperature=temperature, seed=7)
    ref, new = _both(models, sampling, max_num_seqs=3)
    reqs = _reqs()
    _assert_same(run_to_completion(ref, reqs), run_to_completion(new, reqs), reqs)
    assert new.dec.slots == 3 and not new.has_unfinished()


def test_mid_flight_adds_and_aborts_leave_the_other_rows_unchanged(models):
    reqs = _reqs(5)
    ref, _ = _both(models, GREEDY)
    full = run_to_completion(ref, reqs)
    g = TorchGraphActor(TorchGraphConfig(model=str(models.actor), sampling=GREEDY, max_num_seqs=4))
    seen = {r.req_id: [] for r in reqs}
    for r in reqs[:3]:
        g.add(r)
    k = 0
    while g.has_unfinished() or k < 4:
        if k == 2:
            g.abort("r0")  # a row in the middle of the slots leaves
            g.add(reqs[3])
        if k == 4:
            g.add(reqs[4])
        for d in g.step():
            seen[d.req_id].extend(d.token_ids)
        k += 1
    assert seen["r0"] == full["r0"][0][:len(seen["r0"])] and len(seen["r0"]) < reqs[0].max_new_tokens
    for r in reqs[1:]:
        assert seen[r.req_id] == full[r.req_id][0], r.req_id


def test_weight_sync_and_sleep_prefill_the_running_rows_again(models):
    new = load_causal_lm(models.actor)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    req = GenRequest("w", _reqs(1)[0].prompt_ids, 20, ignore_eos=True)
    ref = TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY))
    ref.add(req)
    g = TorchGraphActor(TorchGraphConfig(model=str(models.actor), sampling=GREEDY))
    g.add(req)
    got_ref, got = [], []
    for k in range(20):
        if k == 5:
            ref.load_weights(new.state_dict())
            g.load_weights(new.state_dict())
        if k == 9:
            assert g.sleep() > 0 and g.kv_bytes() == 0
            g.wake_up()
        got_ref += [t for d in ref.step() for t in d.token_ids]
        got += [t for d in g.step() for t in d.token_ids]
    assert got == got_ref and len(got) == 20


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_other_architectures_match_transformers(family):
    """Llama (no q/k/v bias) and Qwen3 (q/k-norm) shapes, random weights in memory."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    kw = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256)
    cfg = LlamaConfig(**kw) if family == "llama" else Qwen3Config(head_dim=16, **kw)
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(cfg).float().eval()
    reqs = _reqs(4, base=6)
    reqs = [GenRequest(r.req_id, tuple(t % 96 for t in r.prompt_ids), r.max_new_tokens, ignore_eos=True) for r in reqs]
    ref = TorchActor(TorchActorConfig(model="(memory)", sampling=GREEDY, eos_token_ids=(), max_model_len=256), model=model)
    g = TorchGraphActor(TorchGraphConfig(model="(memory)", sampling=GREEDY, eos_token_ids=(), max_model_len=256,
                                         max_num_seqs=3), model=model)
    _assert_same(run_to_completion(ref, reqs), run_to_completion(g, reqs), reqs)


def test_buckets():
    assert batch_buckets(128) == (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
    assert batch_buckets(20) == (1, 2, 4, 8, 12, 16, 20)
    assert batch_buckets(1) == (1,)
    assert bucket_of(13, batch_buckets(128)) == 16 and bucket_of(1, (1, 2)) == 1
    assert length_buckets(1000) == (64, 128, 256, 512, 1000)
    with pytest.raises(ConfigError):
        bucket_of(129, batch_buckets(128))


def test_kv_cache_cap_sets_the_slots_and_bad_config_is_one_line(models):
    m = load_causal_lm(models.actor)
    per_token = 2 * 2 * 2 * 32 * 4  # keys and values x layers x KV heads x head dim x fp32
    assert slots_for(m, 100, 64, None) == 64
    assert slots_for(m, 100, 64, 10 * 100 * per_token) == 10
    with pytest.raises(ConfigError, match="holds no sequence"):
        slots_for(m, 100, 64, 99 * per_token)
    for bad in (dict(max_num_seqs=0), dict(dtype="int8"), dict(kv_cache_bytes=0)):
        with pytest.raises(ConfigError):
            TorchGraphConfig(model="x", **bad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_graph_replay_matches_eager_on_cuda(models):  # pragma: no cover - runs where there is a GPU
    reqs = _reqs()
    out = {}
    for graphs in (False, True):
        g = TorchGraphActor(TorchGraphConfig(model=str(models.actor), sampling=SamplingConfig(temperature=1.0, seed=3),
                                             device="cuda", max_num_seqs=4, cuda_graphs=graphs))
        if graphs:
            assert g.capture_graphs(2) == 2 * len(g.dec.len_buckets)  # batch buckets 1 and 2, every length
        out[graphs] = run_to_completion(g, reqs)
        assert g.dec.graphs_on == graphs and (g.dec.graph_count() > 0) == graphs
    _assert_same(out[False], out[True], reqs, abs_lp=1e-3)


def test_memory_fit_counts_whole_slots_for_the_graph_decoders():
    from oppo_real.config import RealConfig
    from oppo_real.devices.memory_fit import kv_cache_bytes
    from oppo_sim.hw.models.lookup import get_model

    actor = get_model("qwen2.5-1.5b")
    per = actor.with_(dtype_bytes=4).kv_bytes_per_token()
    for backend in ("torch-graph", "torch-static-graph"):
        cfg = RealConfig(backend=backend, batch=8)
        assert kv_cache_bytes(cfg, actor) == 16 * cfg.max_model_len * per  # 2 x batch slots of max_model_len
        big = RealConfig(backend=backend, batch=200)
        assert kv_cache_bytes(big, actor) == big.engine.max_num_seqs * big.max_model_len * per
