"""Seconds of a training pass as the trainer's backend runs it (``CostModel.train``): data parallel
FSDP / ZeRO (with Ulysses sequence parallelism) or Megatron-Core (TP with sequence parallelism, PP, CP, EP,
the distributed optimizer), both on the slowest data-parallel rank of each optimizer step.

**Data-parallel imbalance.** A step's sequences are dealt to the ``dp`` data-parallel ranks
(:func:`dp_partition`): with ``TrainerLayout.balance_batch`` (verl's default ``trainer.balance_batch``) a
partition with equal sequence counts balanced by tokens — verl uses Karmarkar-Karp, approximated here by
the greedy longest-first (LPT) rule with equal counts, each share then in verl's order from 0.6.1
(``TrainerLayout.balance_order``: ascending by length, the even places followed by the odd ones reversed, short
sequences at both ends; earlier verl kept batch order); without it, contiguous chunks in batch order. Each rank
splits its share into the ``minibatches`` optimizer steps in that order (verl's per-rank mini-batches), and every
optimizer step waits for its slowest rank (the gradient collective is a barrier): the step's compute is the largest
rank's FLOPs, not the mean (with equal lengths, the mean: ``FLOPs / devices``).

**Fixed costs.** ``train.overhead_s`` is paid per micro-batch (each forward + backward's launches and Python) and once
per optimizer step. A rank's micro-batches in an optimizer step are its tokens packed into micro-batches as
``micro_batches.MicroBatch`` counts them (the memory plan's: packed to a token budget, a fixed count of sequences, or
one longest sequence); a forward-only pass's by its own where one is given.

**FSDP** (``fsdp_train_seconds``): per device ``max(FLOPs / (sp · peak · eff), bytes / (bw · eff))`` with
the bytes of today's model (weights read three times and the optimizer's 16 bytes per parameter per optimizer step),
the gradient all-reduce (ZeRO-3: and the parameter all-gather) per optimizer step, expert all-to-alls under ``--ep``,
and with Ulysses sequence parallelism ``sp`` four all-to-alls per layer per micro-batch (Q/K/V in and the output out,
forward and backward), each rank sending ``(sp - 1) / sp`` of its tokens' heads.

**Megatron** (``megatron_train_seconds``), per optimizer step on the slowest data-parallel rank, with
``m`` micro-batches: compute, the busiest stage's FLOPs (``TrainerLayout.stage_flops``: its layers' share, the
output layer whole on the last stage) over ``tp · cp``, or the rank's weight and optimizer bytes where those are
slower (the weights of its shard read three times per micro-batch); TP with sequence
parallelism: an all-gather and a reduce-scatter before and after attention and MLP — four collectives per
layer forward, four backward (four more forward under full recomputation) — of the micro-batch's
``tokens / cp · hidden`` bytes, ``(tp - 1) / tp`` of it per rank; CP: the ring's KV exchange,
``cp - 1`` passes of the rank's K and V blocks forward and twice that backward, overlapped with the
attention core (only what exceeds it is charged); EP: the dispatch and combine, forward and backward, of each
MoE layer of the stage, over the tokens the rank holds, as ``layout.moe_dispatcher`` moves them (all-to-alls, or
Megatron's all-gather and reduce-scatter); PP: one point-to-point send per
micro-batch and model chunk forward and one backward, of the sequence-parallel activation shard; then the
pipeline bubble ``(pp - 1) / (vpp · m)`` of all that; then the gradient reduce-scatter and parameter
all-gather of the rank's shard over its ``dp · cp`` data-parallel ranks (the routed experts' over
``devices / (pp · ep)``), not overlapped with the backward (``overlap_grad_reduce`` off).

**Where each group sits** (Megatron's rank order ``tp-cp-ep-dp-pp``, innermost first; the expert groups
``ep-dp-pp`` with expert tensor parallelism 1, so an EP group is ``ep`` consecutive ranks): a group of
``span`` consecutive ranks runs over the scale-up link when it fits in one scale-up domain
(``gpu_table.domain_gpus``), over the network otherwise — TP spans ``tp``, CP ``tp · cp``, EP ``ep``, the
data-parallel groups a whole stage (``devices / pp``, every ``tp``-th rank of it); pipeline neighbours are
``devices / pp`` apart, over the network whenever the pool spans domains. Across the network, point-to-point
traffic runs at each GPU's NIC, an all-to-all at its NIC for the share bound off the node, ring collectives (TP's, the
data-parallel reductions, the allgather dispatcher's) at the NICs of the group's GPUs in a domain together (``links``).

Not modelled: overlap of the TP, EP and data-parallel collectives with compute (Megatron's
``tp_comm_overlap``, ``overlap_grad_reduce``, ``overlap_param_gather``), MoE routing imbalance, and the per-micro-batch
tokens of a rank being unequal (its tokens are taken as spread evenly over its micro-batches).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from oppo_sim.hw.costs.expert_parallel import alltoall_bytes_per_token, dispatch_bytes_per_token, dispatch_kind, expert_split
from oppo_sim.hw.costs.megatron_host import host_seconds
from oppo_sim.hw.costs.micro_batches import MicroBatch
from oppo_sim.hw.costs.op_cost import expert_flop_excess
from oppo_sim.hw.costs.links import alltoall_bw, group_bw, group_nodes, ring_bw
from oppo_sim.hw.devices.hardware import allreduce_seconds, collective_latency, collective_seconds
from oppo_sim.hw.models.model_spec import ModelSpec
from oppo_sim.hw.memory.trainer_memory import stage_params

__all__ = ["pass_flops", "OPTIMIZER_BYTES_PER_PARAM", "CPU_ADAM_PARAMS_PER_S", "cpu_optimizer_seconds", "dp_partition", "RankLoads", "rank_loads", "fsdp_train_seconds",
           "megatron_train_seconds", "with_host", "forward_ranks", "scorer_batch_scale", "forward_seconds", "expert_excess"]

OPTIMIZER_BYTES_PER_PARAM = 16
"""Adam in mixed precision touches ~16 bytes per parameter per optimizer step (fp32 master, m, v, grad)."""
CPU_ADAM_PARAMS_PER_S = 2e9
"""Parameters one node's host CPU steps with Adam per second, shared by the node's ranks: DeepSpeed's CPU Adam
stepping a ZeRO-3 Qwen-72B over 4 A100 nodes (18B parameters a node) took ~10 s an optimizer step against 0.2 s
on the GPUs (deepspeedai/DeepSpeed#6834); a memory-bound loop over ~30 bytes a parameter (fp32 master, m, v
read and written, the gradient read, the bf16 copy written) at ~60 GB/s of a host's bandwidth agrees."""


def cpu_optimizer_seconds(cost, params_rank: float, devices: int) -> float:
    """Seconds one optimizer step spends on the host CPU (``layout.optimizer_offload`` of the state, module
    notes of ``trainer_layout``): a rank whose optimizer holds ``params_rank`` parameters sends their bf16
    gradients down and takes their bf16 weights back over its host link, and the node's CPU steps all its
    ranks' shares (``cost.host_gpus`` of the pool's ``devices`` a node) at :data:`CPU_ADAM_PARAMS_PER_S`."""
    f = cost.layout.optimizer_offload
    if f <= 0:
        return 0.0
    per_node = min(devices, cost.host_gpus or cost.domain or devices)
    return f * params_rank * (per_node / CPU_ADAM_PARAMS_PER_S + 2 * 2 / cost.hw.gpu.host_bw)


def dp_partition(seq_tokens: np.ndarray, ranks: int, balance: bool) -> np.ndarray:
    """The data-parallel rank of each sequence: contiguous chunks in order (the first ``n mod ranks`` one
    longer), or with ``balance`` equal counts balanced by tokens — the sequences sorted longest first and
    each dealt to the least loaded rank that has room (ties: the lowest rank) — greedy LPT with equal counts,
    an approximation of verl's equal-size Karmarkar-Karp partition."""
    n = len(seq_tokens)
    if not balance or ranks == 1:
        sizes = np.full(ranks, n // ranks, dtype=np.int64)
        sizes[: n % ranks] += 1
        return np.repeat(np.arange(ranks), sizes)
    tokens = np.asarray(seq_tokens, dtype=np.float64)
    room = [n // ranks + (1 if r < n % ranks else 0) for r in range(ranks)]
    heap = [(0.0, r) for r in range(ranks) if room[r] > 0]
    out = [0] * n
    pop, push = heapq.heappop, heapq.heappush
    lengths = tokens.tolist()
    for i in np.argsort(-tokens, kind="stable").tolist():  # plain Python: this runs every step
        load, r = pop(heap)
        out[i] = r
        room[r] -= 1
        if room[r]:
            push(heap, (load + lengths[i], r))
    return np.asarray(out, dtype=np.int64)


@dataclass(frozen=True)
class RankLoads:
    """Per optimizer step, the slowest data-parallel rank's work: ``flops`` and ``attn_flops`` (the largest
    rank's), ``tokens`` and ``micro_batches`` (the largest of any rank's)."""

    flops: np.ndarray
    attn_flops: np.ndarray
    tokens: np.ndarray
    micro_batches: np.ndarray


def rank_loads(seq_tokens: np.ndarray, flops: np.ndarray, attn_flops: np.ndarray, ranks: int, minibatches: int,
               balance: bool, micro: MicroBatch, by_length: bool = True) -> RankLoads:
    """Deal the sequences to ``ranks`` (:func:`dp_partition`), split each rank's share into ``minibatches``
    in order, and take each optimizer step's slowest rank (module notes). Balanced and ``by_length``, a rank's share
    is in verl's order from 0.6.1 (``ray_trainer._balance_batch``: ascending by length, then the even places
    followed by the odd ones reversed — short sequences at both ends, long ones in the middle), so mini-batch ``i``
    holds sequences of the same length ranks on every rank; otherwise in batch order (earlier verl; unbalanced)."""
    seq = np.asarray(seq_tokens, dtype=np.float64)
    rank = dp_partition(seq, ranks, balance)
    counts = np.bincount(rank, minlength=ranks)
    by_length = by_length and balance and ranks > 1
    if by_length:  # verl orders each rank's share by length, the short ones at both ends
        order = np.lexsort((np.arange(len(seq)), seq, rank))
    else:  # each rank's share in batch order
        order = np.argsort(rank, kind="stable")
    k = np.arange(len(seq)) - np.repeat(np.cumsum(counts) - counts, counts)  # place within its rank, in that order
    c = np.repeat(counts, counts)
    pos = np.where(k % 2 == 0, k // 2, c - 1 - k // 2) if by_length else k
    mb = np.empty(len(seq), dtype=np.int64)
    mb[order] = pos * minibatches // np.maximum(c, 1)

    def per(values: np.ndarray) -> np.ndarray:
        grid = np.zeros((ranks, minibatches))
        np.add.at(grid, (rank, mb), values)
        return grid

    tok = per(seq)
    micro_batches = micro.count(tok, lambda: per(np.ones_like(seq)), float(seq.max()) if len(seq) else 1.0)
    return RankLoads(per(np.asarray(flops, dtype=np.float64)).max(axis=0), per(np.asarray(attn_flops, dtype=np.float64)).max(axis=0),
                     tok.max(axis=0), micro_batches.max(axis=0))


def _lat(cost, kind: str, span: int, devices: int) -> float:
    """Latency of one ``kind`` collective over a group of ``span`` ranks of the pool."""
    return collective_latency(cost.hw.params.collective, kind, span, group_nodes(cost, span, devices))


def _exchange_seconds(cost, model: ModelSpec, ep: int, devices: int, tokens: float) -> float:
    """Seconds of one MoE layer's dispatch and combine of ``tokens`` a rank over the ``ep``-rank expert-parallel group,
    as ``cost.layout.moe_dispatcher`` moves them (``expert_parallel.dispatch_bytes_per_token``); Megatron's allgather
    dispatcher reduce-scatters the experts' output in the router's dtype (``layout.moe_router_dtype``: NeMo RL's fp64
    moves four times the bf16 bytes)."""
    lay = cost.layout
    how = lay.moe_dispatcher if lay.megatron else "alltoall"
    sent = dispatch_bytes_per_token(model, ep, how) * tokens
    combine = lay.combine_bytes(model.dtype_bytes) / model.dtype_bytes if how == "allgather" else 1.0
    kind = dispatch_kind(how)  # the allgather dispatcher's all-gather and reduce-scatter are ring collectives
    bw = (alltoall_bw(cost, ep, devices) if kind == "all-to-all" else ring_bw(cost, ep, devices)) * cost.hw.params.collective.eff_memory
    return 2 * _lat(cost, kind, ep, devices) + (1.0 + combine) * sent / bw


def with_host(cost, model: ModelSpec, gpu, m, ep: int, train: bool):
    """Megatron's ``m`` micro-batches of a pipeline stage whose GPU work takes ``gpu`` seconds, each pass (forward;
    backward) the larger of its GPU share and the host's time issuing it (``megatron_host.host_seconds`` at
    ``cost.host_op_s``; the forward is a third of a training micro-batch's GPU time (under LoRA a half), a quarter under full
    recomputation)."""
    if cost.host_op_s <= 0:
        return gpu
    lay = cost.layout
    local = model.experts / (ep * lay.expert_tp) if model.moe else 0.0
    hf, hb = host_seconds(model, cost.host_op_s, lay.stage_share(model.layers), lay.tp, local,
                          cost.recompute if train else "none")
    per = gpu / m
    if not train:
        return m * np.maximum(hf, per)
    share = 1.0 / _weight_passes(cost)  # the forward's part: a third, a quarter under full recomputation (LoRA: one less)
    return m * (np.maximum(hf, share * per) + np.maximum(hb, (1.0 - share) * per))


def expert_excess(cost, model: ModelSpec, micro_tokens: float, scalar_head: bool = False) -> float:
    """The extra share of a MoE model's matmul FLOPs that prices its routed experts at the GPU's measured grouped
    GEMMs (``op_cost.expert_flop_excess``; 0 without tables) for micro-batches of ``micro_tokens`` tokens a rank:
    each expert receives ``ep x micro_tokens x top-k / experts`` of them, ``moe_intermediate`` wide (divided by the
    layout's expert tensor parallelism under Megatron)."""
    if not model.moe or cost.hw.ops is None:
        return 0.0
    ep = cost.expert_parallel
    width = model.moe_intermediate / (cost.layout.expert_tp if cost.layout.megatron else 1)
    tpe = micro_tokens * ep * model.experts_per_token / model.experts
    return expert_flop_excess(cost.hw.ops, model, tpe, width, scalar_head)


def pass_flops(layout, model: ModelSpec, seq_tokens, scalar_head: bool = False) -> np.ndarray:
    """FLOPs of one training pass (no recomputation) over sequences of ``seq_tokens`` tokens: three forwards (the
    forward, the inputs' and the weights' gradients); under ``layout.lora`` no frozen weight's gradient — one forward's
    matmul FLOPs less — and the adapters' forward and both gradients, ``3 x 2`` FLOPs per adapter parameter a token
    multiplies through (:mod:`oppo_sim.hw.models.lora`)."""
    n = np.asarray(seq_tokens, dtype=np.float64)
    flops = 3.0 * np.asarray(model.forward_flops(n, 0, scalar_head=scalar_head), dtype=np.float64).reshape(n.shape)
    if layout.lora is not None:
        flops = flops - (model.flop_coeffs(scalar_head)[0] - 6.0 * layout.lora.token_params(model)) * n
    return flops


def _weight_passes(cost) -> float:
    """Passes through the weights in a training micro-batch: forward, input and weight gradients (3), a recomputed
    forward too under full recomputation (4); one less under LoRA (no frozen weight's gradient)."""
    return (4.0 if cost.recompute == "full" else 3.0) - (1.0 if cost.layout.lora is not None else 0.0)


def _weight_reads(cost) -> float:
    """Times a training micro-batch reads the weights from memory: :func:`_weight_passes` less a recomputed forward."""
    return _weight_passes(cost) - (1.0 if cost.recompute == "full" else 0.0)


def _loads(cost, model: ModelSpec, ranks: int, seq_tokens, minibatches: int, scalar_head: bool) -> RankLoads:
    n = np.asarray(seq_tokens, dtype=np.float64)
    flops = pass_flops(cost.layout, model, n, scalar_head) + _recompute(cost, model, n, scalar_head)
    excess = expert_excess(cost, model, cost.micro.typical_tokens(n), scalar_head)
    if excess:  # the routed experts' grouped GEMMs, forward and backward (and the recomputed forward)
        flops = flops + excess * _weight_passes(cost) * model.flop_coeffs(scalar_head)[0] * n
    attn = 3.0 * model.pair_flops * n * (n + 1.0) / 2.0
    layout = cost.layout
    return rank_loads(n, flops, attn, ranks, minibatches, layout.balance_batch, cost.micro, layout.balance_order == "length")


def _recompute(cost, model: ModelSpec, n: np.ndarray, scalar_head: bool) -> np.ndarray:
    if cost.recompute == "full":
        return np.asarray(model.forward_flops(n, 0, scalar_head=scalar_head), dtype=np.float64).reshape(n.shape)
    if cost.recompute == "selective" and not cost.flash_attention:
        return model.pair_flops * n * (n + 1.0) / 2.0
    return np.zeros_like(n)


def fsdp_train_seconds(cost, model: ModelSpec, devices: int, seq_tokens, minibatches: int, scalar_head: bool) -> float:
    """One PPO epoch under FSDP / ZeRO (module notes)."""
    op, g, coll = cost.hw.params.train, cost.hw.gpu, cost.hw.params.collective
    sp = cost.sequence_parallel if devices % cost.sequence_parallel == 0 else 1
    loads = _loads(cost, model, devices // sp, seq_tokens, minibatches, scalar_head)
    params = model.params_scalar_head if scalar_head else model.params
    ep = cost.expert_parallel if model.moe else 1
    shared, experts = (x * model.dtype_bytes for x in expert_split(model, params, ep))
    w_read = shared + experts  # per device: all the shared weights, 1 / ep of the experts
    trains = cost.layout.trainable(model, scalar_head)  # the share that has gradients and Adam state (LoRA: the adapters)
    opt_rank = trains * (params / cost.layout.shard_ranks(devices) if cost.zero_stage >= 1 else params)  # whose Adam state a rank holds
    f = cost.layout.optimizer_offload
    nbytes = minibatches * (_weight_reads(cost) * w_read + OPTIMIZER_BYTES_PER_PARAM * opt_rank * (1.0 - f))
    compute = float(loads.flops.sum()) / (sp * g.peak_flops * op.eff_compute)
    micro = float(loads.micro_batches.sum())
    t = op.overhead_s * (micro + minibatches) + max(compute, nbytes / (g.mem_bw * op.eff_memory))
    ts, te = cost.layout.trainable_split(model, scalar_head)
    sync = cost.gradient_sync(shared, devices, ts * shared) + (
        cost.gradient_sync(experts, devices // ep, te * experts) if ep > 1 else 0.0)
    t += minibatches * (sync + cpu_optimizer_seconds(cost, opt_rank, devices))
    tokens_dev = loads.tokens / sp  # each device's tokens of the slowest group, per optimizer step
    if ep > 1:
        per_token = alltoall_bytes_per_token(model, ep)
        a2a = _lat(cost, "all-to-all", ep, devices) * 4 * model.moe_layers * micro
        t += a2a + 4 * model.moe_layers * float(tokens_dev.sum()) * per_token / (alltoall_bw(cost, ep, devices) * coll.eff_memory)
    if sp > 1:  # Ulysses: Q/K/V in and the output out, forward and backward, per layer and micro-batch
        width = (2 * model.attn_width + 2 * model.kv_width) * model.dtype_bytes
        bw = alltoall_bw(cost, sp, devices)
        t += (4 * model.layers * micro * _lat(cost, "all-to-all", sp, devices)
              + 2 * model.layers * float(tokens_dev.sum()) * width * (sp - 1) / sp / (bw * coll.eff_memory))
    return t


def megatron_train_seconds(cost, model: ModelSpec, devices: int, seq_tokens, minibatches: int, scalar_head: bool) -> float:
    """One PPO epoch under Megatron-Core on the slowest data-parallel rank of each optimizer step (module notes)."""
    lay, op, g, coll = cost.layout, cost.hw.params.train, cost.hw.gpu, cost.hw.params.collective
    tp, pp, cp, vpp = lay.tp, lay.pp, lay.cp, lay.vpp
    dp = lay.data_parallel(devices)
    ep = cost.expert_parallel if model.moe else 1
    loads = _loads(cost, model, dp, seq_tokens, minibatches, scalar_head)
    m = np.maximum(loads.micro_batches, 1.0)
    share = lay.stage_share(model.layers)  # the largest stage's share of the layers (1 / pp evenly)
    dense, routed = stage_params(model, pp, scalar_head, share)
    dense_rank, routed_rank = dense / tp, routed / (ep * lay.expert_tp)
    expert_dp = max(1, devices // (pp * ep * lay.expert_tp))
    w_rank = (dense_rank + routed_rank) * model.dtype_bytes
    td, tr = lay.trainable_split(model, scalar_head)  # the shares with gradients and Adam state (LoRA: the adapters)
    opt = td * dense_rank / (dp * cp if lay.distributed_optimizer else 1) + tr * routed_rank / (
        expert_dp if lay.distributed_optimizer else 1)
    head = loads.tokens * 2.0 * model.head_params(scalar_head) * _weight_passes(cost)  # the output layer, last stage
    compute = lay.stage_flops(model.layers, loads.flops, head) / (tp * cp * g.peak_flops * op.eff_compute)
    memory = (_weight_reads(cost) * w_rank * m + OPTIMIZER_BYTES_PER_PARAM * opt * (1.0 - lay.optimizer_offload)) / (g.mem_bw * op.eff_memory)
    stage = np.maximum(compute, memory)
    layers = lay.stage_layers(model.layers)
    tok_mb = loads.tokens / m / cp  # tokens of one micro-batch on one CP rank (the TP group's)
    dt = model.dtype_bytes
    if tp > 1:
        calls = (8 + (4 if cost.recompute == "full" else 0)) * layers * m
        bus = (tp - 1) / tp * tok_mb * model.hidden * dt
        stage = stage + calls * collective_seconds(coll, bus, ring_bw(cost, tp, devices), "all-gather", tp,
                                                    group_nodes(cost, tp, devices))
    if cp > 1:
        bw = group_bw(cost, tp * cp, devices)
        kv = (cp - 1) * tok_mb * 2 * model.kv_width * dt / tp  # one forward's ring passes per layer
        ring = layers * m * (3 * (cp - 1) * coll.overhead_s + 3 * kv / (bw * coll.eff_memory))
        attn = loads.attn_flops * share / (tp * cp * g.peak_flops * op.eff_compute)
        stage = stage + np.maximum(0.0, ring - attn)
    if ep > 1:  # dispatch and combine, forward and backward
        stage = stage + 2 * model.moe_layers * share * m * _exchange_seconds(cost, model, ep, devices, tok_mb / tp)
    stage = with_host(cost, model, stage, m, ep, train=True) + op.overhead_s * m
    if pp > 1:
        bw = group_bw(cost, devices, devices)  # neighbours devices / pp apart: across whenever the pool spans domains
        act = tok_mb / tp * model.hidden * dt
        stage = stage + 2 * vpp * m * (coll.overhead_s + act / (bw * coll.eff_memory))
        stage = stage * (1.0 + (pp - 1) / (vpp * m))
    stage_span = devices // pp  # a stage's data-parallel groups, one per model-parallel rank, side by side
    nodes = group_nodes(cost, devices, devices)  # the data-parallel group is strided over the whole pool
    sync = allreduce_seconds(coll, td * dense_rank * dt, dp * cp, ring_bw(cost, stage_span, devices, stride=tp), nodes)
    if ep > 1:
        stride = ep * lay.expert_tp
        sync += allreduce_seconds(coll, tr * routed_rank * dt, expert_dp, ring_bw(cost, stage_span, devices, stride=stride), nodes)
    return float(np.sum(stage)) + minibatches * (sync + op.overhead_s + cpu_optimizer_seconds(cost, opt, devices))


def forward_ranks(cost, devices: int) -> int:
    """Data-parallel ranks a forward-only pass (log-probs, reference, reward, values) is dealt over on a
    pool of ``devices`` GPUs priced by ``cost``: ``devices / (tp · pp · cp)`` under Megatron, ``devices /
    sp`` under FSDP with sequence parallelism, else every device."""
    if cost.layout.megatron and devices % cost.layout.model_parallel == 0:
        return devices // cost.layout.model_parallel
    sp = cost.sequence_parallel
    return devices // sp if sp > 1 and devices % sp == 0 else devices


def scorer_batch_scale(cost, devices: int) -> int:
    """How many ``scorer_max_tokens`` batches one scorer forward over ``devices`` GPUs takes: one per
    data-parallel rank (:func:`forward_ranks`), and under Megatron one per pipeline stage and model chunk as
    well (a pipeline schedule keeps ``pp · vpp`` micro-batches in flight; a forward charges its own fill and
    drain, so a pass split into several forwards pays them each time — an upper bound)."""
    lay = cost.layout
    return forward_ranks(cost, devices) * (lay.pp * lay.vpp if lay.megatron else 1)


def forward_seconds(cost, model: ModelSpec, devices: int, tokens: np.ndarray, flops: np.ndarray, nbytes: float,
                    head: float = 0.0) -> float:
    """Seconds of one batched forward-only pass over sequences of ``tokens`` new tokens costing ``flops`` each
    (``head`` a token the output layer's): dealt to the :func:`forward_ranks` data-parallel ranks as a training step's
    sequences are, the slowest rank's busiest pipeline stage's FLOPs over its model-parallel GPUs (or the weights and
    KV bytes per device, where slower), the fixed cost per micro-batch, under ``--ep`` each MoE layer's dispatch and
    combine per micro-batch, with Ulysses sequence parallelism its two all-to-alls per layer and micro-batch, and
    under Megatron the forward's TP collectives (two all-gathers and two reduce-scatters per layer and
    micro-batch), each micro-batch at least the host's time issuing it (:func:`with_host`), and the pipeline
    bubble ``(pp - 1) / (vpp · m)``."""
    op, g, coll = cost.hw.params.prefill, cost.hw.gpu, cost.hw.params.collective
    ranks = forward_ranks(cost, devices)
    split = devices // ranks
    if ranks > 1 and len(tokens) > 1:
        loads = rank_loads(tokens, flops, flops, ranks, 1, cost.layout.balance_batch, cost.micro_batch(True))
        slowest, rank_tokens, m = float(loads.flops[0]), float(loads.tokens[0]), max(float(loads.micro_batches[0]), 1.0)
    else:
        slowest, rank_tokens = float(np.sum(flops)), float(np.sum(tokens))
        longest = float(np.max(tokens)) if len(tokens) else 1.0
        m = max(float(cost.micro_batch(True).count(np.array([rank_tokens]), np.array([float(len(tokens))]), longest)[0]), 1.0)
    lay = cost.layout
    share = lay.stage_share(model.layers)  # the largest stage's share of the layers (1 / pp evenly)
    busiest = lay.stage_flops(model.layers, slowest, head * rank_tokens) * lay.pp  # pp == 1: all of them
    t = max(busiest / (split * g.peak_flops * op.eff_compute), nbytes / (devices * g.mem_bw * op.eff_memory))
    ep = cost.expert_parallel if model.moe else 1
    if ep > 1:  # each MoE layer's dispatch and combine, per micro-batch, of a model-parallel rank's tokens
        shard = lay.tp * lay.cp if lay.megatron else split
        t += model.moe_layers * share * m * _exchange_seconds(cost, model, ep, devices, rank_tokens / m / shard)
    if not lay.megatron:
        if split > 1:  # Ulysses: Q/K/V in and the output out, per layer and micro-batch
            width = (2 * model.attn_width + 2 * model.kv_width) * model.dtype_bytes
            bw = alltoall_bw(cost, split, devices)
            t += model.layers * (2 * m * _lat(cost, "all-to-all", split, devices) + rank_tokens / split * width * (split - 1) / split / (bw * coll.eff_memory))
        return t + op.overhead_s * m
    if lay.tp > 1:
        bus = (lay.tp - 1) / lay.tp * rank_tokens / m / lay.cp * model.hidden * model.dtype_bytes
        t += 4 * model.layers * share * m * collective_seconds(coll, bus, ring_bw(cost, lay.tp, devices), "all-gather",
                                                                lay.tp, group_nodes(cost, lay.tp, devices))
    t = float(with_host(cost, model, t, m, ep, train=False)) + op.overhead_s * m
    if lay.pp > 1:
        t *= 1.0 + (lay.pp - 1) / (lay.vpp * m)
    return t
