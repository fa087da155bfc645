"""``plan --export openrlhf``: a ``train_ppo_ray`` command-line fragment in OpenRLHF's current dotted flags
(since 2026-04-19; the names checked against :data:`~oppo_sim.frameworks.openrlhf_flags.DOTTED` by the tests).

Lengths are OpenRLHF's since 2026-03-24: ``--data.max_len`` is prompt + response and
``--rollout.max_new_tokens`` the response cap (prompts truncated to their difference). The async policy is
``--train.async_enable --train.async_queue_size k``; under async ``--train.colocate_all`` colocates the
DeepSpeed models only, vLLM keeps its own GPUs: the planner's ``gen-apart G+T``. OpenRLHF trains with
DeepSpeed: a Megatron layout has no setting (a ``#`` note, ZeRO-3 instead).
"""

from __future__ import annotations

from oppo_sim.frameworks.export_common import (Chosen, layout_of, micro_rules, model_name, per_gpu_budget, split_notes,
                                                weight_move_notes)
from oppo_sim.hw.costs.micro_batches import MicroBatch
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.traces.trace import DEFAULT_MAX_PROMPT

_EST = {"ppo": "gae", "grpo": "group_norm", "dapo": "group_norm", "rloo": "rloo", "reinforce++": "reinforce_baseline"}


def _pool(cfg: SimConfig, role: str, gpus: int) -> list[str]:
    """``--ROLE.num_nodes/--ROLE.num_gpus_per_node`` for ``gpus`` GPUs: spread over the run's nodes where even."""
    nodes = cfg.nodes if gpus % cfg.nodes == 0 and gpus >= cfg.nodes else 1
    return [f"--{role}.num_nodes {nodes}", f"--{role}.num_gpus_per_node {gpus // nodes}"]


def _placement(cfg: SimConfig, layout: str, sizes: tuple[int, int, int], run_async: bool) -> list[str]:
    gen, train, score = sizes
    alg, tp = cfg.algorithm, cfg.engine.tp
    rm, ref, critic = alg.reward != "rule", alg.kl, alg.critic
    roles = [role for role, on in (("ref", ref), ("reward", rm), ("critic", critic)) if on]
    if run_async and layout == "gen-apart":  # colocate_all under async: every DeepSpeed model on the actor's GPUs
        return ["--train.colocate_all", *_pool(cfg, "actor", train), f"--vllm.num_engines {gen // tp}",
                *[a for role in roles for a in _pool(cfg, role, train)]]
    if layout in ("colocated", "shared"):
        devices = cfg.placement.total_devices
        out = [] if layout == "colocated" else [
            f"# OpenRLHF cannot colocate generation with training while the scorers sit apart: the plan's shared "
            f"{gen}+{score} becomes colocated {devices}"]
        out += ["--train.colocate_all", *_pool(cfg, "actor", devices), f"--vllm.num_engines {devices // tp}"]
        out += [a for role in roles for a in _pool(cfg, role, devices)]
        return (out + (["--vllm.enable_sleep"] if cfg.colocate == "sleep" else [])
                + (["--ds.enable_sleep"] if cfg.offload_train_state else []))
    out = [f"--vllm.num_engines {gen // tp}", *_pool(cfg, "actor", train)]
    if critic:
        out.append("--train.colocate_critic_reward  # oppo-sim trains the critic on the actor's pool")
    if layout == "gen-apart":
        if rm:
            out.append("# OpenRLHF has no way to put the reward model on the actor's GPUs: it gets its own")
            out += _pool(cfg, "reward", 1)
        return out + (["--train.colocate_actor_ref"] if ref else [])
    if rm and ref and score == 1:
        out.append("# one scoring GPU cannot hold OpenRLHF's separate reward and reference groups: the reference "
                   "goes with the actor")
        return out + _pool(cfg, "reward", 1) + ["--train.colocate_actor_ref"]
    if rm and ref:
        return out + _pool(cfg, "reward", score - score // 2) + _pool(cfg, "ref", score // 2)
    return out + _pool(cfg, "reward" if rm else "ref", score)


def _policy(cfg: SimConfig, chosen: Chosen, layout: str) -> list[str]:
    if chosen.kind == "async" and layout in ("colocated", "shared"):
        return [f"# {chosen.policy}: under --train.async_enable OpenRLHF gives vLLM its own GPUs; the plan's async on "
                f"{layout} GPUs has no setting: this runs synchronously"]
    if chosen.kind == "async":
        k = chosen.param("k") or 1
        return ["--train.async_enable", f"--train.async_queue_size {k}  # async: the sampler runs up to {k} "
                                        "batch(es) ahead of the trainer"]
    if chosen.kind == "partial-rollout":
        return [f"# {chosen.policy}: OpenRLHF's nearest is --train.async_enable --train.partial_rollout_enable "
                "(in-flight responses finish on new weights), which also trains one step stale: not set"]
    if chosen.kind != "baseline":
        return [f"# OpenRLHF runs the synchronous schedule (or --train.async_enable): {chosen.policy} has no setting"]
    return []


def _lengths(cfg: SimConfig) -> list[str]:
    if not cfg.max_response:
        return ["# the plan's responses have no cap: set --rollout.max_new_tokens and --data.max_len to what you allow"]
    out = [] if cfg.truncate_prompt else ["# OpenRLHF truncates overlong prompts where the plan filtered them"]
    prompt = cfg.max_prompt
    if prompt is None:
        out.append(f"# the plan's prompts have no cap: --data.max_len allows prompts of {DEFAULT_MAX_PROMPT}")
        prompt = DEFAULT_MAX_PROMPT
    return out + [f"--data.max_len {prompt + cfg.max_response}", f"--rollout.max_new_tokens {cfg.max_response}"]


def _trainer(cfg: SimConfig, chosen: Chosen) -> list[str]:
    out = []
    zero = chosen.zero_stage
    if cfg.trainer.megatron:
        out.append(f"# OpenRLHF trains with DeepSpeed: the plan's {cfg.trainer.label()} trainer has no setting; "
                   "ZeRO-3 instead")
        zero = 3
    if cfg.expert_parallel > 1:
        out.append(f"# expert parallelism {cfg.expert_parallel}: OpenRLHF's DeepSpeed trainer has no setting for it")
    if cfg.trainer.fsdp_size and not cfg.trainer.megatron:
        out.append(f"# the plan shards the trainer's state in groups of {cfg.trainer.fsdp_size} (hybrid); DeepSpeed "
                   "shards it over every rank (ZeRO++'s --zpg partitions only the weights)")
    out += [f"--ds.zero_stage {zero}"] if zero is not None else []
    f = cfg.trainer.optimizer_offload
    if 0 < f < 1:
        out.append(f"# the plan steps {f:.0%} of the Adam state on the CPU; DeepSpeed's offload_optimizer moves all of it")
    out += ["--ds.adam_offload"] if f > 0 else []
    lora = cfg.trainer.lora
    if lora is not None:
        out += ([] if lora.sync == "merged" else ["# the plan syncs the adapters alone; OpenRLHF broadcasts the whole weights"]) + [
            f"--ds.lora.rank {lora.rank}", "--ds.lora.target_modules " + ("all-linear" if lora.all_linear else " ".join(lora.targets))]
    out += ["--actor.gradient_checkpointing_enable"] if chosen.recompute not in (None, "none") else []
    sp = cfg.train_memory.sequence_parallel
    out += [f"--ds.ring_attn_size {sp}"] if sp > 1 else []
    # packed unless the plan priced each micro-batch padded (OpenRLHF pads without --ds.packing_samples)
    out += [] if cfg.padded_micro_batches and sp == 1 else ["--ds.packing_samples"]
    return out + _micro_batches(cfg, sp)


def _micro_batches(cfg: SimConfig, sp: int) -> list[str]:
    """The plan's micro-batches (``micro_rules``): token budgets as OpenRLHF's dynamic batch (a GPU's, which OpenRLHF
    scales by the ring degree), counts of sequences as its micro-batch sizes; one of the two for both passes."""
    train, fwd = micro_rules(cfg, MicroBatch(sequences=1))
    if train.tokens is None and fwd.tokens is None:
        return [f"--train.micro_batch_size {train.sequences}", f"--rollout.micro_batch_size {fwd.sequences}"]
    longest = (DEFAULT_MAX_PROMPT if cfg.max_prompt is None else cfg.max_prompt) + (cfg.max_response or 0)
    out = [] if train.tokens is not None and fwd.tokens is not None else [
        f"# OpenRLHF's dynamic batch packs both passes by tokens: the plan's {(fwd if fwd.tokens is None else train).label()} "
        "a micro-batch become that many longest sequences' tokens"]
    (n_train, a), (n_fwd, b) = (per_gpu_budget("OpenRLHF", r.worst_tokens(longest), sp) for r in (train, fwd))
    return out + a + [x for x in b if x not in a] + ["--train.dynamic_batch_enable", f"--train.max_tokens_per_gpu {n_train}",
                                                    f"--rollout.max_tokens_per_gpu {n_fwd}"]


def export_openrlhf(cfg: SimConfig, chosen: Chosen = Chosen()) -> str:
    """A ``train_ppo_ray`` command-line fragment (dotted flags) that sets up ``cfg``."""
    layout, gen, train, score = layout_of(cfg)
    alg, eng = cfg.algorithm, cfg.engine
    out = [f"# oppo-sim plan: {chosen.policy} on {layout} {cfg.placement.total_devices} GPUs; OpenRLHF's dotted flags "
           "(since 2026-04-19); the run's length is yours (--train.num_episodes over your dataset)"]
    out += _policy(cfg, chosen, layout)
    out += [f"# {note}" for note in weight_move_notes(cfg, "openrlhf", chosen)]
    out += ["# the model paths name oppo-sim's table models: point them at your copies",
            f"--actor.model_name_or_path {model_name(cfg.actor)}"]
    out += ["--reward.remote_url http://localhost:5000/get_reward  # your verifier"] if alg.reward == "rule" else [
        f"--reward.model_name_or_path {model_name(cfg.reward)}"]
    sequences = cfg.batch * alg.n
    if sequences % cfg.minibatches:
        out.append(f"# {sequences} samples do not split into {cfg.minibatches} equal training batches")
    out += [f"--rollout.batch_size {cfg.batch}", f"--rollout.n_samples_per_prompt {alg.n}",
            f"--train.batch_size {sequences // cfg.minibatches}", f"--train.max_epochs {cfg.ppo_epochs}", *_lengths(cfg),
            f"--algo.advantage.estimator {_EST[alg.name]}"]
    out += ["--algo.dynamic_filtering_enable"] if alg.name == "dapo" else []
    out += (["--algo.kl.use_loss", "--algo.kl.estimator k3"] if alg.grouped else []) if alg.kl else ["--algo.kl.init_coef 0"]
    out += _trainer(cfg, chosen)
    out += [f"--vllm.tensor_parallel_size {eng.tp}", f"--vllm.gpu_memory_utilization {eng.gpu_memory_utilization}"]
    out += ["--vllm.enable_prefix_caching"] if eng.enable_prefix_caching else []
    out += ["--vllm.enforce_eager"] if eng.enforce_eager else []
    out += _placement(cfg, layout, (gen, train, score), chosen.kind == "async" and layout in ("gen-apart", "split"))
    return _fragment(out)


def _fragment(lines: list[str]) -> str:
    """The comments first (a ``#`` inside a continued command line would end it), then one option a line."""
    done = split_notes(lines)
    notes = [line for line in done if line.startswith("#")]
    return "\n".join(notes + [" \\\n".join(line for line in done if not line.startswith("#"))]) + "\n"


__all__ = ["export_openrlhf"]
