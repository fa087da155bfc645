"""The trainer layout's contract: backend names, megatron-only parallelism, the devices it must divide, the flags."""

from dataclasses import replace

import pytest

from oppo_sim.cli import build_parser
from oppo_sim.cli_setup import sim_config
from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.pipeline.config import SimConfig


def test_defaults_are_fsdp_data_parallel():
    t = TrainerLayout()
    assert t.backend == "fsdp" and t.model_parallel == 1 and t.data_parallel(8) == 8 and t.label() == "fsdp"


def test_megatron_layout_counts_ranks():
    t = TrainerLayout("megatron", tp=4, pp=2, vpp=2, cp=2)
    assert t.model_parallel == 16 and t.data_parallel(64) == 4
    assert t.label() == "megatron tp4 pp2 vpp2 cp2" and t.label(ep=8) == "megatron tp4 pp2 vpp2 cp2 ep8 etp4"
    assert t.state(3, ep=8) == "megatron tp4 pp2 vpp2 cp2 ep8 etp4" and TrainerLayout().state(3, ep=8) == "ZeRO-3"
    one = TrainerLayout("megatron", tp=4, etp=1)  # experts whole on a rank, as RL MoE recipes set it: not named
    assert one.expert_tp == 1 and one.label(ep=8) == "megatron tp4 pp1 ep8"


def test_expert_tensor_parallelism_is_megatrons_and_divides_a_stage_with_ep():
    assert TrainerLayout("megatron", tp=2).expert_tp == 2  # unset: Megatron-Core's default, tp
    assert TrainerLayout("megatron", tp=2, etp=1).expert_tp == 1 and TrainerLayout().expert_tp == 1
    with pytest.raises(ConfigError, match="--etp 2 is Megatron's expert_tensor_parallel_size"):
        TrainerLayout(etp=2)
    with pytest.raises(ConfigError, match="trainer etp must be an integer >= 1"):
        TrainerLayout("megatron", etp=0)
    TrainerLayout("megatron", tp=2, etp=2).check_experts(16, 8)  # 8 x 2 ranks: one stage of 16
    with pytest.raises(ConfigError, match=r"--ep 8\) x expert tensor parallelism 4 must divide the 16 ranks"):
        TrainerLayout("megatron", tp=4, etp=4).check_experts(16, 8)


@pytest.mark.parametrize("kw, words", [
    (dict(backend="deepspeed"), "train backend"),
    (dict(tp=2), "need --train-backend megatron"),
    (dict(backend="megatron", vpp=2), "need pipeline parallelism"),
    (dict(backend="megatron", tp=0), "tp must be an integer"),
    (dict(backend="megatron", distributed_optimizer=1), "distributed_optimizer must be a bool"),
])
def test_bad_layouts_refused_in_one_line(kw, words):
    with pytest.raises(ConfigError, match=words):
        TrainerLayout(**kw)


def test_layout_must_divide_the_training_pool():
    with pytest.raises(ConfigError, match="must divide its 7 devices"):
        SimConfig(trainer=TrainerLayout("megatron", tp=2))  # the paper placement trains on 7


def test_flags_reach_the_config():
    p = build_parser()
    a = p.parse_args(["run", "--placement", "colocated", "--devices", "8", "--train-backend", "megatron",
                      "--train-tp", "2", "--pp", "2", "--vpp", "2", "--no-distributed-optimizer"])
    t = sim_config(a).trainer
    assert (t.backend, t.tp, t.pp, t.vpp, t.cp, t.distributed_optimizer) == ("megatron", 2, 2, 2, 1, False)


def test_run_names_the_megatron_layout_not_a_zero_stage(capsys):
    from oppo_sim.cli import main

    assert main(["run", "--placement", "colocated", "--devices", "8", "--train-backend", "megatron", "--train-tp", "2",
                 "--pp", "2", "--steps", "1", "--batch", "8", "--max-response", "256"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("memory headroom"))
    assert "trainer megatron tp2 pp2," in line and "ZeRO" not in line


@pytest.mark.parametrize("overrides, etp", [
    ("", "2"),  # verl leaves expert_tensor_parallel_size null: Megatron-Core's default, the actor's TP
    ("actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=1", "1"),
])
def test_verl_reads_expert_tensor_parallelism_and_its_null(overrides, etp):
    from oppo_sim.frameworks.verl import translate_verl
    from framework_helpers import pairs
    m = "actor_rollout_ref.actor.megatron."
    got = pairs(translate_verl(f"actor_rollout_ref.actor.strategy=megatron {m}tensor_model_parallel_size=2 "
                               f"{m}expert_model_parallel_size=4 actor_rollout_ref.model.path=Qwen/Qwen3-30B-A3B "
                               f"{overrides}").args)
    assert got["--etp"] == etp and got["--ep"] == "4"


def test_an_uneven_pipeline_split_is_paced_by_its_largest_stage():
    even = TrainerLayout("megatron", pp=16)
    uneven = TrainerLayout("megatron", pp=16, first_stage_layers=3, last_stage_layers=2)  # DeepSeek-V3's 61 layers
    assert even.stage_layers(61) == pytest.approx(61 / 16) and uneven.stage_layers(61) == 4.0  # 3, 14 x 4, 2
    assert TrainerLayout("megatron", pp=12, last_stage_layers=6).stage_layers(61) == 6.0  # 11 x 5, then 6
    uneven.check_stages(61)
    with pytest.raises(ConfigError, match="61 layers less 3 on the first and 3 on the last stage leave 55 for 14"):
        TrainerLayout("megatron", pp=16, first_stage_layers=3, last_stage_layers=3).check_stages(61)
    with pytest.raises(ConfigError, match="needs --pp > 1"):
        TrainerLayout("megatron", first_stage_layers=3)


def test_the_largest_stage_sets_a_megatron_steps_compute_and_a_ranks_weights():
    from oppo_sim.hw.costs.costmodel import CostModel
    from oppo_sim.hw.devices.hardware import get_hardware
    from oppo_sim.hw.memory.trainer_memory import megatron_state_bytes
    from oppo_sim.hw.models.lookup import get_model
    import numpy as np
    m = get_model("deepseek-v3")
    even, uneven = TrainerLayout("megatron", pp=16), TrainerLayout("megatron", pp=16, first_stage_layers=3, last_stage_layers=2)
    seqs = np.full(64, 2048.0)
    t = [CostModel(get_hardware("h100-sxm"), layout=lay, expert_parallel=16).train(m, 256, seqs, 1) for lay in (even, uneven)]
    # Since 2026-11-27 the output layer sits on the last stage (it was spread over all of them): an even split's last
    # rank runs 61 / 16 layers and the 0.93B-parameter head (about 1.6 MoE layers), the recipe's 3, 14 x 4, 2 split at
    # most 4 layers a rank, so it is the faster one, which is why DeepSeek-V3's recipes set it.
    assert t[1] < t[0]
    w = [megatron_state_bytes(m, lay, 16, 256).weights for lay in (even, uneven)]
    assert w[1] > w[0]
    from oppo_sim.core.placement import colocated_placement
    with pytest.raises(ConfigError, match="must divide evenly"):  # checked against the actor's layers
        SimConfig(actor="deepseek-v3", reward="qwen2.5-0.5b", gpu="h100-sxm", placement=colocated_placement(16),
                  trainer=TrainerLayout("megatron", pp=16, first_stage_layers=3, last_stage_layers=3))


def test_the_readers_and_exports_carry_an_uneven_pipeline_split():
    from oppo_sim.frameworks.export import export
    from oppo_sim.frameworks.verl import translate_verl
    from framework_helpers import pairs
    from pathlib import Path
    script = Path(__file__).parent / "fixtures" / "frameworks" / "verl" / "grpo_deepseek671b_math_megatron_96gb.sh"
    got = pairs(translate_verl(str(script)).args)
    assert got["--last-stage-layers"] == "6" and "--first-stage-layers" not in got  # the script's LAST_LAYER
    cfg = SimConfig(actor="qwen3-30b-a3b", reward="qwen2.5-0.5b", gpu="h100-sxm", expert_parallel=2,
                    placement=__import__("oppo_sim.core.placement", fromlist=["x"]).colocated_placement(8),
                    trainer=TrainerLayout("megatron", pp=4, first_stage_layers=11, last_stage_layers=11, etp=1))
    text = export(cfg, "verl")
    back = pairs(translate_verl(" ".join(l for l in text.splitlines() if l and not l.startswith("#"))).args)
    assert back["--first-stage-layers"] == "11" and back["--last-stage-layers"] == "11" and back["--etp"] == "1"
    grpo = replace(cfg, algorithm=replace(cfg.algorithm, name="grpo", n=4, reward="rule"))  # NeMo RL runs GRPO
    assert "num_layers_in_first_pipeline_stage: 11" in export(grpo, "nemo-rl")


def test_the_output_layer_sits_on_the_last_pipeline_stage():
    """Megatron-Core builds the output layer and the loss on the last pipeline rank: the busiest rank's FLOPs are the
    larger of a decoder share and the last rank's share plus the whole head (by hand: 80 body + 20 head FLOPs)."""
    assert TrainerLayout("megatron").stage_flops(36, 100.0, 20.0) == 100.0  # no pipeline: the whole pass
    assert TrainerLayout("megatron", pp=4).stage_flops(36, 100.0, 20.0) == pytest.approx(80 / 4 + 20)
    uneven = TrainerLayout("megatron", pp=4, first_stage_layers=10, last_stage_layers=6)  # 10, 10, 10, 6
    assert uneven.rank_layers(36) == (10.0, 10.0, 6.0)
    assert uneven.stage_flops(36, 100.0, 20.0) == pytest.approx(80 * 6 / 36 + 20)  # the short last rank still paces
    assert uneven.stage_flops(36, 100.0, 1.0) == pytest.approx(99 * 10 / 36)  # a small head: a 10-layer rank paces


def test_megatrons_account_for_switches_take_a_layer_off_the_ends():
    both = TrainerLayout("megatron", pp=4, embedding_in_split=True, loss_in_split=True)
    assert both.rank_layers(30) == (7.0, 8.0, 7.0) and both.stage_layers(30) == 8.0  # (30 + 2) / 4 = 8, one less at each end
    assert both.label() == "megatron tp1 pp4 embedding-in-split loss-in-split"
    assert TrainerLayout("megatron", pp=16, first_stage_layers=3, last_stage_layers=2).label(16) == \
        "megatron tp1 pp16 ep16 first3 last2"
    assert both.stage_flops(30, 100.0, 20.0) == pytest.approx(max(80 * 8 / 30, 80 * 7 / 30 + 20))
    assert TrainerLayout("megatron", pp=2, loss_in_split=True).rank_layers(31) == (16.0, 0.0, 15.0)
    both.check_stages(30)
    with pytest.raises(ConfigError, match="31 layers and the 2 counted .* do not divide evenly over pp 4"):
        both.check_stages(31)
    with pytest.raises(ConfigError, match="needs --pp > 1"):
        TrainerLayout("megatron", loss_in_split=True)
    with pytest.raises(ConfigError, match="cannot be set together"):
        TrainerLayout("megatron", pp=4, loss_in_split=True, last_stage_layers=6)


def test_a_layer_off_the_last_rank_shortens_a_large_vocabulary_models_step():
    """Qwen2.5-7B's output layer (152k x 3,584) costs about two decoder layers: with the loss counted in the split
    the last of three ranks holds 9 layers and the head (28 + 2 = 30 over 3, one less at each end), not 9.3 and it."""
    import numpy as np
    from oppo_sim.hw.costs.costmodel import CostModel
    from oppo_sim.hw.devices.hardware import get_hardware
    from oppo_sim.hw.models.lookup import get_model
    m, seqs = get_model("qwen2.5-7b"), np.full(48, 4096.0)
    plain = TrainerLayout("megatron", pp=3)
    counted = replace(plain, embedding_in_split=True, loss_in_split=True)
    t = [CostModel(get_hardware("h100-sxm"), layout=lay).train(m, 6, seqs, 1) for lay in (plain, counted)]
    assert t[1] < t[0]
    no_pp = CostModel(get_hardware("h100-sxm"), layout=TrainerLayout("megatron")).train(m, 6, seqs, 1)
    assert t[0] > no_pp  # a third of the layers each, but the last rank also runs the whole output layer


def test_the_account_for_switches_are_read_exported_and_kept_by_the_search():
    from oppo_sim.explore.trainer_space import TrainerOptions, trainer_layouts
    from oppo_sim.frameworks.export import export
    from oppo_sim.frameworks.verl import translate_verl
    from oppo_sim.core.placement import colocated_placement
    from framework_helpers import pairs
    cfg = SimConfig(actor="qwen2.5-7b", reward="qwen2.5-0.5b", gpu="h100-sxm", placement=colocated_placement(8),
                    trainer=TrainerLayout("megatron", pp=2, embedding_in_split=True, loss_in_split=True))
    text = export(cfg, "verl")
    assert "override_transformer_config.account_for_loss_in_pipeline_split=True" in text
    back = pairs(translate_verl(" ".join(l for l in text.splitlines() if l and not l.startswith("#"))).args)
    assert "--account-for-embedding-in-pipeline-split" in back and "--account-for-loss-in-pipeline-split" in back
    grpo = replace(cfg, algorithm=replace(cfg.algorithm, name="grpo", n=4, reward="rule"))
    assert "no key for it" in export(grpo, "nemo-rl")  # NeMo RL's megatron_cfg does not pass them on
    o = TrainerOptions(backends=("megatron",), trainer=cfg.trainer, tps=(1,), pps=(1, 2, 4), layers=28)
    got = {t.pp: t for t, _ in trainer_layouts(o, 8, 8)}
    assert set(got) == {1, 2}  # 28 + 2 = 30 does not split over 4 ranks
    assert not got[1].loss_in_split and got[2].loss_in_split and got[2].embedding_in_split
