"""How the trainer is parallelised, in the frameworks' own terms: the backend (``fsdp``: FSDP / DeepSpeed
ZeRO data parallelism, optionally with Ulysses sequence parallelism — verl ``actor.strategy=fsdp``,
OpenRLHF's DeepSpeed — or ``megatron``: Megatron-Core's tensor, pipeline, context and expert parallelism
with the distributed optimizer — verl ``ppo_megatron_trainer``, NeMo RL ``policy.megatron_cfg``).

``tp`` (``tensor_model_parallel_size``, with sequence parallelism as verl and NeMo RL enable it), ``pp``
(``pipeline_model_parallel_size``), ``vpp`` (``virtual_pipeline_model_parallel_size``: model chunks per
pipeline rank, 1 = none), ``cp`` (``context_parallel_size``) and ``distributed_optimizer``
(``use_distributed_optimizer``: Adam state sharded over the data-parallel ranks) apply to ``megatron`` only;
expert parallelism (``expert_model_parallel_size``) is ``SimConfig.expert_parallel`` for both backends.
The data-parallel degree is what is left: ``devices / (tp · pp · cp)``.

``optimizer_offload`` (both backends) is the fraction of the optimizer's state whose Adam step runs on the host
CPU: DeepSpeed's ``offload_optimizer`` (OpenRLHF ``--adam_offload``) is 1; Megatron's hybrid optimizer takes
``optimizer_offload_fraction`` with ``optimizer_cpu_offload`` (verl ``actor.optim.override_optimizer_config``, NeMo
RL ``megatron_cfg.optimizer``). Its state leaves the GPUs; its step is timed in
:func:`oppo_sim.hw.costs.trainer_cost.cpu_optimizer_seconds`.

``fsdp_size`` (``fsdp`` only; verl ``actor.fsdp_config.fsdp_size``, whose ``-1`` is 0 here) is FSDP's shard group:
0 shards the state over every rank of the training pool (full shard); ``N`` is hybrid sharding (HSDP): the state
sharded over groups of ``N`` consecutive ranks and replicated across the groups — a ZeRO-3 gather runs inside a
group (over NVLink where it fits in a node), the gradients are reduced inside it and all-reduced across groups.

``balance_batch`` (verl ``trainer.balance_batch``, default on; both backends) says how a step's sequences
are dealt to the data-parallel ranks: balanced by tokens (verl's Karmarkar-Karp partition with equal counts,
approximated by a greedy longest-first partition with equal counts, :func:`oppo_sim.hw.costs.trainer_cost.dp_partition`) or in
contiguous chunks in batch order (``balance_batch=False``, OpenRLHF's and NeMo RL's plain split). ``balance_order``
says how a balanced rank's share is ordered before it is split into mini-batches: ``length`` (verl from 0.6.1,
PR #3605 of 2025-10-23: ascending by length, the even places then the odd ones reversed) or ``batch`` (earlier
verl: in batch order).

``moe_dispatcher`` (Megatron ``moe_token_dispatcher_type``; ``megatron`` only, a MoE model under ``--ep``) is how
the tokens reach their experts: ``alltoall`` (verl's, which sets it) sends each token to the ranks of its top-k
experts and back; ``allgather`` (Megatron-Core's and NeMo RL's default) all-gathers every rank's tokens over the
expert-parallel group and reduce-scatters the experts' output, ``ep - 1`` tokens' hidden vectors a token instead
of ``top-k · (ep - 1) / ep`` (more bytes wherever ``ep`` exceeds the top-k); ``flex`` (DeepEP / HybridEP) is
priced as ``alltoall``. ``moe_router_dtype`` (Megatron's; ``model`` is its None) is the dtype the router's
probabilities are kept in, and the allgather dispatcher reduce-scatters the experts' output in it
(``token_combine``: ``hidden_states.to(local_probs.dtype)``): NeMo RL's ``fp64`` moves four times the bf16 bytes in
the combine and its backward.

``first_stage_layers`` / ``last_stage_layers`` (Megatron ``num_layers_in_first_pipeline_stage`` /
``num_layers_in_last_pipeline_stage``; ``megatron`` with ``pp > 1``) split the decoder layers unevenly, the rest evenly
over the stages between, as NeMo RL's and verl's large-MoE recipes set them (DeepSeek-V3's 61 layers over 16
stages: 3, 14 x 4, 2); ``embedding_in_split`` / ``loss_in_split`` (Megatron ``account_for_embedding_in_pipeline_split``
/ ``account_for_loss_in_pipeline_split``) count the embedding / the output layer and loss as one layer each, so the
first / last pipeline rank builds one decoder layer less. The busiest rank paces the pipeline
(:meth:`TrainerLayout.stage_flops`: the last holds the output layer as well).

``etp`` (Megatron ``expert_tensor_parallel_size``; ``megatron`` only) splits each routed expert over that many ranks:
unset, Megatron-Core takes ``tp`` (``initialize_model_parallel``), as verl leaves it (``null``); NeMo RL's base
config sets 1, and so do verl's and Megatron-Bridge's MoE recipes. ``ep x etp`` ranks of a pipeline stage hold one
copy of the experts.

``free_grads`` (both backends): the trainer frees its gradients at the end of each update — verl's FSDP actor
(``dp_actor.update_policy`` ends with ``zero_grad()``, which sets them to None) — so where its state stays on the GPUs
while the engine generates, the gradients take turns with the engine as the activations do; off, they are held.

``lora`` (both backends; :class:`oppo_sim.hw.models.lora.LoRA`, None: full fine-tuning) trains low-rank adapters on
the frozen weights of every trained model: verl's ``model.lora_rank``, OpenRLHF's ``--lora_rank``, NeMo RL's
``lora_cfg`` / ``peft``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.models.lora import LoRA

TRAIN_BACKENDS = ("fsdp", "megatron")
BALANCE_ORDERS = ("length", "batch")
MOE_DISPATCHERS = ("alltoall", "allgather", "flex")
ROUTER_DTYPES = MappingProxyType({"model": 0, "fp32": 4, "fp64": 8})
"""Megatron ``moe_router_dtype`` (``model``: Megatron's None, the model's own dtype) and its bytes per element."""

STAGE_SPLIT: tuple[tuple[str, str, str], ...] = (
    ("num_layers_in_first_pipeline_stage", "first_stage_layers", "--first-stage-layers"),
    ("num_layers_in_last_pipeline_stage", "last_stage_layers", "--last-stage-layers"))
"""An uneven pipeline split as Megatron names it, the :class:`TrainerLayout` field and oppo-sim's option, for the
readers and the exports."""
SPLIT_ACCOUNTING: tuple[tuple[str, str, str], ...] = (
    ("account_for_embedding_in_pipeline_split", "embedding_in_split", "--account-for-embedding-in-pipeline-split"),
    ("account_for_loss_in_pipeline_split", "loss_in_split", "--account-for-loss-in-pipeline-split"))
"""Megatron's switches that count the embedding / the output layer and loss as a layer of the split (False by
default), the :class:`TrainerLayout` field and oppo-sim's option."""

__all__ = ["TRAIN_BACKENDS", "BALANCE_ORDERS", "MOE_DISPATCHERS", "ROUTER_DTYPES", "STAGE_SPLIT", "SPLIT_ACCOUNTING",
           "TrainerLayout"]


def _count(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"trainer {name} must be an integer >= 1, got {v!r}")


@dataclass(frozen=True)
class TrainerLayout:
    """The trainer's backend and model parallelism (module notes). Checked at construction; the
    training pool's device count is checked by :meth:`check_devices`."""

    backend: str = "fsdp"
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    distributed_optimizer: bool = True
    balance_batch: bool = True
    optimizer_offload: float = 0.0  # share of the optimizer state and step on the host CPU (module notes)
    balance_order: str = "length"  # a balanced rank's share before the mini-batch split: verl >= 0.6.1's, or batch order
    fsdp_size: int = 0  # fsdp: ranks of one shard group (0: the whole pool; N: hybrid sharding, module notes)
    moe_dispatcher: str = "alltoall"  # megatron moe_token_dispatcher_type (module notes)
    moe_router_dtype: str = "model"  # megatron moe_router_dtype: the allgather dispatcher's combine dtype (module notes)
    etp: int | None = None  # megatron expert_tensor_parallel_size (None: Megatron-Core's default, tp; module notes)
    first_stage_layers: int | None = None  # megatron num_layers_in_first_pipeline_stage (None: an even split)
    last_stage_layers: int | None = None  # megatron num_layers_in_last_pipeline_stage (None: an even split)
    embedding_in_split: bool = False  # megatron account_for_embedding_in_pipeline_split (module notes)
    loss_in_split: bool = False  # megatron account_for_loss_in_pipeline_split (module notes)
    lora: LoRA | None = None  # adapters on frozen weights (None: every weight trains; module notes)
    free_grads: bool = False  # gradients freed after each update (verl's FSDP actor): they take turns with the engine

    def __post_init__(self) -> None:
        if self.backend not in TRAIN_BACKENDS:
            raise ConfigError(f"train backend must be one of {', '.join(TRAIN_BACKENDS)}, got {self.backend!r}")
        for name in ("tp", "pp", "vpp", "cp"):
            _count(name, getattr(self, name))
        for name in ("distributed_optimizer", "balance_batch", "free_grads", "embedding_in_split", "loss_in_split"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.balance_order not in BALANCE_ORDERS:
            raise ConfigError(f"balance order must be one of {', '.join(BALANCE_ORDERS)}, got {self.balance_order!r}")
        if self.moe_dispatcher not in MOE_DISPATCHERS:
            raise ConfigError(f"MoE token dispatcher must be one of {', '.join(MOE_DISPATCHERS)}, got {self.moe_dispatcher!r}")
        if self.moe_router_dtype not in ROUTER_DTYPES:
            raise ConfigError(f"MoE router dtype must be one of {', '.join(ROUTER_DTYPES)}, got {self.moe_router_dtype!r}")
        f = self.optimizer_offload
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f <= 1.0:
            raise ConfigError(f"optimizer offload must be a fraction in [0, 1] (1: every Adam step on the CPU), got {f!r}")
        if self.backend == "fsdp" and (self.model_parallel > 1 or self.vpp > 1):
            raise ConfigError(f"--train-tp/--pp/--vpp/--cp need --train-backend megatron (fsdp is data parallel; "
                              f"its sequence parallelism is --sp), got tp={self.tp} pp={self.pp} vpp={self.vpp} cp={self.cp}")
        fs = self.fsdp_size
        if isinstance(fs, bool) or not isinstance(fs, int) or fs < -1:
            raise ConfigError(f"fsdp_size must be an integer >= 1, or 0 / -1 for the whole pool, got {fs!r}")
        object.__setattr__(self, "fsdp_size", max(fs, 0))
        if self.megatron and self.fsdp_size:
            raise ConfigError(f"--fsdp-size {self.fsdp_size} is FSDP's shard group; --train-backend megatron shards by "
                              "its own layout (--train-tp, --pp, --ep, the distributed optimizer)")
        if self.etp is not None:
            _count("etp", self.etp)
            if not self.megatron and self.etp != 1:
                raise ConfigError(f"--etp {self.etp} is Megatron's expert_tensor_parallel_size: it needs --train-backend megatron")
        for _, name, opt in STAGE_SPLIT + SPLIT_ACCOUNTING:
            if getattr(self, name) not in (None, False) and self.pp == 1:
                raise ConfigError(f"{opt} sets how a pipeline is split: it needs --pp > 1")
        for name in ("first_stage_layers", "last_stage_layers"):
            if getattr(self, name) is not None:
                _count(name, getattr(self, name))
        if (self.embedding_in_split or self.loss_in_split) and self._uneven:
            raise ConfigError("account_for_*_in_pipeline_split and num_layers_in_first/last_pipeline_stage cannot be "
                              "set together (Megatron-Core)")
        if self.lora is not None and not isinstance(self.lora, LoRA):
            raise ConfigError(f"trainer lora must be a LoRA or None, got {type(self.lora).__name__}")
        if self.vpp > 1 and self.pp == 1:
            raise ConfigError(f"virtual pipeline stages (--vpp {self.vpp}) need pipeline parallelism (--pp > 1)")

    @property
    def megatron(self) -> bool:
        return self.backend == "megatron"

    def plain(self, backend: str = "fsdp") -> "TrainerLayout":
        """``backend`` without model parallelism, keeping this layout's trainer-wide settings (``balance_batch``,
        ``balance_order``, ``optimizer_offload``, ``moe_dispatcher``, ``lora``): what a search or a fallback starts from when it
        changes the layout."""
        return TrainerLayout(backend, balance_batch=self.balance_batch, optimizer_offload=self.optimizer_offload,
                             balance_order=self.balance_order, fsdp_size=self.fsdp_size if backend == "fsdp" else 0,
                             moe_dispatcher=self.moe_dispatcher, moe_router_dtype=self.moe_router_dtype, lora=self.lora,
                             free_grads=self.free_grads)

    def combine_bytes(self, dtype_bytes: int) -> int:
        """Bytes an element of the allgather dispatcher's combine moves: the router's dtype, else the model's."""
        return ROUTER_DTYPES[self.moe_router_dtype] or dtype_bytes

    @property
    def expert_tp(self) -> int:
        """Tensor parallelism of the routed experts: ``etp``, or where unset Megatron-Core's default, ``tp``
        (``initialize_model_parallel``); 1 under FSDP."""
        return self.tp if self.etp is None else self.etp

    @property
    def _uneven(self) -> bool:
        return self.first_stage_layers is not None or self.last_stage_layers is not None

    @property
    def split_set(self) -> bool:
        """Whether any of Megatron's pipeline-split settings is set (an uneven split, or the account-for switches)."""
        return self._uneven or self.embedding_in_split or self.loss_in_split

    def _middle(self, layers: int) -> tuple[int, int]:
        """(stages between the first and the last that an uneven split leaves even, the layers left for them)."""
        first, last = self.first_stage_layers, self.last_stage_layers
        return self.pp - (first is not None) - (last is not None), layers - (first or 0) - (last or 0)

    def rank_layers(self, layers: int) -> tuple[float, float, float]:
        """Decoder layers of a ``layers``-layer model on (the first, each middle, the last) pipeline rank: ``layers /
        pp`` each; with an uneven split the first's and the last's as set, the rest even over the ranks between
        (Megatron-Core's ``num_layers_in_first/last_pipeline_stage``); with the embedding / loss counted in the split,
        ``(layers + 1 [+ 1]) / pp`` each, one less on the first / last rank. A middle rank's 0 where there is none."""
        if self.pp == 1:
            return float(layers), 0.0, float(layers)
        if self._uneven:
            middle_stages, rest = self._middle(layers)
            mid = rest / middle_stages if middle_stages else 0.0
            first, last = self.first_stage_layers, self.last_stage_layers
            return float(first if first is not None else mid), mid, float(last if last is not None else mid)
        e, lo = int(self.embedding_in_split), int(self.loss_in_split)
        per = (layers + e + lo) / self.pp
        return per - e, per if self.pp > 2 else 0.0, per - lo

    def stage_layers(self, layers: int) -> float:
        """Decoder layers of the pipeline rank that holds the most (:meth:`rank_layers`)."""
        return max(self.rank_layers(layers))

    def stage_share(self, layers: int) -> float:
        """The largest pipeline stage's share of a ``layers``-layer model's layers (``1 / pp`` split evenly; 1 without
        pipeline parallelism): what a stage's weights, collectives and host time scale by."""
        return self.stage_layers(layers) / layers

    def stage_flops(self, layers: int, flops, head):
        """FLOPs of the busiest pipeline rank in a pass of ``flops`` (scalars or arrays) of which ``head`` are the
        output layer's: the decoder layers' part as the ranks hold them (:meth:`rank_layers`), the output layer and
        its loss whole on the last (Megatron-Core places them there; the first rank's embedding lookup has no
        matmul); ``flops`` itself without pipeline parallelism."""
        if self.pp == 1:
            return flops
        body = flops - head
        first, mid, last = self.rank_layers(layers)
        return np.maximum(body * max(first, mid) / layers, body * last / layers + head)

    def check_stages(self, layers: int, whole: int | None = None) -> None:
        """An uneven pipeline split must leave the middle stages whole, equal layer counts, and an even one must
        divide the ``whole`` layers the pipeline splits (``ModelSpec.pipeline_layers``; default ``layers``) over
        ``pp x vpp`` (one line if not)."""
        first, last = self.first_stage_layers, self.last_stage_layers
        counted = self.embedding_in_split + self.loss_in_split
        if counted and (layers + counted) % (self.pp * self.vpp):
            raise ConfigError(f"pipeline split: {layers} layers and the {counted} counted for the embedding / loss do not "
                              f"divide evenly over pp {self.pp} x vpp {self.vpp} (Megatron-Core)")
        if first is None and last is None:
            whole = layers if whole is None else whole
            if self.pp > 1 and not counted and whole % (self.pp * self.vpp):
                raise ConfigError(f"pipeline split: {whole} layers do not divide evenly over pp {self.pp} x vpp "
                                  f"{self.vpp} (Megatron-Core asserts it): choose another --pp / --vpp, or split unevenly "
                                  "with --first-stage-layers / --last-stage-layers")
            return
        middle_stages, rest = self._middle(layers)
        if rest < 0 or (middle_stages and (rest <= 0 or rest % (middle_stages * self.vpp))) or (not middle_stages and rest):
            raise ConfigError(f"pipeline split: {layers} layers less {first or 0} on the first and {last or 0} on the "
                              f"last stage leave {rest} for {middle_stages} middle stage(s) x vpp {self.vpp}: they must "
                              "divide evenly (Megatron-Core)")

    @property
    def model_parallel(self) -> int:
        """Ranks one model replica spans: ``tp · pp · cp``."""
        return self.tp * self.pp * self.cp

    def data_parallel(self, devices: int) -> int:
        """Data-parallel ranks on ``devices`` GPUs (checked to divide)."""
        self.check_devices(devices)
        return devices // self.model_parallel

    def shard_ranks(self, devices: int) -> int:
        """Ranks an FSDP / ZeRO trainer's state is sharded over on a ``devices``-GPU pool: ``fsdp_size`` (hybrid
        sharding) where it is smaller, else all of them."""
        return self.fsdp_size if 0 < self.fsdp_size < devices else devices

    def check_devices(self, devices: int) -> None:
        if 0 < self.fsdp_size < devices and devices % self.fsdp_size:  # verl: one at or over the pool is a full shard
            raise ConfigError(f"--fsdp-size {self.fsdp_size} must divide the trainer's {devices} devices (FSDP's "
                              f"hybrid sharding replicates whole shard groups)")
        if devices % self.model_parallel:
            raise ConfigError(f"the trainer's tp x pp x cp = {self.tp} x {self.pp} x {self.cp} = {self.model_parallel} "
                              f"must divide its {devices} devices")

    def check_experts(self, devices: int, ep: int) -> None:
        """Megatron's expert-parallel groups are cut from one pipeline stage's ``devices / pp`` ranks: ``ep``
        must divide them (one line if not)."""
        if self.megatron and ep > 1 and (devices // self.pp) % (ep * self.expert_tp):
            etp = f" x expert tensor parallelism {self.expert_tp}" if self.expert_tp > 1 else ""
            raise ConfigError(f"expert parallelism (--ep {ep}){etp} must divide the {devices // self.pp} ranks of one "
                              f"pipeline stage ({devices} devices / pp {self.pp})")

    @property
    def named(self) -> bool:
        """Whether the layout is more than plain FSDP over the whole pool (Megatron, or hybrid sharding): what a
        plan's configuration label names."""
        return self.megatron or self.fsdp_size > 0

    def label(self, ep: int = 1) -> str:
        """``fsdp`` (``fsdp hybrid 8`` with hybrid sharding), or ``megatron tp4 pp2 (vpp2) (cp2) (ep8)`` style and a
        pipeline split's settings (``first3 last2``, ``loss-in-split``), for tables (``ep``: expert parallelism)."""
        if not self.megatron:
            return f"fsdp hybrid {self.fsdp_size}" if self.fsdp_size else "fsdp"
        parts = [f"tp{self.tp}", f"pp{self.pp}"] + ([f"vpp{self.vpp}"] if self.vpp > 1 else []) + (
            [f"cp{self.cp}"] if self.cp > 1 else []) + ([f"ep{ep}"] if ep > 1 else []) + (
            [f"etp{self.expert_tp}"] if ep > 1 and self.expert_tp > 1 else [])
        parts += [f"{end}{n}" for end, n in (("first", self.first_stage_layers), ("last", self.last_stage_layers)) if n]
        parts += [f"{end}-in-split" for end, on in (("embedding", self.embedding_in_split), ("loss", self.loss_in_split)) if on]
        return "megatron " + " ".join(parts)

    def state(self, zero_stage, ep: int = 1) -> str:
        """How the trainer holds its state, for a report: its Megatron layout, or ``ZeRO-N``, and where Adam steps
        if not on the GPUs."""
        if self.balance_order not in BALANCE_ORDERS:
            raise ConfigError(f"balance order must be one of {', '.join(BALANCE_ORDERS)}, got {self.balance_order!r}")
        f = self.optimizer_offload
        cpu = "" if f == 0 else ", Adam on the CPU" if f == 1 else f", {f:.0%} of Adam on the CPU"
        hybrid = f" in groups of {self.fsdp_size}" if self.fsdp_size and not self.megatron else ""
        return (self.label(ep) if self.megatron else f"ZeRO-{zero_stage}{hybrid}") + cpu + (
            f", {self.lora.label()}" if self.lora else "")

    @property
    def weight_scale(self) -> float:
        """The weights' bytes over bf16's: LoRA's frozen weights in their own dtype (verl's FSDP actor: fp32), else 1."""
        return 1.0 if self.lora is None else self.lora.base_scale

    def trainable(self, model, scalar_head: bool = False) -> float:
        """The share of ``model``'s parameters that train (gradients, optimizer state and step, gradient collectives):
        1, or under ``lora`` the adapters' (:meth:`LoRA.trainable_fraction`)."""
        return 1.0 if self.lora is None else self.lora.trainable_fraction(model, scalar_head)

    def trainable_split(self, model, scalar_head: bool = False) -> tuple[float, float]:
        """:meth:`trainable` of the parameters outside the routed experts and of the routed experts, apart."""
        return (1.0, 1.0) if self.lora is None else self.lora.trainable_split(model, scalar_head)
