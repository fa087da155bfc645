"""A generation iteration priced as the sum of its kernels from measured fractions
(``oppo_sim.hw.costs.op_cost.OpCosts``), for ``costmodel.DecodeCost`` when the op costs come from tables.

An iteration over ``t`` tokens (``b`` decodes plus ``n`` chunked-prefill tokens) on one of the replica's
``tp`` GPUs costs

- dense GEMMs (attention projections, dense and shared-expert MLPs, LM head): the roofline of their
  weights at ``t`` tokens over the GEMM fraction at ``t``;
- grouped expert GEMMs (MoE layers): the roofline of the experts the tokens touch
  (``ModelSpec.touched_experts``), each computing at least a tile of ``MOE_BLOCK_TOKENS`` tokens, over the
  grouped-GEMM fraction at ``t * top_k / experts`` tokens per expert and the per-GPU expert width;
- paged decode attention: per layer, the measured fixed cost of a call at batch ``b`` plus the KV reads
  at the measured fraction of the bandwidth — a straight line in the cached tokens, so that the engine's
  closed-form spans stay closed-form; an MLA model's (absorbed, as vLLM runs it) per cached token at the
  measured MLA fraction of the larger of its FLOPs (``2·heads/tp·(2·kv_lora + rope)`` a layer) and its
  latent's bytes;
- prefill attention: its (query, key) pairs' FLOPs at the measured fraction for that chunk length.

The per-size results are cached per instance (one per model, GPU and layout); nothing is re-read.
"""

from __future__ import annotations

from oppo_sim.hw.devices.gpu_table import GPUSpec
from oppo_sim.hw.models.lookup import ModelSpec
from oppo_sim.hw.costs.op_cost import MOE_BLOCK_TOKENS, OpCosts

_LONG = 8192.0  # tokens at which a prefill attention runs at its long-sequence fraction


class DecodeKernels:
    """Kernel-sum prices of one model's generation iterations on a ``tp``-GPU replica."""

    def __init__(self, ops: OpCosts, model: ModelSpec, tp: int, expert_parallel: bool, gpu: GPUSpec):
        self.ops, self.model, self.tp = ops, model, tp
        self.peak, self.bw = gpu.peak_flops, gpu.mem_bw
        m = model
        expert_active = m.moe_layers * m.experts_per_token * m.expert_params if m.moe else 0
        self.dense_params = m.matmul_params - expert_active  # per token
        self.dense_bytes = m.weight_bytes() - (m.routed_expert_params * m.dtype_bytes if m.moe else 0)
        self.width = (m.moe_intermediate if expert_parallel else m.moe_intermediate / tp) if m.moe else 0.0
        self.kv_bytes = m.replica_kv_bytes_per_token(tp) / tp  # per cached token, on one GPU
        self._tok: dict[float, float] = {}
        self._att: dict[int, tuple[float, float]] = {}

    def _roof(self, flops: float, nbytes: float) -> float:
        return max(flops / (self.tp * self.peak), nbytes / (self.tp * self.bw))

    def experts_s(self, tokens: float) -> float:
        """Seconds of the grouped expert GEMMs of an iteration over ``tokens`` tokens (0 if dense)."""
        m = self.model
        if not m.moe or tokens <= 0:
            return 0.0
        touched = float(m.touched_experts(tokens))
        per_touched = max(tokens * m.experts_per_token / touched, MOE_BLOCK_TOKENS)
        flops = 2.0 * m.moe_layers * touched * per_touched * m.expert_params
        nbytes = m.moe_layers * touched * m.expert_params * m.dtype_bytes
        frac = self.ops.moe(tokens * m.experts_per_token / m.experts, self.width)
        return self._roof(flops, nbytes) / (frac if frac else self.ops.gemm(tokens))

    def tokens_s(self, tokens: float) -> float:
        """Seconds of all GEMMs (dense and grouped) of an iteration over ``tokens`` tokens."""
        got = self._tok.get(tokens)
        if got is None:
            dense = self._roof(2.0 * self.dense_params * tokens, self.dense_bytes) / self.ops.gemm(max(tokens, 1.0))
            got = self._tok[tokens] = dense + self.experts_s(tokens)
        return got

    def attention(self, batch: int) -> tuple[float, float]:
        """(fixed seconds, seconds per cached KV token) of the decode attention of ``batch`` sequences."""
        got = self._att.get(batch)
        if got is None:
            m = self.model
            measured = self.ops.decode_attention(batch) if batch > 0 else (0.0, 1.0)
            intercept, kv_frac = measured if measured else (0.0, 0.7)
            pre = self.ops.prefill_attention(_LONG) or 0.5
            per_kv = max(self.kv_bytes / (self.bw * kv_frac), m.pair_flops / (self.tp * self.peak * pre))
            mla = self.ops.mla_decode(batch) if m.mla and batch > 0 else None
            if mla:  # absorbed MLA: every head scores the latent and the rope key, then sums the latent
                flops = 2.0 * m.layers * m.heads / self.tp * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
                per_kv = max(flops / self.peak, self.kv_bytes / self.bw) / mla
            got = self._att[batch] = (m.layers * intercept if batch > 0 else 0.0, per_kv)
        return got

    def prefill_s(self, tokens: int, pairs: float, kv_prefill: float) -> float:
        """Seconds of the prefill attention of ``tokens`` chunked-prefill tokens with ``pairs`` (query, key)
        pairs over ``kv_prefill`` cached context tokens."""
        if tokens <= 0:
            return 0.0
        frac = self.ops.prefill_attention(tokens) or 0.5
        compute = self.model.pair_flops * pairs / (self.tp * self.peak * frac)
        return max(compute, self.kv_bytes * (kv_prefill + tokens) / self.bw)

    def iteration(self, decode_seqs: int, kv_decode: float, prefill_tokens: int, prefill_pairs: float,
                  kv_prefill: float) -> float:
        """Kernel seconds of one mixed iteration (no fixed overhead, no collectives)."""
        fixed, per_kv = self.attention(decode_seqs)
        return (self.tokens_s(float(decode_seqs + prefill_tokens)) + fixed + per_kv * (kv_decode + decode_seqs)
                + self.prefill_s(prefill_tokens, prefill_pairs, kv_prefill))

    def lines(self, b: int, kv0: float) -> tuple[float, float, float]:
        """(fixed, first-iteration KV seconds, KV seconds added per iteration) of pure-decode iterations of
        ``b`` sequences from KV ``kv0``: iteration ``i`` costs ``fixed + a + s * i``."""
        fixed, per_kv = self.attention(b)
        return self.tokens_s(float(b)) + fixed, per_kv * (kv0 + b), per_kv * b
