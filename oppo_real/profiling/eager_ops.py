"""How many ops an eager decode iteration issues from the host: the count that turns a measured eager iteration
into the host's seconds per op (``oppo_sim.hw.costs.eager.EAGER_HOST_OP_S``).

:func:`count_ops` runs a function under a ``TorchDispatchMode`` and counts every ATen op that reaches the
dispatcher below autograd, less the view ops (:data:`VIEW_OPS`: reshapes, transposes, slices — metadata only,
no kernel). What is left is one host dispatch each, and on a GPU at least one kernel launch each (an elementwise
op, a GEMM, the attention, a copy); a few launch two, a few (a scalar made on the host) none. The count is the
same on any device: the dispatch runs above the backend, so counting on the CPU counts what a GPU iteration of
the same code issues.

:func:`slot_decoder_ops` counts one eager iteration of the project's graph-captured decoder
(``oppo_real.backends.graph_decoder.SlotDecoder`` with CUDA graphs off — the ``decode-eager`` rows of a GPU
profile): ops per layer and ops outside the layers, from models of the same shape with two and three layers
(random weights; the counts do not depend on the weights or the layer count), extrapolated to the shape's layers.

:func:`host_op_points` / :func:`host_op_summary` turn eager decode iterations measured on a GPU into the host's
microseconds per op — wall time over ops, for the host-bound iterations only (kernels under
:data:`HOST_BOUND_SHARE` of the wall time) — what ``oppo-sim --host-op-us`` takes. ``oppo-real profile
--no-cuda-graphs`` on a GPU reports it (``host_op.csv``); ``paper_figs/eager_host_op.py`` made the default from
the H200's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

__all__ = ["VIEW_OPS", "HOST_BOUND_SHARE", "count_ops", "slot_decoder_ops", "host_op_points", "host_op_summary",
           "profile_host_op"]

VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "transpose", "t", "permute", "expand", "expand_as",
    "slice", "select", "narrow", "unsqueeze", "squeeze", "as_strided", "alias", "detach", "unbind", "split",
    "chunk", "view_as", "lift_fresh",
})
"""ATen ops that only make a new view of a tensor's storage: dispatched, but no kernel."""

HOST_BOUND_SHARE = 0.5
"""An eager iteration whose kernels ran under this share of its wall time is host-bound: its wall time is the host's."""


def count_ops(fn: Callable[[], Any]) -> Counter:
    """The non-view ATen ops ``fn()`` dispatches, by name (module notes)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name not in VIEW_OPS:
                self.ops[name] += 1
            return func(*args, **(kwargs or {}))

    with _Count() as mode:
        fn()
    return mode.ops


def slot_decoder_ops(config, batch: int = 8, kv: int = 128) -> tuple[int, int]:
    """(ops per layer, ops outside the layers) of one eager ``SlotDecoder`` decode iteration of ``batch``
    sequences at ``kv`` cached tokens, for a transformers ``config`` (its ``num_hidden_layers`` ignored)."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    from oppo_real.backends.graph_decoder import SlotDecoder

    def total(layers: int) -> int:
        cfg = copy.deepcopy(config)
        cfg.num_hidden_layers = layers
        if getattr(cfg, "layer_types", None):  # one attention type per layer (transformers 5)
            cfg.layer_types = [cfg.layer_types[0]] * layers
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
        dec = SlotDecoder(model, max(batch, 1), kv + 2, 1.0, cuda_graphs=False)
        tokens = torch.zeros(batch, dtype=torch.long)
        step = lambda: dec.decode(batch, tokens, list(range(batch)), [kv] * batch)  # noqa: E731
        step()  # the first call allocates the cache
        return sum(count_ops(step).values())

    two, three = total(2), total(3)
    per_layer = three - two
    return per_layer, two - 2 * per_layer


def host_op_points(rows, ops: int):
    """Per measured eager decode iteration (a frame with ``seconds`` and ``kernel_share``): the host microseconds per
    op, ``seconds / ops``; only the host-bound rows (``kernel_share`` under :data:`HOST_BOUND_SHARE`)."""
    if ops < 1:
        raise ValueError(f"ops per iteration must be >= 1, got {ops}")
    bound = rows[rows["kernel_share"] < HOST_BOUND_SHARE].copy()
    bound["ops"] = ops
    bound["host_us_per_op"] = bound["seconds"] * 1e6 / ops
    return bound


def host_op_summary(points) -> dict:
    """The median, min and max host microseconds per op over :func:`host_op_points` (empty: no host-bound point)."""
    us = points["host_us_per_op"]
    if us.empty:
        return {}
    return {"points": int(len(us)), "ops_per_iteration": int(points["ops"].iloc[0]), "median_us": round(float(us.median()), 1),
            "min_us": round(float(us.min()), 1), "max_us": round(float(us.max()), 1),
            "kernel_share_max": round(float(points["kernel_share"].max()), 3)}


def profile_host_op(table, config):
    """(points, summary) of a GPU profile's eager decode rows (``oppo-real profile --no-cuda-graphs``: ``op``
    "decode", ``seconds``, ``kernel_share``) for the decoder of transformers ``config``; the summary is empty
    where no row is host-bound."""
    rows = table[(table["op"] == "decode") & table["kernel_share"].notna()]
    per_layer, outside = slot_decoder_ops(config)
    points = host_op_points(rows, outside + config.num_hidden_layers * per_layer)
    return points, host_op_summary(points)
