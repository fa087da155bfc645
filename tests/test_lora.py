"""LoRA (``oppo_sim.hw.models.lora``): the adapters' size against hand-counted (and PEFT's printed) figures, what they
change in memory, training time, the gradient collectives and the weight sync, verl's reference-in-actor, and the
three readers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import colocated_placement
from oppo_sim.frameworks.nemo_rl import translate_nemo_rl
from oppo_sim.frameworks.openrlhf import translate_openrlhf
from oppo_sim.frameworks.verl import translate_verl
from oppo_sim.hw.costs.trainer_cost import pass_flops
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.hw.costs.weight_export import Payload
from oppo_sim.hw.memory.train_memory import TrainMemoryConfig
from oppo_sim.hw.models.lookup import get_model
from oppo_sim.hw.models.lora import LORA_MODULES, LoRA, parse_targets
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.memory_plan import memory_report
from oppo_sim.pipeline.topology import cost_models, weight_sync_legs

from framework_helpers import config_of, pairs

QWEN7 = get_model("qwen2.5-7b")  # h 3584, 28 layers, 28 heads of 128, 4 KV heads, MLP 18,944
PER_LAYER = (3584 + 3584) + 2 * (3584 + 512) + (3584 + 3584) + 3 * (3584 + 18944)  # q, k, v, o, gate, up, down


def test_adapters_of_a_dense_model_match_the_hand_count_and_peft():
    lora = LoRA(32)
    assert lora.params(QWEN7) == 32 * 28 * PER_LAYER == 80_740_352  # PEFT prints 40,370,176 at r=16
    assert lora.tensors(QWEN7) == 2 * 7 * 28
    assert LoRA(8, "q_proj,v_proj").params(QWEN7) == 8 * 28 * ((3584 + 3584) + (3584 + 512))
    assert lora.routed_params(QWEN7) == 0 and lora.token_params(QWEN7) == lora.params(QWEN7)
    assert lora.trainable_fraction(QWEN7) == pytest.approx(80_740_352 / QWEN7.params)


def test_adapters_of_a_moe_model_count_every_routed_expert_once_and_a_token_its_top_k():
    m = get_model("qwen3-30b-a3b")
    lora = LoRA(16)
    routed = 16 * m.moe_layers * m.experts * 3 * (m.hidden + m.moe_intermediate)
    assert lora.routed_params(m) == routed
    attn = 16 * m.layers * ((m.hidden + m.attn_width) * 2 + (m.hidden + m.kv_width) * 2)
    assert lora.params(m) == attn + routed  # no dense or shared MLP
    assert lora.token_params(m) == pytest.approx(attn + routed * m.experts_per_token / m.experts)


def test_target_names_and_bad_input():
    assert parse_targets("all-linear") == parse_targets("all_linear") == LORA_MODULES
    assert parse_targets(["linear_qkv", "linear_fc2"]) == ("q_proj", "k_proj", "v_proj", "down_proj")
    assert parse_targets("model.layers.0.self_attn.q_proj v_proj") == ("q_proj", "v_proj")
    with pytest.raises(ConfigError, match="'lm_head'"):
        parse_targets("q_proj,lm_head")
    for bad in (dict(rank=0), dict(rank=8, sync="lazy"), dict(rank=8, targets="")):
        with pytest.raises(ConfigError):
            LoRA(**bad)


def _cfg(lora: LoRA | None, **kw) -> SimConfig:
    base = dict(batch=16, steps=1, gpu="h100-sxm", actor="qwen2.5-7b", placement=colocated_placement(8),
                algorithm=Algorithm("grpo", n=4, reward="rule", kl=True), max_response=2048,
                train_memory=TrainMemoryConfig(zero_stage=3, recompute="full"), trainer=TrainerLayout(lora=lora))
    return SimConfig(**{**base, **kw})


def _role(cfg: SimConfig, name: str):
    return next(r for p in memory_report(cfg).pools for r in p.roles if r.role == name and r.weights + r.grads > 0)


def test_memory_keeps_the_frozen_weights_and_the_adapters_state_only():
    full, lora = _role(_cfg(None), "train"), _role(_cfg(LoRA(32)), "train")
    frac = LoRA(32).trainable_fraction(QWEN7)
    assert lora.weights == full.weights
    assert _role(_cfg(LoRA(32, base_dtype="fp32")), "train").weights == 2 * full.weights  # verl FSDP's fp32 frozen weights
    assert lora.grads == pytest.approx(full.grads * frac) and lora.optimizer == pytest.approx(full.optimizer * frac)
    assert lora.activations == full.activations
    assert "LoRA r32" in lora.note


def test_a_training_pass_drops_the_frozen_weight_gradients_and_adds_the_adapters():
    n = np.array([1000.0, 3000.0])
    lora = LoRA(32)
    full = pass_flops(TrainerLayout(), QWEN7, n)
    with_lora = pass_flops(TrainerLayout(lora=lora), QWEN7, n)
    lin = QWEN7.flop_coeffs()[0]
    np.testing.assert_allclose(full - with_lora, (lin - 6 * lora.token_params(QWEN7)) * n)
    cost, full_cost = (cost_models(c, memory_report(c))["main"] for c in (_cfg(lora), _cfg(None)))
    seqs = np.full(64, 2500.0)
    assert cost.train(QWEN7, 8, seqs, 2) < full_cost.train(QWEN7, 8, seqs, 2)
    assert cost.train_flops(QWEN7, seqs) == pytest.approx(float(np.sum(pass_flops(cost.layout, QWEN7, seqs))))


def test_gradient_collectives_move_the_adapters_and_zero3_still_gathers_the_weights():
    cfg = _cfg(None)
    cost = cost_models(cfg, memory_report(cfg))["main"]
    w = float(QWEN7.weight_bytes())
    both, grads_small = cost.gradient_sync(w, 8), cost.gradient_sync(w, 8, 0.01 * w)
    assert grads_small < both
    assert grads_small > cost.param_gather(w, 8)  # the ZeRO-3 all-gather of the frozen weights stays


def test_an_adapter_sync_moves_the_adapters_and_a_merged_one_the_weights():
    merged, adapter = _cfg(LoRA(32, sync="merged")), _cfg(LoRA(32, sync="adapter"), placement=colocated_placement(8))
    legs = {name: weight_sync_legs(c, cost_models(c, memory_report(c))) for name, c in (("m", merged), ("a", adapter))}
    assert sum(legs["a"].values()) < sum(legs["m"].values())
    p = Payload.adapters(QWEN7, LoRA(32))
    assert p.nbytes == 2 * 80_740_352 and p.tensors == 392 and Payload.weights(QWEN7).nbytes == QWEN7.weight_bytes()


def test_reference_in_actor_holds_no_weights_and_needs_lora():
    cfg = _cfg(LoRA(32), reference_in_actor=True)
    ref = [r for p in memory_report(cfg).pools for r in p.roles if r.role == "reference"]
    assert ref and all(r.weights == 0 for r in ref) and "ref_in_actor" in ref[0].note
    with pytest.raises(ConfigError, match="needs --lora-rank"):
        _cfg(None, reference_in_actor=True)


VERL = ("data.train_batch_size=32 actor_rollout_ref.rollout.n=4 actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct "
        "algorithm.adv_estimator=grpo trainer.n_gpus_per_node=8 actor_rollout_ref.actor.ppo_mini_batch_size=16 ")


def test_verl_lora_is_read_with_its_adapter_sync_and_reference_in_actor():
    got = pairs(translate_verl(VERL + "actor_rollout_ref.model.lora_rank=32 actor_rollout_ref.actor.use_kl_loss=True "
                                      "actor_rollout_ref.model.target_modules=[q_proj,v_proj]").args)
    assert got["--lora-rank"] == "32" and got["--lora-targets"] == "q_proj,v_proj" and got["--lora-sync"] == "adapter"
    assert "--reference-in-actor" in got
    no_kl = pairs(translate_verl(VERL + "actor_rollout_ref.model.lora_rank=8").args)
    assert "--reference-in-actor" not in no_kl and no_kl["--lora-targets"] == "all-linear"
    assert got["--lora-base-dtype"] == "fp32"  # verl's FSDP actor loads in fp32 unless model_dtype says otherwise
    bf16 = pairs(translate_verl(VERL + "actor_rollout_ref.model.lora_rank=8 "
                                       "actor_rollout_ref.actor.fsdp_config.model_dtype=bfloat16").args)
    assert bf16["--lora-base-dtype"] == "bf16"
    merged = pairs(translate_verl(VERL + "actor_rollout_ref.model.lora.rank=16 actor_rollout_ref.model.lora.merge=True").args)
    assert merged["--lora-rank"] == "16" and merged["--lora-sync"] == "merged"
    assert "--lora-rank" not in pairs(translate_verl(VERL).args)


def test_a_verl_lora_job_runs_end_to_end_where_full_tuning_does_not_fit():
    job = (VERL + "actor_rollout_ref.model.lora_rank=32 actor_rollout_ref.actor.use_kl_loss=True "
           "trainer.n_gpus_per_node=1 actor_rollout_ref.rollout.gpu_memory_utilization=0.3 data.max_response_length=1024 "
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1")
    cfg = config_of("--from-verl", job, "--gpu", "h100-sxm", "--policy", "baseline")
    assert cfg.trainer.lora == LoRA(32, sync="adapter", base_dtype="fp32") and cfg.reference_in_actor  # verl's FSDP actor
    from oppo_sim.pipeline.fit_check import check_fits

    check_fits(cfg)  # fits on one H100
    with pytest.raises(ConfigError, match="does not fit"):
        check_fits(replace(cfg, trainer=TrainerLayout(), reference_in_actor=False))


@pytest.mark.parametrize("args", ["--lora_rank 64 --target_modules q_proj v_proj",
                                  "--ds.lora.rank 64 --ds.lora.target_modules q_proj v_proj"])
def test_openrlhf_lora_in_either_flag_style(args):
    base = "--pretrain Qwen/Qwen2.5-7B-Instruct --actor_num_gpus_per_node 8 --vllm_num_engines 4 --colocate_all_models "
    if args.startswith("--ds."):
        base = "--actor.model_name_or_path Qwen/Qwen2.5-7B-Instruct --actor.num_gpus_per_node 8 --vllm.num_engines 4 --train.colocate_all "
    got = pairs(translate_openrlhf(base + args).args)
    assert got["--lora-rank"] == "64" and got["--lora-targets"] == "q_proj,v_proj" and got["--lora-sync"] == "merged"


def test_nemo_rl_lora_of_either_trainer(tmp_path):
    from pathlib import Path

    base = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl" / "grpo_math_1B.yaml"
    dt = tmp_path / "dt.yaml"
    dt.write_text(f"defaults: {base}\npolicy:\n  dtensor_cfg:\n    lora_cfg:\n      enabled: true\n      dim: 128\n")
    got = pairs(translate_nemo_rl([str(dt)]).args)
    assert got["--lora-rank"] == "128" and got["--lora-targets"] == "all-linear" and got["--lora-sync"] == "merged"
    mg = tmp_path / "mg.yaml"
    mg.write_text(f"defaults: {base}\npolicy:\n  megatron_cfg:\n    enabled: true\n    peft:\n      enabled: true\n"
                  "      dim: 16\n      target_modules: [linear_qkv, linear_proj]\n  dtensor_cfg:\n    enabled: false\n")
    got = pairs(translate_nemo_rl([str(mg)]).args)
    assert got["--lora-rank"] == "16" and got["--lora-targets"] == "q_proj,k_proj,v_proj,o_proj"


def test_a_simulated_run_says_its_lora_rank():
    from oppo_sim.pipeline.simulate import simulate

    cfg = _cfg(LoRA(32, sync="adapter"), steps=1, batch=8, max_response=512)
    assert simulate("oppo-longtail-default", "baseline", cfg).summary["lora_rank"] == 32
    assert simulate("oppo-longtail-default", "baseline", replace(cfg, trainer=TrainerLayout())).summary["lora_rank"] == 0


def test_nemo_rl_exclude_modules_by_name_path_or_megatron_name(tmp_path):
    from pathlib import Path

    base = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl" / "grpo_math_1B.yaml"

    def targets(exclude: str):
        r = tmp_path / "r.yaml"
        r.write_text(f"defaults: {base}\npolicy:\n  dtensor_cfg:\n    lora_cfg:\n      enabled: true\n      dim: 8\n"
                     f"      match_all_linear: false\n      exclude_modules: {exclude}\n")
        return pairs(translate_nemo_rl([str(r)]).args)["--lora-targets"]

    assert targets("['*out_proj*']") == "all-linear"  # a Mamba mixer's projection: none of these
    assert targets("[linear_fc1]") == "q_proj,k_proj,v_proj,o_proj,down_proj"
    assert targets("['*.mlp.*']") == "q_proj,k_proj,v_proj,o_proj"
    with pytest.raises(ConfigError, match="excludes every adapted linear"):
        targets("['*']")


def test_lora_shortens_a_megatron_pass_and_splits_its_state_between_dense_and_experts():
    cfg = _cfg(LoRA(32), trainer=TrainerLayout("megatron", tp=2, lora=LoRA(32)))
    full = replace(cfg, trainer=TrainerLayout("megatron", tp=2))
    seqs = np.full(64, 2500.0)
    lora_s, full_s = (cost_models(c, memory_report(c))["main"].train(QWEN7, 8, seqs, 2) for c in (cfg, full))
    assert lora_s < full_s
    m = get_model("qwen3-30b-a3b")
    dense, routed = LoRA(8, "q_proj,v_proj").trainable_split(m)
    assert routed == 0.0 and dense == pytest.approx(LoRA(8, "q_proj,v_proj").params(m) / (m.params - m.routed_expert_params))
