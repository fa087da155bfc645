"""What the ``plan --export`` writers share (:mod:`~oppo_sim.frameworks.export`, ``export_openrlhf``,
``export_nemo_rl``): what the plan chose besides the ``SimConfig`` (:class:`Chosen`), the placement in the
planner's terms, model names, and comments-first ordering."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.micro_batches import MicroBatch
from oppo_sim.pipeline.config import SimConfig


@dataclass(frozen=True)
class Chosen:
    """What the plan chose besides the ``SimConfig``: the policy's label (``async(k=2)``; its kind and
    staleness bound or token budget are read from it unless given) and the trainer's memory settings."""

    policy: str = "baseline"
    zero_stage: int | None = None
    recompute: str | None = None
    staleness: int | None = None
    budget: int | None = None

    @property
    def kind(self) -> str:
        return self.policy.split("(")[0].strip()

    def param(self, name: str) -> int | None:
        given = {"k": self.staleness, "budget": self.budget}.get(name)
        m = re.search(rf"\b{name}=(\d+)", self.policy)
        return given if given is not None else (int(m.group(1)) if m else None)


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


def micro_rules(cfg: SimConfig, default: MicroBatch) -> tuple[MicroBatch, MicroBatch]:
    """The plan's micro-batches of training and of the forward-only passes, as the exports write them: as given, else
    ``default``, the framework's nearest to oppo-sim's own (packed to one longest sequence): one sequence a
    micro-batch, or where the framework only packs, a budget of the longest sequence its caps allow."""
    t = cfg.train_memory
    train = t.micro if t.micro.given else default
    return train, (t.forward_micro if t.forward_micro.given else train)


def per_gpu_budget(framework: str, tokens: int, scale: int) -> tuple[int, list[str]]:
    """A rank's token budget as the framework takes it, per GPU (it multiplies back by ``scale``, its sequence- or
    context-parallel degree), and a ``#`` note where that rounds up."""
    n = -(-tokens // scale)
    note = [] if tokens % scale == 0 else [f"# {framework} takes a GPU's token budget, x {scale}: the plan's {tokens} "
                                           f"tokens become {n * scale}"]
    return n, note


def model_name(model) -> str:
    """What a framework's model path should say: a table model's Hugging Face name, else the path given."""
    from oppo_sim.hw.models.lookup import MODELS

    mid = model if isinstance(model, str) else model.id
    if mid.lower() in MODELS:
        return MODELS[mid.lower()].name
    path = Path(mid)
    return str(path.parent if path.name == "config.json" else path)


def per_node(cfg: SimConfig, gpus: int, what: str) -> int:
    if gpus % cfg.nodes:
        raise ConfigError(f"{what}: {gpus} GPUs do not spread evenly over {cfg.nodes} nodes")
    return gpus // cfg.nodes


_REFIT_GROUP = {"nemo-rl": ("NeMo RL", "all"), "verl": ("verl", "all"), "openrlhf": ("OpenRLHF", "rank0")}
"""Per framework: its name, and who joins its refit's broadcast between pools (``--refit-group``)."""
_GROUP_WORDS = {"all": "every trainer and engine rank", "rank0": "the trainer's rank 0 and the engines"}


def _refit_group_notes(cfg: SimConfig, framework: str) -> list[str]:
    """A note where the plan's refit broadcast group (``--refit-group``) is not the framework's, for pools apart."""
    name, group = _REFIT_GROUP[framework]
    if cfg.refit_group == group or cfg.placement.generate == cfg.placement.train:
        return []
    return [f"the plan broadcasts a refit over {_GROUP_WORDS[cfg.refit_group]}; {name} over {_GROUP_WORDS[group]}: "
            f"plan with --refit-group {group} to price it so"]


def weight_move_notes(cfg: SimConfig, framework: str, chosen: Chosen = Chosen()) -> list[str]:
    """Notes on how the plan moved the reference's and the refit's weights (``--reference-on-host``,
    ``--refit-buffers``, ``--refit-group``, an async plan's refit in flight) where ``framework`` (``verl``, ``openrlhf``,
    ``nemo-rl``) does it otherwise."""
    kl = cfg.algorithm.kl
    out = _refit_group_notes(cfg, framework)
    if "async" in chosen.policy and set(cfg.scoring_roles()) - set(cfg.after_update):
        out.append(f"the plan starts {', '.join(r for r in cfg.scoring_roles() if r not in cfg.after_update)} of a "
                   f"step beside the previous update; {_REFIT_GROUP[framework][0]}'s trainer runs every pass after the "
                   f"previous step's sync: plan with --after-update all to price it so")
    if framework == "nemo-rl":
        return out + ([] if cfg.reference_on_host or not kl else [
            "NeMo RL keeps the reference in host memory and swaps it with the policy for its pass: plan with "
            "--reference-on-host to price it so"]) + ([] if cfg.refit_buffers == 2 else [
                "NeMo RL double-buffers its refit (NRL_REFIT_NUM_BUFFERS=2): plan with --refit-buffers 2 to price it so"])
    name = _REFIT_GROUP[framework][0]
    out += [f"the plan swaps the reference in from host memory (NeMo RL's way); {name} keeps its weights on GPUs"
           + (" (actor_rollout_ref.ref.fsdp_config.param_offload=True offloads them between passes)"
              if framework == "verl" else "")] if cfg.reference_on_host and kl else []
    out += [f"the plan refits the weights in flight (NeMo RL's in_flight_weight_updates); {name} has no such setting"] \
        if "in-flight" in chosen.policy else []
    return out + ([f"the plan double-buffers the refit (NeMo RL's way); {name} hands the weights over tensor by tensor"]
                  if cfg.refit_buffers == 2 else [])


def split_notes(lines: list[str]) -> list[str]:
    """Comments first (``#`` lines, then ``line  # why`` tails as comments), then the settings."""
    notes = [line for line in lines if line.startswith("#")]
    notes += ["# {}: {}".format(*line.split("  # ", 1)) for line in lines if not line.startswith("#") and "  # " in line]
    return notes + [line.split("  # ", 1)[0] for line in lines if not line.startswith("#")]


__all__ = ["Chosen", "layout_of", "model_name", "per_node", "split_notes", "weight_move_notes"]
