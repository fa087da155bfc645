"""OpenRLHF's two command-line styles read as OpenRLHF reads them: scripts written for these tests after
OpenRLHF's ``examples/scripts`` (dotted, flat, async with bash arrays; each names the file and commit it is
modelled on) against values written by hand from the scripts; style detection, typo and not-understood refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from oppo_sim.cli import main
from oppo_sim.frameworks.openrlhf import translate_openrlhf
from oppo_sim.frameworks.openrlhf_flags import DOTTED as DOTTED_NAMES

from framework_helpers import config_of, pairs

FIX = Path(__file__).parent / "fixtures" / "frameworks" / "openrlhf"
DOTTED = str(FIX / "train_ppo_ray_hybrid_engine.sh")
FLAT = str(FIX / "train_ppo_ray_hybrid_engine_flat.sh")
ASYNC = str(FIX / "train_reinforce_baseline_ray_agent_async.sh")




def one_line_error(capsys, *argv: str) -> str:
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


HYBRID = {"--batch": "1024", "--n": "1", "--minibatches": "8", "--ppo-epochs": "1", "--max-prompt": "2047",
          "--max-response": "2048", "--algorithm": "ppo", "--zero": "3", "--recompute": "full", "--sp": "1",
          "--gpu-memory-utilization": "0.5", "--tp": "2", "--placement": "colocated", "--devices": "8", "--nodes": "1",
          "--colocate": "sleep", "--sleep-level": "1"}


def test_dotted_script_is_read_as_the_current_openrlhf():
    t = translate_openrlhf(DOTTED)
    got = pairs(t.args)
    assert {k: got.get(k) for k in HYBRID} == HYBRID
    assert "--truncate-prompt" in got and "--offload-train-state" in got and "--no-reference" not in got
    assert "dotted flags" in t.echo().splitlines()[0]
    assert not t.pending and (got["--actor"], got["--reward"]) == ("llama-3-8b", "llama-3-8b")  # OpenRLHF/Llama-3-8b-*: by name
    ignored = {i.key for i in t.ignored}
    assert {"--actor.adam.lr", "--ds.packing_samples", "--ref.num_nodes"} <= ignored
    assert not [i for i in t.ignored if "would refuse" in i.why]  # every flag is one of OpenRLHF's


def test_flat_script_of_the_same_job_gives_the_same_options():
    dotted, flat = translate_openrlhf(DOTTED), translate_openrlhf(FLAT)
    assert flat.args == dotted.args
    assert "flat flags" in flat.echo().splitlines()[0]
    cfg = config_of("--from-openrlhf", FLAT, "--actor", "llama-3.1-8b", "--reward", "llama-3.1-8b")
    assert (cfg.batch, cfg.algorithm.n, cfg.minibatches, cfg.engine.tp, cfg.placement.total_devices) == (1024, 1, 8, 2, 8)
    assert cfg.train_memory.zero_stage == 3 and cfg.algorithm.name == "ppo" and cfg.max_response == 2048


def test_async_script_with_bash_arrays():
    t = translate_openrlhf(ASYNC)  # "${CKPT_ARGS[@]}" and friends expanded as bash would
    got = pairs(t.args)
    expected = {"--batch": "128", "--n": "8", "--minibatches": "1", "--ppo-epochs": "1", "--max-prompt": "10240",
                "--max-response": "64000", "--algorithm": "dapo", "--reward": "rule", "--zero": "3",
                "--recompute": "full", "--sp": "2", "--tp": "2", "--gpu-memory-utilization": "0.95",
                "--policy": "async", "--staleness": "1", "--placement": "gen-apart 4+4", "--nodes": "1"}
    assert {k: got.get(k) for k in expected} == expected


def test_async_colocate_all_puts_vllm_apart_and_partial_rollout_is_said():
    t = translate_openrlhf("--actor.model_name_or_path Qwen/Qwen2.5-7B --train.async_enable --train.partial_rollout_enable "
                           "--train.async_queue_size 2 --train.colocate_all --actor.num_gpus_per_node 4 "
                           "--vllm.num_engines 4 --vllm.tensor_parallel_size 1 --algo.advantage.estimator group_norm "
                           "--rollout.n_samples_per_prompt 4 --reward.remote_url http://x")
    got = pairs(t.args)
    assert (got["--policy"], got["--staleness"], got["--placement"]) == ("async", "2", "gen-apart 4+4")
    assert any("partial_rollout_enable" in n for n in t.notes)
    assert not any("synchronous loop" in n for n in t.notes)


@pytest.mark.parametrize("args, option, value", [
    ("--prompt_max_len 512 --generate_max_len 256", "--max-prompt", "512"),
    ("--prompt_max_len 512 --generate_max_len 256", "--max-response", "256"),
    ("--max_len 4096 --max_new_tokens 1024", "--max-prompt", "3072"),
    ("--data.max_len 4096 --rollout.max_new_tokens 1024", "--max-response", "1024"),
    ("--data.max_len 4096 --rollout.max_new_tokens 1024", "--max-prompt", "3072"),
    ("--rollout_batch_size 8", "--max-prompt", "1024"),  # a flat line without lengths: the 2025 defaults
    ("--rollout.batch_size 8", "--max-response", "2048"),  # dotted: max_len 2048, no max_new_tokens
])
def test_lengths_of_each_version(args, option, value):
    assert pairs(translate_openrlhf(args).args)[option] == value


@pytest.mark.parametrize("args, msg", [
    ("--rollout.bach_size 8", "did you mean --rollout.batch_size"),
    ("--pretrain Qwen/Qwen2.5-7B --rollout_batchsize 8", "did you mean --rollout_batch_size"),
    ("--pretrain Qwen/Qwen2.5-7B --rollout.batch_size 8", "mixes OpenRLHF's dotted flags"),
    ("--foo.bar 1 --baz.qux 2", "none of its 2 options is an OpenRLHF train_ppo_ray option"),
    ("--local_rank 0", "no OpenRLHF train_ppo_ray option found"),
    ("--train.async_enable --vllm.enable_sleep --train.colocate_all", "async RLHF is not supported with vLLM sleep"),
    ("--train.partial_rollout_enable", "without --train.async_enable"),
    ("--prompt_max_len 512 --max_len 2048", "OpenRLHF takes one pair"),
    ("--data.max_len 1024 --rollout.max_new_tokens 2048", "must be >= 1 and below --data.max_len 1024"),
])
def test_refusals_are_one_line(capsys, args, msg):
    assert msg in one_line_error(capsys, "--from-openrlhf", args)


def test_an_unknown_flag_near_no_known_one_is_listed_not_refused():
    t = translate_openrlhf("--rollout.batch_size 8 --my.custom_flag 3")
    assert [(i.key, "would refuse" in i.why) for i in t.ignored] == [("--my.custom_flag", True)]


def test_a_command_quoted_inside_a_launcher_is_read(tmp_path):
    """OpenRLHF's slurm example runs the command inside ``srun ... bash -c "..."``."""
    script = tmp_path / "slurm.sh"
    script.write_text('JOBLOG=x.log\nsrun --overlap -w "$node_1" bash -c \\\n"pip install ray && ray job submit -- '
                      'python3 -m openrlhf.cli.train_ppo_ray \\\n  --rollout.batch_size 8 \\\n'
                      '  --rollout.n_samples_per_prompt 2" &>> ${JOBLOG}\n')
    got = pairs(translate_openrlhf(str(script)).args)
    assert (got["--batch"], got["--n"]) == ("8", "2")


@pytest.mark.parametrize("args, msg", [
    ("--algo.advantage.estimator group_norm --actor.model_name_or_path Qwen/Qwen2.5-7B", "a group baseline needs > 1"),
    ("--advantage_estimator rloo --n_samples_per_prompt 1", "a group baseline needs > 1"),
    ("--algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 4 --algo.dynamic_filtering_enable",
     "without --reward.remote_url or --train.agent_func_path"),
])
def test_openrlhfs_own_argument_checks(capsys, args, msg):
    assert msg in one_line_error(capsys, "--from-openrlhf", args)


def test_every_dotted_name_read_maps_to_a_flat_name_of_the_same_option():
    from oppo_sim.frameworks.openrlhf import READ
    from oppo_sim.frameworks.openrlhf_flags import FLAT, TO_FLAT

    assert set(TO_FLAT) <= DOTTED_NAMES and set(TO_FLAT.values()) <= FLAT
    old = {"prompt_max_len", "generate_max_len", "max_tokens_per_gpu"}  # flat-only: names of earlier flat releases
    assert READ - old <= set(TO_FLAT.values())  # each read option has both spellings


@pytest.mark.parametrize("args, want", [
    ("--use_dynamic_batch --train_max_tokens_per_gpu 8192 --ring_attn_size 2", (16384, 16384)),  # x the ring degree
    ("--use_dynamic_batch", (16192, 16192)),  # OpenRLHF's defaults: 16192, the rollout's = the training's
    ("--use_dynamic_batch --max_tokens_per_gpu 4096", (4096, None)),  # the one budget before the split
    ("--use_dynamic_batch --rollout_max_tokens_per_gpu 30000", (16192, 30000)),
    ("--train_max_tokens_per_gpu 8192", (None, None)),  # without the dynamic batch it is not read
])
def test_the_dynamic_batch_token_budgets_are_read(args, want):
    t = translate_openrlhf("--pretrain meta-llama/Llama-3.1-8B-Instruct " + args)
    got = {a: int(t.args[i + 1]) for i, a in enumerate(t.args) if a.endswith("micro-batch-tokens")}
    assert (got.get("--micro-batch-tokens"), got.get("--logprob-micro-batch-tokens")) == want
    if want[0] is None:
        assert [i.why for i in t.ignored if "tokens_per_gpu" in i.key] == ["read only with the dynamic batch"]



@pytest.mark.parametrize("args, want", [
    ("--pretrain meta-llama/Llama-3.1-8B-Instruct", (4, 8)),  # the flat releases' defaults (to a2978694, 2026-04-11)
    ("--actor.model_name_or_path meta-llama/Llama-3.1-8B-Instruct", (1, 1)),  # the dotted releases' defaults
    ("--pretrain meta-llama/Llama-3.1-8B-Instruct --micro_train_batch_size 8 --micro_rollout_batch_size 16", (8, 16)),
    ("--pretrain meta-llama/Llama-3.1-8B-Instruct --use_dynamic_batch --micro_train_batch_size 8", (None, None)),
])
def test_fixed_micro_batch_sizes_are_read_without_the_dynamic_batch(args, want):
    cfg = config_of("--from-openrlhf", args)
    assert (cfg.train_memory.micro_batch_size, cfg.train_memory.logprob_micro_batch_size) == want


def test_a_typed_token_budget_replaces_the_frameworks_micro_batch_size():
    cfg = config_of("--from-openrlhf", "--pretrain meta-llama/Llama-3.1-8B-Instruct", "--micro-batch-tokens", "8192")
    t = cfg.train_memory
    assert (t.micro_batch_tokens, t.micro_batch_size, t.logprob_micro_batch_size) == (8192, None, 8)


def test_the_old_and_new_budget_names_together_are_refused_in_one_line(capsys):
    cmd = "--pretrain meta-llama/Llama-3.1-8B-Instruct --use_dynamic_batch --max_tokens_per_gpu 4096 " \
          "--rollout_max_tokens_per_gpu 30000"
    assert main(["run", "--from-openrlhf", cmd]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no OpenRLHF release takes both" in err
