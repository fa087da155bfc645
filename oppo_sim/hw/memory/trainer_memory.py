"""Memory per rank of a Megatron-Core trainer (``TrainerLayout.backend == "megatron"``): the training state
of one pipeline stage's tensor-parallel shard, and the activations its in-flight micro-batches keep.

**State** (Megatron-LM's distributed-optimizer notes, ``docs/source/api-guide/dist_optimizer.md``: bf16
parameters with fp32 main gradients take ``6 + 12/d`` bytes per parameter with the distributed optimizer
over ``d`` data-parallel ranks, 18 without): per rank, ``2`` bytes of weights and ``4`` of fp32 gradients
per parameter it holds, and ``12`` of Adam state (fp32 master, momentum, variance) divided by the
data-parallel ranks (with the context-parallel ones: Megatron shards it over ``dp · cp``) where
``distributed_optimizer`` is on. A rank holds ``1 / tp`` of its stage's dense parameters; a stage is
``1 / pp`` of the decoder layers, plus the input embedding on the first stage and the output layer on the
last (both on the one stage where ``pp == 1``; a tied embedding is kept on both ends, as Megatron does).
The routed experts are split over ``ep`` ranks and each over ``etp`` (``TrainerLayout.expert_tp``: Megatron's
``expert_tensor_parallel_size``, unset ``tp``; 1 in the RL frameworks' MoE recipes). Their Adam state is sharded
over the expert-data-parallel ranks ``devices / (pp · ep · etp)``.

**Activations** use :mod:`oppo_sim.hw.memory.train_memory`'s per-token, per-layer count (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", adapted to the Llama/Qwen layers), with
their result for tensor parallelism with sequence parallelism: every stored tensor is split over the
``tp`` ranks (``s·b·h·(34 + 5·a·s/h) / t`` per layer in the paper's GPT form); context parallelism splits
the tokens over ``cp``. Full recomputation keeps each layer's input (``2·s·b·h / t``) plus one layer being
rebuilt. The pipeline's first stage holds the most (Megatron's 1F1B schedule,
``megatron/core/pipeline_parallel/schedules.py``): ``pp - 1`` warm-up micro-batches plus the one running,
each of ``L / pp`` layers, i.e. ``L`` layers' worth (``min(pp, m)`` micro-batches where a step has only
``m``); interleaved with ``vpp`` model chunks, ``2·(pp - 1) + (vpp - 1)·pp`` warm-up chunk passes plus one,
each of ``L / (pp · vpp)`` layers: ``L·(1 + (pp - 1) / (pp · vpp))`` (the paper's sec. 4.2.3). The last
stage holds one micro-batch of its layers plus the output layer's (vocabulary-parallel: ``/ tp``); the
larger of the two ends is the rank's peak.

Not modelled: the embedding's activations, Megatron's communication buffers (grad buckets, the
all-to-all dispatcher's permutation buffers), and the ends of an uneven layer split apart from its largest stage
(``TrainerLayout.stage_layers``: the first and the last stage are taken at its size, an upper bound).
"""

from __future__ import annotations

import math

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.memory.train_memory import (ADAM_BYTES, RECOMPUTE_MODES, WEIGHT_BYTES, StateBytes, head_activation_bytes,
                                layer_activation_bytes_per_token)
from oppo_sim.hw.models.model_spec import ModelSpec
from oppo_sim.hw.costs.trainer_layout import TrainerLayout

__all__ = ["MAIN_GRAD_BYTES", "stage_params", "megatron_state_bytes", "inflight_layers",
           "megatron_activation_bytes", "micro_batches_bound"]

MAIN_GRAD_BYTES = 4
"""Megatron accumulates gradients in fp32 ``main_grad`` buffers (the ``6 + 12/d`` of its notes)."""


def stage_params(model: ModelSpec, pp: int, scalar_head: bool = False, share: float | None = None) -> tuple[float, float]:
    """(dense parameters, routed-expert parameters) of the largest pipeline stage: ``share`` of the decoder layers
    (``TrainerLayout.stage_layers`` over the layers; None: ``1 / pp``) plus the larger end (embedding on the first
    stage, output layer on the last; both where ``pp == 1``; a tied or scalar head counts as the embedding's copy or a
    ``hidden``-wide vector)."""
    share = 1.0 / pp if share is None else share
    emb = model.vocab * model.hidden
    total = model.params_scalar_head if scalar_head else model.params
    last = model.head_params(scalar_head)  # what the last stage holds (a tied head: its own copy)
    in_total = 0 if model.tied_embeddings and not scalar_head else last  # the head as `total` counts it
    routed = model.routed_expert_params
    layers = total - emb - in_total - routed
    ends = emb + in_total if pp == 1 else max(emb, last)
    return layers * share + ends, routed * share


def megatron_state_bytes(model: ModelSpec, layout: TrainerLayout, ep: int, devices: int,
                         scalar_head: bool = False, trains: tuple[float, float] = (1.0, 1.0)) -> StateBytes:
    """Weights, fp32 gradients and Adam state per rank of the largest stage (module notes); ``trains``: the share of
    the dense and of the routed parameters that train (LoRA's adapters), which the gradients and Adam state scale by."""
    dp = layout.data_parallel(devices)
    dense, routed = stage_params(model, layout.pp, scalar_head, layout.stage_share(model.layers))
    ep = ep if model.moe else 1
    etp = layout.expert_tp
    dense_rank, routed_rank = dense / layout.tp, routed / (ep * etp)
    shard = layout.distributed_optimizer
    expert_dp = max(1, devices // (layout.pp * ep * etp))
    td, tr = trains
    return StateBytes(
        weights=WEIGHT_BYTES * (dense_rank + routed_rank),
        grads=MAIN_GRAD_BYTES * (td * dense_rank + tr * routed_rank),
        optimizer=ADAM_BYTES * (td * dense_rank / (dp * layout.cp if shard else 1) + tr * routed_rank / (expert_dp if shard else 1)),
    )


def inflight_layers(layers: int, pp: int, vpp: int, micro_batches: int) -> float:
    """Layers' worth of one micro-batch's activations the first pipeline stage holds at its peak, with
    ``micro_batches`` per optimizer step (module notes: ``L`` for 1F1B with ``m >= pp``, ``L·(1 + (pp-1)/(pp·vpp))``
    interleaved)."""
    if pp < 1 or vpp < 1 or micro_batches < 1:
        raise ConfigError(f"inflight_layers: pp, vpp and micro_batches must be >= 1, got {pp}, {vpp}, {micro_batches}")
    if pp == 1:
        return float(layers)
    chunk = layers / (pp * vpp)
    if vpp == 1:
        return chunk * min(pp, micro_batches)
    return chunk * min(2 * (pp - 1) + (vpp - 1) * pp + 1, micro_batches * vpp)


def megatron_activation_bytes(model: ModelSpec, layout: TrainerLayout, tokens: int, seq_len: int, recompute: str,
                              micro_batches: int, flash_attention: bool = True, scalar_head: bool = False,
                              response_tokens: int | None = None, full_logits: bool = False) -> float:
    """Activation bytes per rank for micro-batches of ``tokens`` tokens (sequences of up to ``seq_len``),
    ``micro_batches`` of them per optimizer step per data-parallel rank: the larger of the first stage
    (its in-flight micro-batches) and the last (one micro-batch and the output layer), split over
    ``tp · cp`` (module notes)."""
    if recompute not in RECOMPUTE_MODES:
        raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    split = layout.tp * layout.cp
    s = min(seq_len, tokens)
    stored = "flash" if flash_attention else "eager"
    core = stored if recompute == "none" or flash_attention else "recomputed"
    per_layer = layer_activation_bytes_per_token(model, s, core)
    rebuilt = layer_activation_bytes_per_token(model, s, stored)
    kept = model.dtype_bytes * model.hidden if recompute == "full" else per_layer

    def body(layers: float) -> float:
        one = rebuilt if recompute == "full" else 0.0
        return tokens * (layers * kept + one) / split

    stage = layout.stage_layers(model.layers)  # an uneven split's ends taken at its largest stage (an upper bound)
    first = body(inflight_layers(stage * layout.pp, layout.pp, layout.vpp, micro_batches))
    resp = tokens if response_tokens is None else response_tokens
    head = head_activation_bytes(model, tokens, resp, scalar_head, full_logits) / split
    last = body(stage) + head
    return max(first, last) if layout.pp > 1 else first + head


def micro_batches_bound(sequences: int, minibatches: int, data_parallel: int) -> int:
    """Micro-batches per optimizer step per data-parallel rank at most: one sequence each (a micro-batch
    holds at least one), ``ceil(sequences / (minibatches · dp))``."""
    return max(1, math.ceil(sequences / (minibatches * data_parallel)))

