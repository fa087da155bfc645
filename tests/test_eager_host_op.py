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


def test_the_host_cost_per_op_is_a_command_line_setting_for_both_engines(tmp_path):
    from oppo_sim.cli import build_parser
    from oppo_sim.cli_setup import sim_config
    from oppo_sim.hw.fitting.profiles import resolve_hardware, save_profile

    parse = build_parser().parse_args
    cfg = sim_config(parse(["run", "--enforce-eager", "--host-op-us", "35"]))
    assert cfg.eager_host_op_s == pytest.approx(35e-6)
    static = sim_config(parse(["run", "--engine", "static", "--call-overhead", "0.5", "--host-op-us", "5"]))
    assert static.static_cost.host_op_s == pytest.approx(5e-6) and static.static_cost.call_overhead_s == 0.5
    assert sim_config(parse(["run", "--engine", "static"])).static_cost.host_op_s == HF_HOST_OP_S
    path = tmp_path / "p.json"  # a measured profile holds its host time; the flag still overrides it
    save_profile(resolve_hardware("h200"), path)
    assert sim_config(parse(["run", "--enforce-eager", "--profile", str(path), "--host-op-us", "30"])).eager_host_op_s == pytest.approx(30e-6)
    with pytest.raises(SystemExit):
        parse(["run", "--host-op-us", "-1"])


def test_a_gpu_profile_without_graphs_reports_the_hosts_cost_per_op(tmp_path):
    from types import SimpleNamespace

    from oppo_real.commands.profile_cmd import _host_op
    from oppo_real.profiling.eager_ops import profile_host_op

    cfg = TinyModelConfig().qwen2_config()
    cfg.save_pretrained(tmp_path / "actor")
    per_layer, outside = slot_decoder_ops(cfg)
    ops = outside + cfg.num_hidden_layers * per_layer
    table = pd.DataFrame({"op": ["decode"] * 4 + ["prefill"], "seconds": [ops * 20e-6, ops * 30e-6, ops * 25e-6, 1.0, 1.0],
                          "kernel_share": [0.2, 0.1, 0.3, 0.9, 0.1]})  # the 0.9 row is GPU-bound: not the host's
    points, summary = profile_host_op(table, cfg)
    assert len(points) == 3 and summary["median_us"] == 25.0 and summary["min_us"] == 20.0 and summary["ops_per_iteration"] == ops
    lines = []
    assert _host_op(table, SimpleNamespace(actor=tmp_path / "actor"), tmp_path, lines.append) == {"host_op_us": 25.0}
    assert "--host-op-us 25" in lines[0] and len(pd.read_csv(tmp_path / "host_op.csv")) == 3
    busy = table.assign(kernel_share=0.8)
    assert _host_op(busy, SimpleNamespace(actor=tmp_path / "actor"), tmp_path, lines.append) == {} and "not measured" in lines[-1]
