"""``oppo-sim run --from-verl SOURCE``: a verl PPO/GRPO job as oppo-sim options.

SOURCE is one of

- a ``.yaml``/``.yml`` file shaped like verl's ``verl/trainer/config/ppo_trainer.yaml`` (nested keys;
  a Hydra ``defaults:`` list is listed as ignored, its composition not followed; ``${other.key}``
  interpolations are resolved);
- any other file: a launch script or a list of overrides, e.g. verl's
  ``examples/grpo_trainer/run_qwen2-7b.sh`` — its ``key=value`` words are read, every other word
  (``python3``, ``-m``, ``verl.trainer.main_ppo``) is listed as ignored;
- a string of overrides: ``--from-verl "data.train_batch_size=512 actor_rollout_ref.rollout.n=16"``.

``--from-verl`` may be given several times (a config file, then overrides): later sources win, as in
Hydra. A key no source sets takes verl's documented default (:data:`VERL_DEFAULTS`), as verl itself
would — e.g. ``actor.ppo_epochs`` is 1 in verl where oppo-sim's own default is 4.

What each key means, from verl's config reference (github.com/volcengine/verl ``docs/examples/config.rst``,
commit 006cefd) and ``verl/trainer/config/ppo_trainer.yaml`` (commit 008db45), the rollout's
``sleep(level=1)`` from verl's vLLM sharding manager:

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
| ``rollout.max_num_seqs``, ``.max_num_batched_tokens``, ``.enable_chunked_prefill`` | the vLLM options of the same names |
| ``rollout.free_cache_engine`` | ``--colocate sleep --sleep-level 1`` (verl calls vLLM's ``sleep(level=1)``), else ``--colocate resident`` |
| ``actor.use_kl_loss``, ``algorithm.use_kl_in_reward`` | a reference model iff either is set, else ``--no-reference`` |
| ``actor.ulysses_sequence_parallel_size`` | ``--sp`` |
| ``actor.strategy`` | ``fsdp``/``fsdp2`` (verl's default; FSDP full-shard, the reference and reward workers sharded the same way) -> ``--zero 3``; ``megatron`` -> the ZeRO stage left auto (approximated) |
| ``actor.fsdp_config.param_offload``, ``.optimizer_offload`` | either True -> ``--offload-train-state``; both False (verl's default) -> ``--no-offload-train-state`` |
| ``model.enable_gradient_checkpointing`` | ``--recompute full`` / ``--recompute none`` |
| ``model.path`` | ``--actor``: the path's ``config.json`` where it exists here, else a table id matched from the name (``Qwen/Qwen2.5-7B-Instruct`` -> ``qwen2.5-7b``), else a one-line error naming it (unless ``--actor`` is typed) |
| ``algorithm.adv_estimator`` | ``--algorithm``: gae -> ppo, grpo, rloo, reinforce_plus_plus(_baseline) -> reinforce++; grpo with ``algorithm.filter_groups.enable`` -> dapo |
| ``reward_model.enable``, ``reward_model.model.path`` | ``--reward MODEL``, or ``--reward rule`` (verl's reward function) when the reward model is off |
| ``trainer.n_gpus_per_node`` x ``trainer.nnodes`` | ``--placement colocated --devices N --nodes M``: verl's hybrid engine puts every role on every GPU |
| ``trainer.total_training_steps`` | ``--steps`` |

(``actor.`` and ``rollout.`` stand for ``actor_rollout_ref.actor.`` and ``actor_rollout_ref.rollout.``.)
Approximated, and said in the echo: verl's ``truncation: error`` (an overlong prompt stops the run)
becomes a filter; ``reinforce_plus_plus`` (no baseline) becomes oppo-sim's ``reinforce++``; the critic
takes the reward model's shape (``critic.model.path`` is not read). Keys of what oppo-sim does not time
(optimiser, logging, checkpoints, micro-batch sizes, expert parallelism) are listed as ignored.
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
    read_source,
    resolve,
)

A, R = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."
VERL_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 1024, "data.max_prompt_length": 512, "data.max_response_length": 512,
    "data.filter_overlong_prompts": False, "data.truncation": "error",
    R + "n": 1, R + "tensor_model_parallel_size": 2, R + "gpu_memory_utilization": 0.5, R + "max_num_seqs": 1024,
    R + "max_num_batched_tokens": 8192, R + "enable_chunked_prefill": True, R + "free_cache_engine": True,
    A + "ppo_mini_batch_size": 256, A + "ppo_epochs": 1, A + "use_kl_loss": False, A + "ulysses_sequence_parallel_size": 1,
    A + "strategy": "fsdp", A + "fsdp_config.param_offload": False, A + "fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": False, "reward_model.enable": False,
    "trainer.n_gpus_per_node": 8, "trainer.nnodes": 1,
}
"""verl's defaults of the keys oppo-sim reads (``verl/trainer/config/ppo_trainer.yaml``, 2025)."""

ADV_ESTIMATORS: dict[str, str] = {"gae": "ppo", "grpo": "grpo", "rloo": "rloo",
                                  "reinforce_plus_plus_baseline": "reinforce++", "reinforce_plus_plus": "reinforce++"}
"""verl ``algorithm.adv_estimator`` -> oppo-sim ``--algorithm``."""

_PLAIN: tuple[tuple[str, str, Any], ...] = (  # key, option, value type: one key, one option
    ("data.train_batch_size", "--batch", as_int),
    ("data.max_prompt_length", "--max-prompt", as_int),
    ("data.max_response_length", "--max-response", as_int),
    (R + "n", "--n", as_int),
    (R + "tensor_model_parallel_size", "--tp", as_int),
    (R + "gpu_memory_utilization", "--gpu-memory-utilization", as_float),
    (R + "max_num_seqs", "--max-num-seqs", as_int),
    (R + "max_num_batched_tokens", "--max-num-batched-tokens", as_int),
    (A + "ppo_epochs", "--ppo-epochs", as_int),
    (A + "ulysses_sequence_parallel_size", "--sp", as_int),
    ("trainer.total_training_steps", "--steps", as_int),
)
_GROUPED = ("data.filter_overlong_prompts", "data.truncation", R + "enable_chunked_prefill", R + "free_cache_engine",
            A + "ppo_mini_batch_size", A + "use_kl_loss", "algorithm.use_kl_in_reward",
            "actor_rollout_ref.model.enable_gradient_checkpointing", "actor_rollout_ref.model.path",
            "algorithm.adv_estimator", "algorithm.filter_groups.enable", "reward_model.enable",
            "reward_model.model.path", "trainer.n_gpus_per_node", "trainer.nnodes", A + "strategy",
            A + "fsdp_config.param_offload", A + "fsdp_config.optimizer_offload", "actor_rollout_ref.ref.fsdp_config.param_offload")
READ: frozenset[str] = frozenset([k for k, _, _ in _PLAIN] + list(_GROUPED))
"""Every verl key the reader translates; any other key is listed as ignored."""

_WHY = {"data.": "dataset plumbing", "trainer.": "logging, checkpoints, validation", "critic.": "the critic takes "
        "the reward model's shape", "actor_rollout_ref.ref.": "the reference has the actor's shape",
        "actor_rollout_ref.actor.optim.": "the optimiser's settings do not change a step's time",
        "custom_reward_function.": "the rule reward's cost is --reward-cost-ms"}


def read_verl(sources: Sequence[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """The merged keys of ``sources`` (later wins), Hydra interpolations resolved, the stray words, and the
    keys given (the rest of :data:`VERL_DEFAULTS` fills in)."""
    given: dict[str, Any] = {}
    stray: list[str] = []
    for src in sources:
        keys, words = read_source(src, "--from-verl")
        given.update(keys)
        stray += words
    merged = resolve({**VERL_DEFAULTS, **given})
    return merged, stray, list(given)


def translate_verl(sources: Sequence[str] | str) -> Translation:
    """verl's config (files and/or overrides) -> oppo-sim arguments, with every key echoed or listed."""
    sources = (sources,) if isinstance(sources, str) else tuple(sources)
    cfg, stray, given = read_verl(sources)
    b = Builder("verl", sources)
    dflt = {k: k not in given for k in cfg}
    for key, opt, kind in _PLAIN:
        if cfg.get(key) is not None:
            b.use(key, cfg[key], opt, kind(key, cfg[key]), default=dflt[key])
    _prompts(b, cfg, dflt)
    _engine(b, cfg, dflt)
    _training(b, cfg, dflt)
    _trainer_state(b, cfg, dflt)
    _algorithm(b, cfg, dflt)
    _placement(b, cfg, dflt)
    for key in sorted(k for k in given if k not in READ):
        head = next((why for p, why in _WHY.items() if key.startswith(p)), "not modelled")
        b.ignore(key, cfg[key], "Hydra defaults list: composition not followed" if key == "defaults" else head)
    if stray:
        b.ignore(" ".join(stray), "", "words that are not key=value overrides")
    b.notes.append("verl runs the synchronous schedule (oppo-sim's baseline policy); --policy chooses the one simulated")
    return b.done()


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


def _engine(b: Builder, cfg: dict, dflt: dict) -> None:
    k = R + "enable_chunked_prefill"
    on = as_bool(k, cfg[k])
    b.use(k, on, "--enable-chunked-prefill" if on else "--no-enable-chunked-prefill", default=dflt[k])
    k = R + "free_cache_engine"
    if as_bool(k, cfg[k]):
        b.use(k, True, "--colocate", "sleep", "--sleep-level", 1, note="vLLM sleep(level=1) after each rollout",
              default=dflt[k])
    else:
        b.use(k, False, "--colocate", "resident", default=dflt[k])


def _training(b: Builder, cfg: dict, dflt: dict) -> None:
    k = A + "ppo_mini_batch_size"
    batch, mini = as_int("data.train_batch_size", cfg["data.train_batch_size"]), as_int(k, cfg[k])
    if mini < 1:
        raise ConfigError(f"{k}: must be >= 1, got {mini}")
    parts = -(-batch // mini)
    b.use(k, mini, "--minibatches", parts, default=dflt[k],
          note=f"{batch} / {mini} prompts" + ("" if batch % mini == 0 else ", the last mini-batch smaller"))
    k = "actor_rollout_ref.model.enable_gradient_checkpointing"
    b.use(k, cfg[k], "--recompute", "full" if as_bool(k, cfg[k]) else "none", default=dflt[k])
    k = "actor_rollout_ref.model.path"
    if k in cfg:
        b.use_model(k, cfg[k], "--actor")


def _trainer_state(b: Builder, cfg: dict, dflt: dict) -> None:
    """The actor's strategy (FSDP full-shard = ZeRO-3) and its offload switches (``--[no-]offload-train-state``)."""
    k = A + "strategy"
    strategy = str(cfg[k]).strip().lower()
    if strategy in ("fsdp", "fsdp2"):
        b.use(k, strategy, "--zero", 3, note="FSDP full-shard: ZeRO-3 (the reference sharded with it)", default=dflt[k])
    elif strategy == "megatron":
        b.use(k, strategy, note="ZeRO stage left auto", default=dflt[k])
        b.notes.append("actor.strategy=megatron: tensor/pipeline parallel training is not modelled; oppo-sim's "
                       "data-parallel trainer with the ZeRO stage left auto (2, else 3) stands in for it")
    else:
        raise ConfigError(f"{k}: expected fsdp, fsdp2 or megatron, got {cfg[k]!r}")
    pk, ok = A + "fsdp_config.param_offload", A + "fsdp_config.optimizer_offload"
    param, opt = as_bool(pk, cfg[pk]), as_bool(ok, cfg[ok])
    b.use(pk, param, default=dflt[pk])
    b.use(ok, opt, "--offload-train-state" if param or opt else "--no-offload-train-state", default=dflt[ok],
          note="with param_offload: the trainer's state " + ("to host while vLLM generates" if param or opt else
                                                            "stays on the GPUs while vLLM generates"))
    rk = "actor_rollout_ref.ref.fsdp_config.param_offload"
    if rk in cfg:
        b.use(rk, cfg[rk], note="oppo-sim offloads frozen weights exactly when it offloads the trainer's state")


def _algorithm(b: Builder, cfg: dict, dflt: dict) -> None:
    k = "algorithm.adv_estimator"
    est = str(cfg[k]).strip().lower()
    if est not in ADV_ESTIMATORS:
        raise ConfigError(f"{k}={cfg[k]}: oppo-sim simulates {', '.join(ADV_ESTIMATORS)}")
    name = ADV_ESTIMATORS[est]
    note = "no group baseline in verl; oppo-sim's reinforce++ costs the same" if est == "reinforce_plus_plus" else ""
    fk = "algorithm.filter_groups.enable"
    if fk in cfg and as_bool(fk, cfg[fk]):
        if name != "grpo":
            raise ConfigError(f"{fk}=True (DAPO's dynamic sampling) is simulated with adv_estimator=grpo, got {est}")
        name, note = "dapo", "with algorithm.filter_groups.enable: DAPO's dynamic sampling"
        b.use(fk, True, note="-> --algorithm dapo")
    b.use(k, est, "--algorithm", name, note=note, default=dflt[k])
    loss, inrew = as_bool(A + "use_kl_loss", cfg[A + "use_kl_loss"]), as_bool(
        "algorithm.use_kl_in_reward", cfg["algorithm.use_kl_in_reward"])
    b.use(A + "use_kl_loss", loss, default=dflt[A + "use_kl_loss"])
    b.use("algorithm.use_kl_in_reward", inrew, *(() if loss or inrew else ("--no-reference",)),
          note="a reference model for the KL" if loss or inrew else "neither KL: no reference model",
          default=dflt["algorithm.use_kl_in_reward"])
    k = "reward_model.enable"
    if not as_bool(k, cfg[k]):
        b.use(k, False, "--reward", "rule", note="verl's reward function on the CPU", default=dflt[k])
        return
    b.use(k, True, default=dflt[k])
    mk = "reward_model.model.path"
    if mk not in cfg:
        raise ConfigError(f"{k}=True needs {mk}")
    b.use_model(mk, cfg[mk], "--reward")


def _placement(b: Builder, cfg: dict, dflt: dict) -> None:
    per, nodes = as_int("trainer.n_gpus_per_node", cfg["trainer.n_gpus_per_node"]), as_int("trainer.nnodes",
                                                                                          cfg["trainer.nnodes"])
    if per < 1 or nodes < 1:
        raise ConfigError(f"trainer.n_gpus_per_node and trainer.nnodes must be >= 1, got {per} and {nodes}")
    b.use("trainer.n_gpus_per_node", per, "--placement", "colocated", "--devices", per * nodes,
          note="hybrid engine: every role on every GPU", default=dflt["trainer.n_gpus_per_node"])
    b.use("trainer.nnodes", nodes, "--nodes", nodes, default=dflt["trainer.nnodes"])


__all__ = ["ADV_ESTIMATORS", "READ", "VERL_DEFAULTS", "read_verl", "translate_verl"]
