"""The padded KV cache of one static mini-batch (`TorchStaticActor`'s groups): a transformers
``DynamicCache`` over every row, rows left-padded to a common width, with the attention mask (1 = a real
token) and the token each row feeds next. Two operations change its shape: :func:`merge_rows` appends
freshly prefilled rows (left-padding whichever side is narrower) and :func:`select_rows` keeps a subset
of rows and trims the leading columns no kept row uses (exact: positions come from the mask)."""

from __future__ import annotations

import torch


def kv_layers(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer, each [rows, heads, columns, head_dim]."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_from(kvs: list[tuple[torch.Tensor, torch.Tensor]]):
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=kvs)


def lpad(t: torch.Tensor, n: int, dim: int = 2) -> torch.Tensor:
    """``t`` with ``n`` zero columns prepended along ``dim`` (KV: [batch, heads, seq, dim]; mask: dim 1)."""
    if n <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = n
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)


def merge_rows(cache, mask: torch.Tensor, last: torch.Tensor, new_cache, new_mask: torch.Tensor,
               new_last: torch.Tensor):
    """The cache, mask and next tokens of the rows of (``cache``, ``mask``, ``last``) followed by the
    rows of (``new_cache``, ``new_mask``, ``new_last``), both left-padded to the wider width."""
    w, p = mask.shape[1], new_mask.shape[1]
    width = max(w, p)
    old = [(lpad(k, width - w), lpad(v, width - w)) for k, v in kv_layers(cache)]
    new = [(lpad(k, width - p), lpad(v, width - p)) for k, v in kv_layers(new_cache)]
    merged = cache_from([(torch.cat([a, c]), torch.cat([b, d])) for (a, b), (c, d) in zip(old, new)])
    return merged, torch.cat([lpad(mask, width - w, dim=1), lpad(new_mask, width - p, dim=1)]), torch.cat([last, new_last])


def select_rows(cache, mask: torch.Tensor, last: torch.Tensor, keep: list[int]):
    """Rows ``keep`` (non-empty) of the cache, mask and next tokens, without the leading columns that no
    kept row uses."""
    idx = torch.tensor(keep, device=mask.device)
    mask = mask.index_select(0, idx)
    lead = int(mask.any(dim=0).int().argmax())  # first column some remaining row uses
    kvs = [(k.index_select(0, idx)[:, :, lead:], v.index_select(0, idx)[:, :, lead:]) for k, v in kv_layers(cache)]
    return cache_from(kvs), mask[:, lead:], last.index_select(0, idx)
