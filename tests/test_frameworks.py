"""Speaking the frameworks' language: verl configs and OpenRLHF command lines read as oppo-sim options
(``--from-verl``, ``--from-openrlhf``), and a plan's configuration written back (``plan --export``).

The fixtures (tests/fixtures/frameworks/) are real configurations of those projects, written out from their
repositories' examples and documented defaults. Keys that map to options other branches add (``--max-prompt``,
``--truncate-prompt``: limits; ``--sleep-level``: coloc; ``--actor PATH/config.json``: models) are asserted on
the translated argument list, which does not depend on the parser having them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oppo_sim.cli import build_parser, main, subcommand_parsers
from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.export import Chosen, export
from oppo_sim.frameworks.openrlhf import translate_openrlhf
from oppo_sim.frameworks.verl import translate_verl

from framework_helpers import config_of, pairs

FIX = Path(__file__).parent / "fixtures" / "frameworks"
VERL_SH = str(FIX / "verl_grpo_run_qwen2-7b.sh")
VERL_YAML = str(FIX / "verl_ppo_trainer_grpo.yaml")
ORL_REINFORCE = str(FIX / "openrlhf_reinforce_baseline_hybrid_engine.sh")
ORL_PPO = str(FIX / "openrlhf_ppo_llama_ray.sh")




def test_verl_launch_script_keys_become_options_with_verl_units():
    t = translate_verl(VERL_SH)
    got = pairs(t.args)
    expected = {"--batch": "1024", "--n": "5", "--max-response": "1024", "--max-prompt": "512", "--tp": "2",
                "--gpu-memory-utilization": "0.6", "--minibatches": "4", "--ppo-epochs": "1", "--algorithm": "grpo",
                "--reward": "rule", "--placement": "colocated", "--devices": "8", "--nodes": "1", "--actor": "qwen2.5-7b",
                "--recompute": "full", "--sp": "1", "--colocate": "sleep", "--sleep-level": "1", "--zero": "3"}
    assert {k: got.get(k) for k in expected} == expected
    assert "--no-offload-train-state" in got and "--offload-train-state" not in got  # actor offload False
    assert "--no-reference" not in got  # use_kl_loss=True keeps the reference
    assert "--truncate-prompt" not in got  # filter_overlong_prompts=True: oppo-sim's filter
    defaults = {u.key for u in t.used if u.default}  # not in the script: verl's documented defaults
    assert "actor_rollout_ref.actor.ppo_epochs" in defaults and "data.train_batch_size" not in defaults


def test_verl_unknown_keys_and_stray_words_are_listed_and_echoed():
    t = translate_verl(VERL_SH)
    ignored = {i.key for i in t.ignored}
    assert {"actor_rollout_ref.actor.optim.lr", "trainer.logger", "actor_rollout_ref.actor.kl_loss_type",
            "data.train_files"} <= ignored
    assert any(k.startswith("python3 -m verl.trainer.main_ppo") for k in ignored)
    echo = t.echo()
    for u in t.used:
        assert u.key in echo
    assert "actor_rollout_ref.actor.ppo_mini_batch_size" in echo and "-> --minibatches 4" in echo
    assert "ignored (" in echo and "actor_rollout_ref.actor.optim.lr = 1e-6" in echo


def test_verl_yaml_file_with_interpolations_and_later_overrides():
    t = translate_verl([VERL_YAML, "data.train_batch_size=64 +actor_rollout_ref.rollout.n=16"])
    got = pairs(t.args)
    assert got["--batch"] == "64" and got["--n"] == "16"  # the later source wins
    assert got["--minibatches"] == "1"  # 64 prompts / mini-batches of 256 -> one (smaller) mini-batch
    assert got["--devices"] == "16" and got["--nodes"] == "2" and got["--steps"] == "30"
    ignored = {i.key: i.value for i in t.ignored}
    assert ignored["critic.ppo_epochs"] == 1  # ${actor_rollout_ref.actor.ppo_epochs} resolved
    assert not any(u.default for u in t.used if u.key.startswith("data."))


@pytest.mark.parametrize("overrides, option, value", [
    ("data.train_batch_size=512 actor_rollout_ref.actor.ppo_mini_batch_size=128", "--minibatches", "4"),
    ("algorithm.adv_estimator=gae", "--algorithm", "ppo"),
    ("algorithm.adv_estimator=grpo algorithm.filter_groups.enable=True actor_rollout_ref.rollout.n=4", "--algorithm", "dapo"),
    ("reward_model.enable=True reward_model.model.path=/nowhere/Qwen2.5-7B-RM", "--reward", "qwen2.5-7b"),
    ("actor_rollout_ref.model.enable_gradient_checkpointing=False", "--recompute", "none"),
    ("actor_rollout_ref.rollout.free_cache_engine=False", "--colocate", "resident"),
    ("data.filter_overlong_prompts=False data.truncation=left", "--truncate-prompt", None),
    ("actor_rollout_ref.actor.use_kl_loss=False algorithm.use_kl_in_reward=False", "--no-reference", None),
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=4", "--sp", "4"),
    ("actor_rollout_ref.actor.strategy=fsdp2", "--zero", "3"),
    ("actor_rollout_ref.actor.fsdp_config.param_offload=True", "--offload-train-state", None),
    ("actor_rollout_ref.actor.fsdp_config.optimizer_offload=True", "--offload-train-state", None),
    ("data.train_batch_size=8", "--no-offload-train-state", None),  # verl's default: offload off
    ("trainer.balance_batch=False", "--no-balance-batch", None),
    ("data.train_batch_size=8", "--balance-batch", None),  # verl's default: balanced
])
def test_verl_key_semantics(overrides, option, value):
    got = pairs(translate_verl(overrides).args)
    assert option in got and got[option] == value


def test_verl_megatron_strategy_is_the_megatron_trainer():
    got = pairs(translate_verl("actor_rollout_ref.actor.strategy=megatron").args)
    assert "--zero" not in got and got["--train-backend"] == "megatron" and got["--train-tp"] == "1"
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.strategy: expected fsdp, fsdp2 or megatron"):
        translate_verl("actor_rollout_ref.actor.strategy=ddp")


def test_verl_model_path_config_json_is_passed_as_a_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    got = pairs(translate_verl(f"actor_rollout_ref.model.path={tmp_path}").args)
    assert got["--actor"] == str(tmp_path / "config.json")  # get_model reads it (models branch)


def test_unknown_model_name_is_one_line_unless_actor_is_typed(capsys):
    with pytest.raises(ConfigError, match="NoSuchModel-8b.*--actor"):
        config_of("--from-openrlhf", "--pretrain org/NoSuchModel-8b --colocate_all_models", "--reward", "qwen2.5-7b")
    cfg = config_of("--from-openrlhf", ORL_PPO, "--actor", "llama-3.1-8b", "--reward", "llama-3.1-8b")
    assert cfg.models()["generate"].id == "llama-3.1-8b"
    assert main(["run", "--from-verl", "actor_rollout_ref.model.path=org/NoSuchModel-3B"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NoSuchModel-3B" in err[0]


def test_openrlhf_hybrid_engine_fixture():
    t = translate_openrlhf(ORL_REINFORCE)
    got = pairs(t.args)
    expected = {"--batch": "128", "--n": "8", "--minibatches": "1", "--ppo-epochs": "1", "--max-prompt": "10240",
                "--max-response": "64000", "--algorithm": "dapo", "--reward": "rule", "--actor": "qwen3-8b",
                "--zero": "3", "--recompute": "full", "--sp": "2", "--tp": "2", "--gpu-memory-utilization": "0.7",
                "--placement": "colocated", "--devices": "4", "--nodes": "1", "--colocate": "resident"}
    assert {k: got.get(k) for k in expected} == expected
    assert "--offload-train-state" in got  # --deepspeed_enable_sleep
    assert "--truncate-prompt" in got and "--no-reference" not in got  # init_kl_coef 1e-5 > 0: a reference
    ignored = {i.key for i in t.ignored}
    assert {"--actor_learning_rate", "--micro_train_batch_size", "--ref_num_nodes"} <= ignored
    # the dynamic batch: a GPU's token budgets x the ring-attention degree 2
    assert (got["--micro-batch-tokens"], got["--logprob-micro-batch-tokens"]) == ("32384", "65536")
    assert any(k.startswith("ray job submit") for k in ignored)


def test_openrlhf_separate_pools_become_a_split_placement():
    t = translate_openrlhf(ORL_PPO + "")
    got = pairs(t.args)
    # vLLM 2 x tp 2 = 4 generate; actor 2 (reference with it, critic with the reward model); reward 2 score
    assert got["--placement"] == "split 4+2+2" and got["--algorithm"] == "ppo" and got["--minibatches"] == "8"
    cfg = config_of("--from-openrlhf", ORL_PPO, "--actor", "llama-3.1-8b", "--reward", "llama-3.1-8b")
    assert [(p.name, p.devices) for p in cfg.placement.pools] == [("gen", 4), ("train", 2), ("score", 2)]
    assert cfg.engine.tp == 2 and cfg.train_memory.zero_stage == 3 and cfg.batch == 1024
    assert any("critic trains on the actor's pool" in n for n in t.notes)


def test_explicit_flags_win_over_translated_ones(capsys):
    cfg = config_of("--from-verl", VERL_SH, "--batch", "8", "--devices", "4", "--tp", "1", "--no-enable-chunked-prefill")
    assert (cfg.batch, cfg.placement.total_devices, cfg.engine.tp) == (8, 4, 1)  # typed
    assert cfg.algorithm.n == 5 and cfg.algorithm.name == "grpo" and cfg.ppo_epochs == 1  # translated
    assert cfg.engine.enable_chunked_prefill is False
    assert main(["run", "--from-verl", VERL_SH, "--batch", "4", "--steps", "1", "--max-response", "64",
                 "--actor", "qwen2.5-0.5b"]) == 0
    out = capsys.readouterr().out
    assert "data.train_batch_size" in out and "(overridden by --batch on the command line)" in out
    assert "algorithm grpo n=5" in out


@pytest.mark.parametrize("argv, msg", [
    (["--from-verl", "data.train_batch_size=many"], "data.train_batch_size: expected an integer"),
    (["--from-verl", "not-a-file-nor-overrides"], "no such file, and not key=value overrides"),
    (["--from-verl", "algorithm.adv_estimator=remax"], "algorithm.adv_estimator=remax"),
    (["--from-verl", "=5"], "has no key"),
    (["--from-openrlhf", "--colocate_all_models yes"], "on/off flag"),
    (["--from-openrlhf", "stray --n_samples_per_prompt 4"], "'stray' is not an option"),
    (["--from-openrlhf", "--train_batch_size 0"], "--train_batch_size must be >= 1"),
    (["--from-verl", "data.train_batch_size=8", "--from-openrlhf", "--n_samples_per_prompt 2"], "not both"),
])
def test_malformed_input_is_one_line(capsys, argv, msg):
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0]


@pytest.mark.parametrize("text", ["data: [unclosed\n", "- just\n- a list\n"])
def test_malformed_yaml_file_is_one_line(capsys, tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["run", "--from-verl", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.yaml" in err[0]


ROUND_TRIP = [  # (framework, oppo-sim arguments of the original run, what the plan chose)
    ("verl", ["--placement", "colocated", "--devices", "16", "--nodes", "2", "--algorithm", "grpo", "--n", "8",
              "--reward", "rule", "--tp", "2", "--batch", "64", "--minibatches", "4", "--sp", "2"], Chosen("oppo", 3, "full")),
    ("verl", ["--placement", "colocated", "--devices", "8", "--algorithm", "ppo", "--batch", "32", "--no-reference",
              "--gpu-memory-utilization", "0.7", "--colocate", "resident"], Chosen("baseline", None, "none")),
    ("openrlhf", ["--placement", "colocated", "--devices", "8", "--algorithm", "rloo", "--n", "4", "--reward", "rule",
                  "--tp", "4", "--batch", "16", "--minibatches", "2"], Chosen("oppo", 2, "full")),
    ("openrlhf", ["--placement", "split 4+3+1", "--algorithm", "grpo", "--n", "4", "--reward", "rule", "--tp", "2",
                  "--batch", "16"], Chosen("baseline", 3, "none")),
    ("openrlhf", ["--placement", "split 8+6+2", "--nodes", "2", "--algorithm", "ppo", "--reward", "qwen2.5-7b",
                  "--batch", "32", "--minibatches", "2"], Chosen("inter", 2, "full")),
    ("openrlhf", ["--placement", "gen-apart 4+4", "--algorithm", "dapo", "--n", "4", "--reward", "rule", "--batch", "16"],
     Chosen("async", 3, "full")),
    ("verl", ["--placement", "colocated", "--devices", "8", "--algorithm", "grpo", "--n", "4", "--reward", "rule",
              "--no-offload-train-state"], Chosen("baseline", 3, "full")),
    ("openrlhf", ["--placement", "colocated", "--devices", "8", "--algorithm", "grpo", "--n", "4", "--reward", "rule",
                  "--no-offload-train-state"], Chosen("baseline", 3, "full")),
]


def _fields(cfg) -> dict:
    p = cfg.placement
    return {"batch": cfg.batch, "n": cfg.algorithm.n, "algorithm": cfg.algorithm.name, "kl": cfg.algorithm.kl,
            "reward": cfg.algorithm.reward, "reward_model": cfg.models()["reward"].id, "actor": cfg.models()["generate"].id,
            "tp": cfg.engine.tp, "devices": p.total_devices, "nodes": cfg.nodes,
            "pools": [(x.name, x.devices) for x in p.pools], "roles": {r: p.pool_of(r) for r in ("generate", "reward",
                                                                                                  "reference", "train")},
            "gpu_memory_utilization": cfg.engine.gpu_memory_utilization, "sp": cfg.train_memory.sequence_parallel,
            "max_response": cfg.max_response, "max_prompt": getattr(cfg, "max_prompt", None),
            "ppo_epochs": cfg.ppo_epochs, "minibatches": cfg.minibatches,
            "colocate": cfg.colocate if p.shared(p.generate) else "generation apart",
            "offload_train_state": cfg.offload_train_state if p.shared(p.generate) else None}


@pytest.mark.parametrize("framework, argv, chosen", ROUND_TRIP)
def test_export_then_import_gives_the_same_config(tmp_path, framework, argv, chosen):
    base = ["--actor", "qwen2.5-7b", "--max-response", "2048", "--ppo-epochs", "2", *argv]
    if "--max-prompt" in subcommand_parsers()["run"]._option_string_actions:
        base += ["--max-prompt", "1024", "--truncate-prompt"]  # once the limits branch has merged
    original = config_of(*base)
    text = export(original, framework, chosen)
    path = tmp_path / f"exported.{framework}"
    path.write_text(text)
    flag = "--from-verl" if framework == "verl" else "--from-openrlhf"
    back = config_of(flag, str(path))
    if framework == "verl" or "--steps" in argv:
        assert back.steps == original.steps
    assert _fields(back) == _fields(original)
    want = {"none": "none", "full": "full", None: None}[chosen.recompute]
    assert back.train_memory.recompute == want
    if framework == "openrlhf" or chosen.zero_stage == 3:  # verl's FSDP is ZeRO-3 whatever the plan chose
        assert back.train_memory.zero_stage == chosen.zero_stage


def test_export_says_what_the_framework_cannot_express():
    cfg = config_of("--placement", "split 4+3+1", "--algorithm", "grpo", "--n", "4", "--reward", "rule")
    verl = export(cfg, "verl", Chosen("oppo(C=500,Δ0=8)", 2, "selective"))
    assert "# verl runs the synchronous schedule: the overlap policy oppo(C=500,Δ0=8) has no verl setting" in verl
    assert "split 4/3/1 placement cannot be expressed" in verl and "selective recomputation becomes full" in verl
    assert "trainer.n_gpus_per_node=8" in verl and "ZeRO-2" in verl
    shared = config_of("--placement", "paper", "--devices", "8")
    orl = export(shared, "openrlhf", Chosen("oppo"))
    assert "cannot colocate generation with training while the scorers sit apart" in orl
    assert "--train.colocate_all" in orl  # OpenRLHF's dotted flags (since 2026-04-19)
    lines = orl.splitlines()  # comments first: a "#" line inside a continued command would end it
    comments = [i for i, line in enumerate(lines) if line.startswith("#")]
    assert comments == list(range(len(comments))) and all(" #" not in line for line in lines[len(comments):])


def test_plan_export_prints_overrides_that_read_back(capsys, tmp_path):
    argv = ["plan", "--gpus", "4xh100-sxm", "--actor", "qwen2.5-0.5b", "--reward", "rule", "--algorithm", "grpo",
            "--n", "4", "--batch", "8", "--steps", "2", "--max-response", "128", "--policies", "baseline",
            "--layouts", "colocated", "--processes", "1", "--export", "verl"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    text = out.split("verl settings of the best configuration:\n", 1)[1]
    assert "trainer.n_gpus_per_node=4" in text and "algorithm.adv_estimator=grpo" in text
    path = tmp_path / "plan.verl"
    path.write_text(text)
    cfg = config_of("--from-verl", str(path))
    assert (cfg.batch, cfg.algorithm.n, cfg.placement.total_devices, cfg.models()["generate"].id) == (8, 4, 4, "qwen2.5-0.5b")


@pytest.mark.parametrize("label, pools", [
    ("colocated 8", [("main", 8)]), ("shared 7+1", [("main", 7), ("score", 1)]),
    ("split 4+3+1", [("gen", 4), ("train", 3), ("score", 1)]), ("gen-apart 4+4", [("gen", 4), ("train", 4)]),
])
def test_placement_takes_the_planners_labels(label, pools):
    cfg = config_of("--placement", label)
    assert [(p.name, p.devices) for p in cfg.placement.pools] == pools


@pytest.mark.parametrize("label", ["split 4+x", "split 4+3", "ring 8", "colocated 0"])
def test_bad_placement_label_is_one_line(capsys, label):
    assert main(["run", "--placement", label]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown placement" in err[0] and "split 4+3+1" in err[0]


def test_hydra_defaults_list_is_listed_not_followed(tmp_path):
    path = tmp_path / "trainer.yaml"
    path.write_text("defaults:\n  - actor@actor_rollout_ref.actor: dp_actor\ndata:\n  train_batch_size: 32\n")
    t = translate_verl(str(path))
    assert pairs(t.args)["--batch"] == "32"
    assert [(i.key, i.why) for i in t.ignored] == [("defaults", "Hydra defaults list: composition not followed")]


def test_framework_options_parsed_without_main_are_refused():
    parser = build_parser()
    args = parser.parse_args(["run", "--from-verl", "data.train_batch_size=8"])
    with pytest.raises(ConfigError, match="translated by oppo_sim.cli.main"):
        args.func(args)


def test_openrlhf_arguments_as_a_string():
    args = ("--pretrain Qwen/Qwen2.5-7B-Instruct --rollout_batch_size 32 --n_samples_per_prompt 8 "
            "--train_batch_size 64 --advantage_estimator group_norm --remote_rm_url http://127.0.0.1:5000/get_reward "
            "--colocate_all_models --vllm_num_engines 4 --vllm_tensor_parallel_size 2 --actor_num_gpus_per_node 8 "
            "--vllm_enable_sleep --init_kl_coef 0")
    cfg = config_of("--from-openrlhf", args)
    assert (cfg.batch, cfg.algorithm.n, cfg.minibatches, cfg.engine.tp) == (32, 8, 4, 2)
    assert (cfg.algorithm.name, cfg.algorithm.reward, cfg.algorithm.kl) == ("grpo", "rule", False)
    assert [(p.name, p.devices) for p in cfg.placement.pools] == [("main", 8)] and cfg.colocate == "sleep"
    assert translate_openrlhf(args).sources == ("the arguments given",)


@pytest.mark.parametrize("name, table_id", [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("/models/qwen3-32b/", "qwen3-32b"),
    ("Qwen/Qwen2.5-0.5B", "qwen2.5-0.5b"), ("OpenRLHF/Llama-3-8b-sft-mixture", "llama-3-8b"), ("Qwen/Qwen2-7B-Instruct", "qwen2-7b"),
    ("org/NoSuchModel-3B", None), ("Qwen/Qwen2-57B-A14B", "qwen2-57b-a14b"), ("Qwen/Qwen2.5-VL-7B", "qwen2.5-vl-7b"),  # its own entry, never the text model qwen2.5-7b
])
def test_model_names_match_table_ids_on_word_boundaries(name, table_id):
    from oppo_sim.frameworks.translation import model_arg

    assert model_arg("actor_rollout_ref.model.path", name)[0] == table_id


def test_a_real_length_openrlhf_command_line_is_read_not_taken_for_a_file(capsys):
    """A command line longer than a file name may be (255 bytes) once crashed ``Path.is_file`` (ENAMETOOLONG)."""
    args = ("--pretrain meta-llama/Llama-3.1-8B-Instruct --advantage_estimator reinforce_baseline --n_samples_per_prompt 4 "
            "--rollout_batch_size 8 --train_batch_size 32 --prompt_max_len 1024 --generate_max_len 256 --colocate_all_models "
            "--vllm_enable_sleep --deepspeed_enable_sleep --actor_num_gpus_per_node 8 --vllm_num_engines 4 "
            "--vllm_tensor_parallel_size 2 --remote_rm_url http://localhost:5000/get_reward --max_epochs 1")
    assert len(args) > 255
    t = translate_openrlhf(args)
    assert "--n" in t.args and "4" in t.args
    assert main(["run", "--from-openrlhf", args, "--steps", "1", "--actor", "qwen2.5-0.5b"]) == 0
    assert "--n_samples_per_prompt" in capsys.readouterr().out


def test_engine_and_trainer_memory_fractions_are_read_apart():
    """verl's rollout.gpu_memory_utilization (0.6 in the script) and OpenRLHF's --vllm_gpu_memory_utilization (0.7)
    are the engine's own share; neither framework caps its trainer by a fraction (it has the GPU while vLLM
    sleeps): the trainer's share stays oppo-sim's 0.9. verl keeps the actor's state on the GPUs
    (param_offload=False): it sits beside the engine's share while it generates, and the two fit together."""
    from oppo_sim.hw.memory.pool_memory import GENERATE
    from oppo_sim.pipeline.fit_check import check_fits

    verl = config_of("--from-verl", VERL_SH, "--batch", "8", "--devices", "8", "--tp", "1")
    orl = config_of("--from-openrlhf", ORL_REINFORCE, "--actor", "qwen2.5-7b", "--steps", "1")
    assert (verl.engine.gpu_memory_utilization, verl.train_memory_fraction, verl.offload_train_state) == (0.6, 0.9, False)
    assert (orl.engine.gpu_memory_utilization, orl.train_memory_fraction, orl.offload_train_state) == (0.7, 0.9, True)
    main = check_fits(verl, 2048, 1024).pool(verl.placement.generate)
    train = sum(r.total for r in main.held(GENERATE) if r.role == "train")
    assert train > 0 and main.need(GENERATE) == pytest.approx(0.6 * main.mem_bytes + sum(
        r.total for r in main.held(GENERATE) if r.role != "generate"))
    assert main.need(GENERATE) <= 0.9 * main.mem_bytes and main.capacity_of("other") == pytest.approx(0.9 * main.mem_bytes)


def test_verl_balance_batch_round_trips(tmp_path):
    cfg = config_of("--actor", "qwen2.5-7b", "--placement", "colocated", "--devices", "8", "--algorithm", "grpo",
                    "--n", "4", "--reward", "rule", "--batch", "16", "--no-balance-batch")
    assert not cfg.trainer.balance_batch
    text = export(cfg, "verl", Chosen("baseline", 3, "full"))
    assert "trainer.balance_batch=False" in text
    path = tmp_path / "exported.verl"
    path.write_text(text)
    assert not config_of("--from-verl", str(path)).trainer.balance_batch


def test_verl_rollout_name_is_echoed_and_an_sglang_rollout_is_said_to_be_priced_as_the_vllm_engine():
    t = translate_verl("actor_rollout_ref.rollout.name=sglang data.train_batch_size=8")
    used = {u.key: u for u in t.used}
    assert "vLLM-like" in used["actor_rollout_ref.rollout.name"].note
    assert not any(i.key == "actor_rollout_ref.rollout.name" for i in t.ignored)
