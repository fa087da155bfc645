"""What a vLLM engine holds on each device besides its KV cache, as vLLM's memory profiling measures it before
it sizes the cache, and the KV blocks that leaves.

vLLM (``v1/worker/gpu_worker.py`` ``determine_available_memory``, ``utils/mem_utils.py`` ``memory_profiling``,
0.32) asks for ``requested = total × gpu_memory_utilization`` bytes per device — its own share: memory other
processes hold on the device is not inside it (vLLM refuses to start where less than that is free) — and
gives the KV cache ``requested − non_kv − cuda_graphs``, where ``non_kv`` is what the instance consumed
from its start to the end of a profile run (the weights, non-torch allocations: NCCL and custom all-reduce
buffers, cuBLAS workspaces) plus the profile run's transient peak, and ``cuda_graphs`` the graphs' memory
(estimated and subtracted by default since vLLM 0.21). The profile run (``profile_run``) is one forward of
``max_num_batched_tokens`` dummy tokens, then the sampler on ``min(max_num_seqs, max_num_batched_tokens)``
rows of full-vocabulary logits; the larger of the two is the transient peak.

- **Forward peak** (:func:`forward_peak_bytes`): the residual stream and the normalised hidden states
  (``2·h``, every rank), and the widest layer's intermediates sharded over ``tp``: the MLP's gate/up output
  and its activation (``3·I``; a MoE layer's top-k and shared experts' widths) or attention's Q/K/V and
  output, whichever is wider.
- **Sampler peak**: :data:`SAMPLER_BYTES_PER_LOGIT` bytes per row per vocabulary entry (the logits, their fp32
  copy, the top-k/top-p sort's values and indices, the probabilities).
- **CUDA graphs**: the graphs share one memory pool; it holds the largest captured batch's forward
  intermediates (vLLM captures up to ``min(2·max_num_seqs, 512)`` tokens by default).
- **Non-torch**: :data:`NON_TORCH_BYTES` per device, :data:`NON_TORCH_TP_BYTES` more under tensor parallelism.

The sampler and non-torch constants are measured: vLLM's own profiling lines on an H100 (79.18 GiB, util 0.9)
for Llama-3.1-8B, Qwen3-0.6B, Qwen3-32B and gpt-oss-20b (``llm-d/llm-d-benchmark``,
``config_explorer/empirical-vllm-memory-results.md``): peak activation 4.76, 5.56, 5.64 and 7.38 GiB with
``max_num_seqs`` 1024 — 38.4 to 38.9 bytes per logit for vocabularies of 128k to 201k, the forward peak of an
8192-token dummy batch (0.2 to 1.3 GiB for those models by the count above) being the smaller — and non-torch
0.13 to 0.14 GiB at TP1, 0.55 GiB at TP2. Those runs predate the CUDA-graph subtraction (their KV cache is exactly ``requested − weights −
peak − non-torch``). docs/model.md lists the checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.devices.hardware import GiB
from oppo_sim.hw.models.lookup import ModelSpec

SAMPLER_BYTES_PER_LOGIT = 38.7
"""Transient bytes of vLLM's dummy sampler run per row per vocabulary entry (measured, module notes)."""
NON_TORCH_BYTES = 0.13 * GiB
"""Non-torch memory a vLLM instance allocates per device from its start (measured at TP1, module notes)."""
NON_TORCH_TP_BYTES = 0.42 * GiB
"""More non-torch memory per device under tensor parallelism (NCCL, custom all-reduce; measured at TP2)."""
MAX_CUDAGRAPH_TOKENS = 512
"""vLLM's default largest CUDA-graph capture size: ``min(2 · max_num_seqs, 512)``."""


@dataclass(frozen=True)
class EngineMemory:
    """Bytes per device a vLLM engine holds besides its KV cache, by what vLLM's profiling counts."""

    weights: float
    activations: float  # the profile forward's transient peak
    sampler: float  # the dummy sampler run's transient peak
    cuda_graphs: float
    non_torch: float
    seq_state: float = 0.0  # a hybrid's constant per-sequence state (Mamba2 / linear attention), max_num_seqs of it

    @property
    def transient(self) -> float:
        """The profile run's transient peak: its forward or its sampler run, whichever is larger."""
        return max(self.activations, self.sampler)

    @property
    def overhead(self) -> float:
        """What the profiling takes besides the weights."""
        return self.transient + self.cuda_graphs + self.non_torch

    @property
    def non_kv(self) -> float:
        """Everything before the KV blocks: weights, the profiling's take and a hybrid's per-sequence state (set
        aside for ``max_num_seqs`` sequences — an upper bound: vLLM takes it per running sequence)."""
        return self.weights + self.overhead + self.seq_state

    def describe(self) -> str:
        return (f"profiled peak {self.transient / GiB:.2f} (forward {self.activations / GiB:.2f}, sampler "
                f"{self.sampler / GiB:.2f}), CUDA graphs {self.cuda_graphs / GiB:.2f}, non-torch {self.non_torch / GiB:.2f} GiB"
                + (f", sequence state {self.seq_state / GiB:.2f} GiB" if self.seq_state else ""))


def forward_peak_bytes(model: ModelSpec, tokens: int, tp: int = 1) -> float:
    """Transient bytes per device of one forward over ``tokens`` tokens (module notes)."""
    widest = max(3 * model.mlp_act_width, model.attn_act_width)
    return float(tokens * model.dtype_bytes * (2 * model.hidden + widest / tp))


def engine_memory(model: ModelSpec, tp: int, max_num_seqs: int, max_num_batched_tokens: int,
                  enforce_eager: bool = False) -> EngineMemory:
    """What vLLM's profiling takes per device before the KV cache for ``model`` over ``tp`` devices (no CUDA
    graphs under ``enforce_eager``)."""
    if tp < 1 or max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ConfigError(f"need tp, max_num_seqs and max_num_batched_tokens >= 1, got {tp}, {max_num_seqs}, "
                          f"{max_num_batched_tokens}")
    rows = min(max_num_seqs, max_num_batched_tokens)
    return EngineMemory(
        weights=model.weight_bytes() / tp,
        activations=forward_peak_bytes(model, max_num_batched_tokens, tp),
        sampler=SAMPLER_BYTES_PER_LOGIT * rows * model.vocab,
        cuda_graphs=0.0 if enforce_eager else forward_peak_bytes(model, min(2 * max_num_seqs, MAX_CUDAGRAPH_TOKENS), tp),
        non_torch=NON_TORCH_BYTES + (NON_TORCH_TP_BYTES if tp > 1 else 0.0),
        seq_state=max_num_seqs * model.mixer_state_bytes / tp,
    )


def kv_bytes_per_token_per_device(model: ModelSpec, tp: int) -> int:
    """KV bytes one token takes on each device of a ``tp``-way replica: the KV heads split over the ranks (each
    rank holds at least one: vLLM replicates KV heads where there are fewer than ranks); MLA's latent whole; a
    hybrid stack's attention layers only."""
    if model.mla:
        return model.kv_bytes_per_token()
    return 2 * model.full_attn_layers * math.ceil(model.kv_heads / tp) * model.hd * model.dtype_bytes


def kv_blocks(kv_bytes: float, model: ModelSpec, tp: int, block_size: int) -> int:
    """KV-cache blocks in ``kv_bytes`` per device, as vLLM counts them (``num_gpu_blocks``, the null block
    included): ``kv_bytes // (block_size × bytes per token per device)``."""
    if kv_bytes <= 0:
        return 0
    return int(kv_bytes // (block_size * kv_bytes_per_token_per_device(model, tp)))
