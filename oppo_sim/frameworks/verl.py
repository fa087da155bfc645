"""``oppo-sim run --from-verl SOURCE``: a verl PPO/GRPO job as oppo-sim options.

SOURCE is one of

- a ``.yaml``/``.yml`` file shaped like verl's ``verl/trainer/config/ppo_trainer.yaml`` (nested keys;
  a Hydra ``defaults:`` list is listed as ignored, its composition not followed; ``${other.key}``
  interpolations are resolved);
- any other file: a launch script or a list of overrides, e.g. verl's
  ``examples/grpo_trainer/run_qwen2-7b.sh`` — read as bash would expand it (its variables, ``${VAR:-d}``,
  ``$((...))``, arrays: :mod:`oppo_sim.frameworks.shell`), its commands' ``key=value`` words are read; the
  entry point and ``--config-name`` say which trainer and schedule (:mod:`oppo_sim.frameworks.verl_layout`);
  every other word (``python3``, ``-m``) is listed as ignored;
- a string of overrides: ``--from-verl "data.train_batch_size=512 actor_rollout_ref.rollout.n=16"``.

``--from-verl`` may be given several times (a config file, then overrides): later sources win, as in
Hydra. A key no source sets takes verl's documented default (:data:`VERL_DEFAULTS`), as verl itself
would — e.g. ``actor.ppo_epochs`` is 1 in verl where oppo-sim's own default is 4.

What each key means, from verl's config reference (github.com/volcengine/verl ``docs/examples/config.rst``,
commit 006cefd), ``verl/trainer/config/ppo_trainer.yaml`` (commit 008db45; the defaults rechecked against
the composed ``_generated_ppo_trainer.yaml`` and ``_generated_ppo_megatron_trainer.yaml`` of release v0.7.0,
2026-01-05: main has since lowered ``rollout.max_num_seqs`` to 256), the rollout's ``sleep(level=1)`` from
verl's vLLM sharding manager:

| verl key | oppo-sim option |
|---|---|
| ``data.train_batch_size`` (prompts per step) | ``--batch`` |
| ``actor_rollout_ref.rollout.n`` (responses per prompt) | ``--n`` |
| ``actor.ppo_mini_batch_size`` (prompts, global) | ``--minibatches = train_batch_size / ppo_mini_batch_size`` |
| ``actor.ppo_epochs`` | ``--ppo-epochs`` |
| ``data.max_prompt_length``, ``data.max_response_length`` | ``--max-prompt``, ``--max-response`` |
| ``data.filter_overlong_prompts``, ``data.truncation`` | filtered (oppo-sim's default), or ``--truncate-prompt`` for left/right/middle without the filter |
| ``rollout.tensor_model_parallel_size`` | ``--tp`` |
| ``rollout.gpu_memory_utilization`` | ``--gpu-memory-utilization`` (vLLM >= 0.7: a fraction of the whole device, as oppo-sim's) |
| ``rollout.max_num_seqs``, ``.max_num_batched_tokens``, ``.enable_chunked_prefill``, ``.enforce_eager`` | the vLLM options of the same names (``enforce_eager`` defaulted to True before verl 0.6) |
| ``rollout.free_cache_engine`` | ``--colocate sleep --sleep-level 1`` (verl calls vLLM's ``sleep(level=1)``), else ``--colocate resident`` |
| ``actor.use_kl_loss``, ``algorithm.use_kl_in_reward`` | a reference model iff either is set, else ``--no-reference`` |
| ``actor.ulysses_sequence_parallel_size`` | ``--sp`` |
| ``actor.use_dynamic_bsz`` with ``ppo_max_token_len_per_gpu``, else ``ppo_micro_batch_size_per_gpu`` (or the deprecated global size over the data-parallel ranks); ``rollout.log_prob_*`` of the same | ``--micro-batch-tokens`` (x ``--sp`` or ``--cp``, as verl scales it) or ``--micro-batch-size``; ``--logprob-micro-batch-tokens`` / ``-size`` |
| ``actor.strategy`` | ``fsdp``/``fsdp2`` (verl's default; FSDP full-shard, the reference and reward workers sharded the same way) -> ``--zero 3``; ``megatron`` (also selected by ``--config-name=ppo_megatron_trainer``) -> ``--train-backend megatron`` |
| ``actor.fsdp_config.reshard_after_forward`` | ``False`` -> ``--zero 2`` (FSDP SHARD_GRAD_OP); else ``--zero 3`` |
| ``actor.fsdp_config.param_offload``, ``.optimizer_offload`` | either True -> ``--offload-train-state``; both False (verl's default) -> ``--no-offload-train-state`` |
| ``actor.megatron.tensor_model_parallel_size``, ``pipeline_…``, ``virtual_pipeline_…``, ``context_parallel_size``, ``expert_model_parallel_size``, ``use_distributed_optimizer`` | ``--train-tp``, ``--pp``, ``--vpp``, ``--cp``, ``--ep``, ``--[no-]distributed-optimizer`` |
| ``actor.megatron.override_transformer_config.moe_token_dispatcher_type`` (under ``--ep``; verl sets ``alltoall``) | ``--moe-dispatcher`` |
| ``actor.megatron.param_offload``, ``grad_offload``, ``optimizer_offload`` | any True -> ``--offload-train-state``, else ``--no-offload-train-state`` |
| ``model.enable_gradient_checkpointing`` (FSDP); ``actor.megatron.override_transformer_config.recompute_granularity`` (Megatron) | ``--recompute full`` / ``none``; ``full``/``selective``/``none`` |
| ``critic.model.path`` (with ``adv_estimator=gae``) | ``--critic`` |
| ``data.gen_batch_size``, ``algorithm.filter_groups.max_num_gen_batches`` (DAPO) | ``--gen-batch-size``, ``--max-gen-batches`` |
| one-step-off / fully-async entry points, ``rollout.n_gpus_per_node``, ``rollout.nnodes``, ``async_training.*`` | ``--placement "gen-apart G+T"`` and ``--policy async --staleness K`` (:mod:`oppo_sim.frameworks.verl_layout`); ``--refit-group all`` (the weights broadcast over every actor and rollout worker) |
| ``model.path`` | ``--actor``: the path's ``config.json`` where it exists here, else a table id matched from the name (``Qwen/Qwen2.5-7B-Instruct`` -> ``qwen2.5-7b``), else a one-line error naming it (unless ``--actor`` is typed) |
| ``algorithm.adv_estimator`` | ``--algorithm``: gae -> ppo, grpo, rloo, reinforce_plus_plus(_baseline) -> reinforce++; grpo with ``algorithm.filter_groups.enable`` -> dapo |
| ``reward_model.enable``, ``reward_model.model.path`` | ``--reward MODEL``, or ``--reward rule`` (verl's reward function) when the reward model is off |
| ``trainer.n_gpus_per_node`` x ``trainer.nnodes`` | ``--placement colocated --devices N --nodes M``: verl's hybrid engine puts every role on every GPU |
| ``reward_model.enable_resource_pool``, ``.n_gpus_per_node``, ``.nnodes`` | the reward model's own pool: ``--placement "shared N+R"`` (``split G+T+R`` off the hybrid engine) |
| ``trainer.total_training_steps`` | ``--steps`` |
| ``trainer.balance_batch`` | ``--[no-]balance-batch`` (verl's default on: each rank's share balanced by tokens, in verl's order) |

(``actor.`` and ``rollout.`` stand for ``actor_rollout_ref.actor.`` and ``actor_rollout_ref.rollout.``.)
Approximated, and said in the echo: verl's ``truncation: error`` (an overlong prompt stops the run)
becomes a filter; ``reinforce_plus_plus`` (no baseline) becomes oppo-sim's ``reinforce++``. Keys of what
oppo-sim does not time (optimiser, logging, checkpoints, micro-batch sizes) are listed as ignored. The
defaults are verl's release v0.7.0's; the known keys, v0.7.0's and main's (``oppo_sim/data/verl_config_keys.json``);
a near-miss of a known key is refused with "did you mean" (:mod:`oppo_sim.frameworks.verl_keys`), and a
source none of whose keys verl has is refused.
"""

from __future__ import annotations

from typing import Any, Sequence

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.translation import (
    Builder,
    Translation,
    as_bool,
    as_float,
    as_int,
    load_source,
    resolve,
)
from oppo_sim.frameworks.lora_keys import VERL_LORA_KEYS, verl_lora
from oppo_sim.frameworks.verl_keys import check_typos
from oppo_sim.frameworks.verl_padding import PADDING_KEYS, padding
from oppo_sim.frameworks.verl_layout import (
    ASYNC_DEFAULTS,
    LAYOUT_KEYS,
    MEGATRON_DEFAULTS,
    entry,
    fsdp,
    fused_kernels,
    megatron,
    placement_and_policy,
    micro_batches,
)

A, R = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."
VERL_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 1024, "data.max_prompt_length": 512, "data.max_response_length": 512,
    "data.filter_overlong_prompts": False, "data.truncation": "error",
    R + "n": 1, R + "tensor_model_parallel_size": 2, R + "gpu_memory_utilization": 0.5, R + "max_num_seqs": 1024,
    R + "max_num_batched_tokens": 8192, R + "enable_chunked_prefill": True, R + "free_cache_engine": True,
    R + "enforce_eager": False,
    A + "ppo_mini_batch_size": 256, A + "ppo_epochs": 1, A + "use_kl_loss": False, A + "ulysses_sequence_parallel_size": 1,
    A + "strategy": "fsdp", A + "fsdp_config.param_offload": False, A + "fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True, "actor_rollout_ref.hybrid_engine": True,
    "actor_rollout_ref.model.use_fused_kernels": False,
    "algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": False, "reward_model.enable": False,
    "trainer.n_gpus_per_node": 8, "trainer.nnodes": 1, "trainer.balance_batch": True,
}
"""verl's defaults of the keys oppo-sim reads, at release v0.7.0 (``ppo_trainer``; ``ppo_megatron_trainer`` adds
:data:`~oppo_sim.frameworks.verl_layout.MEGATRON_DEFAULTS`, the async entry points
:data:`~oppo_sim.frameworks.verl_layout.ASYNC_DEFAULTS`)."""

ADV_ESTIMATORS: dict[str, str] = {"gae": "ppo", "grpo": "grpo", "rloo": "rloo",
                                  "reinforce_plus_plus_baseline": "reinforce++", "reinforce_plus_plus": "reinforce++",
                                  "grpo_vectorized": "grpo", "rloo_vectorized": "rloo", "grpo_passk": "grpo",
                                  "gpg": "grpo", "opo": "grpo", "optimal_token_baseline": "grpo"}
"""verl ``algorithm.adv_estimator`` -> oppo-sim ``--algorithm`` (verl's ``AdvantageEstimator``; ``remax``, which
generates a greedy baseline response per prompt, is not simulated)."""
_SAME_COST = frozenset({"grpo_vectorized", "rloo_vectorized", "grpo_passk", "gpg", "opo", "optimal_token_baseline"})
"""Estimators whose advantage differs from oppo-sim's algorithm only in a CPU-side formula over the same group."""
CRITIC_DEFAULT = "~/models/deepseek-llm-7b-chat"
"""verl's ``critic.model.path`` when a PPO job does not give one."""

_PLAIN: tuple[tuple[str, str, Any], ...] = (  # key, option, value type: one key, one option
    ("data.max_prompt_length", "--max-prompt", as_int),
    ("data.max_response_length", "--max-response", as_int),
    (R + "n", "--n", as_int),
    (R + "tensor_model_parallel_size", "--tp", as_int),
    (R + "gpu_memory_utilization", "--gpu-memory-utilization", as_float),
    (R + "max_num_seqs", "--max-num-seqs", as_int),
    (R + "max_num_batched_tokens", "--max-num-batched-tokens", as_int),
    (A + "ppo_epochs", "--ppo-epochs", as_int),
    ("trainer.total_training_steps", "--steps", as_int),
)
DAPO_ROUNDS: tuple[tuple[str, str], ...] = (("data.gen_batch_size", "--gen-batch-size"),
                                            ("algorithm.filter_groups.max_num_gen_batches", "--max-gen-batches"))
"""DAPO's rounds: verl key -> the option of oppo-sim's round-by-round DAPO (where this oppo-sim lacks it, the
key is listed as ignored by the command's parser)."""
_GROUPED = ("data.train_batch_size", "data.filter_overlong_prompts", "data.truncation", R + "enable_chunked_prefill", R + "name",
            R + "enforce_eager", "trainer.balance_batch", A + "fsdp_config.offload_policy",
            R + "free_cache_engine", A + "ppo_mini_batch_size", A + "use_kl_loss", "algorithm.use_kl_in_reward",
            "actor_rollout_ref.model.enable_gradient_checkpointing", "actor_rollout_ref.model.path",
            "actor_rollout_ref.model.use_fused_kernels",
            "algorithm.adv_estimator", "algorithm.filter_groups.enable", "reward_model.enable",
            "reward_model.model.path", "trainer.n_gpus_per_node", "trainer.nnodes", A + "strategy",
            A + "ulysses_sequence_parallel_size", A + "fsdp_config.param_offload", A + "fsdp_config.optimizer_offload",
            "actor_rollout_ref.ref.fsdp_config.param_offload", "critic.model.path", "critic.strategy")
READ: frozenset[str] = frozenset([k for k, _, _ in _PLAIN] + list(_GROUPED) + [k for k, _ in DAPO_ROUNDS]
                                 + list(LAYOUT_KEYS) + list(PADDING_KEYS) + list(VERL_LORA_KEYS))
"""Every verl key the reader translates; any other key is listed as ignored."""

_WHY = {"data.": "dataset plumbing", "trainer.": "logging, checkpoints, validation", "critic.": "the critic trains "
        "with the actor's layout", "actor_rollout_ref.ref.": "the reference has the actor's shape and layout",
        "actor_rollout_ref.actor.optim.": "the optimiser's settings do not change a step's time",
        "custom_reward_function.": "the rule reward's cost is --reward-cost-ms",
        "reward_model.reward_kwargs.": "the rule reward's cost is --reward-cost-ms",
        "rollout.": "the rollout's own GPUs: only the one-step-off and fully-async entry points have them",
        "async_training.": "only the fully-async entry point reads it",
        "actor_rollout_ref.actor.optim.override_optimizer_config.": "Megatron's optimizer settings other than its CPU "
        "offload are not modelled", "actor_rollout_ref.actor.megatron.override_transformer_config.": "Megatron's "
        "kernel settings are not modelled (of its pipeline split, the first/last stage layers and account_for_* are)"}


def read_verl(sources: Sequence[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """The merged keys of ``sources`` (later wins), Hydra interpolations resolved, the stray words, and the
    keys given (the rest of :data:`VERL_DEFAULTS` fills in)."""
    cfg, stray, given, _, _ = _read(sources)
    return cfg, stray, given


def _read(sources: Sequence[str]) -> tuple[dict[str, Any], list[str], list[str], list[str], set[str]]:
    given: dict[str, Any] = {}
    stray: list[str] = []
    assumed: list[str] = []
    added: set[str] = set()
    for src in sources:
        s = load_source(src, "--from-verl")
        given.update(s.keys)
        stray += s.stray
        assumed += s.notes
        added |= s.plus
        if not s.keys:
            raise ConfigError(f"--from-verl {src!r}: no verl key=value overrides in it (is it a verl job?)")
    schedule, config, _ = entry(stray, given, set(given))
    base = {**VERL_DEFAULTS, **(ASYNC_DEFAULTS if schedule != "sync" else {}),
            **(MEGATRON_DEFAULTS if config and "megatron" in config or str(given.get(A + "strategy")) == "megatron"
               else {})}
    if config and "megatron" in config:
        base[A + "strategy"] = "megatron"
    return resolve({**base, **given}), stray, list(given), assumed, added


def translate_verl(sources: Sequence[str] | str) -> Translation:
    """verl's config (files and/or overrides) -> oppo-sim arguments, with every key echoed or listed."""
    sources = (sources,) if isinstance(sources, str) else tuple(sources)
    cfg, stray, given, assumed, added = _read(sources)
    try:
        return _translate(sources, cfg, stray, given, assumed, added)
    except ConfigError as e:  # an empty value: say which variables the script left unset
        unset = [n.split(" ", 1)[0] for n in assumed if "is not set in the script" in n]
        if unset and "''" in str(e):
            key = str(e).split(":", 1)[0]
            raise ConfigError(f"{e} ({', '.join(unset)}: not set in the script, and the environment (the launcher's "
                              f"variables) is not read; give the value after the script: --from-verl {key}=VALUE)") from None
        raise


def _translate(sources: tuple[str, ...], cfg: dict, stray: list[str], given: list[str], assumed: list[str],
               added: set[str]) -> Translation:
    unknown = check_typos(given, added)
    if given and len(unknown) == len(given):
        raise ConfigError(f"--from-verl: none of the {len(given)} keys given is a key of verl's config (e.g. "
                          f"{unknown[0]}); is it a verl job?")
    schedule, config, said = entry(stray, cfg, set(given))
    b = Builder("verl", sources)
    b.assumed += assumed
    dflt = {k: k not in given for k in cfg}
    fully = schedule == "fully-async"
    if said:
        b.use(" ".join(said), "", note=f"{schedule} schedule" + (f", config {config}" if config else ""))
    if config and config.removesuffix("_trainer").split("_")[-1] not in ("ppo", "megatron"):
        b.notes.append(f"--config-name={config}: that config file is not read; its keys are taken as verl's defaults")
    for key, opt, kind in _PLAIN:
        if cfg.get(key) is not None:
            b.use(key, cfg[key], opt, kind(key, cfg[key]), default=dflt[key])
    _prompts(b, cfg, dflt)
    _engine(b, cfg, dflt, colocated=schedule == "sync")
    _training(b, cfg, dflt, fully)
    backend = _trainer_state(b, cfg, dflt)
    fused_kernels(b, cfg, dflt)
    micro_batches(b, cfg, dflt, backend)
    algorithm = _algorithm(b, cfg, dflt)
    verl_lora(b, cfg, backend)
    padding(b, cfg, backend, critic=algorithm == "ppo", reward_model=as_bool("reward_model.enable", cfg["reward_model.enable"]))
    _dapo_rounds(b, cfg, dflt, given, algorithm, fully)
    placement_and_policy(b, cfg, dflt, schedule, as_int(R + "tensor_model_parallel_size",
                                                        cfg[R + "tensor_model_parallel_size"]))
    b.training_loop("verl")
    _ignored(b, cfg, given, stray, said, backend, set(unknown), added, schedule)
    return b.done()


def _ignored(b: Builder, cfg: dict, given: list[str], stray: list[str], said: list[str], backend: str,
             unknown: set[str], added: set[str], schedule: str) -> None:
    echoed = {u.key for u in b.used}
    for key in sorted(k for k in given if k not in echoed):
        base = max(((p, w) for p, w in _WHY.items() if key.startswith(p)), default=("", ""))[1]
        if key in unknown:
            why = "not a key of verl's config"
            why = f"added with +: {base or why}" if key in added else why
        elif key == "data.train_batch_size":
            why = "fully-async: the trainer takes require_batches x ppo_mini_batch_size prompts at a time"
        elif key in dict(DAPO_ROUNDS):
            why = ("fully-async: the rollout generates prompt by prompt" if schedule == "fully-async" else
                   "only DAPO's dynamic sampling (algorithm.filter_groups.enable=True) generates in rounds")
        elif key.startswith("rollout.") and schedule != "sync":
            why = "the rollout's run length and validation: not modelled"
        elif key.startswith("async_training.") and schedule == "fully-async":
            why = "not modelled"
        elif key == A + "ulysses_sequence_parallel_size" and backend == "megatron":
            why = "an FSDP setting; Megatron's is context_parallel_size"
        else:
            why = base or "not modelled"
        b.ignore(key, cfg[key], "Hydra defaults list: composition not followed" if key == "defaults" else why)
    said_words = {w for s in said for w in s.split(" ")}
    rest = [w for w in stray if w not in said_words]
    if rest:
        b.ignore(" ".join(rest), "", "words that are not key=value overrides")


def _prompts(b: Builder, cfg: dict, dflt: dict) -> None:
    filt = as_bool("data.filter_overlong_prompts", cfg["data.filter_overlong_prompts"])
    trunc = str(cfg["data.truncation"]).strip().lower()
    if trunc not in ("error", "left", "right", "middle"):
        raise ConfigError(f"data.truncation: expected error, left, right or middle, got {cfg['data.truncation']!r}")
    b.use("data.filter_overlong_prompts", filt, note="overlong prompts filtered" if filt else "",
          default=dflt["data.filter_overlong_prompts"])
    if filt or trunc == "error":
        b.use("data.truncation", trunc, default=dflt["data.truncation"],
              note="not reached: filtered first" if filt else "verl stops on an overlong prompt; oppo-sim filters it")
    else:
        b.use("data.truncation", trunc, "--truncate-prompt", default=dflt["data.truncation"])


def _engine(b: Builder, cfg: dict, dflt: dict, colocated: bool) -> None:
    if R + "name" in cfg:  # vllm (verl's default), sglang, hf: the same rollout keys, one engine model
        name = str(cfg[R + "name"]).strip().lower()
        b.use(R + "name", name, note="" if name == "vllm" else "priced as oppo-sim's vLLM-like engine")
    k = R + "enable_chunked_prefill"
    on = as_bool(k, cfg[k])
    b.use(k, on, "--enable-chunked-prefill" if on else "--no-enable-chunked-prefill", default=dflt[k])
    k = "trainer.balance_batch"
    on = as_bool(k, cfg[k])
    b.use(k, on, "--balance-batch" if on else "--no-balance-batch", default=dflt[k],
          note="" if on else "each rank's sequences in batch order: every optimizer step waits for its slowest rank")
    k = R + "enforce_eager"
    on = as_bool(k, cfg[k])
    b.use(k, on, "--enforce-eager" if on else "--no-enforce-eager", default=dflt[k],
          note="no CUDA graphs: the host issues every kernel of a decode step" if on else "")
    k = R + "free_cache_engine"
    if not colocated:
        b.use(k, cfg[k], default=dflt[k], note="the rollout has its own GPUs: nothing takes turns")
    elif as_bool(k, cfg[k]):
        b.use(k, True, "--colocate", "sleep", "--sleep-level", 1, note="vLLM sleep(level=1) after each rollout",
              default=dflt[k])
    else:
        b.use(k, False, "--colocate", "resident", default=dflt[k])


def _training(b: Builder, cfg: dict, dflt: dict, fully_async: bool) -> None:
    k = A + "ppo_mini_batch_size"
    if not fully_async:  # fully-async: the batch and mini-batches come from async_training.* (verl_layout)
        batch, mini = as_int("data.train_batch_size", cfg["data.train_batch_size"]), as_int(k, cfg[k])
        if mini < 1 or batch < 1:
            raise ConfigError(f"data.train_batch_size and {k} must be >= 1, got {batch} and {mini}")
        b.use("data.train_batch_size", batch, "--batch", batch, default=dflt["data.train_batch_size"])
        b.use(k, mini, "--minibatches", -(-batch // mini), default=dflt[k],
              note=f"{batch} / {mini} prompts" + ("" if batch % mini == 0 else ", the last mini-batch smaller"))
    k = "actor_rollout_ref.model.path"
    if k in cfg:
        b.use_model(k, cfg[k], "--actor")


def _trainer_state(b: Builder, cfg: dict, dflt: dict) -> str:
    """The actor's trainer: FSDP (full-shard = ZeRO-3, ``--sp``, its offload and checkpointing switches) or
    Megatron (:func:`~oppo_sim.frameworks.verl_layout.megatron`). -> the backend."""
    k = A + "strategy"
    strategy = str(cfg[k]).strip().lower()
    if strategy == "megatron":
        b.use(k, strategy, default=dflt[k])
        megatron(b, cfg, dflt)
        return "megatron"
    fsdp(b, cfg, dflt, k, strategy)
    rk = "actor_rollout_ref.ref.fsdp_config.param_offload"
    if rk in cfg:
        b.use(rk, cfg[rk], note="oppo-sim offloads frozen weights exactly when it offloads the trainer's state")
    k = "actor_rollout_ref.model.enable_gradient_checkpointing"
    b.use(k, cfg[k], "--recompute", "full" if as_bool(k, cfg[k]) else "none", default=dflt[k])
    return "fsdp"



def _algorithm(b: Builder, cfg: dict, dflt: dict) -> str:
    """``--algorithm``, the reference (KL), the reward and, under GAE, the critic. -> the algorithm."""
    k = "algorithm.adv_estimator"
    est = str(cfg[k]).strip().lower()
    if est not in ADV_ESTIMATORS:
        raise ConfigError(f"{k}={cfg[k]}: oppo-sim simulates {', '.join(ADV_ESTIMATORS)}")
    name = ADV_ESTIMATORS[est]
    note = "no group baseline in verl; oppo-sim's reinforce++ costs the same" if est == "reinforce_plus_plus" else (
        f"the same group of n, another advantage formula: costs as {name}" if est in _SAME_COST else "")
    fk = "algorithm.filter_groups.enable"
    if fk in cfg and as_bool(fk, cfg[fk]):
        if name != "grpo":
            raise ConfigError(f"{fk}=True (DAPO's dynamic sampling) is simulated with adv_estimator=grpo, got {est}")
        name, note = "dapo", "with algorithm.filter_groups.enable: DAPO's dynamic sampling"
        b.use(fk, True, note="-> --algorithm dapo")
    b.use(k, est, "--algorithm", name, note=note, default=dflt[k])
    if name == "ppo":
        ck = "critic.model.path"
        b.use_model(ck, cfg.get(ck, CRITIC_DEFAULT), "--critic")
        if ck not in cfg:
            b.notes.append(f"critic.model.path not given: verl's default {CRITIC_DEFAULT}")
    loss, inrew = as_bool(A + "use_kl_loss", cfg[A + "use_kl_loss"]), as_bool(
        "algorithm.use_kl_in_reward", cfg["algorithm.use_kl_in_reward"])
    b.use(A + "use_kl_loss", loss, default=dflt[A + "use_kl_loss"])
    b.use("algorithm.use_kl_in_reward", inrew, *(() if loss or inrew else ("--no-reference",)),
          note="a reference model for the KL" if loss or inrew else "neither KL: no reference model",
          default=dflt["algorithm.use_kl_in_reward"])
    k = "reward_model.enable"
    if not as_bool(k, cfg[k]):
        b.use(k, False, "--reward", "rule", note="verl's reward function on the CPU", default=dflt[k])
        return name
    b.use(k, True, default=dflt[k])
    mk = "reward_model.model.path"
    if mk not in cfg:
        raise ConfigError(f"{k}=True needs {mk}")
    b.use_model(mk, cfg[mk], "--reward")
    return name


# ---- DAPO's rounds: verl data.gen_batch_size and filter_groups.max_num_gen_batches (one place) -------------

def _dapo_rounds(b: Builder, cfg: dict, dflt: dict, given: list[str], algorithm: str, fully_async: bool) -> None:
    """Under DAPO, the prompts generated per round and the most rounds a step may take, as given."""
    if algorithm != "dapo" or fully_async:
        return
    for key, option in DAPO_ROUNDS:
        if key in given:
            b.use(key, cfg[key], option, as_int(key, cfg[key]), default=dflt[key])


__all__ = ["ADV_ESTIMATORS", "CRITIC_DEFAULT", "DAPO_ROUNDS", "READ", "VERL_DEFAULTS", "read_verl", "translate_verl"]
