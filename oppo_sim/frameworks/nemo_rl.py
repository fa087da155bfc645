"""``oppo-sim run --from-nemo-rl "RECIPE.yaml [key=value ...]"``: a NeMo RL GRPO recipe as oppo-sim options.

The recipe is composed as NeMo RL composes it (``defaults:`` chain, then Hydra overrides as
``examples/run_grpo.py`` takes them: :mod:`~oppo_sim.frameworks.nemo_rl_recipe`). Keys follow NeMo RL's
``examples/configs`` at commit 7ea279a (2026-08-22; ``grpo.async_grpo.*``, ``policy.dtensor_cfg._v2``):

- ``grpo.num_prompts_per_step`` -> ``--batch``; ``grpo.num_generations_per_prompt`` -> ``--n``;
  ``policy.train_global_batch_size`` (samples per optimizer step) -> ``--minibatches = B x n / it`` and
  ``--ppo-epochs 1`` (a step's samples are trained once); ``grpo.adv_estimator.name`` grpo /
  reinforce_plus_plus -> ``--algorithm grpo`` / ``reinforce++``; ``grpo.use_dynamic_sampling`` -> ``dapo``
  (``grpo.batch_multiplier`` -> ``--gen-batch-size``, ``grpo.dynamic_sampling_max_gen_batches`` ->
  ``--max-gen-batches``); ``loss_fn.reference_policy_kl_penalty`` 0 -> ``--no-reference``, else
  ``--reference-on-host`` (the policy worker keeps the reference in pinned host memory); NeMo RL's refit is
  double-buffered (``NRL_REFIT_NUM_BUFFERS``, 2 by default) -> ``--refit-buffers 2``, and between pools broadcast
  over every training and inference worker -> ``--refit-group all``; the reward is an
  environment (``env.*``, off the GPUs) -> ``--reward rule``;
- ``policy.model_name`` -> ``--actor``; ``data.max_input_seq_length`` -> ``--max-prompt`` (a longer prompt
  becomes a 4-token stub trained with weight 0: filtered here); ``policy.generation.max_new_tokens`` ->
  ``--max-response``, capped by ``policy.max_total_sequence_length`` (vLLM's ``max_model_len``);
- the generation engine (``policy.generation.backend``: vllm, sglang, megatron; :mod:`~oppo_sim.frameworks.nemo_rl_engine`):
  ``vllm_cfg.tensor_parallel_size`` / ``gpu_memory_utilization`` / ``enforce_eager`` -> ``--tp`` /
  ``--gpu-memory-utilization`` / ``--enforce-eager``, SGLang's server GPUs and ``mem_fraction_static`` likewise;
- the trainer: ``policy.megatron_cfg.enabled`` -> ``--train-backend megatron`` with
  ``tensor_model_parallel_size`` / ``pipeline_model_parallel_size`` / ``context_parallel_size`` /
  ``expert_model_parallel_size`` / ``optimizer.use_distributed_optimizer`` (``optimizer.optimizer_cpu_offload`` with
  ``optimizer_offload_fraction`` -> ``--optimizer-offload``) -> ``--train-tp`` / ``--pp`` /
  ``--cp`` / ``--ep`` / ``--[no-]distributed-optimizer``, and under ``--ep`` ``moe_token_dispatcher_type`` (NeMo RL's
  default ``allgather``; ``moe_enable_deepep``: ``flex``) -> ``--moe-dispatcher`` and ``moe_router_dtype`` (default
  ``fp64``; null: ``model``) -> ``--moe-router-dtype``; ``policy.dtensor_cfg.enabled`` -> ``--train-backend
  fsdp --zero 3`` (FSDP2 full shard) with ``context_parallel_size`` -> ``--sp``. With ``policy.sequence_packing`` or
  ``dynamic_batching`` enabled (exclusive), its ``train_mb_tokens`` / ``logprob_mb_tokens`` -> ``--micro-batch-tokens``
  / ``--logprob-micro-batch-tokens``; with neither, ``--padded-batches`` with ``train_micro_batch_size`` /
  ``logprob_batch_size`` sequences a micro-batch (``--micro-batch-size`` / ``--logprob-micro-batch-size``). DTensor's own
  ``tensor_parallel_size`` is not Megatron's and oppo-sim's FSDP trainer is data parallel only: it is echoed
  and said in the notes, the trainer priced as FSDP over all its GPUs; activation checkpointing of either
  -> ``--recompute full`` (else ``none``); ``policy.dtensor_cfg.expert_parallel_size`` -> ``--ep``;
- placement: ``policy.generation.colocated.enabled`` -> ``--placement colocated --devices
  cluster.gpus_per_node x cluster.num_nodes`` (vLLM ``sleep(level=1)``, the policy offloaded before
  generation, its optimizer state by ``move_optimizer``'s blocking ``.to("cpu")`` into pageable memory:
  ``--colocate sleep --sleep-level 1 --offload-train-state --optimizer-move pageable``); not colocated, generation gets
  ``colocated.resources`` (on one node its ``gpus_per_node``; on several, ``num_nodes`` whole nodes) and
  training the rest: ``--placement gen-apart G+T``;
- ``grpo.async_grpo.enabled`` -> ``--policy async --staleness grpo.async_grpo.max_trajectory_age_steps``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.userfiles import user_path
from oppo_sim.frameworks.lora_keys import NEMO_RL_LORA_KEYS, nemo_rl_lora
from oppo_sim.frameworks.nemo_rl_engine import engine
from oppo_sim.frameworks.nemo_rl_recipe import Recipe, recipe, value
from oppo_sim.frameworks.translation import Builder, Translation, as_bool, as_float, as_int, existing_file, split_words
from oppo_sim.hw.costs.trainer_layout import MOE_DISPATCHERS, ROUTER_DTYPES, STAGE_SPLIT

P, G, V, M, D = "policy.", "policy.generation.", "policy.generation.vllm_cfg.", "policy.megatron_cfg.", "policy.dtensor_cfg."
READ: tuple[str, ...] = (
    "grpo.num_prompts_per_step", "grpo.num_generations_per_prompt", P + "train_global_batch_size", P + "model_name",
    "data.max_input_seq_length", G + "max_new_tokens", P + "max_total_sequence_length", V + "tensor_parallel_size",
    V + "gpu_memory_utilization", "cluster.gpus_per_node", "cluster.num_nodes", G + "colocated.enabled",
)
"""The keys a GRPO recipe must have (NeMo RL's base ``grpo_math_1B.yaml`` has them all); a recipe that
composes to none of them is refused."""
WATCHED: tuple[str, ...] = (*READ, "grpo.async_grpo.enabled", "grpo.async_grpo.max_trajectory_age_steps",
                            "grpo.use_dynamic_sampling", "grpo.batch_multiplier", "grpo.dynamic_sampling_max_gen_batches",
                            "loss_fn.reference_policy_kl_penalty", "grpo.adv_estimator.name", V + "async_engine", V + "enforce_eager",
                            V + "max_model_len",
                            M + "optimizer.optimizer_cpu_offload", M + "optimizer.optimizer_offload_fraction",
                            M + "enabled", D + "enabled", M + "tensor_model_parallel_size", M + "pipeline_model_parallel_size",
                            M + "context_parallel_size", M + "expert_model_parallel_size", M + "expert_tensor_parallel_size",
                            M + "activation_checkpointing",
                            M + "sequence_parallel", D + "tensor_parallel_size", D + "context_parallel_size",
                            D + "activation_checkpointing", D + "expert_parallel_size", P + "sequence_packing.enabled",
                            P + "dynamic_batching.enabled", G + "colocated.resources.gpus_per_node", G + "colocated.resources.num_nodes",
                            *(P + f"{part}.{k}_mb_tokens" for part in ("sequence_packing", "dynamic_batching")
                              for k in ("train", "logprob")), *NEMO_RL_LORA_KEYS)
"""Every key the reader reads: a new key of a recipe that nearly spells one is a typo."""
_WHY = {P + "train_micro_batch_size": "with packing or dynamic batching the micro-batches are by tokens (above)",
        P + "dtensor_cfg.enabled": "off: the trainer is the one enabled (policy.megatron_cfg, above)",
        P + "sequence_packing.enabled": "off: the micro-batches are dynamic batching's (above)",
        P + "make_sequence_length_divisible_by": "pads a sequence by at most that many tokens less one: not charged",
        "grpo.max_num_steps": "the run's length: oppo-sim simulates --steps",
        P + "logprob_batch_size": "with packing or dynamic batching the micro-batches are by tokens (above)"}


def sources(values: Sequence[str]) -> tuple[Path, list[str]]:
    """``--from-nemo-rl`` values (a recipe, overrides, or a launch command or file holding them) -> (recipe
    path, overrides in order). Words up to ``run_grpo*.py`` are the launcher; ``--config PATH`` names the recipe."""
    words: list[str] = []
    for v in values:
        path = existing_file(v)
        if path is not None and path.suffix.lower() in (".yaml", ".yml"):
            words.append(v)
        elif path is None and v.strip() and not any(c.isspace() for c in v.strip()) and ("=" in v or v.startswith("~")):
            words.append(v.strip())  # one override (``key=value``, ``~key``), not a launch line: a shell reader would
            #                          take a dot-less ``key=value`` for a variable assignment and drop it
        else:
            words += split_words(path.read_text() if path is not None else v, "--from-nemo-rl")
    for i, w in enumerate(words):
        if "=" not in w and w.endswith(".py"):
            words = words[i + 1:]
            break
    found: list[str] = []
    overrides: list[str] = []
    it = iter(words)
    for w in it:
        if w in ("--config", "--config-path"):
            found.append(next(it, ""))
        elif w.startswith("--config="):
            found.append(w.split("=", 1)[1])
        elif w.lower().endswith((".yaml", ".yml")) and "=" not in w:
            found.append(w)
        elif "=" in w or w.startswith("~"):
            overrides.append(w)
        elif w != "\\":
            raise ConfigError(f"--from-nemo-rl: {w!r} is neither a recipe (.yaml) nor a key=value override")
    if len(found) != 1:
        raise ConfigError(f"--from-nemo-rl: give one recipe .yaml, got {len(found)}" + (f": {', '.join(found)}" if found else ""))
    return user_path(found[0]), overrides


def translate_nemo_rl(values: Sequence[str]) -> Translation:
    """NeMo RL recipe (+ overrides) -> oppo-sim arguments, each key used echoed and the recipe's own others listed."""
    path, overrides = sources(values)
    r = recipe(path, overrides, WATCHED)
    if not any(k in r.flat for k in READ):
        raise ConfigError(f"--from-nemo-rl {path}: not a NeMo RL GRPO recipe (none of {', '.join(READ[:3])}, ... "
                          "after its defaults chain)")
    nulled = [sec for sec in ("grpo", "policy", "cluster", "loss_fn") if sec in r.flat and r.flat[sec] is None]
    if nulled:  # OmegaConf replaces the section with None, and NeMo RL cannot start without it
        raise ConfigError(f"--from-nemo-rl {path}: the section {nulled[0]} is set to null; NeMo RL needs it")
    chain = " <- ".join(p.name for p in r.chain)
    b = Builder("NeMo RL (examples/configs at 7ea279a, 2026-08-22)",
                (chain + (f" with {len(overrides)} override(s)" if overrides else ""),))
    g = _Get(r, b)
    _batches(g)
    _lengths(g)
    _trainer(g)
    nemo_rl_lora(b, r.flat)
    _placement(g)
    b.training_loop("NeMo RL")
    echoed = {u.key for u in b.used}
    for k in sorted(r.own):
        if not any(k == e or k.startswith(e + ".") for e in echoed) and k in r.flat:
            b.ignore(k, r.flat[k], _WHY.get(k, "not modelled"))
    return b.done()


class _Get:
    """Reads keys of a composed recipe, echoing each as used (the recipe's own or its parents' default)."""

    def __init__(self, r: Recipe, b: Builder) -> None:
        self.r, self.b = r, b

    def __call__(self, key: str, dflt: Any = None) -> Any:
        v = value(self.r.flat, key)
        return dflt if v is None else v

    def use(self, key: str, *args: Any, note: str = "", v: Any = None) -> None:
        """Echo ``key``: from the recipe itself, from a parent (said in the note), or NeMo RL's default where no
        file of the chain sets it."""
        parent = None if key in self.r.own else self.r.parent_of(key)
        if parent is not None:
            note = f"{note}; from {parent}" if note else f"from {parent}"
        default = key not in self.r.own and parent is None
        self.b.use(key, self(key) if v is None else v, *args, note=note, default=default)


def _batches(g: _Get) -> None:
    prompts = as_int("grpo.num_prompts_per_step", g("grpo.num_prompts_per_step", 32))
    n = as_int("grpo.num_generations_per_prompt", g("grpo.num_generations_per_prompt", 16))
    gbs = as_int(P + "train_global_batch_size", g(P + "train_global_batch_size", prompts * n))
    if min(prompts, n, gbs) < 1:
        raise ConfigError(f"grpo.num_prompts_per_step, num_generations_per_prompt and policy.train_global_batch_size "
                          f"must be >= 1, got {prompts}, {n}, {gbs}")
    g.use("grpo.num_prompts_per_step", "--batch", prompts, v=prompts)
    g.use("grpo.num_generations_per_prompt", "--n", n, v=n)
    parts = max(1, -(-prompts * n // gbs))
    g.use(P + "train_global_batch_size", "--minibatches", parts, "--ppo-epochs", 1, v=gbs,
          note=f"{prompts} x {n} samples / {gbs}, each trained once")
    est = str(g("grpo.adv_estimator.name", "grpo")).strip().lower()
    algos = {"grpo": "grpo", "reinforce_plus_plus": "reinforce++"}
    if est not in algos:
        raise ConfigError(f"grpo.adv_estimator.name {est}: oppo-sim simulates {', '.join(algos)}")
    name = algos[est]
    if as_bool("grpo.use_dynamic_sampling", g("grpo.use_dynamic_sampling", False)):
        mult = as_float("grpo.batch_multiplier", g("grpo.batch_multiplier", 1))
        g.use("grpo.use_dynamic_sampling", "--algorithm", "dapo", "--gen-batch-size", int(prompts * mult),
              note=f"DAPO's dynamic sampling: rounds of {prompts} x batch_multiplier {mult} prompts")
        gens = as_int("grpo.dynamic_sampling_max_gen_batches", g("grpo.dynamic_sampling_max_gen_batches", 10))
        g.use("grpo.dynamic_sampling_max_gen_batches", "--max-gen-batches", gens, v=gens)
    else:
        g.use("grpo.adv_estimator.name", "--algorithm", name, v=est)
    kl = as_float("loss_fn.reference_policy_kl_penalty", g("loss_fn.reference_policy_kl_penalty", 0.01))
    if kl < 0:
        raise ConfigError(f"loss_fn.reference_policy_kl_penalty must be >= 0 (0: no reference model), got {kl}")
    g.use("loss_fn.reference_policy_kl_penalty", *(("--reference-on-host",) if kl > 0 else ("--no-reference",)), v=kl,
          note="KL in the loss: a reference model, held in pinned host memory and swapped with the policy's weights "
               "for its pass (use_reference_model)" if kl > 0 else "no reference model")
    g.b.use("NRL_REFIT_NUM_BUFFERS", 2, "--refit-buffers", 2, default=True,
            note="NeMo RL's refit packs tensors into buffers, two in flight (an environment variable, not the recipe's)")
    g.b.use("model_update_group", "all", "--refit-group", "all", default=True,
            note="a refit between pools broadcasts over every trainer and engine rank (grpo.py's collective init)")
    g.b.use("env", "", "--reward", "rule", note="NeMo RL's environments score off the GPUs")
    model = g(P + "model_name")
    if model is None and P + "model_name" in g.r.flat:
        raise ConfigError(f"{P}model_name is null: the recipe must name the policy's model (a Hugging Face id or path)")
    if model is not None:
        g.b.use_model(P + "model_name", model, "--actor")


def _lengths(g: _Get) -> None:
    seq = as_int(P + "max_total_sequence_length", g(P + "max_total_sequence_length", 512))
    total = min(seq, as_int(V + "max_model_len", g(V + "max_model_len", seq)))  # vLLM's own cap, where set lower
    if total < 1:
        raise ConfigError(f"{P}max_total_sequence_length={seq} and {V}max_model_len: the lengths must be >= 1")
    new = as_int(G + "max_new_tokens", g(G + "max_new_tokens", total))
    prompt = as_int("data.max_input_seq_length", g("data.max_input_seq_length", total))
    g.use(P + "max_total_sequence_length", v=seq, note="prompt + response (vLLM's max_model_len)")
    if V + "max_model_len" in g.r.flat:
        g.use(V + "max_model_len", v=g(V + "max_model_len"), note="vLLM's cap on prompt + response" + (
            "" if total == seq else f": below max_total_sequence_length, it caps at {total}"))
    g.use(G + "max_new_tokens", "--max-response", min(new, total), v=new,
          note="" if new <= total else f"capped at {'max_total_sequence_length' if total == seq else 'max_model_len'} {total}")
    g.use("data.max_input_seq_length", "--max-prompt", prompt, v=prompt,
          note="a longer prompt becomes a stub trained with weight 0: filtered")
    if min(new, total) + prompt > total:
        g.b.notes.append(f"vLLM's max_model_len {total} caps prompt + response: a response stops at {total} minus its "
                         f"prompt's length; oppo-sim caps prompts at {prompt} and responses at {min(new, total)} "
                         "separately (an upper bound)")
    engine(g)
    _async(g)


def _async(g: _Get) -> None:
    if as_bool("grpo.async_grpo.enabled", g("grpo.async_grpo.enabled", False)):
        age = as_int("grpo.async_grpo.max_trajectory_age_steps", g("grpo.async_grpo.max_trajectory_age_steps", 1))
        g.use("grpo.async_grpo.enabled", "--policy", "async", note="generation runs ahead of training")
        g.use("grpo.async_grpo.max_trajectory_age_steps", "--staleness", age, v=age,
              note=f"trajectories at most {age} step(s) old")
        k = "grpo.async_grpo.in_flight_weight_updates"
        if as_bool(k, g(k, False)) and as_bool(V + "async_engine", g(V + "async_engine", False)):
            g.use(k, "--in-flight-weight-updates", v=True, note="the refit does not wait for the generations in "
                  "flight; a step's prompts start as the B x k groups in flight free a slot")
            g.b.notes.append("in-flight weight updates: a trajectory in flight at a refit finishes on the new weights; "
                             "oppo-sim keeps each on the version it started with (its staleness)")
        elif as_bool(k, g(k, False)):
            g.use(k, v=True, note=f"without {V}async_engine NeMo RL waits for the generations in flight: not set")
    else:
        g.b.notes.append("NeMo RL's synchronous GRPO loop is oppo-sim's baseline policy; --policy chooses the one "
                         "simulated")


def _trainer(g: _Get) -> None:
    mega = as_bool(M + "enabled", g(M + "enabled", False))
    fsdp = as_bool(D + "enabled", g(D + "enabled", not mega))
    if mega and fsdp:
        raise ConfigError("policy.megatron_cfg.enabled and policy.dtensor_cfg.enabled are both true; NeMo RL takes one")
    if mega:
        tp, pp, cp, ep = (as_int(M + k, g(M + k, 1)) for k in ("tensor_model_parallel_size",
                          "pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size"))
        dist = as_bool(M + "optimizer.use_distributed_optimizer", g(M + "optimizer.use_distributed_optimizer", True))
        g.use(M + "enabled", "--train-backend", "megatron", v=True)
        g.use(M + "tensor_model_parallel_size", "--train-tp", tp, v=tp)
        g.use(M + "pipeline_model_parallel_size", "--pp", pp, v=pp)
        g.use(M + "context_parallel_size", "--cp", cp, v=cp)
        g.use(M + "expert_model_parallel_size", "--ep", ep, v=ep)
        if ep > 1:
            _dispatcher(g)
            etp = as_int(M + "expert_tensor_parallel_size", g(M + "expert_tensor_parallel_size", tp))
            g.use(M + "expert_tensor_parallel_size", "--etp", etp, v=etp)
        for k, _, opt in STAGE_SPLIT:
            if pp > 1 and g(M + k) is not None:
                g.use(M + k, opt, as_int(M + k, g(M + k)), v=g(M + k), note="an uneven pipeline split")
        if g(M + "virtual_pipeline_model_parallel_size") is not None:
            vpp = as_int(M + "virtual_pipeline_model_parallel_size", g(M + "virtual_pipeline_model_parallel_size"))
            g.use(M + "virtual_pipeline_model_parallel_size", "--vpp", vpp, v=vpp)
        g.use(M + "optimizer.use_distributed_optimizer", "--distributed-optimizer" if dist else
              "--no-distributed-optimizer", v=dist)
        if as_bool(M + "optimizer.optimizer_cpu_offload", g(M + "optimizer.optimizer_cpu_offload", False)):
            frac = as_float(M + "optimizer.optimizer_offload_fraction", g(M + "optimizer.optimizer_offload_fraction", 0.0))
            g.use(M + "optimizer.optimizer_cpu_offload", "--optimizer-offload", frac, v=True,
                  note=f"Megatron's hybrid optimizer: {frac:g} of the Adam state stepped on the CPU (Megatron's default "
                       f"fraction: 0)")
        sp = as_bool(M + "sequence_parallel", g(M + "sequence_parallel", False))
        g.use(M + "sequence_parallel", v=sp, note="" if sp or tp == 1 else
              "off: oppo-sim prices Megatron tp with sequence parallelism on (activations a little larger here)")
        ckpt = M + "activation_checkpointing"
    else:
        tp, cp = as_int(D + "tensor_parallel_size", g(D + "tensor_parallel_size", 1)), as_int(
            D + "context_parallel_size", g(D + "context_parallel_size", 1))
        g.use(D + "enabled", "--train-backend", "fsdp", "--zero", 3, v=True, note="FSDP2 full shard: ZeRO-3")
        g.use(D + "context_parallel_size", "--sp", cp, v=cp, note="context parallelism as sequence parallelism")
        if g(D + "expert_parallel_size") is not None:  # DTensor/Automodel's expert parallelism of a MoE model
            ep = as_int(D + "expert_parallel_size", g(D + "expert_parallel_size"))
            g.use(D + "expert_parallel_size", "--ep", ep, v=ep)
        if tp > 1:
            g.use(D + "tensor_parallel_size", v=tp, note="DTensor tensor parallelism: not modelled")
            g.b.notes.append(f"{D}tensor_parallel_size={tp}: DTensor TP is not Megatron's and oppo-sim's FSDP trainer is "
                             f"data parallel: the trainer is priced as FSDP over all its GPUs, without the TP split")
        ckpt = D + "activation_checkpointing"
    on = as_bool(ckpt, g(ckpt, False))
    g.use(ckpt, "--recompute", "full" if on else "none", v=on)
    _micro_batches(g, tp)


def _micro_batches(g: _Get, tp: int) -> None:
    """Packed or dynamic micro-batches by their token budgets; neither, padded ones of a count of sequences. At ``tp``
    >= 4 NeMo RL asserts equal training and log-prob micro-batch sizes (lm_policy.py): said in the notes."""
    train, lp = g(P + "train_micro_batch_size"), g(P + "logprob_batch_size")
    if tp >= 4 and lp is not None and train != lp:
        g.b.notes.append(f"NeMo RL refuses {P}train_micro_batch_size={train} with {P}logprob_batch_size={lp} at tensor "
                         f"parallelism {tp} >= 4 (a batch-variant accuracy check) unless NRL_IGNORE_TP_ACCURACY_CHECK=1")
    pack = as_bool(P + "sequence_packing.enabled", g(P + "sequence_packing.enabled", False))
    dyn = as_bool(P + "dynamic_batching.enabled", g(P + "dynamic_batching.enabled", False))
    if pack and dyn:  # lm_policy.py asserts it
        raise ConfigError(f"{P}sequence_packing.enabled and {P}dynamic_batching.enabled: NeMo RL refuses both (one or the other)")
    if pack or dyn:
        part = "sequence_packing." if pack else "dynamic_batching."
        g.use(P + part + "enabled", v=True, note="micro-batches packed by tokens, as oppo-sim's" if pack else
              "micro-batches by a token budget, as oppo-sim packs them")
        for k, opt in (("train_mb_tokens", "--micro-batch-tokens"), ("logprob_mb_tokens", "--logprob-micro-batch-tokens")):
            if _needed(g, P + part + k) is not None:  # lm_policy.py: a data-parallel rank's micro-batch
                n = as_int(P + part + k, g(P + part + k))
                g.use(P + part + k, opt, n, v=n)
    else:  # megatron/data.py get_microbatch_iterator: slices of the batch, padded to its longest sequence
        g.use(P + "sequence_packing.enabled", "--padded-batches", v=False,
              note="micro-batches of whole sequences, each padded to the batch's longest")
        for k, opt in (("train_micro_batch_size", "--micro-batch-size"), ("logprob_batch_size", "--logprob-micro-batch-size")):
            n = as_int(P + k, _needed(g, P + k, 1))
            g.use(P + k, opt, n, v=n, note="sequences a micro-batch")


def _needed(g: _Get, key: str, dflt: Any = None) -> Any:
    """A value NeMo RL reads where it is used: null there fails in NeMo RL -> one line now; absent (a recipe not
    composed on NeMo RL's base), ``dflt``."""
    if key in g.r.flat and g(key) is None:
        raise ConfigError(f"{key} is null: NeMo RL reads it for these micro-batches; give it a value")
    return g(key, dflt)


def _dispatcher(g: _Get) -> None:
    """``megatron_cfg.moe_token_dispatcher_type`` (NeMo RL's default ``allgather``, Megatron-Core's too; ``flex`` where
    ``moe_enable_deepep``) -> ``--moe-dispatcher``."""
    k, deep = M + "moe_token_dispatcher_type", M + "moe_enable_deepep"
    how = str(g(k, "allgather")).strip().lower()
    if as_bool(deep, g(deep, False)):
        g.use(deep, v=True, note="DeepEP: the flex dispatcher")
        how = "flex"
    if how not in MOE_DISPATCHERS:
        raise ConfigError(f"{k}: expected one of {', '.join(MOE_DISPATCHERS)}, got {g(k)!r}")
    g.use(k, "--moe-dispatcher", how, v=how, note="the experts' tokens all-gathered over the EP group and their "
          "output reduce-scattered" if how == "allgather" else "")
    r = M + "moe_router_dtype"
    raw = g(r) if r in g.r.flat else "fp64"  # a recipe's null is Megatron's None (the model's dtype), not a missing key
    dt = "model" if raw is None or str(raw).strip().lower() in ("null", "none") else str(raw).strip().lower()
    if dt not in ROUTER_DTYPES:
        raise ConfigError(f"{r}: expected fp32, fp64 or null, got {g(r)!r}")
    g.use(r, "--moe-router-dtype", dt, v=dt, note="the allgather dispatcher's combine in this dtype" if how == "allgather" else "")


def _placement(g: _Get) -> None:
    per, nodes = as_int("cluster.gpus_per_node", g("cluster.gpus_per_node", 1)), as_int("cluster.num_nodes",
                                                                                        g("cluster.num_nodes", 1))
    if per < 1 or nodes < 1:
        raise ConfigError(f"cluster.gpus_per_node and cluster.num_nodes must be >= 1, got {per} and {nodes}")
    total = per * nodes
    g.use("cluster.num_nodes", "--nodes", nodes, v=nodes)
    if as_bool(G + "colocated.enabled", g(G + "colocated.enabled", True)):
        g.use("cluster.gpus_per_node", "--placement", "colocated", "--devices", total, "--colocate", "sleep",
              "--sleep-level", 1, "--offload-train-state", "--optimizer-move", "pageable", v=per,
              note=f"{per} x {nodes} nodes: generation and training share every GPU (vLLM sleep(level=1)); the "
                   "optimizer state moved to host and back with a .to() per tensor (move_optimizer)")
        g.use(G + "colocated.enabled", v=True)
        return
    rg, rn = g(G + "colocated.resources.gpus_per_node"), g(G + "colocated.resources.num_nodes")
    if nodes == 1:
        if rg is None or as_int(G + "colocated.resources.gpus_per_node", rg) < 1 or rn not in (None, 1):
            raise ConfigError("NeMo RL on one node, not colocated: policy.generation.colocated.resources.gpus_per_node "
                              f"must be > 0 and resources.num_nodes 1 or null, got {rg} and {rn}")
        gen = as_int(G + "colocated.resources.gpus_per_node", rg)
    else:
        if rn is None or as_int(G + "colocated.resources.num_nodes", rn) < 1 or rg != per:
            raise ConfigError("NeMo RL on several nodes, not colocated: policy.generation.colocated.resources.num_nodes "
                              f"must be > 0 and resources.gpus_per_node = cluster.gpus_per_node {per}, got {rn} and {rg}")
        gen = as_int(G + "colocated.resources.num_nodes", rn) * per
    if gen >= total:
        raise ConfigError(f"NeMo RL, not colocated: generation's {gen} GPUs leave none of the cluster's {total} to train")
    g.use("cluster.gpus_per_node", "--placement", f"gen-apart {gen}+{total - gen}", v=per,
          note=f"{per} x {nodes} nodes: {gen} generate, {total - gen} train (the reference with them)")
    g.use(G + "colocated.enabled", v=False)
    for k in ("resources.gpus_per_node", "resources.num_nodes"):
        if g(G + "colocated." + k) is not None:
            g.use(G + "colocated." + k, note="in the placement above")


__all__ = ["READ", "sources", "translate_nemo_rl"]
