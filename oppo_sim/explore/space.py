"""The planner's search space: where each role runs, how generation is split into tensor-parallel
replicas, which policy runs and with which knobs — as typed frozen values, enumerated with the
symmetries removed, and turned into the simulator's ``SimConfig`` and ``Policy``.

Placements (``Layout``) of N GPUs, pools laid out contiguously over the nodes in the order given:

============  =====================================================  ==================================
layout        pools                                                  example (8 GPUs)
============  =====================================================  ==================================
colocated     main[N]: every role                                    ``colocated 8``
shared        main[N-s]: generate + train (critic, actor log-probs);  ``shared 7+1`` (the paper's split)
              score[s]: the frozen reward and reference models
split         gen[g]; train[t]: train + critic + log-probs;          ``split 4+3+1``
              score[s]: reward + reference
gen-apart     gen[g]; train[t]: train and every scorer               ``gen-apart 4+4``
============  =====================================================  ==================================

Generation runs ``g / tp`` data-parallel replicas of ``tp`` GPUs; training runs under each trainer layout
of :attr:`PlanSpace.backends` (:mod:`oppo_sim.explore.trainer_space`: FSDP / ZeRO with the cheapest stage and
recomputation that fit, or Megatron with its tp / pp / ep searched: :meth:`PlanSpace.trainer_choices`), pruned
by memory and trainer-phase cost before simulating (:mod:`oppo_sim.explore.trainer_rank`).

What is *not* enumerated (it cannot be better, or is the same configuration twice) is listed in
``docs/planner.md`` ("What the space leaves out"); :meth:`Candidate.canonical` maps such a candidate onto the one kept.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import Placement, Pool, streamed_roles
from oppo_sim.core.policies import POLICY_NAMES, DeltaRule, Policy, make_policy
from oppo_sim.engine.request import EngineConfig
from oppo_sim.explore.trainer_space import TrainerOptions, trainer_layouts
from oppo_sim.hw.devices.gpu_table import domain_gpus
from oppo_sim.hw.costs.trainer_layout import TrainerLayout
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.hw.models.heads import heads_split

LAYOUTS: tuple[str, ...] = ("colocated", "shared", "split", "gen-apart")
WITH_TRAINER_REFERENCE: tuple[str, ...] = ("colocated", "gen-apart")  # the reference on the training GPUs
DELTA_RULES: tuple[str, ...] = ("step", "proportional")
CHUNKED = frozenset({"intra", "oppo"})
DEFERRING = frozenset({"inter", "dynamic-delta", "oppo", "chunk-autotune"})
RULED = frozenset({"dynamic-delta", "oppo", "chunk-autotune"})
STREAMING = {"stream": "baseline", "intra": "baseline", "oppo": "dynamic-delta", "chunk-autotune": "dynamic-delta"}
"""Policy -> what it is where nothing can be streamed to (``colocated``)."""


@dataclass(frozen=True)
class PlacementSpec:
    """Devices per pool, generation's tensor parallelism ``tp`` and training's sequence parallelism ``sp``
    (activations split over ``sp`` ranks: what lets prompts of tens of thousands of tokens train; its
    all-to-alls are timed) and the trainer's layout (its backend, and Megatron's tp / pp / vpp / cp) with the
expert parallelism ``ep`` it trains a MoE actor with. ``gen == train`` where they share a pool (``colocated``, ``shared``);
    ``score`` is 0 where scoring shares a pool."""

    layout: str
    gen: int
    train: int
    score: int
    tp: int = 1
    sp: int = 1
    trainer: TrainerLayout = TrainerLayout()  # the trainer's backend and parallelism on its ``train`` GPUs
    ep: int = 1  # the trainer's expert parallelism (SimConfig.expert_parallel)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ConfigError(f"unknown layout {self.layout!r}; known: {', '.join(LAYOUTS)}")
        shared = self.layout in ("colocated", "shared")
        if min(self.gen, self.train, self.tp) < 1 or self.score < 0 or (shared and self.gen != self.train):
            raise ConfigError(f"bad placement {self}")
        if (self.score > 0) != (self.layout in ("shared", "split")) or self.gen % self.tp or self.train % self.sp:
            raise ConfigError(f"bad placement {self}")
        if not isinstance(self.trainer, TrainerLayout) or self.train % self.trainer.model_parallel:
            raise ConfigError(f"bad placement {self}")
        if isinstance(self.ep, bool) or not isinstance(self.ep, int) or self.ep < 1 or self.train % self.ep:
            raise ConfigError(f"bad placement {self}")

    @property
    def devices(self) -> int:
        return self.gen + self.score + (0 if self.layout in ("colocated", "shared") else self.train)

    @property
    def replicas(self) -> int:
        return self.gen // self.tp

    def placement(self) -> Placement:
        if self.layout == "colocated":
            return Placement((Pool("main", self.gen),), reward="main", reference="main")
        if self.layout == "shared":
            return Placement((Pool("main", self.gen), Pool("score", self.score)), reference="score")  # = paper_placement
        if self.layout == "split":
            return Placement((Pool("gen", self.gen), Pool("train", self.train), Pool("score", self.score)),
                             generate="gen", critic="train", logprob="train", train="train")
        return Placement((Pool("gen", self.gen), Pool("train", self.train)), generate="gen", reward="train",
                         reference="train", critic="train", logprob="train", train="train")

    def label(self) -> str:
        sizes = {"colocated": (self.gen,), "shared": (self.gen, self.score),
                 "split": (self.gen, self.train, self.score), "gen-apart": (self.gen, self.train)}[self.layout]
        return f"{self.layout} {'+'.join(map(str, sizes))}"

    @property
    def streams(self) -> bool:
        return bool(streamed_roles(self.placement()))


@dataclass(frozen=True)
class PolicySpec:
    """A policy by name with its knobs (None where it has none): chunk C, Δ (Δ0 of a dynamic rule),
    the Δ rule (``step``: ±1 a step; ``proportional``: ±max(1, Δ/4)), token budget, staleness bound."""

    name: str
    chunk: int | None = None
    delta: int | None = None
    rule: str | None = None
    budget: int | None = None
    staleness: int | None = None
    in_flight: bool | None = None  # async: weights refit in flight

    def make(self) -> Policy:
        rule = None
        if self.name in RULED:
            d = 8 if self.delta is None else self.delta
            rule = DeltaRule(delta0=d, delta_max=max(32, d), proportional=self.rule == "proportional")
        return make_policy(self.name, chunk=self.chunk, delta=self.delta, rule=rule, budget=self.budget,
                           staleness=self.staleness, in_flight=self.in_flight)

    def label(self) -> str:
        label = self.make().label()
        if self.name == "chunk-autotune":  # its own label omits Δ0
            label = label[:-1] + f", Δ0={8 if self.delta is None else self.delta})"
        return label + (", Δ/4 rule" if self.rule == "proportional" else "")


@dataclass(frozen=True)
class Candidate:
    """One configuration the planner may try."""

    placement: PlacementSpec
    policy: PolicySpec

    def canonical(self) -> "Candidate":
        """The candidate the space keeps for this one (itself unless streaming is void here)."""
        p = self.policy
        if self.placement.streams or p.name not in STREAMING:
            return self
        name = STREAMING[p.name]
        if name == "baseline":
            return replace(self, policy=PolicySpec("baseline"))
        return replace(self, policy=PolicySpec(name, delta=p.delta, rule=p.rule))

    def config(self, base: SimConfig) -> SimConfig:
        p = self.placement
        return replace(base, placement=p.placement(), engine=replace(base.engine, tp=p.tp),
                       train_memory=replace(base.train_memory, sequence_parallel=p.sp), trainer=p.trainer,
                       expert_parallel=p.ep)

    def label(self) -> str:
        p = self.placement
        trainer = f" ({p.trainer.label(p.ep)})" if p.trainer.named else ""
        return f"{p.label()} tp{p.tp}{f' sp{p.sp}' if p.sp > 1 else ''}{trainer} {self.policy.label()}"


def default_candidate(devices: int, base: SimConfig | None = None) -> Candidate:
    """The reference: the synchronous baseline on the default (paper) placement, with ``base``'s generation
    tp and training sp; under ``base.reference_on_host`` (the reference on the trainer's GPUs) the colocated one."""
    tp = base.engine.tp if base is not None else EngineConfig().tp
    sp = base.train_memory.sequence_parallel if base is not None else 1
    host = base is not None and base.reference_with_trainer
    train = devices if host else devices - 1
    trainer = TrainerLayout() if base is None else base.trainer if train % base.trainer.model_parallel == 0 else base.trainer.plain()
    ep = base.expert_parallel if base is not None and train % base.expert_parallel == 0 else 1
    if trainer.megatron and (train // trainer.pp) % ep:
        trainer = trainer.plain()
    spec = PlacementSpec("colocated", devices, devices, 0, tp, sp, trainer, ep) if host else \
        PlacementSpec("shared", devices - 1, devices - 1, 1, tp, sp, trainer, ep)
    return Candidate(spec, PolicySpec("baseline"))


def _tuple(name: str, values, check, known: tuple = ()) -> tuple:
    out = tuple(dict.fromkeys((values,) if isinstance(values, (str, int)) else values))
    bad = [v for v in out if not check(v)]
    if not out or bad:
        want = f"one of {', '.join(map(str, known))}" if known else "integers >= 1"
        raise ConfigError(f"{name}: {'empty' if not out else f'{bad[0]!r} not allowed'}; want {want}")
    return out


@dataclass(frozen=True)
class PlanSpace:
    """What the planner searches: ``devices`` GPUs over ``nodes`` nodes (equal shares), the layouts, the
    policies and each knob's values. ``heads``: the actor's attention (and KV) heads, which ``tp`` must
    suit; ``domain``: GPUs per scale-up domain (``gpu_table.domain_gpus``; None: a node), which a
    tensor-parallel group may not leave; ``tps``: allowed tensor parallelism (None: every one that fits
    a domain); ``sps``: training's sequence parallelism tried (each must divide the training GPUs), or
    None (the default, *auto*): placements are enumerated without it, and a configuration that does not
    fit so is evaluated with the smallest that makes it fit (``fit_check.smallest_sp``) — sequence
    parallelism where a configuration needs it, as long prompts do, and nowhere else (its traffic is not
    timed, so a free choice would always take it); ``only``: keep just these device splits (placement
    labels such as ``"shared 7+1"``, ``"colocated 8"``); ``reference_on_host``: the reference swaps in from host
    memory on the trainer's GPUs (``SimConfig.reference_on_host``), so only :data:`WITH_TRAINER_REFERENCE` layouts
    are searched."""

    devices: int
    nodes: int = 1
    heads: tuple[int, int] = (0, 0)
    domain: int | None = None
    layouts: tuple[str, ...] = LAYOUTS
    policies: tuple[str, ...] = POLICY_NAMES
    chunks: tuple[int, ...] = (256, 500, 1024)
    deltas: tuple[int, ...] = (4, 8, 16, 32)
    rules: tuple[str, ...] = DELTA_RULES
    budgets: tuple[int, ...] = (1024, 4096)
    stalenesses: tuple[int, ...] = (1, 2)
    tps: tuple[int, ...] | None = None
    sps: tuple[int, ...] | None = None
    only: tuple[str, ...] | None = None
    max_staleness: int | None = None
    trainer: TrainerLayout = TrainerLayout()  # the user's trainer; a Megatron one has its tp and pp searched
    train_tps: tuple[int, ...] = (1, 2, 4, 8)  # Megatron tensor parallelism tried (within a domain, suiting the heads)
    pps: tuple[int, ...] = (1, 2, 4)  # Megatron pipeline parallelism tried (dividing the layers)
    layers: int = 0  # the actor's decoder layers (0: any pp)
    expert_parallel: int = 1  # the user's EP: the FSDP trainer's, and a pinned Megatron trainer's where eps is None
    backends: tuple[str, ...] | None = None  # trainer backends searched (None: the user's trainer's own only)
    vpps: tuple[int, ...] | None = None  # Megatron virtual pipeline stages tried where pp > 1 (None: the user's)
    eps: tuple[int, ...] | None = None  # Megatron EP tried for a MoE actor (None: every one that divides experts and a stage)
    experts: int = 0  # the actor's routed experts (0: dense)
    reference_on_host: bool = False  # the reference on the trainer's GPUs: colocated and gen-apart only
    in_flight: bool = False  # async candidates refit their weights in flight (Async.in_flight)

    def __post_init__(self) -> None:
        if self.devices < 2 or self.nodes < 1 or self.devices % self.nodes:
            raise ConfigError(f"need >= 2 GPUs spread evenly over the nodes, got {self.devices} over {self.nodes}")
        if self.domain is not None and (isinstance(self.domain, bool) or not isinstance(self.domain, int)
                                        or self.domain < 1 or self.domain % self.per_node):
            raise ConfigError(f"domain must be a whole number of nodes of {self.per_node} GPUs, got {self.domain!r}")
        pos = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1  # noqa: E731
        for name, known in (("layouts", LAYOUTS), ("policies", POLICY_NAMES), ("chunks", ()), ("deltas", ()),
                            ("rules", DELTA_RULES), ("budgets", ()), ("stalenesses", ())):
            object.__setattr__(self, name, _tuple(name, getattr(self, name), known.__contains__ if known else pos, known))
        if self.reference_on_host:
            self._keep_trainer_reference()
        for name in ("train_tps", "pps"):
            object.__setattr__(self, name, _tuple(name, getattr(self, name), pos))
        for name in ("tps", "sps", "vpps", "eps"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _tuple(name, getattr(self, name), pos))
        if self.only is not None:
            known = {PlacementSpec(layout, *sizes).label() for layout in LAYOUTS for sizes in self.splits(layout)}
            only = tuple(" ".join(str(x).split()) for x in ((self.only,) if isinstance(self.only, str) else self.only))
            bad = [x for x in only if x not in known]
            if bad or not only:
                raise ConfigError(f"only: {bad[0] if bad else 'empty'!r} is no placement of {self.devices} GPUs; "
                                  f"e.g. colocated {self.devices}, shared {self.devices - 1}+1")
            object.__setattr__(self, "only", only)
            off = [x for x in only if x.split()[0] not in self.layouts]
            if off and self.reference_on_host:
                raise ConfigError(f"only: {off[0]!r} runs the reference off the trainer's GPUs, which --reference-on-host "
                                  f"does not allow; layouts {' and '.join(WITH_TRAINER_REFERENCE)} keep it there")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ConfigError(f"max_staleness must be >= 0, got {self.max_staleness}")
        if self.backends is not None:
            object.__setattr__(self, "backends", tuple(dict.fromkeys((self.backends,) if isinstance(self.backends, str)
                                                                      else self.backends)))
        self.trainer_options  # noqa: B018 -- checks the backends named

    def _keep_trainer_reference(self) -> None:
        keep = tuple(x for x in self.layouts if x in WITH_TRAINER_REFERENCE)
        if not keep:
            raise ConfigError(f"layouts: {', '.join(self.layouts)} run the reference off the trainer's GPUs, which "
                              f"--reference-on-host does not allow; layouts {' and '.join(WITH_TRAINER_REFERENCE)} "
                              "keep it there")
        object.__setattr__(self, "layouts", keep)

    @property
    def auto_sp(self) -> bool:
        """True where sequence parallelism is raised only for configurations that need it (``sps`` None)."""
        return self.sps is None

    @property
    def per_node(self) -> int:
        return self.devices // self.nodes

    @property
    def per_domain(self) -> int:
        """GPUs a tensor-parallel group may span: a scale-up domain (a node unless ``domain`` says more)."""
        return self.domain if self.domain is not None else self.per_node

    def tp_choices(self, gen: int) -> tuple[int, ...]:
        """Tensor parallelism for ``gen`` generating GPUs starting at GPU 0 (see the module notes)."""
        heads, kv = self.heads
        out = []
        block = self.per_domain
        for tp in range(1, min(gen, block) + 1):
            if gen % tp or (self.tps is not None and tp not in self.tps):
                continue
            if not heads_split(heads, kv, tp):
                continue
            if any(i * tp // block != ((i + 1) * tp - 1) // block for i in range(gen // tp)):
                continue
            out.append(tp)
        return tuple(out)

    def splits(self, layout: str) -> list[tuple[int, int, int]]:
        """(gen, train, score) device counts of ``layout``."""
        n = self.devices
        if layout == "colocated":
            return [(n, n, 0)]
        if layout == "shared":
            return [(n - s, n - s, s) for s in range(1, n)]
        if layout == "gen-apart":
            return [(g, n - g, 0) for g in range(1, n)]
        return [(g, t, n - g - t) for g in range(1, n - 1) for t in range(1, n - g)]

    @property
    def trainer_options(self) -> TrainerOptions:
        """The trainer dimension (:mod:`oppo_sim.explore.trainer_space`): :attr:`backends` (None: the user's
        trainer's backend only)."""
        return TrainerOptions(self.backends or (self.trainer.backend,), self.trainer, self.train_tps, self.pps, self.vpps,
                              self.eps, self.expert_parallel, self.heads, self.layers, self.experts)

    def trainer_choices(self, train: int) -> tuple[tuple[TrainerLayout, int], ...]:
        """(trainer layout, expert parallelism) pairs tried on ``train`` GPUs, before memory and cost prune
        them (:func:`~oppo_sim.explore.trainer_space.trainer_layouts`)."""
        return trainer_layouts(self.trainer_options, train, self.per_domain)

    def placements(self) -> list[PlacementSpec]:
        out = [PlacementSpec(layout, g, t, s, tp, sp, trainer, ep) for layout in self.layouts for g, t, s in self.splits(layout)
               for tp in self.tp_choices(g) for sp in (self.sps or (1,)) if t % sp == 0
               for trainer, ep in self.trainer_choices(t) if not (trainer.megatron and sp > 1)]
        return out if self.only is None else [p for p in out if p.label() in self.only]

    def policy_specs(self, streams: bool = True) -> list[PolicySpec]:
        """Every (policy, knobs) point; ``streams=False``: those that stay distinct without streaming."""
        out: list[PolicySpec] = []
        for name in self.policies:
            if not streams and name in STREAMING:
                continue
            chunks = self.chunks if name in CHUNKED else (None,)
            deltas = self.deltas if name in DEFERRING else (None,)
            rules = self.rules if name in RULED else (None,)
            budgets = self.budgets if name == "partial-rollout" else (None,)
            stale = self.async_stalenesses() if name == "async" else (None,)
            out += [PolicySpec(name, c, d, r, b, k, self.in_flight_of(name))
                    for c in chunks for d in deltas for r in rules for b in budgets for k in stale]
        return out

    def async_stalenesses(self) -> tuple[int, ...]:
        """The staleness bounds an async candidate takes: the space's, none above ``max_staleness``."""
        return tuple(k for k in self.stalenesses if self.max_staleness is None or k <= self.max_staleness)

    def in_flight_of(self, name: str) -> bool | None:
        """A candidate's ``PolicySpec.in_flight``: True for async where the space refits in flight, else None."""
        return True if name == "async" and self.in_flight else None

    def candidates(self, placements: list[PlacementSpec] | None = None) -> list[Candidate]:
        """The whole space in a fixed order (placements, then policies), symmetries removed; ``placements``:
        only these (the ones the trainer pruning kept, :mod:`oppo_sim.explore.trainer_rank`)."""
        with_stream, without = self.policy_specs(True), self.policy_specs(False)
        return [Candidate(p, s) for p in (self.placements() if placements is None else placements)
                for s in (with_stream if p.streams else without)]

    def __len__(self) -> int:
        return len(self.candidates())


_LABEL_SIZES = {"colocated": lambda n: (n, n, 0), "shared": lambda m, s: (m, m, s), "split": lambda g, t, s: (g, t, s),
                "gen-apart": lambda g, t: (g, t, 0)}


def placement_of_label(text: str) -> Placement:
    """The placement a label names (``"split 4+3+1"``, ``"colocated 8"``: :meth:`PlacementSpec.label`'s form)."""
    layout, _, sizes = " ".join(str(text).split()).partition(" ")
    try:
        counts = tuple(int(x) for x in sizes.split("+"))
        return PlacementSpec(layout, *_LABEL_SIZES[layout](*counts)).placement()
    except (KeyError, TypeError, ValueError, ConfigError):
        raise ConfigError(f"unknown placement {text!r}; known: paper, colocated, disaggregated, or a planner label such "
                          f"as colocated 8, shared 7+1, split 4+3+1, gen-apart 4+4") from None


def space_for(base: SimConfig, devices: int, nodes: int = 1, **kwargs) -> PlanSpace:
    """A space whose ``tp`` choices suit ``base``'s actor and its GPU's scale-up domain."""
    actor = base.models()["generate"]
    domain = domain_gpus(base.hardware_of(base.placement.generate).gpu, devices, nodes)
    kwargs = {"trainer": base.trainer, "layers": actor.layers, "expert_parallel": base.expert_parallel,
              "experts": actor.experts if actor.moe else 0, "reference_on_host": base.reference_with_trainer, **kwargs}
    return PlanSpace(devices=devices, nodes=nodes, heads=(actor.heads, actor.kv_heads), domain=domain, **kwargs)


__all__ = ["LAYOUTS", "WITH_TRAINER_REFERENCE", "DELTA_RULES", "PlacementSpec", "PolicySpec", "Candidate", "PlanSpace", "default_candidate",
           "placement_of_label", "space_for"]
