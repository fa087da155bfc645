"""`SlotDecoder`: the forward passes of a transformers causal LM (Qwen2, Qwen3 or Llama architecture) over a
KV cache allocated once, with every decode iteration replayed as a CUDA graph on a GPU — what makes the
torch engine GPU-bound rather than bound by Python launching kernels (`torch_graph` drives it).

**KV cache: static slots.** One ``[slots, kv_heads, max_len, head_dim]`` tensor per layer for keys and one
for values, allocated at the first forward and never resized. Sequence ``i`` of the running batch owns
slot ``i``: the live sequences always fill slots ``0..n-1`` (when one leaves, the last one's KV is copied
into its hole: :meth:`SlotDecoder.move`), so a decode iteration reads the cache as a plain view
``[:bucket, :, :L]`` — no block-table gather, and PyTorch's own scaled-dot-product attention runs on it
directly. Paged blocks (vLLM) save the memory of sequences shorter than ``max_len`` and share prefixes, but
PyTorch has no paged-attention kernel: gathering the blocks each iteration would read the KV twice. For
RL rollouts (a known number of sequences, each up to a known length) static slots cost
``slots x max_len`` tokens of KV (what :meth:`SlotDecoder.kv_bytes` reports) and nothing per iteration.

**Decode** (:meth:`SlotDecoder.decode`): one token for each of the first ``n`` slots. The batch is padded
to a *batch bucket* (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, ... up to ``slots``; padded rows feed token 0 at
position 0 into free slots and are ignored) and attention reads a *length bucket* of the cache (the
smallest power of two from 64 that holds the longest sequence, or ``max_len``), masked per row to its
own positions — so attention costs what the context costs, within 2x. Sampling happens inside the same
pass (`backends.sampling`: counter-based Gumbel-max, no host sync, shapes fixed by the bucket). With
``cuda_graphs`` on a CUDA device each (batch bucket, length bucket) is captured once, at its first use,
into one shared memory pool (as vLLM and gpt-fast do) and replayed afterwards: one graph launch per
iteration instead of hundreds of kernel launches (:meth:`SlotDecoder.capture_all` captures them all at
warm-up instead). The inputs go through fixed buffers: one host-to-device
copy per iteration (positions and seeds) and one copy back (tokens and log-probs).

**Prefill** (:meth:`SlotDecoder.prefill`): the whole contexts of new sequences, right-padded to the
longest, in one eager forward with causal ``scaled_dot_product_attention`` (flash / memory-efficient
kernels on a GPU; right padding needs no mask: a real token never sees the padding after it); keys and
values are written into the sequences' slots.

Elsewhere (the CPU, or ``cuda_graphs=False``) the very same functions run eagerly, so the CPU tests check
the code a GPU replays. Queries of the heads sharing a KV head attend together (grouped-query attention
without repeating the KV). Weights stay the model's own parameters: copying new weights into them in
place keeps the captured graphs valid.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from oppo_real.backends.sampling import sample
from oppo_sim.core.errors import ConfigError

_MIN_LEN_BUCKET = 64


def batch_buckets(slots: int) -> tuple[int, ...]:
    """The batch sizes a decode iteration is padded to: 1, 2, 4, 8, then x1.5 / x1.33 steps (12, 16, 24,
    32, 48, 64, 96, ...), the last one ``slots``."""
    out, b = [], 1
    while b < slots:
        out.append(b)
        b = b * 2 if b < 8 else (b * 3 // 2 if (b & (b - 1)) == 0 else b * 4 // 3)
    return tuple(out) + (slots,)


def bucket_of(n: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket holding ``n``."""
    for b in buckets:
        if b >= n:
            return b
    raise ConfigError(f"{n} exceeds the largest bucket {buckets[-1]}")


def length_buckets(max_len: int) -> tuple[int, ...]:
    """Attention lengths: powers of two from 64 below ``max_len``, then ``max_len``."""
    out, b = [], _MIN_LEN_BUCKET
    while b < max_len:
        out.append(b)
        b *= 2
    return tuple(out) + (max_len,)


class SlotDecoder:
    """Prefill and decode of ``model`` over ``slots`` static KV slots of ``max_len`` positions each."""

    def __init__(self, model: torch.nn.Module, slots: int, max_len: int, temperature: float, cuda_graphs: bool = True) -> None:
        if slots < 1 or max_len < 2:
            raise ConfigError(f"SlotDecoder needs slots >= 1 and max_len >= 2, got {slots} and {max_len}")
        self.model = model
        inner = model.model
        self.layers = list(inner.layers)
        attn = self.layers[0].self_attn
        cfg = model.config
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(attn, "head_dim", None) or cfg.hidden_size // self.heads
        self.scale = float(getattr(attn, "scaling", self.head_dim ** -0.5))
        self.slots, self.max_len, self.temperature = slots, max_len, temperature
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.graphs_on = bool(cuda_graphs) and self.device.type == "cuda"
        self.buckets = batch_buckets(slots)
        self.len_buckets = length_buckets(max_len)
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self._graphs: dict[tuple[int, int], tuple] = {}
        self._pool = None
        self.captures = 0  # graphs captured so far (a counter for tests and logs)

    # ------------------------------------------------------------------ memory
    def allocate(self) -> None:
        """Allocate the KV cache (and the decode input buffers) if it is not allocated."""
        if self.k:
            return
        shape = (self.slots, self.kv_heads, self.max_len, self.head_dim)
        self.k = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.v = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self._rows = torch.arange(self.slots, device=self.device)
        self._tok_in = torch.zeros(self.slots, dtype=torch.long, device=self.device)
        self._keys_in = torch.zeros((2, self.slots), dtype=torch.long, device=self.device)  # seeds, positions

    def release(self) -> None:
        """Free the KV cache and the captured graphs (they point into it); both come back on next use."""
        self.k, self.v = [], []
        self._graphs.clear()
        self._pool = None

    def kv_bytes(self) -> int:
        return int(sum(t.numel() * t.element_size() for t in self.k + self.v))

    def move(self, src: list[int], dst: list[int], length: int) -> None:
        """Copy the first ``length`` positions of slots ``src`` into slots ``dst`` (all read before any is
        written, so the two may overlap)."""
        if not src:
            return
        s = torch.tensor(src, device=self.device)
        d = torch.tensor(dst, device=self.device)
        n = min(self.max_len, max(1, length))
        for t in self.k + self.v:
            t[d, :, :n] = t[s, :, :n]

    # ------------------------------------------------------------------ model pieces
    def _rope(self, pos: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin ``[..., head_dim]`` at positions ``pos`` (as transformers' rotary embedding)."""
        rot = self.model.model.rotary_emb
        freqs = pos[..., None].float() * rot.inv_freq.to(device=pos.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        scaling = getattr(rot, "attention_scaling", 1.0)
        return (emb.cos() * scaling).to(like.dtype), (emb.sin() * scaling).to(like.dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _qkv(self, layer, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Rotated queries, keys and values ``[batch, heads, seq, head_dim]`` of one layer."""
        a = layer.self_attn
        b, s, _ = h.shape
        q = a.q_proj(h).view(b, s, self.heads, self.head_dim)
        k = a.k_proj(h).view(b, s, self.kv_heads, self.head_dim)
        v = a.v_proj(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        if getattr(a, "q_norm", None) is not None:  # Qwen3
            q, k = a.q_norm(q), a.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin), v

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.model.model.norm(x))

    # ------------------------------------------------------------------ prefill
    @torch.no_grad()
    def prefill(self, first_slot: int, contexts: list[list[int]], seeds: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefill ``contexts`` into slots ``first_slot, first_slot + 1, ...``; sample each one's next token
        (at position ``len(context)``). Returns (tokens, log-probs) on the device."""
        self.allocate()
        n, width = len(contexts), max(len(c) for c in contexts)
        if first_slot + n > self.slots or width > self.max_len:
            raise ConfigError(f"prefill of {n} sequences up to {width} tokens does not fit {self.slots} slots of {self.max_len}")
        ids = torch.zeros((n, width), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, :len(c)] = torch.tensor(c, dtype=torch.long)
        lens = [len(c) for c in contexts]
        keys = torch.tensor([seeds, lens], dtype=torch.long)
        ids, keys = ids.to(self.device), keys.to(self.device)
        pos = torch.arange(width, device=self.device).expand(n, width)
        x = self.model.model.embed_tokens(ids)
        cos, sin = self._rope(pos, x)
        for li, layer in enumerate(self.layers):
            h = layer.input_layernorm(x)
            q, k, v = self._qkv(layer, h, cos, sin)
            self.k[li][first_slot:first_slot + n, :, :width] = k
            self.v[li][first_slot:first_slot + n, :, :width] = v
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=self.kv_heads != self.heads)
            x = x + layer.self_attn.o_proj(o.transpose(1, 2).reshape(n, width, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        last = x[torch.arange(n, device=self.device), keys[1] - 1]  # each row's last real token
        return sample(self._logits(last), self.temperature, keys[0], keys[1])

    # ------------------------------------------------------------------ decode
    def _decode_fn(self, b: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode iteration of slots ``0..b-1`` over the input buffers, attending to ``length``
        positions; writes the new keys and values; samples the next tokens. No host sync, fixed shapes."""
        tok, seeds, pos = self._tok_in[:b], self._keys_in[0, :b], self._keys_in[1, :b]
        rows = self._rows[:b]
        g = self.heads // self.kv_heads
        x = self.model.model.embed_tokens(tok).unsqueeze(1)  # [b, 1, hidden]
        cos, sin = self._rope(pos.unsqueeze(1), x)
        mask = (torch.arange(length, device=self.device)[None, :] <= pos[:, None])[:, None, None, :]  # [b,1,1,L]
        for li, layer in enumerate(self.layers):
            h = layer.input_layernorm(x)
            q, k, v = self._qkv(layer, h, cos, sin)
            self.k[li][rows, :, pos] = k[:, :, 0]
            self.v[li][rows, :, pos] = v[:, :, 0]
            qg = q.reshape(b, self.kv_heads, g, self.head_dim)  # the heads of one KV head attend together
            o = F.scaled_dot_product_attention(qg, self.k[li][:b, :, :length], self.v[li][:b, :, :length],
                                               attn_mask=mask, scale=self.scale)
            x = x + layer.self_attn.o_proj(o.reshape(b, 1, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return sample(self._logits(x[:, 0]), self.temperature, seeds, pos + 1)

    @torch.no_grad()
    def decode(self, n: int, tokens: torch.Tensor, seeds: list[int], positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One token for each of slots ``0..n-1``: ``tokens`` (``[n]``, on the device) are fed at
        ``positions`` (host ints); the next tokens are sampled at ``positions + 1``. Returns (tokens,
        log-probs), ``[n]`` each, on the device."""
        self.allocate()
        b = bucket_of(n, self.buckets)
        length = bucket_of(max(positions) + 1, self.len_buckets)
        keys = torch.zeros((2, b), dtype=torch.long)
        keys[0, :n] = torch.tensor(seeds, dtype=torch.long)
        keys[1, :n] = torch.tensor(positions, dtype=torch.long)
        self._keys_in[:, :b].copy_(keys.to(self.device, non_blocking=True))
        self._tok_in[:n].copy_(tokens)
        self._tok_in[n:b].zero_()
        if not self.graphs_on:
            tok, lp = self._decode_fn(b, length)
            return tok[:n], lp[:n]
        graph = self._graphs.get((b, length)) or self._capture(b, length)
        graph[0].replay()
        return graph[1][:n], graph[2][:n]

    def _capture(self, b: int, length: int) -> tuple:
        """Capture the decode iteration of bucket (b, length). The eager warm-up runs the current inputs
        (the same step the replay then repeats: its KV writes are idempotent)."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self._decode_fn(b, length)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        # thread_local: the other roles' threads (in-process workers) may allocate or synchronize meanwhile
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            tok, lp = self._decode_fn(b, length)
        self._graphs[(b, length)] = (graph, tok, lp)
        self.captures += 1
        return self._graphs[(b, length)]

    def capture_all(self, max_batch: int) -> int:
        """Capture every (batch bucket, length bucket) up to ``max_batch`` sequences now (a warm-up: no
        capture then falls inside a timed iteration). Only while no sequence holds a slot: the captures'
        warm-up runs write position 0 of the first slots. Returns the graphs captured (0 when eager)."""
        if not self.graphs_on:
            return 0
        self.allocate()
        self._tok_in.zero_()
        self._keys_in.zero_()
        before = self.captures
        for b in self.buckets[: self.buckets.index(bucket_of(min(max_batch, self.slots), self.buckets)) + 1]:
            for length in self.len_buckets:
                if (b, length) not in self._graphs:
                    self._capture(b, length)
        return self.captures - before

    def graph_count(self) -> int:
        return len(self._graphs)



def kv_bytes_per_token(model: torch.nn.Module) -> int:
    """Bytes of KV one token takes in every layer (keys and values)."""
    cfg = model.config
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    el = next(model.parameters()).element_size()
    return int(2 * cfg.num_hidden_layers * cfg.num_key_value_heads * hd * el)


def slots_for(model: torch.nn.Module, max_len: int, max_seqs: int, kv_bytes: float | None) -> int:
    """Slots of ``max_len`` positions: ``max_seqs``, or fewer where ``kv_bytes`` does not hold them."""
    if kv_bytes is None:
        return max_seqs
    fit = int(kv_bytes / (kv_bytes_per_token(model) * max_len) * (1 + 1e-9))
    if fit < 1:
        raise ConfigError(f"a KV cache of {kv_bytes / 2**30:.2f} GiB holds no sequence of {max_len} tokens")
    return max(1, min(max_seqs, fit))

