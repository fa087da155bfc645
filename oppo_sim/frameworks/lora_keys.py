"""LoRA as each framework's configuration names it -> ``--lora-rank``, ``--lora-targets``, ``--lora-sync`` and, for
verl, ``--reference-in-actor`` (:mod:`oppo_sim.hw.models.lora`). Read at the commits the readers name:

- verl: ``actor_rollout_ref.model.lora_rank`` / ``target_modules`` (FSDP), or ``actor_rollout_ref.model.lora.rank`` /
  ``lora.target_modules`` (its Megatron path, read first as ``ray_trainer`` reads them); the weight sync hands vLLM
  the adapters alone once the base weights are there (``fsdp_workers.rollout_mode``: ``base_sync_done``), unless
  ``lora.merge`` merges them first (Megatron); the reference is the actor with its adapters off (``ref_in_actor``:
  ``lora_rank > 0``);
- OpenRLHF: ``--lora_rank`` / ``--target_modules`` (``--ds.lora.rank`` / ``--ds.lora.target_modules`` in its newer
  flag names); ``broadcast_to_vllm`` sends every ``named_parameters()`` entry: the whole weights each step;
- NeMo RL: ``policy.dtensor_cfg.lora_cfg`` (``enabled``, ``dim``, ``target_modules``, ``match_all_linear``) or
  ``policy.megatron_cfg.peft`` (``enabled``, ``dim``, ``target_modules``; empty: Megatron-Bridge's default, every
  linear); its refit merges the adapters into the weights (``_maybe_merge_lora_weight``): the whole weights.
"""

from __future__ import annotations

from fnmatch import fnmatch
from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.nemo_rl_recipe import value
from oppo_sim.frameworks.translation import Builder, as_bool, as_int
from oppo_sim.hw.models.lora import LORA_ALIASES, LORA_MODULES, parse_targets

__all__ = ["VERL_LORA_KEYS", "NEMO_RL_LORA_KEYS", "verl_lora", "openrlhf_lora", "nemo_rl_lora"]

_VM = "actor_rollout_ref.model."
VERL_LORA_KEYS: tuple[str, ...] = (_VM + "lora_rank", _VM + "target_modules", _VM + "lora.rank",
                                   _VM + "lora.target_modules", _VM + "lora.merge",
                                   "actor_rollout_ref.actor.fsdp_config.model_dtype")
"""The verl keys read here."""
_ND, _NM = "policy.dtensor_cfg.lora_cfg.", "policy.megatron_cfg.peft."
NEMO_RL_LORA_KEYS: tuple[str, ...] = tuple(p + k for p in (_ND, _NM) for k in (
    "enabled", "dim", "target_modules", "exclude_modules")) + (_ND + "match_all_linear",)
"""The NeMo RL keys read here."""


def _targets_arg(value: Any) -> str:
    """A framework's target modules as ``--lora-targets`` (``all-linear`` or comma-separated names; checked)."""
    got = parse_targets(value)
    return "all-linear" if got == LORA_MODULES else ",".join(got)


def _use(b: Builder, rank_key: str, rank: int, targets: tuple[str, Any, Any, bool], sync: str, why: str) -> None:
    """Echo the rank, the targets (key, value shown, modules, whether the framework's default) and the sync."""
    b.use(rank_key, rank, "--lora-rank", rank, note="LoRA: the adapters train, the weights stay frozen")
    key, shown, modules, default = targets
    b.use(key, shown, "--lora-targets", _targets_arg(modules), default=default)
    b.use("LoRA weight sync", sync, "--lora-sync", sync, note=why, default=True)


def verl_lora(b: Builder, cfg: dict, backend: str) -> None:
    """verl's LoRA keys (module notes); nothing where the rank is 0."""
    rank_key = _VM + "lora.rank" if as_int(_VM + "lora.rank", cfg.get(_VM + "lora.rank", 0) or 0) > 0 else _VM + "lora_rank"
    rank = as_int(rank_key, cfg.get(rank_key, 0) or 0)
    if rank <= 0:
        return
    tk = _VM + ("lora.target_modules" if rank_key.endswith("lora.rank") else "target_modules")
    merge = as_bool(_VM + "lora.merge", cfg.get(_VM + "lora.merge", False))
    if _VM + "lora.merge" in cfg:
        b.use(_VM + "lora.merge", merge)
    _use(b, rank_key, rank, (tk, cfg.get(tk, "all-linear"), cfg.get(tk, "all-linear"), tk not in cfg),
         "merged" if merge else "adapter",
         "lora.merge: the merged weights every step" if merge else
         "verl hands vLLM the adapters alone once its base weights are loaded (rollout_mode, base_sync_done)")
    critic = as_int("critic.model.lora_rank", cfg.get("critic.model.lora_rank", 0) or 0)
    if str(cfg.get("algorithm.adv_estimator", "")).strip().lower() == "gae" and critic != rank:
        b.notes.append(f"critic.model.lora_rank={critic}: oppo-sim gives every trained model the actor's LoRA (rank "
                       f"{rank}); the critic's training is priced with it")
    if backend == "fsdp":  # fsdp_workers: the actor loads in fp32 unless fsdp_config.model_dtype says otherwise
        dk = "actor_rollout_ref.actor.fsdp_config.model_dtype"
        half = str(cfg.get(dk, "fp32")).strip().lower() in ("bf16", "bfloat16", "fp16", "float16", "half")
        b.use(dk, cfg.get(dk, "fp32"), "--lora-base-dtype", "bf16" if half else "fp32", default=dk not in cfg,
              note="the frozen weights' dtype (verl's FSDP actor: fp32 unless set)")
    kl = as_bool("actor_rollout_ref.actor.use_kl_loss", cfg["actor_rollout_ref.actor.use_kl_loss"]) or as_bool(
        "algorithm.use_kl_in_reward", cfg["algorithm.use_kl_in_reward"])
    if kl:
        b.use("ref_in_actor", True, "--reference-in-actor", default=True,
              note=f"verl under LoRA: the reference is the actor with its adapters off ({backend})")


def openrlhf_lora(b: Builder, rank_key: str, rank: int, targets_key: str | None, targets: Any) -> None:
    """OpenRLHF's ``--lora_rank`` (its value and its key as the command line named it) and target modules."""
    if rank > 0:
        shown = targets if targets_key else "all-linear"
        _use(b, rank_key, rank, (targets_key or "target_modules", shown, shown, targets_key is None), "merged",
             "broadcast_to_vllm sends every parameter: the whole weights each step")


def _excluded(modules: tuple[str, ...], patterns: list) -> list[str]:
    """``modules`` less those an ``exclude_modules`` glob matches: against the name, a layer's module path
    (``model.layers.0.mlp.gate_proj``) and the names that stand for it (Megatron's ``linear_fc1`` for gate and up)."""
    def hit(m: str) -> bool:
        attn = m in LORA_MODULES[:4]  # a representative module path, HF's and Megatron's
        hf, mc = ("self_attn", "self_attention") if attn else ("mlp", "mlp")
        names = [m, f"model.layers.0.{hf}.{m}"] + [n for a, parts in LORA_ALIASES.items() if m in parts
                                                   for n in (a, f"decoder.layers.0.{mc}.{a}")]
        return any(fnmatch(n, str(p)) for n in names for p in patterns)
    return [m for m in modules if not hit(m)]


def nemo_rl_lora(b: Builder, flat: dict) -> None:
    """NeMo RL's ``lora_cfg`` (DTensor) or ``peft`` (Megatron) where enabled (module notes)."""
    for pre in (_ND, _NM):
        if not as_bool(pre + "enabled", value(flat, pre + "enabled") or False):
            continue
        b.use(pre + "enabled", True)
        rank = as_int(pre + "dim", value(flat, pre + "dim") if pre + "dim" in flat else 8)
        if rank < 1:
            raise ConfigError(f"{pre}dim={rank}: a LoRA rank must be >= 1 (or set {pre}enabled false)")
        listed = value(flat, pre + "target_modules") or []
        if pre == _ND and as_bool(_ND + "match_all_linear", value(flat, _ND + "match_all_linear") if
                                  _ND + "match_all_linear" in flat else True):
            targets = (_ND + "match_all_linear", True, "all-linear", _ND + "match_all_linear" not in flat)
        else:
            if pre == _ND and _ND + "match_all_linear" in flat:
                b.use(_ND + "match_all_linear", False, note="the target_modules listed" if listed else
                      "and no target_modules: every linear (less exclude_modules)")
            targets = (pre + "target_modules", listed, listed or "all-linear", not listed)
        ex = value(flat, pre + "exclude_modules") or []
        kept = _excluded(parse_targets(targets[2]), ex)
        if ex:
            if not kept:
                raise ConfigError(f"{pre}exclude_modules={ex}: excludes every adapted linear oppo-sim knows")
            b.use(pre + "exclude_modules", ex, note=f"leaves {', '.join(kept)}")
        targets = (*targets[:2], kept, targets[3])
        _use(b, pre + "dim", rank, targets, "merged", "NeMo RL's refit merges the adapters into the weights")
        return
