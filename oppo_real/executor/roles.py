"""The roles a real run's ledger waits for, and its group settings, from the run's algorithm (the issue-17
contract): the algorithm's GPU scoring roles plus the pseudo-role ``"rule"`` under a rule reward (the
task's verifier, run in the driver process and recorded on the timeline pool ``"cpu"``), ``group_size``
n for a grouped algorithm, and dynamic sampling for dapo."""

from __future__ import annotations

from oppo_real.config import RealConfig

RULE_ROLE = "rule"  # the rule reward: a verifier run in the driver process, never streamed to
RULE_POOL = "cpu"  # the timeline pool of the rule reward (the simulator's name for CPU work off the GPUs)


def ledger_groups(cfg: RealConfig) -> dict:
    """The ledger's group settings (``Algorithm.ledger_groups``, as the simulator's): ``group_size`` (n for a
    grouped algorithm) and, for dapo, dynamic sampling in rounds (``filter_groups``: the machine drops a
    complete group whose n rewards -- reported with each finish, ``Progress.reward`` -- are all equal;
    ``gen_batch_size``, ``max_gen_batches``: its rounds)."""
    return cfg.algorithm.ledger_groups()


def ledger_roles(cfg: RealConfig) -> tuple[str, ...]:
    """The roles that must score a sample before it trains: the algorithm's GPU forwards, and ``"rule"``
    where a rule (not a reward model) gives the reward."""
    algo = cfg.algorithm
    return algo.scoring_roles() + ((RULE_ROLE,) if algo.reward == "rule" else ())
