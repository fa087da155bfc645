"""verl launch scripts read as verl would run them: scripts written for these tests, each modelled on one of
verl's (tests/fixtures/frameworks/verl/, each naming the verl script and commit it follows: its settings and the
shell constructs they are written with), against values written by hand from each script; the shell expansion they
rely on; verl's known keys (a near-miss refused with "did you mean", a file verl would not read refused);
hub ids resolved offline; the critic's model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oppo_sim.cli import build_parser, main
from oppo_sim.cli_setup import sim_config
from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.framework_args import with_framework_args
from oppo_sim.frameworks.shell import read_script
from oppo_sim.frameworks.translation import model_arg
from oppo_sim.frameworks.verl import translate_verl

VERL = Path(__file__).parent / "fixtures" / "frameworks" / "verl"
ORL = Path(__file__).parent / "fixtures" / "frameworks" / "openrlhf_ppo_llama_ray.sh"


def opts(args) -> dict[str, str]:
    """``--opt value`` pairs of a translation's arguments (a flag maps to the next word; unused here)."""
    return dict(zip(args, list(args[1:]) + [""]))


def parsed(*argv: str, cmd: str = "run"):
    parser = build_parser()
    return parser.parse_args(with_framework_args(parser, [cmd, *argv], echo=False))


# Written by hand from each script (its variables and $((...)) worked out on paper): batch B, n, prompt and
# response caps, rollout tp, GPUs (pools), nodes, trainer (backend tp pp ep), offload, schedule, algorithm,
# actor, mini-batches. A "pools" of one entry is verl's hybrid engine (colocated); two: rollout + trainer.
EXPECTED = {
    "grpo_qwen3-8b.sh": dict(batch=1024, n=5, prompt=512, response=1024, tp=2, pools=[8], nodes=1,
                             trainer=("fsdp", 1, 1, 1), offload=False, schedule="baseline", algorithm="grpo",
                             actor="qwen3-8b", minibatches=4),
    "grpo_qwen2-7b_math_megatron.sh": dict(batch=1024, n=5, prompt=1024, response=1024, tp=2, pools=[8], nodes=1,
                                           trainer=("megatron", 2, 2, 1), offload=False, schedule="baseline",
                                           algorithm="grpo", actor="qwen2-7b", minibatches=4),
    "grpo_qwen3moe-30b_megatron_96gb.sh": dict(batch=512, n=16, prompt=2048, response=8192, tp=4, pools=[8], nodes=1,
                                               trainer=("megatron", 1, 1, 8), offload=True, schedule="baseline",
                                               algorithm="grpo", actor="qwen3-30b-a3b", minibatches=4),
    "grpo_deepseek671b_math_megatron_96gb.sh": dict(batch=96, n=8, prompt=2048, response=1204 * 8, tp=32, pools=[96],
                                                    nodes=12, trainer=("megatron", 8, 12, 8), offload=True,
                                                    schedule="baseline", algorithm="grpo", actor="deepseek-v3",
                                                    minibatches=3),
    "ppo_qwen2.5-32b.sh": dict(batch=1024, n=1, prompt=1024, response=1024, tp=4, pools=[32], nodes=4,
                               trainer=("fsdp", 1, 1, 1), offload=False, schedule="baseline", algorithm="ppo",
                               actor="qwen2.5-32b", minibatches=4, critic="qwen2.5-32b"),
    "gmpo_test_dapo_7b_math.sh": dict(batch=512, n=16, prompt=2048, response=8192, tp=4, pools=[64], nodes=8,
                                      trainer=("fsdp", 1, 1, 1), offload=True, schedule="baseline", algorithm="grpo",
                                      actor="qwen2.5-math-7b", minibatches=16),
    "dapo_qwen2.5_32b.sh": dict(batch=512, n=16, prompt=2048, response=20480, tp=4, pools=[128], nodes=16,
                                trainer=("fsdp", 1, 1, 1), offload=True, schedule="baseline", algorithm="dapo",
                                actor="qwen2.5-32b", minibatches=16),
    "one_step_off_grpo_0.6b_gsm8k_fsdp2_2_6.sh": dict(batch=1152, n=5, prompt=512, response=1024, tp=2, pools=[2, 6],
                                                      nodes=1, trainer=("fsdp", 1, 1, 1), offload=False,
                                                      schedule="async(k=1)", algorithm="grpo", actor="qwen3-0.6b",
                                                      minibatches=6),
    "one_step_off_dapo_7b_math_megatron_4_12.sh": dict(batch=512, n=12, prompt=2048, response=8192, tp=2,
                                                       pools=[4, 12], nodes=2, trainer=("megatron", 2, 2, 1),
                                                       offload=False, schedule="async(k=1)", algorithm="grpo",
                                                       actor="qwen2.5-math-7b", minibatches=16),
    "grpo_qwen2_5_vl-7b.sh": dict(batch=512, n=5, prompt=1024, response=2048, tp=2, pools=[8], nodes=1,
                                  trainer=("fsdp", 1, 1, 1), offload=False, schedule="baseline", algorithm="grpo",
                                  actor="qwen2.5-vl-7b", minibatches=4),  # a VLM: its language backbone
    # fully-async: a parameter version = require_batches 4 x ppo_mini_batch_size 32 x trigger_parameter_sync_step 4
    "fully_async_dapo_7b_math_fsdp2_8_8.sh": dict(batch=512, n=16, prompt=2048, response=8192, tp=1, pools=[8, 8],
                                                  nodes=2, trainer=("fsdp", 1, 1, 1), offload=False,
                                                  schedule="async(k=1)", algorithm="grpo", actor="qwen2.5-math-7b",
                                                  minibatches=16),
}


def test_megatron_moe_dispatcher_is_read_where_ep_is_on():
    got = {name: sim_config(parsed("--from-verl", str(VERL / name))).trainer.moe_dispatcher
           for name in ("grpo_qwen3moe-30b_megatron_96gb.sh", "grpo_deepseek671b_math_megatron_96gb.sh",
                        "grpo_qwen2-7b_math_megatron.sh")}
    assert got == {"grpo_qwen3moe-30b_megatron_96gb.sh": "flex", "grpo_deepseek671b_math_megatron_96gb.sh": "flex",
                   "grpo_qwen2-7b_math_megatron.sh": "alltoall"}  # the scripts' DeepEP; verl's own alltoall


HEADER = re.compile(r"# Written for oppo-sim's tests, modelled on verl's (?P<path>\S+\.sh)\n"
                    r"# at (?P<commit>[0-9a-f]{40}) \(Apache-2\.0, https://github\.com/volcengine/verl\):\n"
                    r"# its settings and the shell constructs they are written with; not a copy of the file\.\n"
                    r"# ---- script ----\n")
"""The header every script starts with: the verl script and commit it is modelled on, and what it keeps."""


def test_every_script_is_checked_and_names_the_verl_script_it_is_modelled_on():
    files = sorted(p.name for p in VERL.glob("*.sh"))
    assert files == sorted(EXPECTED)
    for name in files:
        head = HEADER.match((VERL / name).read_text())
        assert head, name
        assert head["path"].split("/")[0] in ("examples", "recipe", "verl"), head["path"]
        assert name.removesuffix(".sh").endswith(Path(head["path"]).stem.removeprefix("run_")), (name, head["path"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_script_loads_as_verl_runs_it(name):
    want, src = EXPECTED[name], str(VERL / name)
    t = translate_verl(src)
    assert t.schedule == want["schedule"]
    synchronous = any("verl runs the synchronous schedule" in n for n in t.notes)
    assert synchronous == (want["schedule"] == "baseline")
    a = parsed("--from-verl", src)
    cfg = sim_config(a)
    assert (cfg.batch, cfg.algorithm.n, cfg.max_prompt) == (want["batch"], want["n"], want["prompt"])
    assert (cfg.max_response, cfg.engine.tp, cfg.nodes) == (want["response"], want["tp"], want["nodes"])
    assert [p.devices for p in cfg.placement.pools] == want["pools"]
    assert (cfg.trainer.backend, cfg.trainer.tp, cfg.trainer.pp, cfg.expert_parallel) == want["trainer"]
    assert cfg.offload_train_state == want["offload"]
    assert (cfg.algorithm.name, cfg.models()["generate"].id, cfg.minibatches) == (
        want["algorithm"], want["actor"], want["minibatches"])
    if "critic" in want:
        assert cfg.models()["critic"].id == want["critic"]
    if want["schedule"] != "baseline":  # run simulates the framework's own schedule; compare puts it beside baseline
        assert a.policy == "async" and a.staleness in (None, 1)  # 1: the async policy's own bound
        assert parsed("--from-verl", src, cmd="compare").policies == ("baseline", "async", "oppo")


def test_an_async_script_runs_end_to_end(capsys):
    src = str(VERL / "one_step_off_grpo_0.6b_gsm8k_fsdp2_2_6.sh")
    assert main(["run", "--from-verl", src, "--steps", "1", "--batch", "8", "--max-response", "128"]) == 0
    out = capsys.readouterr().out
    assert "async(k=1)" in out and "gen-apart 2+6" in out and "verl runs the synchronous schedule" not in out
    assert "the GPU: --gpu h200" in out  # what matters and came from oppo-sim's defaults, not the script


def test_dapo_rounds_are_read_from_the_recipe():
    got = translate_verl(str(VERL / "dapo_qwen2.5_32b.sh")).args
    i, j = got.index("--gen-batch-size"), got.index("--max-gen-batches")
    assert (got[i + 1], got[j + 1]) == ("1536", "10")  # gen_prompt_bsz=$((train_prompt_bsz * 3)); max_num_gen_batches=10
    a = parsed("--from-verl", str(VERL / "dapo_qwen2.5_32b.sh"))
    assert (a.gen_batch_size, a.max_gen_batches) == (1536, 10)
    alg = sim_config(a).algorithm  # into the step machine's rounds
    assert (alg.name, alg.gen_batch_size, alg.max_gen_batches) == ("dapo", 1536, 10)


# ---- the shell, as bash expands it --------------------------------------------------------------------

def words(text: str, home: str = "/home/u") -> list[str]:
    return list(read_script(text, "t.sh", home=home).words)


@pytest.mark.parametrize("script, expected", [
    ("A=3\npython x k=$A k2=${A}", ["python", "x", "k=3", "k2=3"]),
    ("export B=${B:-7}\nrun k=$B", ["run", "k=7"]),
    ("E=\nrun a=${E:-d} b=${E-d} c=${U-d}", ["run", "a=d", "b=", "c=d"]),  # :- takes empty as unset, - does not
    ("run a=${V:=5} b=$V", ["run", "a=5", "b=5"]),
    ("P=1024\nrun a=$((P * 2)) b=$(((P + P) * 3)) c=$((7 / 2)) d=$((-7 / 2)) e=$((P % 1000))",
     ["run", "a=2048", "b=6144", "c=3", "d=-3", "e=24"]),
    ("run a=1 \\\n    b=2 \\\n  c='x y' d=\"z ${Q:-w}\"", ["run", "a=1", "b=2", "c=x y", "d=z w"]),
    ("run trainer.logger='[\"console\",\"wandb\"]' k=\"['$HOME/a', 'b']\"",
     ["run", 'trainer.logger=["console","wandb"]', "k=['/home/u/a', 'b']"]),
    ("D=$(date +%s)\nrun a=$D", ["run", "a=$(date", "+%s)"]),  # kept as written, then split as bash splits $D
    ("ARR=(a \"b c\")\nARR+=(d)\nrun \"${ARR[@]}\" \"x=${ARR[1]}\" y=${ARR[1]} n=${#ARR[@]} $ARR",
     ["run", "a", "b c", "d", "x=b c", "y=b", "c", "n=3", "a"]),
    ("M=~/models/Qwen3-8B\nrun p=$M q=$HOME/m r=~/x", ["run", "p=/home/u/models/Qwen3-8B", "q=/home/u/m", "r=/home/u/x"]),
    ("X='a b'\nrun $X \"$X\"", ["run", "a", "b", "a b"]),
    ("run '$NOT' \"\\$NOT\" k=\\$NOT", ["run", "$NOT", "$NOT", "k=$NOT"]),
])
def test_shell_expansion(script, expected):
    assert words(script) == expected


def test_here_documents_are_input_and_read_fills_a_variable():
    s = read_script("""N=4
cat > convert.py <<'EOF'
model = "$HOME"  # not words of the script
EOF
read -r -d '' ARGS <<EOF
openrlhf.cli.train_ppo \\
   --pretrain $HOME/m --n $((N * 2))
EOF
deepspeed --module $ARGS
""", "t.sh", home="/h")
    assert s.commands == (("deepspeed", "--module", "openrlhf.cli.train_ppo", "--pretrain", "/h/m", "--n", "8"),)


def test_a_bash_c_string_is_read_as_a_script():
    s = read_script('P=8\nsrun -N 1 bash -c "pip install x && python3 -m verl.trainer.main_ppo a.b=$P"\n'
                    "for ((i = 1; i < 3; i++)); do Q=1; done\n", "t.sh")
    assert s.commands == (("srun", "-N", "1"), ("python3", "-m", "verl.trainer.main_ppo", "a.b=8"))
    assert "bash -c: its command string read as a script" in s.notes and "for ((...)): its body is not run" in s.notes


def test_what_bash_would_decide_at_run_time_is_assumed_and_said():
    s = read_script("""
mode="async"
if [ "$mode" = "async" ]; then
    R=yes
elif [ "$mode" = "sync" ]; then R=no
else R=other; fi
if [ -f "$HOME/env.sh" ]; then F=sourced; fi
for lr in 1e-6 2e-6; do LR=$lr; done
while true; do W=1; done
f() { G=1; }
D="$(date +%s)"
source ./env.sh
python3 -m verl.trainer.main_ppo a.b=$R c.d=${F:-none} e.f=$LR g.h=$W i.j="$D" $@ 2>&1 | tee log.txt
""", "t.sh", home="/h")
    assert s.commands == (("python3", "-m", "verl.trainer.main_ppo", "a.b=yes", "c.d=none", "e.f=1e-6", "g.h=",
                           "i.j=$(date +%s)"),)
    notes = "\n".join(s.notes)
    for said in ("files are not looked at; taken as false", "for lr in 1e-6 2e-6: its body is read once, for lr=1e-6",
                 "while true: its body is not run", "function f: defined, not run",
                 "$(date +%s): command substitution not run", "source ./env.sh: the sourced file is not read",
                 "$W is not set in the script", "$@, $1, ...: the script's arguments are taken as none",
                 "| tee log.txt: the command a pipe feeds is not read"):
        assert said in notes, said
    assert all("\n" not in n for n in s.notes)


@pytest.mark.parametrize("script, msg", [
    ("run a='unclosed", "t.sh: cannot read as a shell script"),
    ("run a=$((1 / 0))", "not integer arithmetic"),
    ("X=1.5\nrun a=$((X + 1))", "is used in $((...)) but is not an integer"),
    ("run a=${NEED:?set NEED}", "NEED is not set in the script (set NEED)"),
])
def test_shell_errors_are_one_line(script, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        read_script(script, "t.sh")


def test_the_issue_script_loads_where_it_failed_on_shell_syntax():
    t = translate_verl(str(VERL / "gmpo_test_dapo_7b_math.sh"))  # failed on '$((1024' and '${NGPUS_PER_NODE:-8}'
    got = opts(t.args)
    assert (got["--max-prompt"], got["--max-response"], got["--devices"], got["--nodes"]) == ("2048", "8192", "64", "8")


# ---- keys: known, near-misses, files verl would not read ---------------------------------------------------

def test_a_near_miss_of_a_known_key_is_an_error_with_did_you_mean(capsys):
    with pytest.raises(ConfigError, match="data.train_batchsize: not a key of verl's config; did you mean "
                                          "data.train_batch_size"):
        translate_verl("data.train_batchsize=512 actor_rollout_ref.rollout.n=8")
    with pytest.raises(ConfigError, match="did you mean actor_rollout_ref.rollout.gpu_memory_utilization"):
        translate_verl("actor_rollout_ref.rollout.gpu_memory_utilisation=0.5")
    assert main(["run", "--from-verl", "actor_rolout_ref.actor.ppo_epochs=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean actor_rollout_ref.actor.ppo_epochs" in err[0]


def test_unknown_keys_far_from_any_or_added_with_plus_are_listed_not_refused():
    t = translate_verl("data.train_batch_size=8 myrecipe.knob=1 +data.train_batchsize=5")
    why = {i.key: i.why for i in t.ignored}
    assert why["myrecipe.knob"] == "not a key of verl's config"
    assert why["data.train_batchsize"].startswith("added with +")
    assert translate_verl("actor_rollout_ref.model.override_config.max_position_embeddings=32768 "
                          "data.train_batch_size=8").ignored  # under a known mapping: known


def test_a_file_verl_would_not_read_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no verl key=value overrides in it"):
        translate_verl(str(ORL))  # an OpenRLHF script given to --from-verl
    f = tmp_path / "other.sh"
    f.write_text("python train.py model.name=foo optim.lr=1e-5\n")
    with pytest.raises(ConfigError, match="none of the 2 keys given is a key of verl's config"):
        translate_verl(str(f))


def test_a_composed_yaml_config_with_omegaconf_selects_reads(tmp_path):
    f = tmp_path / "ppo_megatron_trainer.yaml"
    f.write_text("""actor_rollout_ref:
  actor:
    _target_: verl.workers.config.McoreActorConfig
    strategy: megatron
    megatron:
      tensor_model_parallel_size: 4
  ref:
    megatron:
      tensor_model_parallel_size: ${oc.select:actor_rollout_ref.actor.megatron.tensor_model_parallel_size,1}
      context_parallel_size: ${oc.select:actor_rollout_ref.actor.megatron.no_such_key,2}
data:
  train_batch_size: 64
""")
    t = translate_verl(str(f))
    assert opts(t.args)["--train-tp"] == "4"  # the reference's tp selects the actor's: the same; its cp the default 2
    assert [n for n in t.notes if "lays the reference" in n] == [
        "actor_rollout_ref.ref.megatron.context_parallel_size=2: oppo-sim lays the reference and the critic out as the actor"]
    assert not [i for i in t.ignored if "not a key" in i.why]  # _target_ is Hydra's, known


def test_a_reward_model_on_its_own_pool_is_a_scoring_pool():
    rm = ("reward_model.enable=True reward_model.model.path=Qwen/Qwen2.5-7B reward_model.enable_resource_pool=True "
          "reward_model.n_gpus_per_node=4 reward_model.nnodes=1 algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=4 ")
    cfg = sim_config(parsed("--from-verl", rm + "actor_rollout_ref.actor.use_kl_loss=True"))
    assert [(p.name, p.devices) for p in cfg.placement.pools] == [("main", 8), ("score", 4)] and cfg.nodes == 2
    t = translate_verl(rm + "actor_rollout_ref.actor.use_kl_loss=True")
    assert any("verl keeps the reference with the actor" in n for n in t.notes)
    t = translate_verl("python -m verl.experimental.one_step_off_policy.main_ppo actor_rollout_ref.hybrid_engine=False "
                       "rollout.n_gpus_per_node=2 trainer.n_gpus_per_node=4 " + rm.replace("=4 reward", "=2 reward"))
    assert opts(t.args)["--placement"] == "split 2+4+2" and t.schedule == "async(k=1)"
    with pytest.raises(ConfigError, match="enable_resource_pool=True needs reward_model.n_gpus_per_node and "
                                          "reward_model.nnodes >= 1"):
        translate_verl(rm.replace("reward_model.nnodes=1", "reward_model.nnodes=0"))


def test_hybrid_engine_off_needs_an_async_entry_point():
    with pytest.raises(ConfigError, match="hybrid_engine=False: verl's main_ppo needs the hybrid engine"):
        translate_verl("actor_rollout_ref.hybrid_engine=False data.train_batch_size=8")
    t = translate_verl("actor_rollout_ref.hybrid_engine=False rollout.n_gpus_per_node=4 trainer.n_gpus_per_node=4")
    assert t.schedule == "async(k=1)" and "gen-apart 4+4" in t.args


def test_fully_async_with_no_staleness_is_synchronous_on_two_pools():
    t = translate_verl(["python -m verl.experimental.fully_async_policy.fully_async_main "
                        "async_training.staleness_threshold=0 actor_rollout_ref.actor.ppo_mini_batch_size=16 "
                        "async_training.require_batches=2 async_training.trigger_parameter_sync_step=3"])
    got = opts(t.args)
    assert t.schedule == "baseline" and "--policy" not in got and got["--placement"] == "gen-apart 8+8"
    assert (got["--batch"], got["--minibatches"]) == ("96", "6")
    assert any("staleness_threshold=0" in n for n in t.notes)


def test_config_name_selects_megatron_in_both_spellings():
    for name in ("--config-name=ppo_megatron_trainer", "--config-name 'ppo_megatron_trainer.yaml'"):
        got = opts(translate_verl(f"python3 -m verl.trainer.main_ppo --config-path=config {name} "
                                  "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2").args)
        assert got["--train-backend"] == "megatron" and got["--pp"] == "2" and "--zero" not in got


# ---- models: hub ids offline, $HOME paths, the critic -------------------------------------------------------

@pytest.mark.parametrize("path, table_id", [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("/root/models/Qwen2.5-7B", "qwen2.5-7b"),
    ("Qwen/Qwen2-7B-Instruct", "qwen2-7b"), ("Qwen/Qwen3-0.6B", "qwen3-0.6b"), ("Qwen/Qwen3-4B", "qwen3-4b"),
    ("Qwen/Qwen3-14B", "qwen3-14b"), ("Qwen/Qwen3-30B-A3B-Base", "qwen3-30b-a3b"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"), ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("deepseek-ai/deepseek-llm-7b-chat", "deepseek-llm-7b"), ("~/models/deepseek-llm-7b-base", "deepseek-llm-7b"),
    ("google/gemma-2-2b-it", "gemma-2-2b"), ("Qwen/Qwen1.5-MoE-A2.7B-Chat", "qwen1.5-moe-a2.7b"),
])
def test_hub_ids_resolve_offline_by_their_last_component(path, table_id):
    assert model_arg("actor_rollout_ref.model.path", path)[0] == table_id


def test_home_model_path_is_expanded_and_its_config_read(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "models" / "Qwen3-8B").mkdir(parents=True)
    (tmp_path / "models" / "Qwen3-8B" / "config.json").write_text(json.dumps(
        {"model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000}))
    script = tmp_path / "run.sh"
    script.write_text('MODEL=$HOME/models/Qwen3-8B\npython3 -m verl.trainer.main_ppo actor_rollout_ref.model.path="$MODEL"\n')
    assert opts(translate_verl(str(script)).args)["--actor"] == str(tmp_path / "models" / "Qwen3-8B" / "config.json")
    script.write_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=$HOME/models/Qwen3-32B\n")
    assert opts(translate_verl(str(script)).args)["--actor"] == "qwen3-32b"  # no config.json there: the table id


def test_critic_option_and_verl_critic_path():
    assert sim_config(parsed("--algorithm", "ppo", "--critic", "qwen2.5-32b")).models()["critic"].id == "qwen2.5-32b"
    assert sim_config(parsed("--algorithm", "ppo")).models()["critic"].id == "qwen2.5-7b"  # the reward model's shape
    with pytest.raises(ConfigError, match="--critic qwen2.5-32b: algorithm 'grpo' has no critic"):
        sim_config(parsed("--algorithm", "grpo", "--n", "4", "--critic", "qwen2.5-32b"))
    t = translate_verl("algorithm.adv_estimator=gae data.train_batch_size=8")  # verl's default critic path
    assert opts(t.args)["--critic"] == "deepseek-llm-7b"
    assert "--critic" not in translate_verl("algorithm.adv_estimator=grpo critic.model.path=Qwen/Qwen3-8B").args


def test_the_docs_read_a_fixture_script_unchanged():
    """docs/your-job.md's runnable verl example is the fixture script, word for word."""
    doc = (Path(__file__).parents[1] / "docs" / "your-job.md").read_text()
    name = "one_step_off_grpo_0.6b_gsm8k_fsdp2_2_6.sh"
    body = (VERL / name).read_text().split("# ---- script ----\n", 1)[1]
    assert f"cat > grpo_0.6b_gsm8k_fsdp2_2_6.sh <<'EOF'\n{body.rstrip()}\nEOF\n" in doc


@pytest.mark.parametrize("mid, total, active", [  # the parameter counts their model cards publish, in billions
    ("qwen3-0.6b", 0.6, None), ("qwen3-1.7b", 1.7, None), ("qwen3-4b", 4.0, None), ("qwen3-14b", 14.8, None),
    ("qwen2-7b", 7.6, None), ("qwen2-72b", 72.7, None), ("qwen1.5-moe-a2.7b", 14.3, 2.7), ("qwen2-57b-a14b", 57.4, 14.2),
    ("llama-3-8b", 8.0, None), ("llama-3.2-1b", 1.24, None), ("llama-3.2-3b", 3.21, None),
    ("deepseek-llm-7b", 6.9, None), ("gemma-2-2b", 2.6, None), ("gemma-2-9b", 9.2, None), ("mistral-nemo", 12.2, None),
])
def test_added_table_models_have_their_published_sizes(mid, total, active):
    from oppo_sim.hw.models.lookup import MODELS

    m = MODELS[mid]
    assert m.params / 1e9 == pytest.approx(total, rel=0.03)
    assert m.active_params / 1e9 == pytest.approx(active if active is not None else total, rel=0.03)


def test_a_launcher_variable_the_script_never_sets_is_refused_with_how_to_give_it(tmp_path):
    script = tmp_path / "slurm.sh"
    script.write_text("NNODES=${SLURM_JOB_NUM_NODES}\nGPUS=8\ncd $SLURM_SUBMIT_DIR\npython3 -m verl.trainer.main_ppo "
                      "data.train_batch_size=64 trainer.n_gpus_per_node=$GPUS trainer.nnodes=$NNODES\n")
    with pytest.raises(ConfigError, match=r"trainer.nnodes: expected an integer, got '' \(\$SLURM_JOB_NUM_NODES, "
                                          r"\$SLURM_SUBMIT_DIR: not set in the script.*give the value after the "
                                          r"script: --from-verl trainer.nnodes=VALUE"):
        translate_verl(str(script))
    cfg = sim_config(parsed("--from-verl", str(script), "--from-verl", "trainer.nnodes=2"))
    assert (cfg.nodes, [p.devices for p in cfg.placement.pools]) == (2, [16])  # GPU counts never defaulted


@pytest.mark.parametrize("name, extra, want", [
    # the script's dynamic batch size: (prompt 2048 + response 9632) tokens per GPU, for training and log-probs
    ("grpo_deepseek671b_math_megatron_96gb.sh", [], (11680, 11680)),
    # verl scales a rank's budget by its context-parallel degree (megatron_actor.py)
    ("grpo_deepseek671b_math_megatron_96gb.sh", ["actor_rollout_ref.actor.megatron.context_parallel_size=2",
                                                 "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=6"],
     (23360, 23360)),
    ("grpo_deepseek671b_math_megatron_96gb.sh", ["actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=30000"],
     (11680, 30000)),
    # off (verl's default): the budget the script sets is not read; no fixed size given either: one longest sequence
    ("fully_async_dapo_7b_math_fsdp2_8_8.sh", [], (None, None)),
    # on under FSDP: the Ulysses degree scales it (dp_actor.py); the log-prob budget defaults to the actor's
    ("fully_async_dapo_7b_math_fsdp2_8_8.sh", ["actor_rollout_ref.actor.use_dynamic_bsz=True",
                                              "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"], (40960, 40960)),
])
def test_dynamic_batch_size_token_budgets_are_read_as_verl_scales_them(name, extra, want):
    cfg = sim_config(parsed("--from-verl", str(VERL / name), *(w for e in extra for w in ("--from-verl", e))))
    assert (cfg.train_memory.micro_batch_tokens, cfg.train_memory.logprob_micro_batch_tokens) == want
    t = translate_verl([str(VERL / name), *extra])
    notes = {u.key.rsplit(".", 1)[1]: u.note for u in t.used if "token_len" in u.key}
    if want[0] is None:
        assert notes == {"ppo_max_token_len_per_gpu": "not read: use_dynamic_bsz is off"}
    assert not any("token_len" in i.key or "dynamic_bsz" in i.key for i in t.ignored)



def test_fixed_micro_batch_sizes_are_read_without_the_dynamic_batch_size():
    cfg = sim_config(parsed("--from-verl", str(VERL / "grpo_qwen3-8b.sh")))
    t = cfg.train_memory
    assert (t.micro_batch_size, t.logprob_micro_batch_size, t.micro_batch_tokens) == (32, None, None)
    fwd = sim_config(parsed("--from-verl", str(VERL / "grpo_qwen3-8b.sh"), "--from-verl",
                            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16"))
    assert (fwd.train_memory.micro_batch_size, fwd.train_memory.logprob_micro_batch_size) == (32, 16)
    on = sim_config(parsed("--from-verl", str(VERL / "grpo_qwen3-8b.sh"), "--from-verl",
                           "actor_rollout_ref.actor.use_dynamic_bsz=True"))
    assert (on.train_memory.micro_batch_tokens, on.train_memory.micro_batch_size) == (16384, None)



@pytest.mark.parametrize("extra, want", [
    ("actor_rollout_ref.rollout.log_prob_micro_batch_size=160", (32, 20)),  # 160 over the 8 GPUs' data parallel ranks
    ("actor_rollout_ref.actor.ppo_micro_batch_size=64", (8, None)),  # the global size replaces the per-GPU 32
])
def test_verls_deprecated_global_micro_batch_sizes_are_divided_by_the_data_parallel_size(extra, want):
    cfg = sim_config(parsed("--from-verl", str(VERL / "grpo_qwen3-8b.sh"), "--from-verl", extra))
    assert (cfg.train_memory.micro_batch_size, cfg.train_memory.logprob_micro_batch_size) == want


def test_a_global_micro_batch_size_under_one_a_rank_is_one_line(capsys):
    assert main(["run", "--from-verl", str(VERL / "grpo_qwen3-8b.sh"), "--from-verl",
                 "actor_rollout_ref.actor.ppo_micro_batch_size=2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "verl needs at least 1" in err
