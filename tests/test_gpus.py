"""The GPUs added for issue 18 (h20, h800, a800-80gb, b200, gb200, mi300x), the scale-up domain rule
("same NVLink domain", not "same node"), datasheet-only GPUs from YAML, and where a run's cost
parameters come from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from oppo_sim.cli import main
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.placement import disaggregated_placement, paper_placement
from oppo_sim.explore.space import PlanSpace, space_for
from oppo_sim.hw.devices.gpu_table import domain_gpus
from oppo_sim.hw.devices.gpu_yaml import KEYS, gpu_yaml_dict, load_gpu_yaml
from oppo_sim.hw.devices.hardware import DEFAULT_COST_PARAMS, GPUS, GiB, Hardware, MiB, OpParams, get_hardware
from oppo_sim.hw.fitting.profiles import resolve_hardware, save_profile
from oppo_sim.hw.costs.sync import SyncMechanism
from oppo_sim.pipeline.config import SimConfig
from oppo_sim.pipeline.fit_check import check_fits
from oppo_sim.pipeline.topology import cost_models, pool_domains, sync_plan

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpus" / "h20.yaml"
NEW = ("h20", "h800", "a800-80gb", "b200", "gb200", "mi300x")


# ------------------------------------------------------------------------------- the table's new entries
@pytest.mark.parametrize("gid", NEW)
def test_new_entries_are_sane(gid):
    g = GPUS[gid]
    assert 30 < g.ridge_flops_per_byte < 400  # dense bf16 FLOP per HBM byte: H20 37 ... GB200 312
    assert 75 * GiB < g.mem_bytes < 200 * GiB
    assert g.net_bw < g.link_bw < g.mem_bw  # NIC < scale-up link < HBM, per GPU one direction
    assert g.host_bw <= 450e9 and g.net_bw in (25e9, 50e9)  # PCIe or Grace C2C; a 200 or 400 Gb/s NIC per GPU
    assert "dense" in g.source and ("nvidia-smi" in g.source or "rocm-smi" in g.source)


@pytest.mark.parametrize("gid, vendor_figure, links", [
    ("h20", 900e9, 1),  # NVLink 4 "900 GB/s", both directions summed
    ("h800", 400e9, 1),  # NVLink cut to "400 GB/s"
    ("a800-80gb", 400e9, 1),
    ("b200", 1800e9, 1),  # NVLink 5 "1.8 TB/s"
    ("gb200", 1800e9, 1),
    ("mi300x", 128e9, 7),  # 7 Infinity Fabric links of "128 GB/s", one to each other GPU
])
def test_links_are_one_direction(gid, vendor_figure, links):
    assert GPUS[gid].link_bw == links * vendor_figure / 2


def test_export_variants_differ_from_their_parent_only_by_the_link():
    def core(g):
        return (g.peak_flops, g.mem_bw, g.mem_bytes, g.host_bw)

    assert core(GPUS["h800"]) == core(GPUS["h100-sxm"]) and GPUS["h800"].link_bw < GPUS["h100-sxm"].link_bw
    assert core(GPUS["a800-80gb"]) == core(GPUS["a100-80gb"]) and GPUS["a800-80gb"].link_bw < GPUS["a100-80gb"].link_bw
    assert GPUS["h20"].peak_flops < GPUS["h100-sxm"].peak_flops / 6 and GPUS["h20"].mem_bw > GPUS["h100-sxm"].mem_bw
    assert GPUS["gb200"].peak_flops > GPUS["b200"].peak_flops > 2 * GPUS["h200"].peak_flops


def test_memory_is_what_the_device_reports():
    assert GPUS["b200"].mem_bytes == 183_359 * MiB  # nvidia-smi; 180 GB on NVIDIA's sheet
    assert GPUS["gb200"].mem_bytes == 189_471 * MiB  # 186 GB
    assert GPUS["b300"].mem_bytes == 275_040 * MiB and GPUS["gb300"].mem_bytes == 284_208 * MiB  # 288 GB sold
    assert GPUS["mi300x"].mem_bytes == 192 * GiB  # rocm-smi 206,158,430,208 B


def test_domain_sizes():
    domains = {g.id: (g.nvlink_domain, g.domain_spans_nodes) for g in GPUS.values()}
    assert domains["gb200"] == domains["gb300"] == (72, True)
    assert all(domains[g] == (8, False) for g in ("h20", "h800", "a800-80gb", "b200", "b300", "mi300x", "h200", "a100-80gb"))
    assert all(domains[g] == (1, False) for g in ("l40s", "rtx-4090", "rtx-pro-6000"))
    assert [g for g, (_, spans) in domains.items() if spans] == ["gb200", "gb300"]


# ---------------------------------------------------------------------------- same NVLink domain, not same node
@pytest.mark.parametrize("gid, devices, nodes, block", [
    ("gb200", 16, 4, 72),  # 4 trays of 4 in one NVL72 rack: one block
    ("gb200", 144, 36, 72),  # two racks
    ("gb200", 16, 1, 64),  # one declared node of 16: four such nodes fit the 72-GPU domain
    ("b200", 16, 2, 8),  # HGX: the node
    ("h200", 8, 2, 4),  # nodes of 4 H200 are separate machines: the domain ends at each
    ("l40s", 8, 2, 4),  # PCIe peers: the node
    ("h100-sxm", 16, 1, 16),  # one declared node of 16 stays one fabric (historical behaviour)
])
def test_domain_gpus(gid, devices, nodes, block):
    assert domain_gpus(GPUS[gid], devices, nodes) == block


def _cfg(gpu, devices=16, nodes=4, **kw):
    return SimConfig(gpu=gpu, actor="qwen2.5-0.5b", reward="qwen2.5-0.5b", batch=8, steps=2,
                     placement=kw.pop("placement", paper_placement(devices)), nodes=nodes, **kw)


def test_sync_uses_nvlink_across_trays_of_one_nvl72_rack():
    assert sync_plan(_cfg("gb200")).mechanism is SyncMechanism.IPC  # generation on the training pool: in place
    dis = disaggregated_placement(8, 6, 2)  # gen on trays 0-1, train on trays 2-3
    assert sync_plan(_cfg("gb200", placement=dis)).mechanism is SyncMechanism.NVLINK
    assert sync_plan(_cfg("b200", devices=16, nodes=2, placement=dis)).mechanism is SyncMechanism.NETWORK
    two_racks = disaggregated_placement(72, 64, 8)  # gen fills rack 0, train sits on rack 1
    assert sync_plan(_cfg("gb200", placement=two_racks, nodes=36)).mechanism is SyncMechanism.NETWORK


def test_gradient_allreduce_stays_on_nvlink_inside_the_rack():
    for gpu, crosses in (("gb200", False), ("b200", True)):
        cfg = _cfg(gpu)
        assert pool_domains(cfg)["main"] == (frozenset({0}) if not crosses else frozenset({0, 1, 2, 3}))
        assert cost_models(cfg, check_fits(cfg))["main"].cross_node is crosses


def test_mixed_gpus_share_no_domain_past_the_node():
    dis = disaggregated_placement(8, 6, 2)
    pools = tuple(dataclasses.replace(p, gpu="b200" if p.name == "train" else None) for p in dis.pools)
    cfg = _cfg("gb200", placement=dataclasses.replace(dis, pools=pools))
    assert sync_plan(cfg).mechanism is SyncMechanism.NETWORK


def test_planner_tp_groups_may_span_the_rack_not_the_node():
    gb, hgx = (SimConfig(gpu=g, actor="qwen2.5-72b", reward="qwen2.5-0.5b", placement=paper_placement(16), nodes=4)
               for g in ("gb200", "b200"))
    assert space_for(gb, 16, 4).tp_choices(16) == (1, 2, 4, 8, 16)  # 64 heads, 8 KV heads
    assert space_for(hgx, 16, 4).tp_choices(16) == (1, 2, 4)  # a group may not leave its 4-GPU node
    assert space_for(hgx, 16, 4).domain == 4 and space_for(gb, 16, 4).domain == 72
    assert PlanSpace(devices=16, nodes=4, heads=(64, 8)).tp_choices(16) == (1, 2, 4)  # no domain given: a node
    with pytest.raises(ConfigError, match="whole number of nodes"):
        PlanSpace(devices=16, nodes=4, domain=6)


# ---------------------------------------------------------------------------------- datasheet-only YAML
def test_example_yaml_is_the_table_entry():
    hw = resolve_hardware(str(EXAMPLE))
    assert hw.gpu == GPUS["h20"]
    assert hw.params == DEFAULT_COST_PARAMS and hw.params_source.startswith("uncalibrated defaults")


@pytest.mark.parametrize("gid", list(GPUS))
def test_yaml_round_trip(gid, tmp_path):
    path = tmp_path / f"{gid}.yml"
    path.write_text(yaml.safe_dump(gpu_yaml_dict(GPUS[gid])))
    assert load_gpu_yaml(path).gpu == GPUS[gid]


def _write(tmp_path, **changes) -> Path:
    doc = {**yaml.safe_load(EXAMPLE.read_text()), **changes}
    path = tmp_path / "my gpu.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in doc.items() if v is not None}))
    return path


def test_yaml_defaults_memory_in_gib_and_efficiencies(tmp_path):
    path = _write(tmp_path, id=None, source=None, nvlink_domain=None, domain_spans_nodes=None, memory_mib=None,
                  memory_gib=95.5, efficiencies={"decode": {"eff_memory": 0.8}, "sync": {"overhead_s": 0.0}})
    hw = load_gpu_yaml(path)
    assert hw.gpu.id == "my-gpu" and hw.gpu.source == f"datasheet spec {path}"
    assert hw.gpu.mem_bytes == 95.5 * GiB and (hw.gpu.nvlink_domain, hw.gpu.domain_spans_nodes) == (8, False)
    assert hw.params.decode == OpParams(0.5, 0.8, 3e-3) and hw.params.sync == OpParams(1.0, 0.6, 0.0)
    assert hw.params.train == DEFAULT_COST_PARAMS.train
    assert "efficiencies for decode, sync" in hw.params_source


@pytest.mark.parametrize("changes, match", [
    ({"bf16_flops": 1}, "unknown key 'bf16_flops'"),
    ({"bf16_tflops": None}, "missing key 'bf16_tflops'"),
    ({"network_gb_s_per_direction": None}, "missing key 'network_gb_s_per_direction'"),
    ({"memory_bandwidth_gb_s": "4 TB/s"}, "'memory_bandwidth_gb_s' must be a number"),
    ({"link_gb_s_per_direction": -450}, "'link_gb_s_per_direction' must be a positive"),
    ({"host_gb_s_per_direction": True}, "'host_gb_s_per_direction' must be a number"),
    ({"memory_gib": 96}, "give only one of 'memory_mib', 'memory_gib'"),
    ({"memory_mib": None}, "give one of 'memory_mib', 'memory_gib'"),
    ({"nvlink_domain": 0}, "'nvlink_domain' must be an integer >= 1"),
    ({"domain_spans_nodes": "yes"}, "'domain_spans_nodes' must be true or false"),
    ({"id": "H 20"}, "lowercase-dashed"),
    ({"name": ""}, "'name' must be a non-empty string"),
    ({"efficiencies": {"generate": {"eff_memory": 0.5}}}, "unknown key 'efficiencies.generate'"),
    ({"efficiencies": {"decode": {"mfu": 0.5}}}, "unknown key 'efficiencies.decode.mfu'"),
    ({"efficiencies": {"decode": {"eff_memory": 1.5}}}, "'efficiencies.decode'.*eff_memory must be in"),
    ({"efficiencies": [0.5]}, "'efficiencies' must be a mapping"),
])
def test_yaml_errors_are_one_line_naming_file_and_key(tmp_path, changes, match):
    path = _write(tmp_path, **changes)
    with pytest.raises(ConfigError, match=match) as e:
        load_gpu_yaml(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("text, match", [
    ("bf16_tflops: [1, 2\n", "not valid YAML"),
    ("- 1\n- 2\n", "top level must be a mapping"),
])
def test_yaml_syntax_and_shape_errors(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        resolve_hardware(str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="file not found"):
        resolve_hardware(str(tmp_path / "missing.yml"))


def test_every_yaml_key_is_documented():
    from oppo_sim.hw.devices import gpu_yaml

    assert all(k in gpu_yaml.__doc__ for k in KEYS)


# ------------------------------------------------------------------------- where the parameters come from
def test_params_source(tmp_path):
    assert get_hardware("h200").params_source == "uncalibrated defaults"
    assert resolve_hardware("mi300x").label == "mi300x (uncalibrated defaults)"
    save_profile(get_hardware("h100-sxm"), tmp_path / "p.json")
    assert resolve_hardware(str(tmp_path / "p.json")).params_source == f"calibrated profile {tmp_path / 'p.json'}"
    assert Hardware(GPUS["h200"], params_source="x") == get_hardware("h200")  # not part of the device's identity
    with pytest.raises(ConfigError, match="params_source"):
        Hardware(GPUS["h200"], params_source="")


def test_params_source_of_measured_defaults_and_fits(monkeypatch):
    from oppo_sim.hw.devices import hardware
    from oppo_sim.hw.fitting.calibration import with_sync_seconds

    monkeypatch.setattr(hardware, "GPU_COST_PARAMS", {"h200": DEFAULT_COST_PARAMS})
    assert get_hardware("H200").params_source == "measured defaults for h200"
    assert get_hardware("b200").params_source == "uncalibrated defaults"
    fitted = with_sync_seconds(get_hardware("b200"), 1e9, 900e9, 0.5)
    assert fitted.params_source == "uncalibrated defaults; sync from a measured time"


# ------------------------------------------------------------------------------------------ the command line
def test_cli_run_on_a_new_table_gpu(capsys):
    assert main(["run", "--gpu", "h20", "--steps", "2", "--batch", "8", "--actor", "qwen2.5-0.5b"]) == 0
    out = capsys.readouterr().out
    assert ", h20 (uncalibrated defaults), placement" in out


def test_cli_run_and_compare_on_a_yaml_gpu(capsys, tmp_path):
    path = _write(tmp_path, id="my-h20", efficiencies={"decode": {"eff_memory": 0.8}})
    small = ["--gpu", str(path), "--steps", "2", "--batch", "8", "--actor", "qwen2.5-0.5b", "--reward", "qwen2.5-0.5b"]
    assert main(["run", *small]) == 0
    assert f"my-h20 (datasheet spec {path} with its own efficiencies for decode" in capsys.readouterr().out
    assert main(["compare", *small, "--policies", "inter"]) == 0
    assert f"my-h20 (datasheet spec {path}" in capsys.readouterr().out


def test_cli_bad_yaml_is_one_line_exit_2(capsys, tmp_path):
    path = _write(tmp_path, colour="green")
    assert main(["run", "--gpu", str(path), "--steps", "1", "--batch", "8", "--actor", "qwen2.5-0.5b"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown key 'colour'" in err and str(path) in err and "\n" not in err


def test_cli_plan_header_names_the_yaml_gpu(capsys):
    assert main(["plan", "--gpus", f"2x{EXAMPLE}", "--actor", "qwen2.5-0.5b", "--reward", "qwen2.5-0.5b", "--steps", "2",
                 "--batch", "8", "--max-response", "1024", "--layouts", "shared", "--policies", "baseline",
                 "--processes", "1", "--top", "1"]) == 0
    assert f"plan: 2 x h20 (uncalibrated defaults, datasheet spec {EXAMPLE}) over 1 node(s)" in capsys.readouterr().out


def test_a_tensor_parallel_group_larger_than_the_domain_runs_its_all_reduces_over_the_network():
    """tp 16 on 8-GPU HGX nodes crosses the network for every layer's all-reduce; on a GB200 NVL72 rack it does not."""
    from oppo_sim.core.algorithms import Algorithm
    from oppo_sim.core.placement import colocated_placement
    from oppo_sim.engine.request import EngineConfig
    from oppo_sim.hw.models.lookup import get_model
    from oppo_sim.pipeline.config import SimConfig
    from oppo_sim.pipeline.fit_check import check_fits
    from oppo_sim.pipeline.topology import cost_models

    model = get_model("qwen3-8b")

    def decode(gpu: str, tp: int, nodes: int):
        cfg = SimConfig(gpu=gpu, actor="qwen3-8b", reward="qwen3-8b", placement=colocated_placement(16),
                        engine=EngineConfig(tp=tp), nodes=nodes, algorithm=Algorithm("grpo", n=4, reward="rule"))
        return cost_models(cfg, check_fits(cfg))["main"].decode(model, tp)

    hopper_in, hopper_across = decode("h100-sxm", 8, 2), decode("h100-sxm", 16, 2)
    assert hopper_in.link_bw is None  # NVLink (450 GB/s)
    assert hopper_across.link_bw == pytest.approx(400e9)  # a ring across the two nodes on their 8 NICs of 50 GB/s
    assert hopper_across.comm(4096) > hopper_in.comm(4096)  # a prefill-sized iteration: more bytes, slower path
    rack = decode("gb200", 16, 4)  # 16 GB200 over 4 trays: one NVLink domain
    assert rack.link_bw is None and rack.comm(4096) < hopper_across.comm(4096)
