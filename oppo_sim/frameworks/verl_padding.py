"""verl's ``use_remove_padding`` switches -> ``--padded-roles`` (``oppo_sim.pipeline.padding``).

verl pads a step's batch to a rectangle — each prompt left-padded to ``data.max_prompt_length``, each response
padded to ``data.max_response_length`` — and a model whose ``use_remove_padding`` is off runs its forward and
backward on that rectangle as it is, so each of its sequences costs the two caps together. One switch per model,
read where the actor's trainer reads its own:

==============  ============================================  ================================================
model           FSDP key (verl v0.7.0 default)                Megatron key (v0.7.0 default)
==============  ============================================  ================================================
actor           ``actor_rollout_ref.model.use_remove_padding``  ``actor_rollout_ref.actor.megatron.use_remove_``
(+ log-probs,   (True; False before v0.7.0)                   ``padding`` (True)
reference)
critic (PPO)    ``critic.model.use_remove_padding`` (False)   ``critic.megatron.use_remove_padding`` (True)
reward model    ``reward_model.model.use_remove_padding``     ``reward_model.megatron.use_remove_padding``
                (False)                                       (the actor's)
==============  ============================================  ================================================

(``_generated_ppo_trainer.yaml`` / ``_generated_ppo_megatron_trainer.yaml`` at v0.7.0.) The critic's switch is
read only where the algorithm has a critic, the reward model's only where it is on.
"""

from __future__ import annotations

from typing import Any

from oppo_sim.frameworks.translation import Builder, as_bool

__all__ = ["PADDING_KEYS", "padding", "export_padding"]

_M = "actor_rollout_ref.model.use_remove_padding"
_MEG = "actor_rollout_ref.actor.megatron.use_remove_padding"
_DEFAULTS: dict[str, dict[str, tuple[str, bool | None]]] = {  # backend -> model -> (key, default; None: the actor's)
    "fsdp": {"actor": (_M, True), "critic": ("critic.model.use_remove_padding", False),
             "reward": ("reward_model.model.use_remove_padding", False)},
    "megatron": {"actor": (_MEG, True), "critic": ("critic.megatron.use_remove_padding", True),
                 "reward": ("reward_model.megatron.use_remove_padding", None)},
}
PADDING_KEYS: tuple[str, ...] = tuple(k for b in _DEFAULTS.values() for k, _ in b.values())
"""The verl keys :func:`padding` reads."""
_ROLES = {"actor": ("actor", "reference"), "critic": ("critic",), "reward": ("reward",)}


def padding(b: Builder, cfg: dict[str, Any], backend: str, critic: bool, reward_model: bool) -> None:
    """Each model's ``use_remove_padding`` as the run's ``--padded-roles`` (the last switch read carries the option;
    nothing where every model removes padding)."""
    table = _DEFAULTS["megatron" if backend == "megatron" else "fsdp"]
    models = ["actor"] + (["critic"] if critic else []) + (["reward"] if reward_model else [])
    actor_removes = True
    roles: list[str] = []
    rows: list[tuple[str, bool, bool, str]] = []
    for model in models:
        key, dflt = table[model]
        default = key not in cfg
        removes = as_bool(key, cfg[key]) if not default else (actor_removes if dflt is None else dflt)
        if model == "actor":
            actor_removes = removes
        note = "" if removes else f"the {model}'s passes padded to max_prompt_length + max_response_length"
        if default and model == "actor" and backend != "megatron":
            note = "; ".join(n for n in (note, "verl v0.7.0's default (False before v0.7.0)") if n)
        rows.append((key, removes, default, note))
        roles += [] if removes else list(_ROLES[model])
    for i, (key, removes, default, note) in enumerate(rows):
        last = i == len(rows) - 1
        args = ("--padded-roles", ",".join(roles)) if last and roles else ()
        b.use(key, removes, *args, note=note, default=default)


def export_padding(cfg) -> list[str]:
    """verl overrides that run each model of ``cfg`` (a ``SimConfig``) padded or not as it was simulated: every
    switch written, so the exported job does not depend on a release's defaults (the actor's is off where the actor
    or the reference is padded: verl's reference shares the actor's model config)."""
    table = _DEFAULTS["megatron" if cfg.trainer.megatron else "fsdp"]
    alg = cfg.algorithm
    models = ["actor"] + (["critic"] if alg.critic else []) + (["reward"] if alg.reward == "model" else [])
    return [f"{table[m][0]}={not any(r in cfg.padded_roles for r in _ROLES[m])}" for m in models]
