"""``plan --export verl|openrlhf|nemo-rl`` then ``--from-verl/--from-openrlhf/--from-nemo-rl`` gives back the same
configuration, for each framework and layout (FSDP, Megatron tp/pp, async); the export is safe to paste (no
simulated step count, the planned epochs and mini-batches, what cannot be expressed said in ``#`` lines)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from oppo_sim.cli import main
from oppo_sim.core.policies import Async
from oppo_sim.frameworks.export import Chosen, export
from oppo_sim.frameworks.framework_args import translate
from oppo_sim.frameworks.openrlhf_flags import DOTTED

from framework_helpers import config_of

BASE_RECIPE = Path(__file__).parent / "fixtures" / "frameworks" / "nemo_rl" / "grpo_math_1B.yaml"
FLAG = {"verl": "--from-verl", "openrlhf": "--from-openrlhf", "nemo-rl": "--from-nemo-rl"}


def policy_of(args) -> tuple[str, str | None]:
    args = list(args)
    at = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--policy", "--staleness")}
    policy = at.get("--policy", "baseline")  # an untyped bound is the async policy's default
    return policy, at.get("--staleness", str(Async.staleness) if policy == "async" else None)


def fields(cfg) -> dict:
    p, t = cfg.placement, cfg.trainer
    return {"batch": cfg.batch, "n": cfg.algorithm.n, "algorithm": cfg.algorithm.name, "kl": cfg.algorithm.kl,
            "reward": cfg.algorithm.reward, "actor": cfg.models()["generate"].id, "tp": cfg.engine.tp,
            "models": {r: cfg.models()[r].id for r in ("reward", "critic")} if cfg.algorithm.critic else None,
            "pools": [(x.name, x.devices) for x in p.pools], "nodes": cfg.nodes,
            "gpu_memory_utilization": cfg.engine.gpu_memory_utilization, "sp": cfg.train_memory.sequence_parallel,
            "max_response": cfg.max_response, "max_prompt": cfg.max_prompt, "truncate": cfg.truncate_prompt,
            "ppo_epochs": cfg.ppo_epochs, "minibatches": cfg.minibatches, "zero": cfg.train_memory.zero_stage,
            "recompute": cfg.train_memory.recompute, "trainer": (t.backend, t.tp, t.pp, t.vpp, t.cp, t.distributed_optimizer, t.moe_dispatcher),
            "ep": cfg.expert_parallel, "eager": cfg.engine.enforce_eager, "cpu_adam": t.optimizer_offload, "offload": cfg.offload_train_state if p.shared(p.generate) else None,
            "lora": t.lora, "reference_in_actor": cfg.reference_in_actor, "full_logits": cfg.train_memory.full_logits}


def round_trip(tmp_path: Path, framework: str, argv: list[str], chosen: Chosen):
    original = config_of("--actor", "qwen2.5-7b", "--max-response", "2048", "--max-prompt", "1024", *argv)
    text = export(original, framework, chosen)
    path = tmp_path / ("recipe.yaml" if framework == "nemo-rl" else f"exported.{framework}")
    if framework == "nemo-rl":
        shutil.copy(BASE_RECIPE, tmp_path / "grpo_math_1B.yaml")
    path.write_text(text)
    return original, text, config_of(FLAG[framework], str(path)), translate(
        *{"verl": ([str(path)], None), "openrlhf": ([], str(path)), "nemo-rl": ([], None, [str(path)])}[framework])


RULE = ["--algorithm", "grpo", "--n", "4", "--reward", "rule", "--batch", "16"]
CASES = [  # (framework, run arguments of the planned configuration, what the plan chose, reason it cannot pass yet)
    ("verl", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--recompute", "full",
              "--ppo-epochs", "2", "--minibatches", "2", "--truncate-prompt", "--enforce-eager"], Chosen("baseline", 3, "full")),
    ("verl", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "2", "--recompute", "none",
              "--ppo-epochs", "1", "--optimizer-offload", "1"], Chosen("baseline", 2, "none")),
    ("verl", ["--placement", "colocated", "--devices", "16", "--nodes", "2", *RULE, "--train-backend", "megatron",
              "--train-tp", "2", "--pp", "2", "--recompute", "full", "--ppo-epochs", "1", "--optimizer-offload", "0.5"],
     Chosen("baseline", None, "full")),
    ("verl", ["--placement", "colocated", "--devices", "16", "--nodes", "2", *RULE, "--actor", "qwen3-30b-a3b",
              "--train-backend", "megatron", "--ep", "8", "--moe-dispatcher", "allgather", "--recompute", "full",
              "--ppo-epochs", "1"], Chosen("baseline", None, "full")),
    ("verl", ["--placement", "gen-apart 4+4", *RULE, "--zero", "3", "--recompute", "full", "--ppo-epochs", "1"],
     Chosen("async(k=1)", 3, "full")),
    ("verl", ["--placement", "colocated", "--devices", "16", "--nodes", "2", *RULE, "--zero", "3", "--fsdp-size", "8",
              "--recompute", "full", "--ppo-epochs", "1"], Chosen("baseline", 3, "full")),
    ("verl", ["--placement", "colocated", "--devices", "8", "--algorithm", "ppo", "--reward", "qwen2.5-1.5b",
              "--critic", "qwen2.5-3b", "--batch", "16", "--zero", "3", "--recompute", "full", "--ppo-epochs", "1"],
     Chosen("baseline", 3, "full")),
    ("verl", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--recompute", "full", "--ppo-epochs",
              "1", "--full-logits"], Chosen("baseline", 3, "full")),
    ("verl", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--recompute", "full", "--ppo-epochs",
              "1", "--lora-rank", "32", "--lora-sync", "adapter", "--reference-in-actor"], Chosen("baseline", 3, "full")),
    ("verl", ["--placement", "colocated", "--devices", "8", *RULE, "--train-backend", "megatron", "--train-tp", "2",
              "--recompute", "full", "--ppo-epochs", "1", "--lora-rank", "16", "--reference-in-actor"],
     Chosen("baseline", None, "full")),
    ("openrlhf", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--recompute", "full",
                  "--ppo-epochs", "1", "--truncate-prompt", "--lora-rank", "16", "--lora-targets", "q_proj,v_proj"],
     Chosen("baseline", 3, "full")),
    ("nemo-rl", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--recompute", "full",
                 "--ppo-epochs", "1", "--lora-rank", "8", "--lora-targets", "q_proj,k_proj,v_proj,o_proj"],
     Chosen("baseline", 3, "full")),
    ("nemo-rl", ["--placement", "colocated", "--devices", "8", *RULE, "--train-backend", "megatron", "--recompute",
                 "full", "--ppo-epochs", "1", "--lora-rank", "8"], Chosen("baseline", None, "full")),
    ("openrlhf", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "2", "--recompute", "full",
                  "--ppo-epochs", "2", "--minibatches", "4", "--truncate-prompt", "--sp", "2", "--enforce-eager"],
     Chosen("baseline", 2, "full")),
    ("openrlhf", ["--placement", "split 8+6+2", "--nodes", "2", "--algorithm", "ppo", "--reward", "qwen2.5-7b",
                  "--batch", "32", "--minibatches", "2", "--zero", "3", "--recompute", "none", "--ppo-epochs", "1",
                  "--truncate-prompt", "--optimizer-offload", "1"], Chosen("baseline", 3, "none")),
    ("openrlhf", ["--placement", "gen-apart 4+4", *RULE, "--zero", "3", "--recompute", "full", "--ppo-epochs", "1",
                  "--truncate-prompt"], Chosen("async(k=2)", 3, "full")),
    ("nemo-rl", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--recompute", "full",
                 "--ppo-epochs", "1", "--minibatches", "2", "--sp", "2", "--enforce-eager"], Chosen("baseline", 3, "full")),
    ("nemo-rl", ["--placement", "colocated", "--devices", "16", "--nodes", "2", *RULE, "--train-backend", "megatron",
                 "--train-tp", "2", "--pp", "2", "--recompute", "full", "--ppo-epochs", "1", "--optimizer-offload", "1"],
     Chosen("baseline", None, "full")),
    ("nemo-rl", ["--placement", "colocated", "--devices", "16", "--nodes", "2", *RULE, "--actor", "qwen3-30b-a3b",
                 "--train-backend", "megatron", "--ep", "8", "--moe-dispatcher", "allgather", "--recompute", "full",
                 "--ppo-epochs", "1"], Chosen("baseline", None, "full")),
    ("nemo-rl", ["--placement", "gen-apart 2+6", *RULE, "--zero", "3", "--recompute", "none", "--ppo-epochs", "1"],
     Chosen("async(k=1)", 3, "none")),
    ("nemo-rl", ["--placement", "gen-apart 8+8", "--nodes", "2", *RULE, "--train-backend", "megatron", "--pp", "2",
                 "--recompute", "full", "--ppo-epochs", "1", "--no-distributed-optimizer"], Chosen("async(k=2)", None, "full")),
]


PARAMS = [pytest.param(*c[:3], id=f"{c[0]}-{c[2].policy}-{'megatron' if 'megatron' in c[1] else 'fsdp'}-{c[1][1]}"
                       + ("-lora" if "--lora-rank" in c[1] else "")) for c in CASES]


@pytest.mark.parametrize("framework, argv, chosen", PARAMS)
def test_export_then_import_gives_the_same_configuration(tmp_path, framework, argv, chosen):
    original, text, back, t = round_trip(tmp_path, framework, argv, chosen)
    assert fields(back) == fields(original), text
    want = ("async", str(chosen.param("k"))) if chosen.kind == "async" else ("baseline", None)
    assert policy_of(t.args) == want


@pytest.mark.parametrize("framework, argv, chosen", [p for p in PARAMS if p.values[0] == "verl"],
                         ids=[p.id for p in PARAMS if p.values[0] == "verl"])
def test_verl_exports_its_zero2_megatron_and_one_step_off_keys(tmp_path, framework, argv, chosen):
    original = config_of("--actor", "qwen2.5-7b", *argv)
    text = export(original, framework, chosen)
    if chosen.zero_stage == 2:
        assert "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=False" in text
    if original.trainer.fsdp_size:
        assert "actor_rollout_ref.actor.fsdp_config.fsdp_size=8" in text
    if original.trainer.megatron:
        pp = f"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size={original.trainer.pp}"
        assert "--config-name=ppo_megatron_trainer" in text and pp in text
        moe = "+actor_rollout_ref.actor.megatron.override_transformer_config.moe_token_dispatcher_type=allgather"
        assert (moe in text) == (original.expert_parallel > 1)
        assert "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=full" in text
    if chosen.kind == "async":
        assert "actor_rollout_ref.hybrid_engine=False" in text and "rollout.n_gpus_per_node=4" in text
        assert "one_step_off_policy.main_ppo" in text


def test_exports_are_safe_to_paste():
    cfg = config_of("--placement", "colocated", "--devices", "8", *RULE, "--steps", "7")
    verl, orl, nemo = (export(cfg, f, Chosen("oppo")) for f in ("verl", "openrlhf", "nemo-rl"))
    assert "total_training_steps=" not in verl and "max_num_steps" not in nemo.split("\n", 3)[-1]
    settings = [line for line in orl.splitlines() if not line.startswith("#")]
    assert not [line for line in settings if "num_episodes" in line or "steps" in line]
    for text in (verl, orl, nemo):
        assert "oppo" in text.splitlines()[0] and text.splitlines()[0].startswith("#")
    flags = [w[2:] for line in orl.splitlines() if not line.startswith("#") for w in line.split() if w.startswith("--")]
    assert flags and set(flags) <= DOTTED  # OpenRLHF's current dotted flags, each a real one
    megatron = config_of("--placement", "colocated", "--devices", "8", *RULE, "--train-backend", "megatron",
                         "--train-tp", "2")
    assert "OpenRLHF trains with DeepSpeed: the plan's megatron tp2 pp1 trainer has no setting" in export(
        megatron, "openrlhf", Chosen("baseline"))
    ppo = config_of("--placement", "colocated", "--devices", "8", "--algorithm", "ppo")
    with pytest.raises(Exception, match="NeMo RL runs GRPO-family algorithms"):
        export(ppo, "nemo-rl")
    colocated_async = export(cfg, "nemo-rl", Chosen("async(k=1)"))
    assert "this runs synchronously" in colocated_async and "async_grpo" not in colocated_async


def test_exports_say_where_the_plan_moved_weights_otherwise_than_the_framework():
    kl = [*RULE, "--placement", "colocated", "--devices", "8"]  # a reference (KL) by default
    plain, nemo_like = config_of(*kl), config_of(*kl, "--reference-on-host", "--refit-buffers", "2")
    assert "plan with --reference-on-host" in export(plain, "nemo-rl") and "plan with --refit-buffers 2" in export(plain, "nemo-rl")
    assert "--reference-on-host" not in export(nemo_like, "nemo-rl") and "--refit-buffers" not in export(nemo_like, "nemo-rl")
    for framework in ("verl", "openrlhf"):
        assert "host memory" not in export(plain, framework) and "double-buffers" not in export(plain, framework)
        text = export(nemo_like, framework)
        assert "# the plan swaps the reference in from host memory" in text
        assert "# the plan double-buffers the refit" in text and "tensor by tensor" in text
    assert "ref.fsdp_config.param_offload=True offloads them" in export(nemo_like, "verl")


def test_plan_export_writes_the_planned_epochs_and_minibatches(capsys, tmp_path):
    argv = ["plan", "--gpus", "4xh100-sxm", "--actor", "qwen2.5-0.5b", "--reward", "rule", "--algorithm", "grpo",
            "--n", "4", "--batch", "8", "--steps", "2", "--max-response", "128", "--policies", "baseline",
            "--layouts", "colocated", "--processes", "1", "--ppo-epochs", "2", "--minibatches", "2", "--export", "nemo-rl"]
    assert main(argv) == 0
    text = capsys.readouterr().out.split("nemo-rl settings of the best configuration:\n", 1)[1]
    shutil.copy(BASE_RECIPE, tmp_path / "grpo_math_1B.yaml")
    (tmp_path / "plan.yaml").write_text(text)
    assert "NeMo RL trains each step's samples once: the plan's 2 epochs have no setting" in text
    cfg = config_of("--from-nemo-rl", str(tmp_path / "plan.yaml"))
    assert (cfg.batch, cfg.algorithm.n, cfg.minibatches, cfg.placement.total_devices) == (8, 4, 2, 4)
    assert main([*argv[:-1], "openrlhf"]) == 0
    out = capsys.readouterr().out
    assert "--train.max_epochs 2" in out and "--train.batch_size 16" in out  # 8 x 4 samples in 2 mini-batches


@pytest.mark.parametrize("framework, argv", [
    ("verl", ["--placement", "colocated", "--devices", "16", "--nodes", "2", *RULE, "--train-backend", "megatron",
              "--train-tp", "2", "--cp", "2", "--recompute", "full", "--ppo-epochs", "1"]),  # verl's budgets are x cp
    ("verl", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--sp", "2", "--recompute", "full",
              "--ppo-epochs", "1"]),  # and x the Ulysses degree
    ("nemo-rl", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--recompute", "full",
                 "--ppo-epochs", "1"]),
    ("openrlhf", ["--placement", "colocated", "--devices", "8", *RULE, "--zero", "3", "--sp", "2", "--recompute",
                  "full", "--ppo-epochs", "1", "--truncate-prompt"]),  # OpenRLHF's budgets are x the ring degree
])
@pytest.mark.parametrize("kind", ["tokens", "size"])
def test_micro_batches_export_and_import_unchanged(tmp_path, framework, argv, kind):
    given = {"tokens": (12288, 20480), "size": (4, 8)}[kind]
    argv = [*argv, f"--micro-batch-{kind}", str(given[0]), f"--logprob-micro-batch-{kind}", str(given[1])]
    if framework == "nemo-rl" and kind == "size":  # NeMo RL counts sequences only in padded micro-batches
        argv.append("--padded-batches")
    _, text, back, _ = round_trip(tmp_path, framework, argv, Chosen("baseline", 3, "full"))
    t = back.train_memory
    assert (getattr(t, f"micro_batch_{kind}"), getattr(t, f"logprob_micro_batch_{kind}")) == given, text
