"""``oppo-sim plan --export verl|openrlhf``: the plan's chosen configuration as that framework's settings.

- **verl**: Hydra ``key=value`` overrides, one per line, for ``python3 -m verl.trainer.main_ppo`` (save
  them to a file: ``oppo-sim run --from-verl FILE`` reads them back).
- **OpenRLHF**: a ``train_ppo_ray`` command-line fragment (``--from-openrlhf`` reads it back).

``#`` comments say what the framework cannot express: OPPO's overlap policy itself (both frameworks run
the synchronous schedule: intra-step streaming and inter-step deferral have no setting), a placement
the framework has no layout for (verl's hybrid engine is always colocated; OpenRLHF cannot colocate
generation with training while the scorers sit apart), the trainer's ZeRO stage under verl's FSDP,
and the step count (OpenRLHF counts episodes over a dataset). The inverse mapping is the readers'
(``verl.py``, ``openrlhf.py``); where the framework can express the configuration, export then import
gives back the same batch, n, tp, devices, nodes, placement, memory fraction, sp, prompt and response
caps and algorithm (``tests/test_frameworks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError
from oppo_sim.pipeline.config import SimConfig

FRAMEWORKS: tuple[str, ...] = ("verl", "openrlhf")
_VERL_EST = {"ppo": "gae", "grpo": "grpo", "dapo": "grpo", "rloo": "rloo", "reinforce++": "reinforce_plus_plus_baseline"}
_ORL_EST = {"ppo": "gae", "grpo": "group_norm", "dapo": "group_norm", "rloo": "rloo", "reinforce++": "reinforce_baseline"}


@dataclass(frozen=True)
class Chosen:
    """What the plan chose besides the ``SimConfig``: the policy's label and the trainer's memory settings."""

    policy: str = "baseline"
    zero_stage: int | None = None
    recompute: str | None = None


def layout_of(cfg: SimConfig) -> tuple[str, int, int, int]:
    """(layout, gen, train, score GPUs) of the config's placement, in the planner's terms."""
    p = cfg.placement
    size = {pool.name: pool.devices for pool in p.pools}
    if len(p.pools) == 1:
        return "colocated", p.total_devices, p.total_devices, 0
    if p.generate == p.train:
        return "shared", size[p.generate], size[p.generate], p.total_devices - size[p.generate]
    gen, train = size[p.generate], size[p.train]
    rest = p.total_devices - gen - train
    return ("split" if rest else "gen-apart"), gen, train, rest


def model_name(model) -> str:
    """What a framework's model path should say: a table model's Hugging Face name, else the path given."""
    from pathlib import Path

    from oppo_sim.hw.models import MODELS

    mid = model if isinstance(model, str) else model.id
    if mid.lower() in MODELS:
        return MODELS[mid.lower()].name
    path = Path(mid)
    return str(path.parent if path.name == "config.json" else path)


def _common(cfg: SimConfig) -> tuple[int | None, bool, int]:
    max_prompt = getattr(cfg, "max_prompt", None)  # SimConfig.max_prompt / truncate_prompt: the limits branch
    return max_prompt, bool(getattr(cfg, "truncate_prompt", False)), cfg.batch // cfg.minibatches


def export_verl(cfg: SimConfig, chosen: Chosen = Chosen()) -> str:
    """Hydra overrides for verl's ``main_ppo`` that set up ``cfg``."""
    layout, gen, train, score = layout_of(cfg)
    alg, eng = cfg.algorithm, cfg.engine
    max_prompt, truncate, mini = _common(cfg)
    out = [f"# oppo-sim plan: {chosen.policy} on {layout} {cfg.placement.total_devices} GPUs"]
    if chosen.policy.split("(")[0] != "baseline":
        out.append(f"# verl runs the synchronous schedule: the overlap policy {chosen.policy} has no verl setting")
    if layout != "colocated":
        out.append(f"# verl's hybrid engine colocates every role: the plan's {layout} {gen}/{train}/{score} placement "
                   f"cannot be expressed; these overrides set up colocated {cfg.placement.total_devices}")
    out.append(f"data.train_batch_size={cfg.batch}")
    out.append(f"data.max_response_length={cfg.max_response}" if cfg.max_response else
               "# the plan's responses have no cap: set data.max_response_length to the longest you allow")
    if max_prompt is not None:
        out += [f"data.max_prompt_length={max_prompt}", f"data.filter_overlong_prompts={not truncate}"]
        out += ["data.truncation=right"] if truncate else []
    out += ["# the model paths name oppo-sim's table models: point them at your copies",
            f"actor_rollout_ref.model.path={model_name(cfg.actor)}", f"actor_rollout_ref.rollout.n={alg.n}",
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={eng.tp}",
            f"actor_rollout_ref.rollout.gpu_memory_utilization={eng.gpu_memory_utilization}",
            f"actor_rollout_ref.rollout.max_num_seqs={eng.max_num_seqs}",
            f"actor_rollout_ref.rollout.max_num_batched_tokens={eng.max_num_batched_tokens}",
            f"actor_rollout_ref.rollout.enable_chunked_prefill={eng.enable_chunked_prefill}",
            f"actor_rollout_ref.rollout.free_cache_engine={cfg.colocate == 'sleep'}"]
    if cfg.batch % cfg.minibatches:
        out.append(f"# {cfg.batch} prompts do not split into {cfg.minibatches} equal mini-batches; verl's are of {mini}")
    out += [f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}", f"actor_rollout_ref.actor.ppo_epochs={cfg.ppo_epochs}",
            f"actor_rollout_ref.actor.use_kl_loss={alg.kl and alg.grouped}",
            f"algorithm.use_kl_in_reward={alg.kl and not alg.grouped}",
            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={cfg.train_memory.sequence_parallel}"]
    if chosen.recompute is not None:
        if chosen.recompute == "selective":
            out.append("# verl checkpoints whole layers: the plan's selective recomputation becomes full")
        out.append(f"actor_rollout_ref.model.enable_gradient_checkpointing={chosen.recompute != 'none'}")
    if chosen.zero_stage is not None:
        out.append(f"# the plan's trainer uses ZeRO-{chosen.zero_stage}; verl's FSDP shards fully (ZeRO-3)")
    out.append(f"algorithm.adv_estimator={_VERL_EST[alg.name]}")
    if alg.name == "dapo":
        out.append("algorithm.filter_groups.enable=True  # DAPO's dynamic sampling (verl's DAPO recipe)")
    if alg.reward == "rule":
        out.append("reward_model.enable=False")
    else:
        out += ["reward_model.enable=True", f"reward_model.model.path={model_name(cfg.reward)}"]
    devices = cfg.placement.total_devices
    if devices % cfg.nodes:
        raise ConfigError(f"{devices} GPUs do not spread evenly over {cfg.nodes} nodes")
    out += [f"trainer.n_gpus_per_node={devices // cfg.nodes}", f"trainer.nnodes={cfg.nodes}",
            f"trainer.total_training_steps={cfg.steps}"]
    notes = [line for line in out if line.startswith("#")]
    notes += ["# {}: {}".format(*line.split("  # ", 1)) for line in out if not line.startswith("#") and "  # " in line]
    return "\n".join(notes + [line.split("  # ", 1)[0] for line in out if not line.startswith("#")]) + "\n"


def _pool(cfg: SimConfig, role: str, gpus: int) -> list[str]:
    """``--ROLE_num_nodes/--ROLE_num_gpus_per_node`` for ``gpus`` GPUs: spread over the run's nodes where even."""
    nodes = cfg.nodes if gpus % cfg.nodes == 0 and gpus >= cfg.nodes else 1
    return [f"--{role}_num_nodes {nodes}", f"--{role}_num_gpus_per_node {gpus // nodes}"]


def _orl_placement(cfg: SimConfig, layout: str, gen: int, train: int, score: int) -> list[str]:
    alg, tp = cfg.algorithm, cfg.engine.tp
    rm, ref, critic = alg.reward != "rule", alg.kl, alg.critic
    if layout in ("colocated", "shared"):
        devices = cfg.placement.total_devices
        out = [] if layout == "colocated" else [
            f"# OpenRLHF cannot colocate generation with training while the scorers sit apart: the plan's shared "
            f"{gen}+{score} becomes colocated {devices}"]
        out += ["--colocate_all_models", *_pool(cfg, "actor", devices), f"--vllm_num_engines {devices // tp}"]
        out += [a for role, on in (("ref", ref), ("reward", rm), ("critic", critic)) if on for a in _pool(cfg, role, devices)]
        return out + (["--vllm_enable_sleep", "--deepspeed_enable_sleep"] if cfg.colocate == "sleep" else [])
    out = [f"--vllm_num_engines {gen // tp}", *_pool(cfg, "actor", train)]
    if critic:
        out.append("--colocate_critic_reward  # oppo-sim trains the critic on the actor's pool")
    if layout == "gen-apart":
        if rm:
            out.append("# OpenRLHF has no way to put the reward model on the actor's GPUs: it gets its own")
            out += _pool(cfg, "reward", 1)
        return out + (["--colocate_actor_ref"] if ref else [])
    if rm and ref and score == 1:
        out.append("# one scoring GPU cannot hold OpenRLHF's separate reward and reference groups: the reference "
                   "goes with the actor")
        return out + _pool(cfg, "reward", 1) + ["--colocate_actor_ref"]
    if rm and ref:
        return out + _pool(cfg, "reward", score - score // 2) + _pool(cfg, "ref", score // 2)
    return out + _pool(cfg, "reward" if rm else "ref", score)


def export_openrlhf(cfg: SimConfig, chosen: Chosen = Chosen()) -> str:
    """A ``train_ppo_ray`` command-line fragment that sets up ``cfg``."""
    layout, gen, train, score = layout_of(cfg)
    alg, eng = cfg.algorithm, cfg.engine
    max_prompt, truncate, _ = _common(cfg)
    out = [f"# oppo-sim plan: {chosen.policy} on {layout} {cfg.placement.total_devices} GPUs; "
           f"{cfg.steps} steps (OpenRLHF counts episodes over the dataset)"]
    if chosen.policy.split("(")[0] != "baseline":
        out.append(f"# OpenRLHF runs the synchronous schedule (or --async_train): {chosen.policy} has no setting")
    out += ["# the model paths name oppo-sim's table models: point them at your copies",
            f"--pretrain {model_name(cfg.actor)}"]
    out += ["--remote_rm_url http://localhost:5000/get_reward  # your verifier"] if alg.reward == "rule" else [
        f"--reward_pretrain {model_name(cfg.reward)}"]
    sequences = cfg.batch * alg.n
    if sequences % cfg.minibatches:
        out.append(f"# {sequences} samples do not split into {cfg.minibatches} equal training batches")
    out += [f"--rollout_batch_size {cfg.batch}", f"--n_samples_per_prompt {alg.n}",
            f"--train_batch_size {sequences // cfg.minibatches}", f"--max_epochs {cfg.ppo_epochs}",
            f"--generate_max_len {cfg.max_response}" if cfg.max_response else
            "# the plan's responses have no cap: set --generate_max_len to the longest you allow"]
    if max_prompt is not None:
        out += ([] if truncate else ["# OpenRLHF truncates overlong prompts where the plan filtered them"])
        out.append(f"--prompt_max_len {max_prompt}")
    out.append(f"--advantage_estimator {_ORL_EST[alg.name]}")
    out += ["--dynamic_filtering"] if alg.name == "dapo" else []
    out += (["--use_kl_loss", "--kl_estimator k3"] if alg.grouped else []) if alg.kl else ["--init_kl_coef 0"]
    if chosen.zero_stage is not None:
        out.append(f"--zero_stage {chosen.zero_stage}")
    if chosen.recompute not in (None, "none"):
        out.append("--gradient_checkpointing")
    sp = cfg.train_memory.sequence_parallel
    out += [f"--ring_attn_size {sp}", "--packing_samples"] if sp > 1 else []
    out += [f"--vllm_tensor_parallel_size {eng.tp}", f"--vllm_gpu_memory_utilization {eng.gpu_memory_utilization}"]
    out += ["--enable_prefix_caching"] if eng.enable_prefix_caching else []
    out += _orl_placement(cfg, layout, gen, train, score)
    return _fragment(out)


def _fragment(lines: list[str]) -> str:
    """The comments first (a ``#`` inside a continued command line would end it), then one option a line."""
    notes = [line for line in lines if line.startswith("#")] + [
        "# {}: {}".format(*line.split("  # ", 1)) for line in lines if not line.startswith("#") and "  # " in line]
    opts = [line.split("  # ", 1)[0] for line in lines if not line.startswith("#")]
    return "\n".join(notes + [" \\\n".join(opts)]) + "\n"


def export(cfg: SimConfig, framework: str, chosen: Chosen = Chosen()) -> str:
    """``cfg`` as ``framework``'s settings (``verl`` or ``openrlhf``)."""
    key = framework.strip().lower()
    if key not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
    return export_verl(cfg, chosen) if key == "verl" else export_openrlhf(cfg, chosen)



def export_best(res, framework: str) -> str:
    """The plan result's best configuration (``PlanResult.best``) as ``framework``'s settings."""
    import pandas as pd

    from oppo_sim.explore.space import Candidate, PlacementSpec, PolicySpec

    row = res.best
    spec = PlacementSpec(row["layout"], int(row["gen_gpus"]), int(row["train_gpus"]), int(row["score_gpus"]),
                         int(row["tp"]), int(row["sp"]))
    cfg = Candidate(spec, PolicySpec("baseline")).config(res.request.base)  # the planner's own placement rule
    zero = None if pd.isna(row["zero_stage"]) else int(row["zero_stage"])
    return export(cfg, framework, Chosen(str(row["policy_label"]), zero, str(row["recompute"])))


__all__ = ["Chosen", "FRAMEWORKS", "export", "export_best", "export_openrlhf", "export_verl", "layout_of", "model_name"]
