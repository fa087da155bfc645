"""The RL algorithm a run trains with — orthogonal to the scheduling policy.

An :class:`Algorithm` says what one step has to compute, not when: how many responses each prompt gets
(``n``: verl ``actor_rollout_ref.rollout.n``, OpenRLHF ``--n_samples_per_prompt``), how an advantage is
formed (a critic with GAE, or a baseline from the prompt's own group), what scores a response (a reward
model, or a rule — a verifier function on the CPU), and whether a reference model is kept for the KL term.

| name | advantage | critic | groups | notes |
|---|---|---|---|---|
| ``ppo`` | GAE on a learned critic | yes | n > 1: kept together, advantage per response | verl ``adv_estimator=gae``; TRL PPO |
| ``grpo`` | reward minus the group's mean, over its std | no | yes | verl/OpenRLHF ``grpo`` |
| ``rloo`` | reward minus the mean of the *other* n-1 | no | yes | verl/OpenRLHF ``rloo`` |
| ``reinforce++`` | reward minus the group's mean, normalised over the batch | no | yes | ``reinforce_plus_plus_baseline`` |
| ``dapo`` | as ``grpo``; groups whose n rewards are all equal carry no gradient and are dropped; the step generates rounds of ``gen_batch_size`` prompts until B informative groups are kept | no | yes | verl DAPO recipe (``filter_groups``) |

A **group** — the n responses of one prompt — is the unit the step machine batches and defers
(``oppo_sim/core/stepmachine.py``); where an algorithm forms its advantage within it (:attr:`Algorithm.grouped`) it
must train whole, and ``ppo`` with n > 1 keeps its n responses together too, as verl generates and trains them.
Sample ids are handed out in blocks of n, so the group of sample ``sid`` is ``sid // n``
(:meth:`Algorithm.group_of`).

dapo's dynamic sampling is verl's (``recipe/dapo/dapo_ray_trainer.py``): a step generates **rounds** of
``gen_batch_size`` prompts (verl ``data.gen_batch_size``, default B = ``data.train_batch_size``), keeps the
groups whose rewards differ, and generates another round until B groups are kept; at most
``max_gen_batches`` rounds (``algorithm.filter_groups.max_num_gen_batches``; 0: no limit) -- the rule is the
step machine's (``oppo_sim/core/stepmachine.py``, "dynamic sampling").
"""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError

ALGORITHM_NAMES: tuple[str, ...] = ("ppo", "grpo", "rloo", "reinforce++", "dapo")
GROUPED: frozenset[str] = frozenset({"grpo", "rloo", "reinforce++", "dapo"})
ALIASES: dict[str, str] = {  # verl's algorithm.adv_estimator and OpenRLHF's --advantage_estimator names
    "gae": "ppo", "reinforce_plus_plus_baseline": "reinforce++", "reinforce-plus-plus": "reinforce++",
}
REWARD_KINDS: tuple[str, ...] = ("model", "rule")
DEFAULT_RULE_COST_MS: float = 5.0
"""CPU time of one rule-reward call (a math answer checker: parse the response, compare with the
reference answer), per response. A verifier that runs code or a sandbox costs far more: set
``reward_cost_ms``."""


@dataclass(frozen=True)
class Algorithm:
    """What a step computes. Defaults: PPO with a critic, a reward model and a KL reference, one response
    per prompt (the paper's setup)."""

    name: str = "ppo"
    n: int = 1  # responses per prompt
    reward: str = "model"  # "model": a reward model scores (a GPU role); "rule": a verifier on the CPU
    reward_cost_ms: float = DEFAULT_RULE_COST_MS  # CPU time per rule-reward call (reward="rule")
    kl: bool = True  # a frozen reference model for the KL term (False: --no-reference)
    informative: float | None = None  # dapo: fraction of groups whose rewards differ (None: from the trace)
    gen_batch_size: int | None = None  # dapo: prompts per generation round (verl data.gen_batch_size; None: B)
    max_gen_batches: int = 0  # dapo: most rounds per step (verl filter_groups.max_num_gen_batches; 0: no limit)

    def __post_init__(self) -> None:
        key = ALIASES.get(self.name.strip().lower(), self.name.strip().lower())
        if key not in ALGORITHM_NAMES:
            raise ConfigError(f"unknown algorithm '{self.name}'; known: {', '.join(ALGORITHM_NAMES)}")
        object.__setattr__(self, "name", key)
        checks = [
            (isinstance(self.n, int) and self.n >= 1, f"n (responses per prompt) must be >= 1, got {self.n}"),
            (key != "dapo" or self.n >= 2, f"dapo drops groups whose n rewards are all equal: it needs n >= 2, got {self.n}"),
            (self.reward in REWARD_KINDS, f"reward must be one of {', '.join(REWARD_KINDS)}, got {self.reward!r}"),
            (self.reward_cost_ms >= 0, f"reward_cost_ms must be >= 0, got {self.reward_cost_ms}"),
            (self.informative is None or 0 < self.informative <= 1,
             f"informative (the fraction of groups dapo keeps) must be in (0, 1], got {self.informative}"),
            (self.informative is None or key == "dapo", "informative applies to dapo only"),
            (self.gen_batch_size is None or (isinstance(self.gen_batch_size, int) and self.gen_batch_size >= 1),
             f"gen_batch_size (prompts per generation round) must be >= 1, got {self.gen_batch_size}"),
            (isinstance(self.max_gen_batches, int) and self.max_gen_batches >= 0,
             f"max_gen_batches must be >= 0 (0: no limit), got {self.max_gen_batches}"),
            (key == "dapo" or (self.gen_batch_size is None and self.max_gen_batches == 0),
             "gen_batch_size and max_gen_batches apply to dapo only (its rounds of dynamic sampling)"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)

    @property
    def critic(self) -> bool:
        """A learned value model (forward before the update, trained with the actor)."""
        return self.name == "ppo"

    @property
    def grouped(self) -> bool:
        """The advantage is formed within a prompt's group, so a group trains (and is deferred) whole."""
        return self.name in GROUPED

    @property
    def group_size(self) -> int:
        """Samples the step machine keeps together: a prompt's n responses. For a grouped algorithm they must train
        together (the advantage is the group's); for ``ppo`` with n > 1 (verl ``rollout.n`` with GAE) each keeps its own
        advantage, and they are kept together as verl generates and trains them: one prompt, n responses, one step."""
        return self.n

    def ledger_groups(self) -> dict:
        """The step machine's group settings (:class:`oppo_sim.core.ledger.Ledger` keywords), the same for both
        drivers: the group size, and for dapo dynamic sampling with its rounds."""
        dapo = self.name == "dapo"
        return {"group_size": self.group_size, "filter_groups": dapo,
                "gen_batch_size": self.gen_batch_size if dapo else None, "max_gen_batches": self.max_gen_batches}

    def group_of(self, sid: int) -> int:
        return sid // self.group_size

    def scoring_roles(self) -> tuple[str, ...]:
        """The GPU forward passes each sample needs before the update, in ``SCORING_ROLES`` order."""
        roles = []
        if self.reward == "model":
            roles.append("reward")
        if self.kl:
            roles.append("reference")
        if self.critic:
            roles.append("critic")
        roles.append("logprob")
        return tuple(roles)

    def label(self) -> str:
        parts = [self.name] + ([f"n={self.n}"] if self.n > 1 else [])
        if self.reward == "rule":
            parts.append("rule reward")
        if not self.kl:
            parts.append("no KL")
        if self.gen_batch_size is not None:
            parts.append(f"rounds of {self.gen_batch_size}")
        return " ".join(parts)


def round_settings(algorithm: str, options: dict) -> dict:
    """The dapo round settings a command line gave (``gen_batch_size``, ``max_gen_batches``; None: not given) as
    ``Algorithm`` keywords; one given with another algorithm -> a one-line ``ConfigError`` naming the option (both
    ``oppo-sim`` and ``oppo-real`` read them so)."""
    given = {k: v for k, v in options.items() if k in ("gen_batch_size", "max_gen_batches") and v is not None}
    if given and algorithm.strip().lower() != "dapo":
        raise ConfigError(f"--{next(iter(given)).replace('_', '-')} sizes dapo's rounds of dynamic sampling; it is not "
                          f"used with --algorithm {algorithm}; drop it or give --algorithm dapo")
    return given
