"""The host's seconds per eager op is a measurement, not a guess: the op counter counts what an eager decode
iteration dispatches (views excluded, every layer the same), and the simulator's constant is the committed H200
measurement's median (``paper_figs/eager_host_op.py``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from oppo_real.models.tiny import TinyModelConfig
from oppo_real.profiling.eager_ops import VIEW_OPS, count_ops, slot_decoder_ops
from oppo_sim.engine.static_params import HF_HOST_OP_S
from oppo_sim.hw.costs.eager import EAGER_HOST_OP_S

torch = pytest.importorskip("torch")
H200 = Path(__file__).resolve().parents[1] / "paper_figs" / "out" / "gpu_h200"


def test_count_ops_counts_kernels_not_views():
    x = torch.ones(4, 6)
    ops = count_ops(lambda: (x.view(6, 4).t() * 2 + 1).sum())
    assert dict(ops) == {"mul": 1, "add": 1, "sum": 1}
    assert not VIEW_OPS & set(ops)


def test_a_decoder_layer_issues_the_same_ops_whatever_the_batch_and_context():
    cfg = TinyModelConfig().qwen2_config()
    per_layer, outside = slot_decoder_ops(cfg, batch=2, kv=8)
    # norm (8) x 2, q/k/v with bias, rotary on q and k, two KV writes, attention, o, MLP (gate, up, SiLU, mul, down),
    # two residual adds: ~40 ops a layer; the embedding, rotary tables, mask, final norm, head and sampler outside
    assert 35 <= per_layer <= 50 and 40 <= outside <= 120
    assert slot_decoder_ops(cfg, batch=4, kv=30) == (per_layer, outside)


def test_the_simulator_prices_eager_ops_at_the_measured_median():
    summary = pd.read_csv(H200 / "eager_host_op_summary.csv").iloc[0]
    points = pd.read_csv(H200 / "eager_host_op.csv")
    assert len(points) == summary["points"] >= 10
    assert points["kernel_share"].max() < 0.5  # host-bound: wall time over ops is the host's
    assert EAGER_HOST_OP_S == pytest.approx(round(float(summary["median_us"])) * 1e-6)
    assert HF_HOST_OP_S == EAGER_HOST_OP_S
