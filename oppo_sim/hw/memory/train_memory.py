"""Training memory per device, as engineers size RLHF jobs: weights, gradients and Adam states under ZeRO,
activations with and without recomputation.

**Training state** (ZeRO paper, Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", sec. 3.1 and 5): mixed-precision Adam holds ``2Ψ + 2Ψ + KΨ`` bytes for Ψ
parameters — bf16 weights, bf16 gradients, and K = 12 bytes of fp32 optimizer state (master weights,
momentum, variance). Over N data-parallel ranks ZeRO-1 shards the optimizer state (``4Ψ + 12Ψ/N``),
ZeRO-2 also the gradients (``2Ψ + 14Ψ/N``), ZeRO-3 also the weights (``16Ψ/N``).

**Activations** kept for the backward pass, per token per layer, in bytes (16-bit tensors). Megatron-LM
("Reducing Activation Recomputation in Large Transformer Models", Korthikanti et al. 2022, sec. 4.1)
counts ``s·b·h·(34 + 5·a·s/h)`` per layer for a GPT layer without recomputation; selective recomputation
(recompute the attention core: QK^T, softmax, attention over V) drops the ``5·a·s/h`` term, full
recomputation keeps only each layer's input ``2·s·b·h`` (plus one layer rebuilt at a time). Adapted
here to the Llama / Qwen layers of ``ModelSpec`` as Hugging Face models run them in PPO trainers:

- no dropout (RLHF fine-tuning runs with it off; the configs set ``attention_dropout = 0``): none of
  Megatron's dropout masks (``sbh`` each, ``as²b`` on the scores) nor the dropped-out scores (``2as²b``),
  so the ``5as²b`` becomes the softmax probabilities alone, ``2·a·s`` bytes per token (they serve both
  the softmax and the attention-over-V backward);
- grouped-query attention: K and V are ``kv_width`` wide, Q and the attention output ``attn_width``;
- SwiGLU instead of GeLU: gate, SiLU(gate), up and their product (four ``intermediate``-wide tensors)
  instead of GeLU's input and output;
- RMSNorm counted as Megatron counts LayerNorm (its input); the lm_head's inputs (the final norm's and
  the head's, bf16); a value head's output is 4 bytes per token;
- the log-probs and entropy PPO takes from the lm_head are computed **chunk-wise**, as RL trainers do
  at long contexts: verl's fused kernels (``actor_rollout_ref.model.use_fused_kernels``:
  ``FusedLinearForPPO``, chunks of 512 tokens, forward and backward recomputing each chunk's logits),
  Liger's fused linear cross-entropy, OpenRLHF / verl chunked entropy. Only one chunk's full-vocabulary
  logits exist at a time: :data:`LOGITS_CHUNK_TOKENS` (512, verl's chunk) tokens × ``14·V`` bytes (bf16
  logits, then fp32 logits, softmax and log-softmax: ``2 + 3·4`` bytes per vocabulary entry), plus a fp32
  log-prob and entropy per token (8 bytes). For Qwen2.5 (V = 152,064) that chunk is 1.0 GiB.
  ``TrainMemoryConfig.full_logits`` (``--full-logits``; verl with ``use_fused_kernels=False``, its default: a
  Hugging Face forward that returns ``logits``) charges instead bf16 logits for every token (``2·V`` bytes) and a
  fp32 log-prob and log-sum-exp per token: verl's ``logprobs_from_logits`` takes them with flash-attn's
  cross-entropy kernel, which keeps no fp32 copy of the logits and writes its gradient in place
  (``inplace_backward``; its fallback goes row by row) — the largest single term at long contexts (46 GiB of a
  162k-token sequence on Qwen2.5-7B). Until 2026-11-27 it also charged a fp32 log-softmax over the response
  tokens (``4·V`` bytes each), which refused verl's own 7B runs on H20 that verl ran without fused kernels;
- FlashAttention (the default in TRL, OpenRLHF and verl) never stores the ``s × s`` scores: it keeps a
  fp32 log-sum-exp per head (``4·a`` bytes per token) and recomputes the scores inside its backward
  kernel — it *is* selective recomputation, so with it ``selective`` changes neither memory nor time.

So per token per layer: ``b·(2h [norm inputs] + h + 2·attn_width + 2·kv_width [q/k/v input, Q, O, K, V]
+ h + 4·intermediate [MLP]) + core``, with ``core = 2·a·s`` (eager), ``4·a`` (flash) or 0 (recomputed).
A mixture-of-experts layer keeps the four tensors of each of the token's top-k experts and of the shared
experts (``ModelSpec.mlp_act_width``, averaged over dense and MoE layers; the router's logits and the
dispatch buffers are not counted); MLA keeps K and V per head after decompression and its two latents
(``ModelSpec.attn_act_width``).

**Compute cost of recomputation** (in ``oppo_sim.hw.costs.costmodel.CostModel.train``): selective adds the
attention core's forward FLOPs (eager attention only); full adds one forward pass (training FLOPs 3x ->
4x forward). Megatron measures ~2-4% for selective and ~30-40% for full; Baidu's RLHF article reports
selective recomputation with sequence parallelism halving activation memory for ~20% slower training.
Sequence parallelism enters only as ``TrainMemoryConfig.sequence_parallel``, a divisor of the activations
(Ulysses / ring attention over data-parallel ranks); its all-to-alls are timed in ``oppo_sim.hw.costs.trainer_cost``.

**Pools and phases** (who holds what when, the engine's and the trainer's shares of a device):
:mod:`oppo_sim.hw.memory.pool_memory`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.costs.micro_batches import MicroBatch
from oppo_sim.hw.models.lookup import ModelSpec

__all__ = [
    "WEIGHT_BYTES", "GRAD_BYTES", "ADAM_BYTES", "ZERO_STAGES", "RECOMPUTE_MODES", "LOGITS_CHUNK_TOKENS",
    "TrainMemoryConfig", "StateBytes", "state_bytes", "layer_activation_bytes_per_token",
    "head_activation_bytes", "activation_bytes", "forward_activation_bytes",
]

WEIGHT_BYTES = 2  # bf16 weights, bytes per parameter
GRAD_BYTES = 2  # bf16 gradients
ADAM_BYTES = 12  # K in the ZeRO paper: fp32 master weights + momentum + variance
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")
LOGITS_CHUNK_TOKENS = 512
"""Tokens whose full-vocabulary logits exist at once when log-probs and entropy are computed chunk-wise:
verl's ``FusedLinearForPPO`` default ``chunk_size`` (``verl/utils/experimental/torch_functional.py``)."""
LOGITS_CHUNK_BYTES_PER_ENTRY = 2 + 3 * 4  # bf16 logits, then fp32 logits, softmax, log-softmax


@dataclass(frozen=True)
class TrainMemoryConfig:
    """How the trainer holds its state. ``None`` for ``zero_stage`` or ``recompute`` means *auto*: the
    cheapest setting that fits (see :meth:`candidates`). ``micro_batch_tokens``: tokens per micro-batch
    (packed); ``None`` = one longest sequence — a sequence is never split across micro-batches, so a
    micro-batch holds at least one; ``micro_batch_size``, instead: sequences per micro-batch (a fixed count, as verl's
    ``ppo_micro_batch_size_per_gpu`` and OpenRLHF's ``micro_train_batch_size``). ``logprob_micro_batch_tokens`` /
    ``_size``: the same for the forward-only passes (the policy's log-probs, the reference, reward and value
    forwards); neither given: the training's (``oppo_sim.hw.costs.micro_batches``). ``sequence_parallel``: ranks a micro-batch's tokens are split over
    (DeepSpeed-Ulysses / ring attention, as OpenRLHF's ``--ring_attn_size`` and verl's
    ``ulysses_sequence_parallel_size``): activations per device shrink by it; its all-to-alls are timed
    (``oppo_sim.hw.costs.trainer_cost``). Only with it do prompts of ~100k tokens train on one GPU's memory. ``full_logits``: the
    lm_head's logits for every token are materialised (no chunked / fused log-prob kernel; module notes)."""

    zero_stage: int | None = None
    recompute: str | None = None
    flash_attention: bool = True
    micro_batch_tokens: int | None = None
    sequence_parallel: int = 1
    full_logits: bool = False
    logprob_micro_batch_tokens: int | None = None
    micro_batch_size: int | None = None
    logprob_micro_batch_size: int | None = None

    def __post_init__(self) -> None:
        z = self.zero_stage
        if z is not None and (isinstance(z, bool) or z not in ZERO_STAGES):
            raise ConfigError(f"zero_stage must be one of 0, 1, 2, 3 (or None for auto), got {z!r}")
        if self.recompute is not None and self.recompute not in RECOMPUTE_MODES:
            raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)} (or None for auto), got {self.recompute!r}")
        for name in ("flash_attention", "full_logits"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name, rule in (("micro_batch", (self.micro_batch_tokens, self.micro_batch_size)),
                           ("logprob_micro_batch", (self.logprob_micro_batch_tokens, self.logprob_micro_batch_size))):
            try:
                MicroBatch(*rule)
            except ConfigError as e:
                raise ConfigError(f"{name}_tokens / {name}_size: {e}") from None
        sp = self.sequence_parallel
        if isinstance(sp, bool) or not isinstance(sp, int) or sp < 1:
            raise ConfigError(f"sequence_parallel must be an integer >= 1, got {sp!r}")

    @property
    def micro(self) -> MicroBatch:
        """Training's micro-batch."""
        return MicroBatch(self.micro_batch_tokens, self.micro_batch_size)

    @property
    def forward_micro(self) -> MicroBatch:
        """The forward-only passes' own micro-batch (not given: the training's applies)."""
        return MicroBatch(self.logprob_micro_batch_tokens, self.logprob_micro_batch_size)

    @property
    def resolved(self) -> bool:
        return self.zero_stage is not None and self.recompute is not None

    def candidates(self) -> tuple["TrainMemoryConfig", ...]:
        """Resolved settings to try, cheapest first. Auto ZeRO tries 2 then 3 (stages 0 and 1 hold more
        at the same traffic; 3 adds a parameter all-gather, 1.5x the gradient traffic); auto recompute
        tries none, selective (eager attention only: with FlashAttention it equals none), full.
        Recomputation costs FLOPs on every token, ZeRO-3 only link traffic, so ZeRO-3 comes first."""
        stages = (self.zero_stage,) if self.zero_stage is not None else (2, 3)
        if self.recompute is not None:
            modes: tuple[str, ...] = (self.recompute,)
        else:
            modes = ("none", "full") if self.flash_attention else RECOMPUTE_MODES
        return tuple(replace(self, zero_stage=z, recompute=r) for r in modes for z in stages)

    def describe(self) -> str:
        z = "auto" if self.zero_stage is None else str(self.zero_stage)
        r = "auto" if self.recompute is None else self.recompute
        sp = f", sequence parallel {self.sequence_parallel}" if self.sequence_parallel > 1 else ""
        return (f"ZeRO-{z}, recompute {r}" + ("" if self.flash_attention else ", eager attention") + sp
                + (", full logits" if self.full_logits else ""))


@dataclass(frozen=True)
class StateBytes:
    """Training state per device, bytes."""

    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def state_bytes(params: int, devices: int, zero_stage: int) -> StateBytes:
    """Weights, gradients and Adam state per device for ``params`` parameters over ``devices``
    data-parallel ranks under ZeRO stage ``zero_stage`` (ZeRO paper: 2Ψ + 2Ψ + 12Ψ, sharded by stage)."""
    if zero_stage not in ZERO_STAGES:
        raise ConfigError(f"zero_stage must be one of 0, 1, 2, 3, got {zero_stage!r}")
    if devices < 1:
        raise ConfigError(f"devices must be >= 1, got {devices}")
    p, n = float(params), float(devices)
    return StateBytes(
        weights=WEIGHT_BYTES * p / (n if zero_stage >= 3 else 1.0),
        grads=GRAD_BYTES * p / (n if zero_stage >= 2 else 1.0),
        optimizer=ADAM_BYTES * p / (n if zero_stage >= 1 else 1.0),
    )


def layer_activation_bytes_per_token(model: ModelSpec, seq_len: int, core: str = "flash") -> float:
    """Bytes one decoder layer keeps for its backward pass, per token, in sequences of ``seq_len``
    tokens. ``core``: how the attention core is handled — ``eager`` (softmax probabilities stored,
    ``b·a·s``), ``flash`` (a fp32 log-sum-exp per head) or ``recomputed`` (nothing)."""
    b, h = model.dtype_bytes, model.hidden
    norms = 2 * h  # the two RMSNorm inputs
    attn = h + model.attn_act_width  # q/k/v input; Q and attention output; K and V (MLA: and its latents)
    mlp = h + 4 * model.mlp_act_width  # gate/up input; gate, SiLU(gate), up, product (MoE: top-k + shared experts')
    if core == "eager":
        extra = float(b * model.heads * seq_len)
    elif core == "flash":
        extra = 4.0 * model.heads
    elif core == "recomputed":
        extra = 0.0
    else:
        raise ConfigError(f"attention core must be eager, flash or recomputed, got {core!r}")
    return float(b * (norms + attn + mlp)) + extra


def head_activation_bytes(model: ModelSpec, tokens: int, response_tokens: int, scalar_head: bool = False,
                          full_logits: bool = False) -> float:
    """Bytes kept after the last layer for ``tokens`` tokens of which ``response_tokens`` are response:
    final-norm and head inputs (bf16) for every token; then, for a scalar (reward / critic) head, a fp32
    value per token; for an lm_head, one chunk's logits and a fp32 log-prob and entropy per token (the
    log-probs computed chunk-wise, module notes), or with ``full_logits`` bf16 logits for every token and a fp32
    log-prob and log-sum-exp per token (``2·V + 8``: flash-attn's cross-entropy, module notes)."""
    b = model.dtype_bytes
    base = float(tokens * 2 * b * model.hidden)
    if scalar_head:
        return base + 4.0 * tokens
    if full_logits:
        return base + float(tokens * b * model.vocab) + 8.0 * tokens
    chunk = min(tokens, LOGITS_CHUNK_TOKENS)
    return base + float(chunk * LOGITS_CHUNK_BYTES_PER_ENTRY * model.vocab) + 8.0 * tokens


def activation_bytes(model: ModelSpec, tokens: int, seq_len: int, recompute: str, flash_attention: bool = True,
                     scalar_head: bool = False, response_tokens: int | None = None, full_logits: bool = False) -> float:
    """Activation bytes per device for one micro-batch of ``tokens`` tokens in sequences of up to ``seq_len``
    tokens, ``response_tokens`` of them response (default: all); ``full_logits``: see
    :func:`head_activation_bytes`."""
    if recompute not in RECOMPUTE_MODES:
        raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}")
    s = min(seq_len, tokens)
    stored = "flash" if flash_attention else "eager"
    if recompute == "full":  # each layer's input, plus one layer rebuilt at a time during the backward
        body = model.layers * model.dtype_bytes * model.hidden + layer_activation_bytes_per_token(model, s, stored)
    else:
        core = stored if recompute == "none" or flash_attention else "recomputed"
        body = model.layers * layer_activation_bytes_per_token(model, s, core)
    resp = tokens if response_tokens is None else response_tokens
    return tokens * body + head_activation_bytes(model, tokens, resp, scalar_head, full_logits)


def forward_activation_bytes(model: ModelSpec, tokens: int, seq_len: int, flash_attention: bool = True,
                             scalar_head: bool = False, response_tokens: int | None = None, full_logits: bool = False) -> float:
    """Activation bytes per device of one forward-only micro-batch (a log-prob, reference, reward or value pass, no
    graph kept): one layer's working set at a time, then the head's (:func:`activation_bytes`' arguments)."""
    stored = "flash" if flash_attention else "eager"
    s = min(seq_len, tokens)
    resp = tokens if response_tokens is None else response_tokens
    return tokens * layer_activation_bytes_per_token(model, s, stored) + head_activation_bytes(
        model, tokens, resp, scalar_head, full_logits)
