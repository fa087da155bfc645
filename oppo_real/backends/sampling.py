"""Batched, per-request reproducible sampling for the torch decoders.

Every row of a batch is sampled in one set of tensor operations, whatever the batch size: Gumbel-max,
``argmax(logits / T + G)`` with ``G = -log(-log(U))``, which draws exactly from ``softmax(logits / T)``.
The uniforms ``U`` are counter-based — a hash of (the request's seed, the token's absolute position in
its sequence, the vocabulary index) — instead of a generator per request, so

- a request's tokens do not depend on which other requests share the batch, nor on the batch's order;
- a request paused and resumed as prompt + tokens so far (or generated in calls of C tokens) draws the
  same noise at the same positions as one left to run;
- the kernel count of a step does not grow with the batch: the per-row ``torch.multinomial`` with a
  per-request ``torch.Generator`` that this replaces cost ~18 kernel launches per row, most of a
  128-row decode iteration's launches on an H100 (``paper_figs/out/gpu_decode.csv``).

The uniforms have 24 random bits (``U`` in [2^-25, 1 - 2^-25]), which truncates the Gumbel noise to
about [-2.9, 17.3]: a token whose probability is below ~1e-7 of the top token's can never be drawn.
"""

from __future__ import annotations

import functools

import torch

_MASK32 = 0xFFFFFFFF
_M1, _M2 = 0x7FEB352D, 0x5BD1E995  # odd multipliers below 2**31: a product with a 32-bit value fits int64


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift / multiply rounds) of int64 tensors holding values < 2**32."""
    x = x ^ (x >> 16)
    x = (x * _M1) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _M2) & _MASK32
    return x ^ (x >> 16)


@functools.lru_cache(maxsize=8)
def _vocab_keys(vocab: int, device: torch.device) -> torch.Tensor:
    """The vocabulary's hashed indices: the same every step, so made once per (vocabulary, device)."""
    return _mix(torch.arange(vocab, device=device, dtype=torch.long) * 2 + 1)


def uniforms(seeds: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[rows, vocab]`` float32 uniforms in (0, 1), a pure function of (seed, position, vocabulary index)."""
    row = _mix(_mix(seeds.long() & _MASK32) ^ (positions.long() & _MASK32))  # [rows]
    col = _vocab_keys(vocab, seeds.device)  # [vocab]
    bits = _mix(row[:, None] ^ col[None, :]) >> 8  # 24 bits
    return (bits.float() + 0.5) * (1.0 / (1 << 24))


def sample(logits: torch.Tensor, temperature: float, seeds: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token of every row and its log-probability under the raw logits (``log_softmax`` of the
    unscaled logits, as vLLM reports). ``temperature == 0``: greedy. ``seeds``/``positions``: ``[rows]``
    integer tensors on the logits' device (the request's seed, the absolute position being sampled)."""
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    if temperature == 0.0:
        tok = torch.argmax(logits, dim=-1)
    else:
        gumbel = -torch.log(-torch.log(uniforms(seeds, positions, logits.shape[-1])))
        tok = torch.argmax(logits / temperature + gumbel, dim=-1)
    return tok, logp.gather(1, tok.unsqueeze(1)).squeeze(1)


def row_keys(seeds: list[int], positions: list[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``seeds`` and ``positions`` tensors of a step's rows (one host-to-device copy)."""
    both = torch.tensor([seeds, positions], dtype=torch.long).to(device, non_blocking=True)
    return both[0], both[1]
