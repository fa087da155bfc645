"""Roofline cost model: seconds for each engine operation on a modelled (or calibrated) device.

Every operation is timed as

    overhead_s + max(flops / (devices * peak_flops * eff_compute), bytes / (devices * mem_bw * eff_memory))

plus, for tensor parallelism, two all-reduces of the layer's activations per layer over the scale-up
interconnect (``link_bw``), and for data-parallel training a gradient all-reduce per optimizer step (across the
network when the pool spans scale-up domains, as ``oppo_sim.hw.costs.links`` prices a ring), both timed by
``hardware.allreduce_seconds`` with the calibrated ``collective`` parameters. The efficiencies and
overheads come from ``Hardware.params`` (defaults, or fitted by ``oppo_sim.hw.fitting.calibration``);
bandwidths follow ``oppo_sim.hw.devices.hardware``'s convention (one direction, per GPU).

Training follows the trainer's memory settings: activation recomputation adds FLOPs (selective: the
attention core's forward, eager attention only; full: one more forward, 3x -> 4x forward FLOPs; see
``oppo_sim.hw.memory.train_memory``), and ZeRO-3 adds a parameter all-gather to the gradient traffic (3 instead of 2
model-sized transfers per optimizer step, the ZeRO paper's 1.5x). The weight sync goes by the
mechanism in ``oppo_sim.hw.costs.sync``.

A mixture-of-experts model costs its *active* parameters' FLOPs (router, top-k and shared experts) and
reads, per forward, only the experts its tokens touch (``ModelSpec.weight_bytes_read``: a decode batch
of a few sequences reads a few experts per layer, a long prefill all of them); training reads all of
them and holds state for all of them. Expert parallelism (``DecodeCost.expert_parallel``,
``CostModel.expert_parallel``) prices its all-to-alls as ``oppo_sim.hw.costs.expert_parallel`` says.

Generation cost is needed per engine iteration, and the engine jumps over many identical-shape decode
iterations at once, so :class:`DecodeCost` gives the closed-form sum of ``m`` consecutive decode
iterations (the KV length grows by the batch size each iteration) and its inverse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.decode_kernels import DecodeKernels
from oppo_sim.hw.costs.eager import DEFAULT_VLLM_RELEASE, EAGER_HOST_OP_S, eager_host_seconds
from oppo_sim.hw.costs.expert_parallel import decode_comm_coeffs
from oppo_sim.hw.costs.links import alltoall_share, group_nodes, ring_bw, ring_share
from oppo_sim.hw.costs.spans import sum_max_lines_floor
from oppo_sim.hw.devices.hardware import Hardware, OpParams, allreduce_seconds, collective_seconds, nodes_spanned
from oppo_sim.hw.memory.train_memory import RECOMPUTE_MODES, ZERO_STAGES
from oppo_sim.hw.models.lookup import ModelSpec
from oppo_sim.hw.costs.sync import SyncPlan, sync_seconds
from oppo_sim.hw.costs.trainer_cost import (OPTIMIZER_BYTES_PER_PARAM, expert_excess, forward_ranks, forward_seconds,
                                            fsdp_train_seconds, megatron_train_seconds, pass_flops, scorer_batch_scale)
from oppo_sim.hw.costs.micro_batches import MicroBatch
from oppo_sim.hw.costs.trainer_layout import TrainerLayout



def _roofline(op: OpParams, flops: float, nbytes: float, devices: int, hw: Hardware) -> float:
    g = hw.gpu
    return op.overhead_s + max(
        flops / (devices * g.peak_flops * op.eff_compute),
        nbytes / (devices * g.mem_bw * op.eff_memory),
    )


@dataclass(frozen=True)
class DecodeCost:
    """Generation-iteration cost for one model on one engine replica of ``tp`` devices.

    An iteration that decodes ``b`` sequences whose KV holds ``kv`` tokens in total, and prefills
    ``n`` prompt tokens with ``pairs`` attention (query, key) pairs, costs
    ``ovh + max(host, comm(b+n) + max(c0 + c_tok*(b+n) + c_pair*(pairs + kv + b), m0(b+n) + m_kv*(kv + b + n)))``:
    ``m0`` is the weights the iteration reads — all of them for a dense model, the experts its ``b + n``
    tokens touch for a MoE model (``ModelSpec.weight_bytes_read``). ``expert_parallel``: the replica's
    experts are sharded over its GPUs (vLLM ``enable_expert_parallel``; see ``oppo_sim.hw.costs.expert_parallel``).
    ``host``: the seconds an eager engine's host spends issuing a step's kernels (vLLM ``enforce_eager``,
    ``oppo_sim.hw.costs.eager``; 0 with CUDA graphs), which the GPU's work overlaps.
    """

    model: ModelSpec
    hw: Hardware
    tp: int = 1
    expert_parallel: bool = False
    link_bw: float | None = None  # bytes/s, one direction, of the group's all-reduces (None: the GPU's link_bw)
    a2a_bw: float | None = None  # bytes/s of its expert all-to-alls (None: link_bw's); see links.alltoall_share
    nodes: int = 1  # scale-up domains the replica's tp GPUs span (its collectives' latency grows with them)
    host_s: float = 0.0  # eager mode: host seconds per step issuing its kernels (0: CUDA graphs)

    @cached_property
    def _k(self) -> tuple[float, float, float, float, float]:
        m, g, p = self.model, self.hw.gpu, self.hw.params.decode
        fl = self.tp * g.peak_flops * p.eff_compute
        by = self.tp * g.mem_bw * p.eff_memory
        c_tok = 2.0 * m.matmul_params / fl
        c_pair = m.pair_flops / fl
        m0 = m.weight_bytes() / by
        m_kv = m.replica_kv_bytes_per_token(self.tp) / by
        return p.overhead_s, c_tok, c_pair, m0, m_kv

    @cached_property
    def _kern(self) -> DecodeKernels | None:
        """The kernel-sum pricing where the hardware carries measured op costs (``oppo_sim.hw.costs.op_cost``)."""
        ops = self.hw.ops
        return None if ops is None else DecodeKernels(ops, self.model, self.tp, self.expert_parallel, self.hw.gpu)

    def _m0(self, tokens: float) -> float:
        """Seconds of the weight reads of an iteration over ``tokens`` tokens (all weights, if dense)."""
        if not self.model.moe:
            return self._k[3]
        return self.model.weight_bytes_read(tokens) / (self.tp * self.hw.gpu.mem_bw * self.hw.params.decode.eff_memory)

    @cached_property
    def _comm_k(self) -> tuple[float, float]:
        """(fixed, per-token) seconds of an iteration's tensor-parallel collectives: two all-reduces per
        layer, each of ``tokens * hidden * dtype_bytes`` bytes (``allreduce_seconds`` is affine in the
        bytes); with expert parallelism, a MoE layer's second one is a dispatch and a combine all-to-all."""
        bw = self.link_bw if self.link_bw is not None else self.hw.gpu.link_bw
        return decode_comm_coeffs(self.model, self.hw.params.collective, self.tp, bw, self.expert_parallel, self.nodes,
                                  self.a2a_bw if self.a2a_bw is not None else bw)

    def comm(self, tokens: float) -> float:
        """Seconds of the tensor-parallel all-reduces of an iteration over ``tokens`` tokens (0 at tp 1)."""
        if self.tp == 1:
            return 0.0
        fixed, per_token = self._comm_k
        return fixed + per_token * tokens

    def iteration(
        self, decode_seqs: int, kv_decode: float, prefill_tokens: int = 0, prefill_pairs: float = 0.0, kv_prefill: float = 0.0
    ) -> float:
        """Seconds for one mixed iteration: ``decode_seqs`` decodes over ``kv_decode`` cached tokens, plus
        ``prefill_tokens`` chunked-prefill tokens with ``prefill_pairs`` attention pairs over ``kv_prefill``
        cached context tokens."""
        ovh, c_tok, c_pair, _, m_kv = self._k
        b, n = decode_seqs, prefill_tokens
        if self._kern is not None:
            return ovh + max(self.host_s, self.comm(b + n) + self._kern.iteration(b, kv_decode, n, prefill_pairs, kv_prefill))
        comp = c_tok * (b + n) + c_pair * (prefill_pairs + kv_decode + b)
        mem = self._m0(b + n) + m_kv * (kv_decode + kv_prefill + b + n)
        return ovh + max(self.host_s, self.comm(b + n) + max(comp, mem))

    def flops(self, decode_seqs: int, kv_decode: float, prefill_tokens: int = 0, prefill_pairs: float = 0.0) -> float:
        m = self.model
        return 2.0 * m.matmul_params * (decode_seqs + prefill_tokens) + m.pair_flops * (
            prefill_pairs + kv_decode + decode_seqs
        )

    def span_flops(self, b: int, kv0: float, iters: int) -> float:
        """FLOPs of ``iters`` pure-decode iterations (KV grows by b per iteration)."""
        m = self.model
        kv_sum = iters * kv0 + b * iters * (iters - 1) / 2.0
        return 2.0 * m.matmul_params * b * iters + m.pair_flops * (kv_sum + b * iters)

    def _lines(self, b: int, kv0: float) -> tuple[float, float, float, float, float, float]:
        """(fixed seconds per iteration, compute line (intercept, slope), memory line, and the host's floor
        under the GPU's part): iteration i of a span costs ``fixed + max(floor, a_c + s_c*i, a_m + s_m*i)``."""
        ovh, c_tok, c_pair, _, m_kv = self._k
        comm = self.comm(b)
        if self._kern is not None:
            fixed, a, s = self._kern.lines(b, kv0)
            return ovh + comm, fixed + a, s, 0.0, 0.0, self.host_s - comm
        a_c = c_tok * b + c_pair * (kv0 + b)
        s_c = c_pair * b
        a_m = self._m0(b) + m_kv * (kv0 + b)
        s_m = m_kv * b
        return ovh + comm, a_c, s_c, a_m, s_m, self.host_s - comm

    def span(self, b: int, kv0: float, iters: int) -> float:
        """Seconds for ``iters`` consecutive pure-decode iterations of ``b`` sequences, starting at KV ``kv0``."""
        if iters <= 0 or b <= 0:
            return 0.0
        fixed, a_c, s_c, a_m, s_m, floor = self._lines(b, kv0)
        return fixed * iters + sum_max_lines_floor(a_c, s_c, a_m, s_m, floor, iters)

    def iters_within(self, b: int, kv0: float, seconds: float, limit: int) -> int:
        """Largest m <= limit with span(b, kv0, m) <= seconds."""
        if seconds <= 0 or b <= 0:
            return 0
        if self.span(b, kv0, limit) <= seconds:
            return limit
        lo, hi = 0, limit  # span(lo) <= seconds < span(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.span(b, kv0, mid) <= seconds:
                lo = mid
            else:
                hi = mid
        return lo


@dataclass(frozen=True)
class CostModel:
    """Times of scorer forwards, training passes and weight syncs on ``hw``. ``zero_stage``,
    ``recompute`` and ``flash_attention`` are the trainer's (resolved) memory settings; ``sync`` is how
    weights reach the generators. The defaults are the historical model: plain 3x training FLOPs,
    gradient all-reduce, sync over the node's interconnect."""

    hw: Hardware
    zero_stage: int = 2
    recompute: str = "none"
    flash_attention: bool = True
    sync: SyncPlan = SyncPlan()
    cross_node: bool = False  # the pool spans scale-up domains (nodes, NVL72 racks): its collectives cross the network
    expert_parallel: int = 1  # training: a MoE model's experts sharded over this many ranks (Megatron's EP)
    domain: int = 0  # GPUs per scale-up domain (gpu_table.domain_gpus; 0: unbounded), the links rule (costs.links)
    pool_domain_gpus: int = 0  # the pool's GPUs in one of its domains (fewest; 0: whole domains): a ring's NICs
    layout: TrainerLayout = TrainerLayout()  # the trainer's backend and parallelism (oppo_sim.hw.costs.trainer_cost)
    micro: MicroBatch = MicroBatch()  # the trainer's micro-batch (TrainMemoryConfig's; default: one longest sequence)
    forward_micro: MicroBatch = MicroBatch()  # the forward-only passes' (TrainMemoryConfig's; not given: the above)
    sequence_parallel: int = 1  # fsdp: Ulysses sequence parallelism of the trainer (TrainMemoryConfig's)
    host_gpus: int = 0  # GPUs sharing one host's CPU (a CPU optimizer's step); 0: the scale-up domain's
    host_op_s: float = EAGER_HOST_OP_S  # megatron: host seconds per issued op (oppo_sim.hw.costs.megatron_host; 0: off)

    def __post_init__(self) -> None:
        if isinstance(self.zero_stage, bool) or self.zero_stage not in ZERO_STAGES:
            raise ConfigError(f"CostModel: zero_stage must be one of 0, 1, 2, 3, got {self.zero_stage!r}")
        if self.recompute not in RECOMPUTE_MODES:
            raise ConfigError(f"CostModel: recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {self.recompute!r}")
        if not isinstance(self.layout, TrainerLayout):
            raise ConfigError(f"CostModel: layout must be a TrainerLayout, got {type(self.layout).__name__}")
        if not isinstance(self.sync, SyncPlan):
            raise ConfigError(f"CostModel: sync must be a SyncPlan, got {type(self.sync).__name__}")

    def micro_batch(self, forward: bool = False) -> MicroBatch:
        """The micro-batch of a training pass, or of a forward-only one (its own where given)."""
        return self.forward_micro if forward and self.forward_micro.given else self.micro

    def decode(self, model: ModelSpec, tp: int = 1, expert_parallel: bool = False, host_op_s: float = 0.0,
               vllm_version: str = DEFAULT_VLLM_RELEASE) -> DecodeCost:
        """The generation cost of a ``tp``-GPU replica; its collectives cross the network where ``tp`` exceeds
        the scale-up domain (``domain``), as a TP group over several nodes does. ``host_op_s`` > 0: the engine
        runs eagerly (vLLM ``enforce_eager``), each op it issues costs the host that long (``oppo_sim.hw.costs.eager``; the ops
        of vLLM release ``vllm_version``)."""
        g, across = self.hw.gpu, self.domain > 0 and tp > self.domain  # links: all-reduces as rings, all-to-alls
        bws = (ring_share(g.link_bw, g.net_bw, self.domain), alltoall_share(g.link_bw, g.net_bw, tp, self.domain)) \
            if across else (None, None)
        return DecodeCost(model, self.hw, tp, expert_parallel, *bws, nodes_spanned(tp, self.domain),
                          eager_host_seconds(model, tp, host_op_s, vllm_version))

    def prefill_flops(self, model: ModelSpec, new_tokens: np.ndarray, context: np.ndarray, scalar_head: bool) -> float:
        return float(np.sum(model.forward_flops(new_tokens, context, scalar_head=scalar_head)))

    def prefill_cost(self, model: ModelSpec, devices: int, new_tokens, context, scalar_head: bool = False) -> tuple[float, float]:
        """(seconds, FLOPs) of one batched forward of sequences with ``new_tokens`` over existing ``context``,
        dealt to the pool's data-parallel ranks and timed on the slowest (``trainer_cost.forward_seconds``)."""
        lin, att = model.flop_coeffs(scalar_head)
        per_seq = [lin * n + att * (n * c + n * (n + 1) / 2.0) for n, c in zip(new_tokens, context)]
        flops = sum(per_seq)
        nbytes = model.weight_bytes_read(sum(new_tokens), scalar_head) + sum(map(sum, zip(new_tokens, context))) * model.kv_bytes_per_token()
        excess = 0.0
        if model.moe and self.hw.ops is not None:  # a MoE's experts at the measured grouped GEMMs
            excess = expert_excess(self, model, self.micro_batch(True).typical_tokens(np.asarray(new_tokens)), scalar_head)
        timed = [f + excess * lin * n for f, n in zip(per_seq, new_tokens)] if excess else per_seq
        if len(per_seq) <= 1 and forward_ranks(self, devices) == devices:  # one sequence on one GPU: plain arithmetic
            op, g = self.hw.params.prefill, self.hw.gpu
            return op.overhead_s + max(sum(timed) / (g.peak_flops * op.eff_compute), nbytes / (devices * g.mem_bw * op.eff_memory)), flops
        return forward_seconds(self, model, devices, np.asarray(new_tokens, dtype=np.float64), np.asarray(timed), nbytes,
                               2.0 * model.head_params(scalar_head)), flops

    def scorer_batch_scale(self, devices: int) -> int:
        """``scorer_max_tokens`` batches per scorer forward on ``devices`` GPUs (``trainer_cost.scorer_batch_scale``)."""
        return scorer_batch_scale(self, devices)

    def group_prefill_cost(
        self, model: ModelSpec, devices: int, prompt: int, responses, scalar_head: bool = False
    ) -> tuple[float, float]:
        """(seconds, FLOPs) of one forward over a group — the ``n`` responses of one prompt — with the prompt
        computed once and each response over it as context (a scorer with a prefix cache: vLLM's, or a
        shared-prefix batch); :meth:`prefill_cost` of ``[prompt, r1, ..., rn]`` over ``[0, prompt, ..., prompt]``.
        Without sharing, the same forward is ``prefill_cost([prompt + r for r in responses], [0] * n)``."""
        resp = [int(r) for r in responses]
        return self.prefill_cost(model, devices, [prompt, *resp], [0] + [prompt] * len(resp), scalar_head)

    def prefill(
        self, model: ModelSpec, devices: int, new_tokens: np.ndarray, context: np.ndarray, scalar_head: bool = False
    ) -> float:
        """Seconds for one batched forward of sequences with ``new_tokens`` over existing ``context``."""
        return self.prefill_cost(model, devices, new_tokens, context, scalar_head)[0]

    def train_flops(self, model: ModelSpec, seq_tokens: np.ndarray, scalar_head: bool = False) -> float:
        return float(np.sum(pass_flops(self.layout, model, seq_tokens, scalar_head)))

    def train(self, model: ModelSpec, devices: int, seq_tokens: np.ndarray, minibatches: int, scalar_head: bool = False) -> float:
        """Seconds for one PPO epoch: forward+backward over the sequences in ``minibatches`` optimizer steps,
        as the trainer's backend (``layout``) runs it on the slowest data-parallel rank of each step
        (``oppo_sim.hw.costs.trainer_cost``)."""
        if self.layout.megatron:
            return megatron_train_seconds(self, model, devices, seq_tokens, minibatches, scalar_head)
        return fsdp_train_seconds(self, model, devices, seq_tokens, minibatches, scalar_head)

    def gradient_sync(self, weight_bytes: float, devices: int, grad_bytes: float | None = None) -> float:
        """Seconds of one optimizer step's collectives over ``devices`` data-parallel ranks: the gradient
        all-reduce (ZeRO-2's reduce-scatter + all-gather move the same bus bytes), and under ZeRO-3 also
        the parameter all-gather, half an all-reduce's bytes (the ZeRO paper's 1.5x), as rings (``links.ring_bw``).
        With hybrid sharding (the layout's ``fsdp_size``) those run inside each shard group, and the ``1 / fsdp_size``
        of the gradients a rank holds is all-reduced across the groups (every ``fsdp_size``-th rank). ``grad_bytes``:
        the gradients' bytes where fewer than the weights' train (LoRA's adapters; default ``weight_bytes``)."""
        coll, s = self.hw.params.collective, self.layout.shard_ranks(devices)
        g = weight_bytes if grad_bytes is None else grad_bytes
        t = allreduce_seconds(coll, g, s, ring_bw(self, s, devices), group_nodes(self, s, devices))
        if s < devices:
            t += allreduce_seconds(coll, g / s, devices // s, ring_bw(self, devices, devices, stride=s),
                                   group_nodes(self, devices, devices))
        return t + (self.param_gather(weight_bytes, s, devices) if self.zero_stage == 3 else 0.0)

    def param_gather(self, weight_bytes: float, devices: int, pool: int | None = None) -> float:
        """Seconds of one all-gather of ``weight_bytes`` of weights sharded over ``devices`` ranks (ZeRO-3 /
        FSDP full-shard; a shard group of a ``pool``-GPU pool under hybrid sharding, default the whole pool): each
        rank receives the ``(n-1)/n`` it lacks, as a ``collective``. ZeRO-3 training pays it once per optimizer step
        (:meth:`gradient_sync`); a frozen model sharded with the trainer (``memory_plan.frozen_shards``) once per
        forward. 0 on one device."""
        if devices <= 1:
            return 0.0
        pool = devices if pool is None else pool
        return collective_seconds(self.hw.params.collective, (devices - 1) / devices * weight_bytes,
                                  ring_bw(self, devices, pool), "all-gather", devices, group_nodes(self, devices, pool))

    def recompute_flops(self, model: ModelSpec, seq_tokens: np.ndarray, scalar_head: bool = False) -> float:
        """FLOPs one training pass over sequences of ``seq_tokens`` tokens spends recomputing activations:
        0 (none), the attention core's forward ``pair_flops * n(n+1)/2`` per sequence
        (selective, eager attention; FlashAttention already recomputes it inside its kernel, which the 3x
        rule absorbs), or one whole forward (full)."""
        n = np.asarray(seq_tokens, dtype=np.float64)
        if self.recompute == "full":
            return float(np.sum(model.forward_flops(n, 0, scalar_head=scalar_head)))
        if self.recompute == "selective" and not self.flash_attention:
            return float(model.pair_flops * np.sum(n * (n + 1.0) / 2.0))
        return 0.0

    # -- the work of one call, as the calibration table records it (FLOPs, bytes) ----------------------
    @staticmethod
    def decode_work(model: ModelSpec, batch: int, kv_tokens: float) -> tuple[float, float]:
        """One decode iteration of ``batch`` sequences over ``kv_tokens`` cached tokens in total."""
        flops = 2.0 * model.matmul_params * batch + model.pair_flops * (kv_tokens + batch)
        return flops, model.weight_bytes_read(batch) + model.kv_bytes_per_token() * (kv_tokens + batch)

    @staticmethod
    def prefill_work(model: ModelSpec, new_tokens, context, scalar_head: bool = False) -> tuple[float, float]:
        n = np.asarray(new_tokens, dtype=np.float64)
        c = np.asarray(context, dtype=np.float64)
        flops = float(np.sum(model.forward_flops(n, c, scalar_head=scalar_head)))
        return flops, model.weight_bytes_read(float(np.sum(n)), scalar_head) + float(np.sum(c + n)) * model.kv_bytes_per_token()

    @staticmethod
    def train_work(model: ModelSpec, seq_tokens, scalar_head: bool = False) -> tuple[float, float]:
        """One forward+backward+optimizer step on one device over sequences of ``seq_tokens`` tokens."""
        flops = 3.0 * float(np.sum(model.forward_flops(np.asarray(seq_tokens, dtype=np.float64), 0, scalar_head=scalar_head)))
        params = model.params_scalar_head if scalar_head else model.params
        return flops, 3.0 * model.weight_bytes(scalar_head=scalar_head) + OPTIMIZER_BYTES_PER_PARAM * params

    @staticmethod
    def sync_work(model: ModelSpec) -> tuple[float, float]:
        return 0.0, float(model.weight_bytes())

    @staticmethod
    def allreduce_work(nbytes: float, devices: int) -> tuple[float, float]:
        """One all-reduce of ``nbytes`` over ``devices`` GPUs as a ``collective`` row: no FLOPs, and the bus
        bytes ``2(n-1)/n * nbytes`` each GPU moves (nccl-tests' busbw is these bytes over the time)."""
        return 0.0, 2.0 * (devices - 1) / devices * float(nbytes)

    def weight_sync(self, model: ModelSpec, plan: SyncPlan | None = None) -> float:
        """Seconds to push the trained actor's weights into the generation engines, along ``plan``
        (default: this cost model's ``sync``)."""
        return sync_seconds(model, self.hw, plan if plan is not None else self.sync)


@dataclass(frozen=True)
class TrainJob:
    """One model's share of a step's update: the trainer runs the jobs one after the other on its pool."""

    role: str  # "actor" or "critic"
    seconds: float
    flops: float
    tokens: int


def train_jobs(cost: CostModel, trained, devices: int, seq_tokens: np.ndarray, epochs: int, minibatches: int) -> list[TrainJob]:
    """The update of one step: for each ``(role, model, scalar_head)`` in ``trained`` (``SimConfig.trained()``:
    the actor, plus the critic only where the algorithm has one), ``epochs`` passes over the step's
    sequences of ``seq_tokens`` tokens (B x n of them) in ``minibatches`` optimizer steps each — FLOPs,
    optimizer traffic and gradient all-reduce all belong to the job, so a critic-free algorithm has none of
    the critic's."""
    tokens = int(np.sum(seq_tokens)) * epochs
    return [
        TrainJob(role, epochs * cost.train(model, devices, seq_tokens, minibatches, scalar_head=scalar),
                 epochs * cost.train_flops(model, seq_tokens, scalar), tokens)
        for role, model, scalar in trained
    ]


def rule_reward_seconds(responses: int, reward_cost_ms: float, workers: int = 1) -> float:
    """CPU seconds a rule reward (a verifier function, no GPU) takes to score ``responses`` responses at
    ``reward_cost_ms`` each, over ``workers`` parallel processes (each takes whole calls). The default cost,
    ``core.algorithms.DEFAULT_RULE_COST_MS`` = 5 ms, is a math answer checker (extract the final answer,
    normalise, compare — verl's ``math_verify``/``gsm8k`` scorers take 1-10 ms); a verifier that runs the
    response's code in a sandbox costs 100 ms to seconds per call: set ``--reward-cost-ms``. ``workers`` = 1
    is verl's ``NaiveRewardManager`` (one loop in the driver); parallel reward managers divide the time."""
    if responses < 0 or reward_cost_ms < 0 or workers < 1:
        raise ConfigError(f"rule_reward_seconds: need responses >= 0, reward_cost_ms >= 0, workers >= 1, "
                          f"got {responses}, {reward_cost_ms}, {workers}")
    return math.ceil(responses / workers) * reward_cost_ms / 1000.0
