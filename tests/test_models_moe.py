"""Mixture-of-experts and MLA models: counts against hand arithmetic, Hugging Face configs as models
(files, directories, the table's fixtures), expert parallelism, and the CLI end to end."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError
from oppo_sim.engine.request import EngineConfig
from oppo_sim.hw.costs.costmodel import CostModel, DecodeCost
from oppo_sim.hw.devices.hardware import get_hardware
from oppo_sim.hw.models.lookup import MODELS, get_model, model_from_hf_config
from oppo_sim.hw.costs.sync import param_tensors
from oppo_sim.pipeline.config import SimConfig

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
H100 = get_hardware("h100-sxm")

# A small Qwen2-MoE: 4 layers, layer 0 dense (mlp_only_layers), 8 experts top-2 of width 32, a shared
# expert of width 48 with its gate; q/k/v bias (qwen2_moe's default).
TINY_MOE = {
    "model_type": "qwen2_moe", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, "num_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
    "mlp_only_layers": [0], "decoder_sparse_step": 1, "tie_word_embeddings": False,
}
# A small DeepSeek-V3: 3 layers, the first dense, 4 routed experts top-2 of width 16 + 1 shared, MLA.
TINY_MLA = {
    "model_type": "deepseek_v3", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 1000, "n_routed_experts": 4,
    "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 16, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "topk_method": "noaux_tc", "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16, "v_head_dim": 16, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
}


def test_moe_counts_by_hand():
    m = model_from_hf_config(TINY_MOE, id="tiny-moe")
    assert (m.experts, m.experts_per_token, m.moe_layers, m.dense_layers) == (8, 2, 3, 1)
    attn = 64 * 64 + 2 * 64 * 32 + 64 * 64  # q, k, v (head dim 16, 2 kv heads), o = 12,288
    other = (64 + 2 * 32) + 2 * 64  # q/k/v bias + two RMSNorms = 256
    dense_mlp = 3 * 64 * 128  # 24,576
    expert = 3 * 64 * 32  # 6,144
    moe_mlp = 64 * 8 + 8 * expert + 3 * 64 * 48 + 64  # router + experts + shared + shared gate = 58,944
    emb = 1000 * 64
    total = 2 * emb + 4 * (attn + other) + dense_mlp + 3 * moe_mlp + 64
    assert total == 379_648 and m.params == total
    active_moe = 64 * 8 + 2 * expert + 3 * 64 * 48 + 64  # 22,080
    assert m.active_params == total - 3 * 6 * expert == 269_056
    assert m.matmul_params == 4 * attn + dense_mlp + 3 * active_moe + emb == 203_968
    assert m.flop_coeffs() == (2 * 203_968, 4 * 4 * 64)  # per token; per (query, key) pair: 4·layers·attn_width
    assert m.kv_bytes_per_token() == 2 * 4 * 2 * 16 * 2 == 512
    assert m.weight_bytes() == 2 * total
    # one token reads its top-2 experts per MoE layer: the active weights
    assert m.weight_bytes_read(1) == pytest.approx(2 * m.active_params)
    # training keeps, per MoE layer, the top-2 experts' and the shared expert's intermediates: (1·128 + 3·(2·32 + 48)) / 4
    assert m.mlp_act_width == (128 + 3 * 112) / 4


def test_mla_counts_by_hand():
    m = model_from_hf_config(TINY_MLA, id="tiny-mla")
    assert m.mla and m.moe and (m.moe_layers, m.hd) == (2, 24)
    attn = 64 * 32 + 32 * 4 * 24 + 64 * (16 + 8) + 16 * 4 * (16 + 16) + 4 * 16 * 64  # q_a, q_b, kv_a, kv_b, o = 12,800
    other = 2 * 64 + 32 + 16  # two RMSNorms + the q and kv latent norms = 176
    expert = 3 * 64 * 16  # 3,072
    moe_mlp = 64 * 4 + 4 + 4 * expert + expert  # router + its bias + 4 routed + 1 shared = 15,620
    total = 2 * 1000 * 64 + 3 * (attn + other) + 3 * 64 * 128 + 2 * moe_mlp + 64
    assert total == 222_808 and m.params == total  # the MTP layer (num_nextn_predict_layers) is not counted
    assert m.active_params == total - 2 * 2 * expert == 210_520
    assert m.matmul_params == 3 * attn + 3 * 64 * 128 + 2 * (64 * 4 + 2 * expert + expert) + 64_000 == 145_920
    assert m.kv_bytes_per_token() == 3 * (16 + 8) * 2 == 144  # layers · (kv_lora_rank + qk_rope_head_dim) · bf16
    assert m.pair_flops == 2 * 3 * 4 * (24 + 16) == 960  # QK^T over 24 dims + AV over 16, per head and layer
    assert m.replica_kv_bytes_per_token(4) == 4 * 144  # the latent is whole on every GPU of a replica
    assert param_tensors(m) == 3 * (7 + 3 + 2) + 2 * (1 + 1 + 3 * 4) + 3  # the MoE layers' MLPs: router, bias, experts


def test_touched_experts():
    m = model_from_hf_config(TINY_MOE)
    assert m.touched_experts(1) == pytest.approx(2.0)  # one token: its top-k
    assert m.touched_experts(3) == pytest.approx(8 * (1 - 0.75 ** 3))  # E·(1 − (1 − k/E)^b)
    assert m.touched_experts(10_000) == pytest.approx(8.0)  # a large batch: all of them
    assert m.weight_bytes_read(10_000) == pytest.approx(m.weight_bytes())
    dense = get_model("qwen2.5-7b")
    assert dense.weight_bytes_read(1) == dense.weight_bytes() and dense.touched_experts(5) == 0.0


def test_decode_reads_only_touched_experts():
    m = get_model("qwen3-30b-a3b")
    dc = DecodeCost(m, H100)
    one, many = dc.iteration(1, 1000.0), dc.iteration(256, 256_000.0)
    read_one = m.weight_bytes_read(1) + 1001 * m.kv_bytes_per_token()
    assert one == pytest.approx(H100.params.decode.overhead_s + read_one / (H100.gpu.mem_bw * H100.params.decode.eff_memory))
    assert m.weight_bytes_read(1) < m.weight_bytes() / 5 and many > 3 * one
    # the closed-form span agrees with iteration by iteration
    assert dc.span(8, 500.0, 10) == pytest.approx(sum(dc.iteration(8, 500.0 + 8 * i) for i in range(10)))


@pytest.mark.parametrize("mid, total, active", [
    ("qwen3-30b-a3b", 30.5e9, 3.3e9), ("qwen3-235b-a22b", 235e9, 22e9), ("deepseek-v3", 671e9, 37e9),
    ("llama-2-7b", 6.74e9, 6.74e9), ("llama-2-13b", 13.0e9, 13.0e9), ("llama-2-70b", 69.0e9, 69.0e9),
    ("qwen2.5-math-7b", 7.62e9, 7.62e9),
])
def test_table_matches_published_totals(mid, total, active):
    m = get_model(mid)
    assert m.params == pytest.approx(total, rel=0.02)
    assert m.active_params == pytest.approx(active, rel=0.03)


@pytest.mark.parametrize("mid", sorted(p.name for p in FIXTURES.iterdir()))
def test_fixture_configs_read_to_the_table(mid):
    read = get_model(str(FIXTURES / mid / "config.json"))
    assert read.id == mid
    assert dataclasses.replace(read, name=MODELS[mid].name) == MODELS[mid]
    assert get_model(str(FIXTURES / mid)) == read  # the directory holding it


def test_bad_configs_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"no such file"):
        get_model(str(tmp_path / "nowhere" / "config.json"))
    bad = dict(TINY_MOE)
    del bad["moe_intermediate_size"]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError) as e:
        get_model(str(tmp_path / "m"))
    msg = str(e.value)
    assert "moe_intermediate_size" in msg and str(tmp_path / "m" / "config.json") in msg and "\n" not in msg
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="not readable JSON"):
        get_model(str(tmp_path / "broken.json"))


def test_unknown_model_type_with_standard_keys():
    cfg = {"model_type": "somebody_new", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100}
    m = model_from_hf_config(cfg)
    assert not m.moe and m.params == 2 * 100 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 128 + 2 * 64) + 64


def test_expert_parallel_changes_decode_and_training():
    m = get_model("qwen3-30b-a3b")
    tp_sliced, ep = DecodeCost(m, H100, tp=4), DecodeCost(m, H100, tp=4, expert_parallel=True)
    assert ep.comm(64) != tp_sliced.comm(64) and ep.iteration(64, 64_000.0) != tp_sliced.iteration(64, 64_000.0)
    dense = get_model("qwen2.5-7b")
    assert DecodeCost(dense, H100, 4, True).comm(64) == DecodeCost(dense, H100, 4).comm(64)
    seqs = [2000.0] * 64
    assert CostModel(H100, expert_parallel=8).train(m, 8, seqs, 1) != CostModel(H100).train(m, 8, seqs, 1)


def test_expert_parallel_shards_training_state_and_is_refused_for_dense():
    from oppo_sim.core.algorithms import Algorithm
    from oppo_sim.core.placement import colocated_placement
    from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
    from oppo_sim.pipeline.memory_plan import memory_report

    base = dict(actor="qwen3-30b-a3b", gpu="h100-sxm", placement=colocated_placement(8), batch=4,
                algorithm=Algorithm("grpo", n=4, reward="rule", kl=False))
    z2 = TrainMemoryConfig(zero_stage=2, recompute="full")
    m = get_model("qwen3-30b-a3b")
    train = {r.role: r for r in memory_report(SimConfig(**base), train=z2).pool("main").roles}["train"]
    sharded = memory_report(SimConfig(**base, expert_parallel=8), train=z2).pool("main")
    train_ep = {r.role: r for r in sharded.roles}["train"]
    # ZeRO-2 keeps whole bf16 weights on every rank; EP 8 keeps 1/8 of the routed experts' (gradients and
    # Adam are sharded 8 ways either way)
    assert train.weights == 2 * m.params
    assert train_ep.weights == pytest.approx(2 * (m.params - m.routed_expert_params) + 2 * m.routed_expert_params / 8)
    assert train_ep.grads + train_ep.optimizer == pytest.approx(train.grads + train.optimizer)
    with pytest.raises(ConfigError, match="'qwen2.5-7b' is dense"):
        SimConfig(expert_parallel=2)
    with pytest.raises(ConfigError, match="is dense"):
        SimConfig(engine=EngineConfig(enable_expert_parallel=True))
    with pytest.raises(ConfigError, match="must divide the 128 experts"):
        SimConfig(**{**base, "placement": colocated_placement(6)}, expert_parallel=6)


def _cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_actor_from_a_config_file(capsys, tmp_path):
    (tmp_path / "tiny-moe").mkdir()
    path = tmp_path / "tiny-moe" / "config.json"
    path.write_text(json.dumps(TINY_MOE))
    res = tmp_path / "r.json"
    code, out, err = _cli(capsys, "run", "--steps", "2", "--batch", "8", "--actor", str(path), "--reward", "rule",
                          "--algorithm", "grpo", "--n", "2", "--json", str(res))
    assert code == 0, err
    assert json.loads(res.read_text())["steps"] == 2
    code, _, err = _cli(capsys, "run", "--steps", "2", "--batch", "8", "--actor", str(path), "--reward", "rule",
                        "--algorithm", "grpo", "--n", "2", "--ep", "2", "--placement", "colocated")
    assert code == 0, err
    code, _, err = _cli(capsys, "run", "--steps", "2", "--batch", "8", "--ep", "2")
    assert code == 2 and "is dense" in err and err.count("\n") == 1
    code, _, err = _cli(capsys, "run", "--steps", "2", "--actor", str(tmp_path / "missing" / "config.json"))
    assert code == 2 and "no such file" in err and err.count("\n") == 1


def test_qwen_moe_expert_count_as_transformers5_saves_it(tmp_path):
    """transformers 5 writes a Qwen-MoE config's expert count as ``num_local_experts``: read the same model."""
    cfg = json.loads((FIXTURES / "qwen3-30b-a3b" / "config.json").read_text())
    cfg["num_local_experts"] = cfg.pop("num_experts")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    read = get_model(str(tmp_path / "config.json"))
    assert read.experts == MODELS["qwen3-30b-a3b"].experts and read.params == MODELS["qwen3-30b-a3b"].params
