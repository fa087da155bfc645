"""The trainer layouts the planner may try on a training pool: the backend and its parallelism, in the
frameworks' own terms (:class:`~oppo_sim.hw.costs.trainer_layout.TrainerLayout`, and the expert parallelism a
MoE actor trains with), enumerated from what is structurally possible — before memory and cost decide
(:mod:`oppo_sim.explore.trainer_rank`).

- ``fsdp`` (verl ``actor.strategy=fsdp``, OpenRLHF's DeepSpeed): the user's layout, and on a pool larger than
  one scale-up domain hybrid sharding by domain as well (``fsdp_size`` = the domain's GPUs: the state sharded
  inside a node, its gathers and most of its gradient traffic on NVLink, at more memory a rank); its ZeRO stage and
  recomputation are the cheapest that fit (``fit_check.check_fits``) and its Ulysses sequence
  parallelism the smallest that fits (``fit_check.smallest_sp``), both chosen later; expert parallelism
  is the user's (``--ep``: verl's FSDP has none of its own).
- ``megatron`` (verl ``ppo_megatron_trainer``, NeMo RL ``policy.megatron_cfg``): every tensor parallelism
  of ``tps`` that stays inside a scale-up domain and divides the attention heads (and the KV heads, or is
  a multiple of them), times every pipeline parallelism of ``pps`` that divides the decoder layers, times
  the virtual stages ``vpps`` (only with ``pp > 1``, the layers divisible by ``pp · vpp``), and for a MoE
  actor every expert parallelism that divides the experts and one pipeline stage's ranks, each routed expert
  whole on a rank (``etp`` 1); ``tp · pp · cp`` must divide the pool. Context parallelism starts at the user's
  (1 by default) and is raised later only where a layout does not fit without it (long sequences); the
  distributed optimizer is the user's (on by default: it never costs memory or time in the model, so the
  planner does not try it off).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.trainer_layout import TRAIN_BACKENDS, TrainerLayout
from oppo_sim.hw.models.heads import heads_split

__all__ = ["TrainerOptions", "trainer_layouts", "megatron_template"]


@dataclass(frozen=True)
class TrainerOptions:
    """What the trainer dimension of a plan may take: the ``backends`` searched, the user's own ``trainer``
    (its settings are kept: cp, the distributed optimizer, balance_batch; a Megatron one's tp/pp are
    searched), the Megatron values tried (``tps``, ``pps``, ``vpps`` — None: the user's — and ``eps`` —
    None: every EP that suits a MoE actor), the FSDP trainer's expert parallelism ``ep`` (the user's), and the actor's shape
    (``heads``: attention and KV heads; ``layers``; ``experts``: routed experts, 0 for a dense model)."""

    backends: tuple[str, ...] = ("fsdp",)
    trainer: TrainerLayout = TrainerLayout()
    tps: tuple[int, ...] = (1, 2, 4, 8)
    pps: tuple[int, ...] = (1, 2, 4)
    vpps: tuple[int, ...] | None = None
    eps: tuple[int, ...] | None = None
    ep: int = 1
    heads: tuple[int, int] = (0, 0)
    layers: int = 0
    experts: int = 0

    def __post_init__(self) -> None:
        from oppo_sim.core.errors import ConfigError

        bad = [b for b in self.backends if b not in TRAIN_BACKENDS]
        if not self.backends or bad:
            raise ConfigError(f"train backends: {bad[0] if bad else 'empty'!r}; known: {', '.join(TRAIN_BACKENDS)}")


def megatron_template(trainer: TrainerLayout) -> TrainerLayout:
    """The Megatron layout the search varies: the user's own where it is Megatron, else Megatron with the
    user's ``balance_batch`` and CPU optimizer share and the distributed optimizer on (the frameworks' recipes);
    its experts unsplit by TP (``etp`` 1, as the RL frameworks' MoE recipes set it) unless the user's says."""
    t = trainer if trainer.megatron else trainer.plain("megatron")
    return t if t.etp is not None else replace(t, etp=1)


_NO_SPLIT = {"first_stage_layers": None, "last_stage_layers": None, "embedding_in_split": False, "loss_in_split": False}


def _pipelined(t: TrainerLayout, tp: int, pp: int, vpp: int, layers: int) -> TrainerLayout | None:
    """``t`` at this TP / PP / VPP (without pipeline parallelism, none of its pipeline-split settings), or None where
    a ``layers``-layer model does not split so (Megatron-Core: whole, equal chunks; 0 layers: not checked)."""
    lay = replace(t, tp=tp, pp=pp, vpp=vpp, **({} if pp > 1 else _NO_SPLIT))
    if not layers:
        return lay
    try:
        lay.check_stages(layers)
    except ConfigError:
        return None
    return lay  # check_stages refuses what Megatron-Core does: uneven chunks, even or with the split settings


def _tp_ok(tp: int, heads: tuple[int, int], domain: int) -> bool:
    h, kv = heads
    return tp <= domain and heads_split(h, kv, tp)


def _eps(o: TrainerOptions, stage_ranks: int) -> tuple[int, ...]:
    if not o.experts:
        return (1,)
    wanted = o.eps if o.eps is not None else tuple(e for e in range(1, stage_ranks + 1) if o.experts % e == 0)
    return tuple(e for e in wanted if stage_ranks % e == 0 and o.experts % e == 0)


def trainer_layouts(o: TrainerOptions, train: int, domain: int) -> tuple[tuple[TrainerLayout, int], ...]:
    """(layout, expert parallelism) pairs to try on ``train`` GPUs whose scale-up domain holds ``domain``
    of them (module notes), FSDP first, in a fixed order."""
    out: list[tuple[TrainerLayout, int]] = []
    if "fsdp" in o.backends:
        fsdp = o.trainer if not o.trainer.megatron else o.trainer.plain()
        if train % o.ep == 0:
            out.append((fsdp, o.ep))
            if not fsdp.fsdp_size and domain < train and train % domain == 0:
                out.append((replace(fsdp, fsdp_size=domain), o.ep))
    if "megatron" not in o.backends:
        return tuple(out)
    t = megatron_template(o.trainer)
    for tp in o.tps:
        if not _tp_ok(tp, o.heads, domain):
            continue
        for pp in o.pps:
            if train % (tp * pp * t.cp):
                continue
            for vpp in (o.vpps if o.vpps is not None else (t.vpp,)):
                lay = _pipelined(t, tp, pp, vpp if pp > 1 else 1, o.layers)
                out += [(lay, ep) for ep in _eps(o, train // pp)] if lay is not None else []
    return tuple(dict.fromkeys(out))
