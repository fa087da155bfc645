"""TorchStaticActor: the batched static decoder in calls of C tokens (OPPO on TRL) honours the
ActorBackend contract, its greedy output does not depend on C (== one call == TorchActor), tokens are
handed out at call ends, joins happen at call boundaries, and it makes the simulator's decisions."""

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
from oppo_real.backends.torch_static import TorchStaticActor, TorchStaticConfig
from oppo_real.models.tiny import load_causal_lm
from oppo_sim.core.errors import ConfigError

GREEDY = SamplingConfig(temperature=0.0)
LENGTHS = [1, 5, 17, 40, 23, 9, 31]


def _prompt(i, n=None):
    n = 4 + 5 * i if n is None else n
    return tuple(3 + (7 * i + k) % 500 for k in range(n)) + (1,)


def _reqs(lengths=LENGTHS):
    return [GenRequest(f"r{i}", _prompt(i), n, ignore_eos=True) for i, n in enumerate(lengths)]


def static(models, **kw):
    kw.setdefault("sampling", GREEDY)
    return TorchStaticActor(TorchStaticConfig(model=str(models.actor), **kw))


@pytest.fixture(scope="module")
def reference(models):
    """Greedy outputs of the per-request TorchActor (no batching, no padding) and of one static call."""
    reqs = _reqs()
    ref = run_to_completion(TorchActor(TorchActorConfig(model=str(models.actor), sampling=GREEDY)), reqs)
    return reqs, ref


def test_is_an_actor_backend(models):
    assert isinstance(static(models), ActorBackend)


@pytest.mark.parametrize("C", [None, 1, 3, 8, 1000])
@pytest.mark.parametrize("gen_batch,carry_kv", [(None, True), (3, True), (None, False)])
def test_greedy_output_is_the_same_whatever_C(models, reference, C, gen_batch, carry_kv):
    reqs, ref = reference
    out = run_to_completion(static(models, call_tokens=C, gen_batch=gen_batch, carry_kv=carry_kv), reqs)
    for r in reqs:
        toks, lps, reason = out[r.req_id]
        assert toks == ref[r.req_id][0]  # token for token
        assert lps == pytest.approx(ref[r.req_id][1], abs=1e-4)
        assert reason == "length"


def test_tokens_are_handed_out_when_the_call_ends(models):
    a = static(models, call_tokens=4)
    for r in _reqs([2, 10]):
        a.add(r)
    seen = []
    while a.has_unfinished():
        seen.append([(d.req_id, len(d.token_ids), d.finished) for d in a.step()])
    # call 1: prefill + 3 decodes, r0 (2 tokens) finished after the 2nd forward but is held to the call's end
    assert seen[:4] == [[], [], [], [("r0", 2, True), ("r1", 4, False)]]
    # call 2: r1 alone, 4 decode iterations; call 3: its last 2 tokens
    assert seen[4:] == [[], [], [], [("r1", 4, False)], [], [("r1", 2, True)]]
    assert a.calls == 3 and a.forwards == 10


def test_requests_added_mid_call_join_at_the_next_call(models, reference):
    reqs, ref = reference
    a = static(models, call_tokens=5)
    a.add(reqs[3])
    first = [a.step() for _ in range(2)]
    a.add(reqs[1])  # mid-call: waits for the boundary
    rest = [a.step() for _ in range(3)]
    assert first == [[], []] and [len(x) for x in rest] == [0, 0, 1]  # call 1 ends with r3 only
    assert rest[-1][0].req_id == "r3" and len(rest[-1][0].token_ids) == 5
    nxt = []
    while not nxt:
        nxt = a.step()
    assert {d.req_id for d in nxt} == {"r1", "r3"}  # joined, prefilled and decoded in call 2
    steps = first + rest + [nxt]
    while a.has_unfinished():
        steps.append(a.step())
    got = {}
    for d in steps:
        for x in d:
            got.setdefault(x.req_id, []).extend(x.token_ids)
    assert got["r1"] == ref["r1"][0] and got["r3"] == ref["r3"][0]


def test_eos_stops_a_row_and_it_keeps_its_slot(models):
    free = run_to_completion(static(models), [GenRequest("a", _prompt(0), 30, ignore_eos=True)])["a"][0]
    stop_tok = free[7]
    first = free.index(stop_tok)
    a = static(models, call_tokens=16, eos_token_ids=(stop_tok,))
    out = run_to_completion(a, [GenRequest("a", _prompt(0), 30), GenRequest("b", _prompt(1), 20, ignore_eos=True)])
    assert out["a"][0] == free[: first + 1] and out["a"][2] == "stop"
    assert len(out["b"][0]) == 20


def test_abort_and_resume_reproduce_greedy_output(models, reference):
    reqs, ref = reference
    a = static(models, call_tokens=6)
    for r in reqs[:4]:
        a.add(r)
    seen = {r.req_id: [] for r in reqs[:4]}
    for _ in range(9):
        for d in a.step():
            seen[d.req_id].extend(d.token_ids)
    for r in reqs[:4]:  # defer everything (tokens of the call in progress are not seen: regenerated)
        a.abort(r.req_id)
    assert not a.has_unfinished() and a.num_running() == 0
    assert a.step() == []
    resumed = [resume_request(r, seen[r.req_id]) for r in reqs[:4] if len(seen[r.req_id]) < r.max_new_tokens]
    rest = run_to_completion(a, resumed)
    for r in reqs[:4]:
        tail = rest[r.req_id][0] if r.req_id in rest else []
        assert seen[r.req_id] + tail == ref[r.req_id][0]


def test_load_weights_changes_outputs_and_restarts_running_requests(models):
    new = load_causal_lm(models.actor)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    req = GenRequest("w", _prompt(2), 20, ignore_eos=True)
    before = run_to_completion(static(models), [req])["w"][0]
    expected = run_to_completion(TorchStaticActor(TorchStaticConfig(model=str(models.actor), sampling=GREEDY), model=new), [req])["w"][0]
    assert before != expected
    a = static(models, call_tokens=4)
    assert a.load_weights(new.state_dict()) >= 0.0
    assert run_to_completion(a, [req])["w"][0] == expected
    b = static(models, call_tokens=8)
    b.add(req)
    seen = []
    for _ in range(5):  # mid-call: the sync ends the call; its tokens come with the next step
        for d in b.step():
            seen.extend(d.token_ids)
    b.load_weights(new.state_dict())
    tail = []
    while b.has_unfinished():
        for d in b.step():
            tail.extend(d.token_ids)
    assert seen == [] and tail[:5] == before[:5]
    ref = TorchStaticActor(TorchStaticConfig(model=str(models.actor), sampling=GREEDY), model=new)
    assert tail[5:] == run_to_completion(ref, [resume_request(req, before[:5])])["w"][0]


def test_seeded_sampling_is_reproducible_and_independent_of_C(models):
    def run(seed, C):
        a = static(models, sampling=SamplingConfig(temperature=1.0, seed=seed), call_tokens=C)
        return run_to_completion(a, [GenRequest(f"s{i}", _prompt(i), 16, ignore_eos=True) for i in range(3)])

    one = run(1, None)
    assert one == run(1, None)
    assert one != run(2, None)
    got = run(1, 5)
    for k in one:
        assert got[k][0] == one[k][0]


def test_config_errors(models):
    with pytest.raises(ConfigError):
        TorchStaticConfig(model="x", call_tokens=0)
    with pytest.raises(ConfigError):
        TorchStaticConfig(model="x", dtype="int8")
    a = static(models)
    a.add(GenRequest("x", _prompt(0), 3))
    with pytest.raises(ConfigError):
        a.add(GenRequest("x", _prompt(0), 3))
    with pytest.raises(ConfigError):
        a.set_call_tokens(0)


@pytest.mark.parametrize("C,gen_batch,carry_kv", [(None, None, True), (4, None, True), (7, 3, True), (5, None, False)])
def test_it_makes_the_simulators_decisions(models, C, gen_batch, carry_kv):
    """Call for call, the real decoder and oppo_sim's static engine run the same prefills (rows x padded
    width) and the same decode iterations (rows over the same padded KV)."""
    from oppo_sim.engine.request import EngineConfig, Req
    from oppo_sim.engine.static import StaticConfig, StaticCostParams, StaticEngineCore
    from oppo_sim.hw.costs.costmodel import DecodeCost
    from oppo_sim.hw.devices.hardware import get_hardware
    from oppo_sim.hw.models.lookup import get_model

    reqs = _reqs()
    a = static(models, call_tokens=C, gen_batch=gen_batch, carry_kv=carry_kv, record_timings=True)
    run_to_completion(a, reqs)
    real, cur = [], []
    for rec in a.timings:
        if rec["kind"] == "call":
            real.append(cur)
            cur = []
        elif rec["kind"] == "prefill":
            cur.append(("prefill", rec["rows"], rec["width"]))
        else:
            cur.append(("decode", rec["rows"], rec["kv"]))
    core = StaticEngineCore(DecodeCost(get_model("qwen2.5-0.5b"), get_hardware("h100-sxm")), EngineConfig(), 1 << 20,
                            StaticConfig(C, gen_batch, carry_kv), StaticCostParams(0.0))
    for i, r in enumerate(reqs):
        core.add(Req(i, len(r.prompt_ids), r.max_new_tokens))
    sim = []
    while (plan := core.plan()) is not None:
        call = []
        if plan.prefill_width:
            call.append(("prefill", sum(plan.fresh), plan.prefill_width))
        call += [("decode", plan.rows, plan.rows * (plan.width + i)) for i in range(plan.decode_iters)]
        sim.append(call)
        core.commit(plan, 0.0)
    assert real == sim


def test_profile_static_decode_writes_a_table_that_fits_and_predicts(models):
    from oppo_real.profiling.engine_ops import model_spec
    from oppo_real.profiling.static_decoder import (
        STATIC_CALL_OP,
        StaticProfileGrid,
        fit_static,
        predict_static_calls,
    )
    from oppo_sim.hw.fitting.calibration import MEASUREMENT_COLUMNS

    grid = StaticProfileGrid(batch=(1, 4), prompt=(8, 32), call_tokens=(3, 8), calls=2, repeats=1)
    from oppo_real.profiling.static_decoder import profile_static_decode

    table = profile_static_decode(models.actor, grid, log=lambda _m: None)
    assert set(MEASUREMENT_COLUMNS) <= set(table.columns)
    assert set(table["op"]) == {"decode", STATIC_CALL_OP}
    assert set(table["kind"]) == {"prefill", "decode", "call"}
    assert (table["seconds"] > 0).all()
    hw, params, report = fit_static(table)
    assert params.call_overhead_s > 0 and list(report["op"]) == ["decode", STATIC_CALL_OP]
    cmp = predict_static_calls(table, hw, params, model_spec(models.actor))
    assert len(cmp) == (table["op"] == STATIC_CALL_OP).sum()
    assert (cmp["pred_s"] > 0).all()


def test_static_profile_round_trip(tmp_path):
    from oppo_real.profiling.static_decoder import load_static_params, save_static_profile
    from oppo_sim.engine.static import StaticCostParams
    from oppo_sim.hw.devices.hardware import get_hardware
    from oppo_sim.hw.fitting.profiles import load_profile

    path = tmp_path / "p.json"
    save_static_profile(get_hardware("h200"), StaticCostParams(0.125), path, {"who": "test"})
    assert load_static_params(path).call_overhead_s == 0.125
    assert load_profile(path).gpu.id == "h200"
