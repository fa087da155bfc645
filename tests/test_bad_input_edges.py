"""Edge inputs a user can type that once ended in a traceback, a hang or a silently different job: each is now either
refused in one line naming the problem or simulated as the job it describes (found by a review that tried bad values
on every command, 2026-11-27)."""

from __future__ import annotations

import json

import pytest

from oppo_sim.cli import main
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.simulate import simulate
from tests.test_nemo_rl_reader import BASE

SMALL = ["--steps", "1", "--batch", "4", "--actor", "qwen2.5-0.5b", "--algorithm", "grpo", "--n", "2", "--reward", "rule"]


def _one_line_error(capsys, argv: list[str], msg: str) -> None:
    try:
        code = main(argv)
    except SystemExit as e:  # an option's own type refuses the value while parsing (argparse exits)
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and msg in err and err.count("\n") == 1, err


@pytest.mark.parametrize("args, msg", [
    (["--contention", "inf"], "must be a finite number >= 0, got inf"),  # was a ZeroDivisionError in the device model
    (["--contention", "nan"], "must be a finite number >= 0, got nan"),
    (["--gpu-memory-utilization", "nan"], "must be a finite number > 0, got nan"),
    (["--batch", "100000000"], "batch must be in [1, 1,000,000] prompts"),  # ran for hours
    (["--policy", "inter", "--delta", "1000000000000"], "delta must be <= 1,000,000 prompts"),
    (["--policy", "oppo", "--delta-max", "1000000000000"], "delta_max <= 1,000,000"),
])
def test_unbounded_and_non_finite_numbers_are_refused(capsys, args, msg):
    _one_line_error(capsys, ["run", *SMALL, *args], msg)


@pytest.mark.parametrize("override, msg", [
    ("data.train_batch_size=nan", "data.train_batch_size: expected an integer, got 'nan'"),  # ValueError traceback
    ("data.train_batch_size=inf", "data.train_batch_size: expected an integer, got 'inf'"),  # OverflowError traceback
    ("data.train_batch_size=1e30", "batch must be in [1, 1,000,000] prompts"),
])
def test_a_verl_value_that_is_no_integer_is_refused(capsys, override, msg):
    _one_line_error(capsys, ["run", "--steps", "1", "--from-verl", override], msg)


@pytest.mark.parametrize("override, msg", [
    ("grpo=5", "grpo is a section of the recipe, not a value"),  # a dot-less override was dropped as a shell variable
    ("nokey=1", "nokey is not in the recipe"),
    ("policy.model_name=null", "policy.model_name is null"),  # was the default model, silently
    ("loss_fn.reference_policy_kl_penalty=nan", "expected a finite number"),  # was "no reference", silently
    ("loss_fn.reference_policy_kl_penalty=-1", "must be >= 0"),
])
def test_a_nemo_rl_override_is_applied_or_refused(capsys, override, msg):
    _one_line_error(capsys, ["run", "--steps", "1", "--from-nemo-rl", str(BASE), "--from-nemo-rl", override], msg)


def test_a_hydra_delete_override_and_a_null_section_still_apply(capsys):
    """``~key`` reached ``Path.expanduser``, which raises on an unknown user: a traceback before any override ran."""
    for override in ("~grpo.batch_multiplier", "policy.optimizer=null"):
        assert main(["run", "--steps", "1", "--from-nemo-rl", str(BASE), "--from-nemo-rl", override]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("flag, value, msg", [
    ("--trace", "~nosuchuser/x.csv", "trace file not found"),
    ("--actor", "~nosuchuser/config.json", "no such file"),
])
def test_a_path_under_an_unknown_users_home_is_a_missing_file(capsys, flag, value, msg):
    _one_line_error(capsys, ["run", "--steps", "1", flag, value], msg)


@pytest.mark.parametrize("extra, msg", [
    ({"num_key_value_heads": 0}, "kv_heads must be a positive integer, got 0"),  # was read as "unset": MHA
    ({"torch_dtype": "int3"}, "torch_dtype 'int3' is not one of"),  # was priced as bf16
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
])
def test_a_malformed_model_config_value_is_refused(tmp_path, capsys, extra, msg):
    cfg = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
           "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    _one_line_error(capsys, ["run", *SMALL[:4], "--actor", str(path), *SMALL[6:]], msg)


def test_a_gpu_yaml_number_with_an_exponent_reads_as_a_number(tmp_path):
    """YAML 1.1 reads ``1e3`` (no dot) as a string; the error said "must be a number, got '1e3'"."""
    from oppo_sim.hw.devices.gpu_yaml import load_gpu_yaml
    from tests.test_gpus import EXAMPLE
    text = "\n".join("bf16_tflops: 1e3" if line.startswith("bf16_tflops:") else line
                      for line in EXAMPLE.read_text().splitlines())
    path = tmp_path / "card.yaml"
    path.write_text(text + "\n")
    assert load_gpu_yaml(path).gpu.peak_flops == pytest.approx(1e15)


@pytest.mark.parametrize("pp, vpp", [(8, 1), (2, 3)])
def test_a_megatron_split_that_leaves_part_layers_is_refused(capsys, pp, vpp):
    """Megatron-Core asserts that the layers divide over pp x vpp; 28 over 8 was priced as 3.5 layers a stage."""
    _one_line_error(capsys, ["run", "--steps", "1", "--batch", "4", "--placement", "colocated", "--devices", "8",
                             "--train-backend", "megatron", "--pp", str(pp), "--vpp", str(vpp)],
                    f"28 layers do not divide evenly over pp {pp} x vpp {vpp}")


def test_ppo_with_several_responses_a_prompt_trains_all_of_them():
    """verl PPO with ``rollout.n`` > 1 generates and trains B x n responses; n was ignored (B trained)."""
    def run(n: int):
        cfg = SimConfig(batch=8, steps=2, algorithm=Algorithm("ppo", n=n), seed=3)
        return simulate("oppo-longtail-default", "baseline", cfg).steps
    one, four = run(1), run(4)
    assert list(one["samples"]) == [8, 8] and list(four["samples"]) == [32, 32]
    assert (four["training_s"] > one["training_s"]).all()


@pytest.mark.parametrize("argv, msg", [
    (["run", "--steps", "1", "--plot", "timeline.txt"], "cannot write a figure to 'timeline.txt'"),
    (["compare", "--steps", "1", "--plot", "."], "cannot write a figure to '.'"),
    (["sweep", "--steps", "1", "--out", "table.xlsx"], "cannot write a table to 'table.xlsx'"),  # said after the sweep
])
def test_an_output_file_that_cannot_be_written_is_refused_before_the_work(capsys, argv, msg):
    _one_line_error(capsys, argv, msg)


def test_a_ray_address_nobody_answers_is_refused_at_once(capsys):
    """Ray retries an address nobody listens on for minutes; the sweep hung."""
    pytest.importorskip("ray")
    _one_line_error(capsys, ["sweep", "--steps", "1", "--batch", "4", "--processes", "1", "--ray-address", "127.0.0.1:1"],
                    "Ray address '127.0.0.1:1': cannot connect")


@pytest.mark.parametrize("argv, msg", [
    (["run", "--steps", "1", "--batch", "4", "--placement", "colocated", "--devices", "3", "--tp", "3", "--actor",
      "qwen2.5-0.5b"], "generation tensor parallelism (--tp) 3 does not split qwen2.5-0.5b's 14 attention heads"),
    (["run", "--steps", "1", "--batch", "4", "--placement", "colocated", "--devices", "8", "--train-backend", "megatron",
      "--train-tp", "8"], "the trainer's tensor parallelism (--train-tp) 8 does not split"),
    (["replay", "--limit", "5", "--trace", "azure2023_conv", "--tp", "3"], "tensor parallelism (--tp) 3 does not split"),
])
def test_tensor_parallelism_the_heads_do_not_allow_is_refused(capsys, argv, msg):
    """vLLM refuses it ("heads must be divisible by tensor parallel size"); run and replay priced it (plan knew)."""
    _one_line_error(capsys, argv, msg)


@pytest.mark.parametrize("extra", [["--tps", "3"], ["--max-staleness", "0", "--policies", "async"]])
def test_a_plan_whose_options_leave_nothing_to_try_says_so(capsys, extra):
    """It printed the reference (outside the options) as the best configuration, exit 0."""
    _one_line_error(capsys, ["plan", "--steps", "1", "--batch", "4", "--processes", "1", "--trials", "5", *extra],
                    "the search space is empty")


@pytest.mark.parametrize("line, msg", [
    ("step:99999999999999999999 - response_length/mean:300 - prompt_length/mean:100", "is not a step number"),
    ("step:1 - response_length/mean:300 - response_length/max:100 - response_length/min:500 - prompt_length/mean:100",
     "response length min 500, mean 300, max 100 are not in order"),  # was a trace of mean 99, silently
    ("step:1 - response_length/mean:300 - response_length/max:inf - prompt_length/mean:100", "is not finite"),
    ("step:1 - response_length/mean:-300 - prompt_length/mean:100", "must be a finite number >= 1, got -300"),
])
def test_a_run_log_with_impossible_lengths_is_refused(tmp_path, capsys, line, msg):
    log = tmp_path / "run.log"
    log.write_text(line + "\n")
    _one_line_error(capsys, ["import", "--out", str(tmp_path / "t.csv"), str(log)], msg)


@pytest.mark.parametrize("argv, msg", [
    (["run", "--steps", "1", "--contention", "1e308"], "contention must be a number in [0, 100]"),  # ZeroDivisionError
    (["run", "--steps", "1", "--devices", "1000000000"], "devices, got"),  # allocated for hours
    (["run", "--steps", "1", "--json", "."], "cannot write a file to '.'"),
    (["import", "--out", "t.csv", "/dev/null"], "not a file"),  # an AssertionError
])
def test_more_values_no_run_can_have_are_refused(capsys, argv, msg):
    _one_line_error(capsys, argv, msg)


def test_an_unknown_config_framework_is_refused(tmp_path, capsys):
    log = tmp_path / "run.log"
    log.write_text("step:1 - response_length/mean:300 - prompt_length/mean:100\n")
    _one_line_error(capsys, ["check", "--config-framework", "foo", "--log", str(log)], "expected verl, openrlhf or nemo-rl")


@pytest.mark.parametrize("argv, msg", [
    (["validate", "--steps", "2", "--warmup", "5"], "--warmup 5 leaves none of the --steps 2"),  # fell back to all steps
    (["run", "--temperature", "nan"], "must be a finite number >= 0, got nan"),  # failed 30 s in, in a worker
    (["run", "--engine-warmup", "nan"], "must be a finite number >= 0, got nan"),
    (["run", "--gpus-per-worker", "-1"], "must be a finite number >= 0, got -1"),
])
def test_oppo_real_refuses_values_before_starting_engines(capsys, argv, msg):
    from oppo_real.cli import main as real_main
    try:
        code = real_main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and msg in err and err.count("\n") == 1, err


def test_a_recipe_that_nulls_a_section_nemo_rl_needs_is_refused(tmp_path, capsys):
    """A child recipe's ``grpo: null`` fell back to NeMo RL's defaults silently; NeMo RL would not start."""
    child = tmp_path / "child.yaml"
    child.write_text(f"defaults: {BASE}\ngrpo: null\n")
    _one_line_error(capsys, ["run", "--steps", "1", "--from-nemo-rl", str(child)], "the section grpo is set to null")
