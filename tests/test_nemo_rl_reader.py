"""NeMo RL recipes read as NeMo RL composes and runs them: recipes written for these tests after NVIDIA-NeMo/RL's
``examples/configs`` (each names the file and commit it is modelled on; the settings the reader uses, in the
recipes' structure) against values written by hand from the files, the defaults chain, overrides,
interpolations, typos and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from oppo_sim.cli import build_parser, main
from oppo_sim.cli_policy import check_policy_flags
from oppo_sim.frameworks.framework_args import with_framework_args
from oppo_sim.frameworks.nemo_rl import translate_nemo_rl
from oppo_sim.frameworks.nemo_rl_recipe import recipe, value

from framework_helpers import config_of, pairs

FIX = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl"
BASE = FIX / "grpo_math_1B.yaml"
LLM = FIX / "recipes" / "llm"




COLO = {"--placement": "colocated", "--colocate": "sleep", "--sleep-level": "1", "--optimizer-move": "pageable"}
CASES = [  # (recipe, expected options written by hand from the file and its parents)
    ("grpo_math_1B.yaml", {"--batch": "32", "--n": "16", "--minibatches": "1", "--ppo-epochs": "1", "--algorithm": "grpo",
                           "--actor": "qwen2.5-1.5b", "--max-response": "512", "--max-prompt": "512", "--tp": "1",
                           "--gpu-memory-utilization": "0.6", "--train-backend": "fsdp", "--zero": "3",
                           "--recompute": "none", "--devices": "1", "--nodes": "1", **COLO}),
    ("grpo_math_1B_megatron.yaml", {"--train-backend": "megatron", "--train-tp": "1", "--pp": "1", "--cp": "1",
                                    "--devices": "1", "--actor": "qwen2.5-1.5b", **COLO}),
    ("recipes/llm/grpo-llama3.1-8b-instruct-2n8g-fsdp2tp1-noncolocated.yaml",
     {"--batch": "64", "--n": "32", "--minibatches": "4", "--actor": "llama-3.1-8b", "--max-response": "4096",
      "--max-prompt": "4096", "--train-backend": "fsdp", "--nodes": "2", "--placement": "gen-apart 8+8"}),
    ("recipes/llm/performance/grpo-llama3.1-8b-instruct-2n8g.yaml",
     {"--batch": "64", "--n": "32", "--minibatches": "1", "--train-backend": "megatron", "--pp": "2", "--train-tp": "1",
      "--recompute": "full", "--devices": "16", "--nodes": "2", **COLO}),
    ("recipes/llm/performance/grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml",
     {"--minibatches": "1", "--policy": "async", "--staleness": "1", "--pp": "1", "--gpu-memory-utilization": "0.8",
      "--placement": "gen-apart 8+8", "--nodes": "2", "--train-backend": "megatron"}),
    ("recipes/llm/grpo-math-qwen3-30ba3b-megatron-tp4-32k.yaml",
     {"--batch": "64", "--n": "16", "--minibatches": "2", "--actor": "qwen3-30b-a3b", "--tp": "4", "--train-tp": "4",
      "--ep": "8", "--max-response": "32768", "--devices": "32", "--nodes": "4", "--recompute": "full",
      "--moe-dispatcher": "allgather", "--moe-router-dtype": "fp64", "--etp": "1"}),  # NeMo RL's (and Megatron-Core's) default token dispatcher; its base config's expert TP
    ("recipes/llm/grpo-nanov3-30BA3B-2n8g-megatron-pack-cp.yaml",  # a Nemotron-H hybrid (Mamba2 + attention + MoE)
     {"--batch": "2", "--n": "8", "--minibatches": "1", "--actor": "nemotron-3-nano-30b-a3b", "--tp": "4",
      "--gpu-memory-utilization": "0.7", "--train-backend": "megatron", "--train-tp": "2", "--pp": "2", "--cp": "2",
      "--ep": "8", "--max-response": "8192", "--devices": "16", "--nodes": "2", **COLO}),
    ("recipes/llm/grpo-llama3.2-1b-instruct-1n8g-megatron.yaml",
     {"--train-backend": "megatron", "--devices": "8", "--max-response": "512", "--max-prompt": "512"}),
    ("recipes/llm/grpo-llama3.2-1b-instruct-1n8g-fsdp2tp2-temp0.8-topp0.9-topk50.yaml",
     {"--train-backend": "fsdp", "--devices": "8", "--max-response": "512"}),  # its parent's parent: grpo_math_1B
]


@pytest.mark.parametrize("name, expected", CASES, ids=[c[0].rsplit("/", 1)[-1] for c in CASES])
def test_recipe_loads_as_nemo_rl_runs_it(name, expected):
    t = translate_nemo_rl([str(FIX / name)])
    got = pairs(t.args)
    assert {k: got.get(k) for k in expected} == expected
    assert "--no-reference" not in got and got["--reward"] == "rule"  # KL penalty 0.01; the math environment
    assert ("--policy" in got) == ("async" in name)


def test_runs_end_to_end_with_the_layout_in_the_config():
    cfg = config_of("--from-nemo-rl", str(LLM / "performance" / "grpo-llama3.1-8b-instruct-2n8g.yaml"))
    assert (cfg.colocate, cfg.optimizer_move) == ("sleep", "pageable")  # move_optimizer's .to() per tensor
    apart = config_of("--from-nemo-rl", str(LLM / "performance" / "grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml"))
    assert apart.optimizer_move == "pinned"  # nothing sleeps: the optimizer never moves
    assert (cfg.trainer.backend, cfg.trainer.pp, cfg.trainer.tp, cfg.placement.total_devices, cfg.nodes) == (
        "megatron", 2, 1, 16, 2)
    assert (cfg.batch, cfg.algorithm.n, cfg.minibatches, cfg.ppo_epochs) == (64, 32, 1, 1)
    assert cfg.models()["generate"].id == "llama-3.1-8b"


def test_unknown_hub_model_needs_actor_in_one_line(capsys):
    name = str(LLM / "grpo-llama3.2-1b-instruct-1n8g-megatron.yaml")
    assert config_of("--from-nemo-rl", name).actor == "llama-3.2-1b"  # a hub id of the offline table
    unknown = ["--from-nemo-rl", name, "--from-nemo-rl", "policy.model_name=acme/Unknown-7B"]
    assert main(["run", *unknown, "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "acme/Unknown-7B" in err[0] and "--actor" in err[0]
    assert config_of(*unknown, "--actor", "qwen2.5-1.5b").placement.total_devices == 8


def test_dtensor_tensor_parallel_is_said_not_silently_dropped():
    t = translate_nemo_rl([str(LLM / "grpo-llama3.2-1b-instruct-1n8g-fsdp2tp2-temp0.8-topp0.9-topk50.yaml")])
    assert any("DTensor TP is not Megatron's" in n for n in t.notes)
    assert [u.value for u in t.used if u.key == "policy.dtensor_cfg.tensor_parallel_size"] == [2]


def test_megatron_generation_runs_on_the_policys_model_parallel_group(tmp_path):
    f = tmp_path / "megatron_generation.yaml"  # as NeMo RL's megatron_generation recipes set it
    f.write_text(f"defaults: {BASE}\npolicy:\n  megatron_cfg:\n    enabled: true\n    tensor_model_parallel_size: 2\n"
                 "    pipeline_model_parallel_size: 2\n  dtensor_cfg:\n    enabled: false\n  generation:\n"
                 "    backend: megatron\n    vllm_cfg:\n      tensor_parallel_size: 1\ncluster:\n  gpus_per_node: 8\n")
    got = pairs(translate_nemo_rl([str(f)]).args)
    assert (got["--tp"], got["--train-tp"], got["--pp"]) == ("4", "2", "2")  # not the vllm_cfg's 1
    f.write_text(f.read_text().replace("    backend: megatron\n", "    backend: megatron\n    mcore_generation_config:\n"
                                       "      tensor_model_parallel_size: 8\n"))
    assert pairs(translate_nemo_rl([str(f)]).args)["--tp"] == "8"  # the generation's own layout where it has one


def test_defaults_chain_merges_parent_then_child(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.yaml").write_text("grpo:\n  num_prompts_per_step: 8\n  num_generations_per_prompt: 4\n"
                                        "policy:\n  max_total_sequence_length: 1024\n  generation:\n"
                                        "    max_new_tokens: ${policy.max_total_sequence_length}\n"
                                        "    vllm_cfg: {tensor_parallel_size: 1, gpu_memory_utilization: 0.5}\n"
                                        "cluster: {gpus_per_node: 4, num_nodes: 1}\n")
    (tmp_path / "mid.yaml").write_text("defaults: base.yaml\npolicy:\n  max_total_sequence_length: 2048\n")
    (tmp_path / "sub" / "child.yaml").write_text("defaults: ../mid.yaml\ngrpo:\n  num_prompts_per_step: 16\n"
                                                 "policy:\n  generation:\n    vllm_cfg:\n      _override_: true\n"
                                                 "      tensor_parallel_size: 2\n")
    r = recipe(tmp_path / "sub" / "child.yaml")
    assert [p.name for p in r.chain] == ["child.yaml", "mid.yaml", "base.yaml"]
    assert value(r.flat, "grpo.num_prompts_per_step") == 16 and value(r.flat, "grpo.num_generations_per_prompt") == 4
    assert value(r.flat, "policy.generation.max_new_tokens") == 2048  # interpolation follows the child's value
    assert "policy.generation.vllm_cfg.gpu_memory_utilization" not in r.flat  # _override_: replaced, not merged
    t = translate_nemo_rl([str(tmp_path / "sub" / "child.yaml"), "policy.max_total_sequence_length=4096 "
                           "policy.generation.vllm_cfg.tensor_parallel_size=4", "+policy.model_name=Qwen/Qwen2.5-7B"])
    got = pairs(t.args)
    assert (got["--batch"], got["--max-response"], got["--tp"], got["--actor"], got["--devices"]) == (
        "16", "4096", "4", "qwen2.5-7b", "4")
    assert "with 3 override(s)" in t.sources[0]
    assert [u.note for u in t.used if u.key == "grpo.num_generations_per_prompt"] == ["from base.yaml"]


@pytest.mark.parametrize("argv, msg", [
    ([str(BASE), "policy.generation.vllm_cfg.tensor_paralel_size=4"], "did you mean policy.generation.vllm_cfg.tensor_parallel_size"),
    ([str(BASE), "policy.brand_new=1"], "NeMo RL adds a new key with +policy.brand_new=1"),
    ([str(BASE), "+grpo.num_prompts_per_step=8"], "already in the recipe"),
    ([str(BASE), str(BASE)], "give one recipe .yaml, got 2"),
    (["policy.model_name=x"], "give one recipe .yaml, got 0"),
    ([str(BASE), "policy.megatron_cfg.enabled=true"], "both true; NeMo RL takes one"),
    ([str(BASE), "policy.sequence_packing.train_mb_tokens=null"], "train_mb_tokens is null: NeMo RL reads it"),
    ([str(BASE), "policy.generation.colocated.enabled=false"], "resources.gpus_per_node must be > 0"),
    ([str(BASE), "grpo.num_prompts_per_step=many"], "expected an integer"),
])
def test_bad_recipes_and_overrides_are_one_line(capsys, argv, msg):
    flags = [a for v in argv for a in ("--from-nemo-rl", v)]
    assert main(["run", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0], err


@pytest.mark.parametrize("override, want", [
    ("+policy.megatron_cfg.moe_token_dispatcher_type=alltoall", "alltoall"),
    ("+policy.megatron_cfg.moe_enable_deepep=true", "flex"),
])
def test_the_moe_dispatcher_follows_the_recipe(override, want):
    t = translate_nemo_rl([str(LLM / "grpo-math-qwen3-30ba3b-megatron-tp4-32k.yaml"), override])
    assert pairs(t.args)["--moe-dispatcher"] == want


@pytest.mark.parametrize("override, want", [("+policy.megatron_cfg.moe_router_dtype=fp32", "fp32"),
                                            ("+policy.megatron_cfg.moe_router_dtype=null", "model")])
def test_the_router_dtype_follows_the_recipe_and_null_is_the_models(override, want):
    t = translate_nemo_rl([str(LLM / "grpo-math-qwen3-30ba3b-megatron-tp4-32k.yaml"), override])
    assert pairs(t.args)["--moe-router-dtype"] == want


@pytest.mark.parametrize("overrides, padded", [
    ([], True),  # the recipe turns packing off: whole sequences, each padded to the batch's longest
    (["policy.sequence_packing.enabled=true"], False),  # packed by tokens
    (["policy.dynamic_batching.enabled=true"], False),  # by a token budget
])
def test_micro_batches_are_padded_only_without_packing_or_dynamic_batching(overrides, padded):
    t = translate_nemo_rl([str(LLM / "grpo-math-qwen3-30ba3b-megatron-tp4-32k.yaml"), *overrides])
    assert ("--padded-batches" in t.args) == padded
    # padded, a micro-batch is train_micro_batch_size / logprob_batch_size sequences; packed, a token budget
    assert ("--micro-batch-size" in t.args, "--micro-batch-tokens" in t.args) == (padded, not padded)
    assert config_of("--from-nemo-rl", str(LLM / "grpo-math-qwen3-30ba3b-megatron-tp4-32k.yaml"),
                     *(w for o in overrides for w in ("--from-nemo-rl", o))).padded_batches == padded


@pytest.mark.parametrize("overrides, flag", [
    ([], True),  # in_flight_weight_updates with vLLM's async engine
    (["policy.generation.vllm_cfg.async_engine=false"], False),  # NeMo RL then waits for the generations in flight
    (["grpo.async_grpo.in_flight_weight_updates=false"], False),
])
def test_weights_refit_in_flight_only_with_the_async_engine(overrides, flag):
    t = translate_nemo_rl([str(LLM / "performance" / "grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml"), *overrides])
    assert ("--in-flight-weight-updates" in t.args) == flag and pairs(t.args)["--policy"] == "async"


def test_an_unknown_moe_dispatcher_is_one_line(capsys):
    recipe_ = str(LLM / "grpo-math-qwen3-30ba3b-megatron-tp4-32k.yaml")
    assert main(["run", "--from-nemo-rl", recipe_, "--from-nemo-rl", "+policy.megatron_cfg.moe_token_dispatcher_type=ring"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "moe_token_dispatcher_type: expected one of alltoall, allgather, flex" in err[0], err


def test_a_typo_in_a_recipe_and_a_file_that_is_not_a_recipe_are_refused(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text(f"defaults: {BASE}\ngrpo:\n  num_prompt_per_step: 64\n")
    with pytest.raises(Exception, match="did you mean grpo.num_prompts_per_step"):
        translate_nemo_rl([str(bad)])
    other = tmp_path / "other.yaml"
    other.write_text("trainer:\n  steps: 3\n")
    with pytest.raises(Exception, match="not a NeMo RL GRPO recipe"):
        translate_nemo_rl([str(other)])
    loop = tmp_path / "loop.yaml"
    loop.write_text("defaults: loop.yaml\n")
    with pytest.raises(Exception, match="comes back to itself"):
        translate_nemo_rl([str(loop)])


def test_a_launch_command_is_read_for_its_recipe_and_overrides(tmp_path):
    cmd = tmp_path / "launch.sh"
    cmd.write_text(f"uv run python examples/run_grpo.py \\\n  --config {BASE} \\\n  cluster.gpus_per_node=8 "
                   "grpo.num_prompts_per_step=64\n")
    got = pairs(translate_nemo_rl([str(cmd)]).args)
    assert (got["--devices"], got["--batch"]) == ("8", "64")


@pytest.mark.parametrize("cmd, typed, kept", [
    ("run", [], True), ("run", ["--policy", "baseline"], False), ("compare", [], False),
    ("compare", ["--policies", "baseline,async"], True), ("run", ["--policy=async"], True),
])
def test_the_recipes_async_bound_goes_where_async_runs(cmd, typed, kept):
    """The staleness bound read from grpo.async_grpo is a knob of the async policy: a policy typed on the command
    line (or compare's --policies) wins, and the knob goes only where async runs (else it is listed as ignored)."""
    parser = build_parser()
    recipe_path = str(LLM / "performance" / "grpo-llama3.1-8b-instruct-2n8g-async-1off.yaml")
    argv = with_framework_args(parser, [cmd, "--from-nemo-rl", recipe_path, *typed], echo=False)
    assert ("--staleness" in argv) == kept and ("--in-flight-weight-updates" in argv) == kept
    a = parser.parse_args(argv)
    check_policy_flags(a, [a.policy] if cmd == "run" else a.policies)  # no knob without its policy: no error


@pytest.mark.parametrize("overrides, train, logprob", [
    ([], "4096", "8192"),  # packing on: max_total 4096 x train_micro_batch_size 1, x logprob_batch_size 2
    (["policy.sequence_packing.train_mb_tokens=12288"], "12288", "8192"),
    (["policy.sequence_packing.enabled=false", "policy.dynamic_batching.enabled=true",
      "policy.dynamic_batching.train_mb_tokens=6000", "policy.dynamic_batching.logprob_mb_tokens=9000"], "6000", "9000"),
])
def test_the_token_budgets_of_packed_or_dynamic_micro_batches_are_read(overrides, train, logprob):
    path = str(LLM / "performance" / "grpo-llama3.1-8b-instruct-2n8g.yaml")
    got = pairs(translate_nemo_rl([path, *overrides]).args)
    assert (got["--micro-batch-tokens"], got["--logprob-micro-batch-tokens"]) == (train, logprob)
    cfg = config_of("--from-nemo-rl", path, *(w for o in overrides for w in ("--from-nemo-rl", o)))
    assert (cfg.train_memory.micro_batch_tokens, cfg.train_memory.logprob_micro_batch_tokens) == (int(train), int(logprob))


def test_packing_and_dynamic_batching_together_are_refused_in_one_line(capsys):
    path = str(LLM / "performance" / "grpo-llama3.1-8b-instruct-2n8g.yaml")
    assert main(["run", "--from-nemo-rl", path, "--from-nemo-rl", "policy.dynamic_batching.enabled=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "NeMo RL refuses both" in err


@pytest.mark.parametrize("overrides, noted", [
    (["policy.megatron_cfg.tensor_model_parallel_size=4"], True),  # the recipe's 1 and 2 differ at TP 4
    (["policy.megatron_cfg.tensor_model_parallel_size=2"], False),  # below 4: no check
    (["policy.megatron_cfg.tensor_model_parallel_size=4", "policy.logprob_batch_size=1"], False),  # equal sizes
])
def test_nemo_rls_tp4_batch_check_is_said(overrides, noted):
    t = translate_nemo_rl([str(LLM / "performance" / "grpo-llama3.1-8b-instruct-2n8g.yaml"), *overrides])
    assert any("NRL_IGNORE_TP_ACCURACY_CHECK" in n for n in t.notes) == noted


@pytest.mark.parametrize("overrides, tp, gmu", [
    (["+policy.generation.sglang_cfg.tp_size=2", "+policy.generation.sglang_cfg.mem_fraction_static=0.7"], "2", "0.7"),
    (["+policy.generation.sglang_cfg.gpus_per_server=4"], "4", None),  # v0.5's key; no static fraction: SGLang's own
])
def test_an_sglang_engine_takes_its_own_gpus_and_memory_share_not_vllm_cfgs(overrides, tp, gmu):
    t = translate_nemo_rl([str(BASE), "policy.generation.backend=sglang", *overrides])
    got = pairs(t.args)
    assert got["--tp"] == tp and got.get("--gpu-memory-utilization") == gmu  # the base's vllm_cfg (tp 1, 0.6) unused
    assert any("vLLM-like engine" in n for n in t.notes)
    assert (gmu is None) == any("mem_fraction_static unset" in n for n in t.notes)


def test_vllm_max_model_len_below_the_total_caps_the_response(tmp_path):
    r = tmp_path / "short.yaml"
    r.write_text(f"defaults: {BASE}\npolicy:\n  max_total_sequence_length: 2048\n  generation:\n    vllm_cfg:\n"
                 "      max_model_len: 1024\n")
    t = translate_nemo_rl([str(r)])
    assert pairs(t.args)["--max-response"] == "1024"
    assert any(u.key.endswith("vllm_cfg.max_model_len") and "caps at 1024" in u.note for u in t.used)
