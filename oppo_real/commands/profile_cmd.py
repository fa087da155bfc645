"""``oppo-real profile``: time the engines' operations here and fit the simulator's cost model; on a GPU,
each measured call beside the uncalibrated prediction of the GPU table's entry (``oppo_real.profiling.gpu_model_error``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from oppo_real.commands.common import (
    BACKEND_HELP,
    BACKENDS,
    DefaultsHelp,
    add_engine_warmup_arg,
    device_map,
    engine_warmup_s,
    profile_engines,
    save_engine_profile,
)
from oppo_real.commands.common import cores as _cores


def add_parser(sub) -> None:
    pr = sub.add_parser("profile", help="time the engines' operations here and fit the simulator's cost model",
                        formatter_class=DefaultsHelp)
    pr.add_argument("--backend", default=None, choices=BACKENDS, help=BACKEND_HELP + " (default vllm; torch-graph on a GPU)")
    pr.add_argument("--cores", type=_cores, default=None, help="cores to pin to (default 0 on the CPU)")
    pr.add_argument("--cache", default=None, help="model cache directory (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)")
    pr.add_argument("--quick", action="store_true", help="a small grid (for CI)")
    pr.add_argument("--device", type=device_map, default=None, help="cpu (default), cuda or cuda:N (the generator's device is profiled)")
    pr.add_argument("--shape", default=None, help="random-weight models of a model-table shape, e.g. qwen2.5-0.5b, or a profiling shape "
                         "(qwen3-moe-2.8b-a0.5b, qwen3-moe-tiny: oppo_real.profiling.model_shape) (default: tiny)")
    pr.add_argument("--gpu", default=None, help="GPU-table entry to predict with (default: the one matching the device's name)")
    pr.add_argument("--ops", type=_ops, default=_ALL_OPS,
                    help="comma-separated operations to time, of decode,prefill,train,sync (default: all four)")
    pr.add_argument("--moves", type=_moves, default=None,
                    help="instead of the engines' operations, time the bulk copies of sleep/wake and weight sync at the "
                         "model's sizes (comma-separated, of sleepwake,sync; oppo_real.profiling.host_moves): "
                         "moves.csv, moves_fit.csv (fixed cost and GiB/s per direction) (default: off, the engines' operations)")
    pr.add_argument("--driver", default=None, choices=("ray", "local"),
                    help="also time the run driver's own costs on these workers — per generation round trip (what "
                         "each chunk stop costs), step, sample and token — into driver.csv and profile.json's "
                         "meta.overheads, which run, compare and check charge (default: off)")
    pr.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                    help="torch-graph backend: decode eagerly instead of replaying CUDA graphs (default: graphs on a GPU)")
    add_engine_warmup_arg(pr)
    pr.add_argument("--verbose", action="store_true", help="engine logs on the console too")
    pr.add_argument("--out", default="out/profile", help="directory for measurements.csv, fit.csv, profile.json")
    pr.set_defaults(func=cmd_profile)


_ALL_OPS = ("decode", "prefill", "train", "sync")  # oppo_real.profiling.engine_ops.OPS (not imported: keeps --help light)
_ALL_MOVES = ("sleepwake", "sync")  # oppo_real.profiling.host_moves.MOVES


def default_backend(device: str) -> str:
    """The engine ``oppo-real profile`` times without ``--backend``: torch-graph on a GPU (decode replayed as CUDA
    graphs: 84-90% of an iteration in kernels on an H200 against 15-24% eager, docs/gpu.md), vLLM elsewhere."""
    return "torch-graph" if device.startswith("cuda") else "vllm"


def _names(known: tuple[str, ...], what: str):
    """An argparse type: a comma-separated list of ``known`` names, in order, once each."""
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
        bad = [n for n in names if n not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"unknown {what}(s) {', '.join(bad) or '(none)'}; known: {', '.join(known)}")
        return names
    return parse


_ops = _names(_ALL_OPS, "op")
_moves = _names(_ALL_MOVES, "move")


def _models(a: argparse.Namespace, device: str):
    from oppo_real.models.tiny import build_models, default_cache_dir

    cache = Path(a.cache) if a.cache else default_cache_dir()
    if a.shape:
        from oppo_real.models.shaped import build_shaped_models
        from oppo_real.profiling.model_shape import profile_shape

        return build_shaped_models(cache, profile_shape(a.shape), device=device)
    return build_models(cache)


def _params(paths) -> float:
    from oppo_real.profiling.engine_ops import model_spec

    return float(model_spec(Path(paths.actor)).params)


def _target(device: str, gpu: str | None):
    """(device name, GPU-table spec or None, total bytes) of the profiled device."""
    from oppo_real.profiling.gpu_model_error import table_spec
    from oppo_sim.hw.devices.hardware import get_gpu

    if device.startswith("cuda"):
        from oppo_real.devices.device_map import DeviceMap, check_available, device_memory

        check_available(DeviceMap(device, device, device))
        _, total, name = device_memory(device)
        return name, table_spec(name, total, gpu)
    return "cpu", (get_gpu(gpu) if gpu else None)


def cmd_profile(a: argparse.Namespace) -> int:
    import pandas as pd

    from oppo_real.console import Console
    from oppo_real.profiling.engine_ops import ProfileGrid, fit, run_profile
    from oppo_real.profiling.gpu_model_error import (
        error_summary,
        fit_gpu,
        gpu_grid,
        heldout_fit,
        plot_profile,
        suggested_defaults,
        with_predictions,
    )
    from oppo_sim.hw.fitting.profiles import save_profile

    device = (a.device.gen if a.device else "cpu")
    cuda = device.startswith("cuda")
    backend = a.backend or default_backend(device)
    cores = a.cores if a.cores is not None else (None if cuda else (0,))
    name, spec = _target(device, a.gpu)
    out = Path(a.out)
    if a.moves or backend.startswith("torch-static"):  # instead of the engines' operations (--driver goes with them)
        _no_driver(a)
        return _profile_moves(a, out, device, spec) if a.moves else _profile_static(a, out, cores, backend)
    with Console(out, a.verbose) as con:
        con.print(f"oppo-real profile: {backend} on {name} ({device}), models {a.shape or 'tiny'}"
                  + (f", predicting with GPU table entry '{spec.id}' and the default cost parameters" if spec else ""))
        paths = _models(a, device)
        grid = ProfileGrid.quick() if a.quick else (gpu_grid(_params(paths)) if cuda else ProfileGrid())
        warm = engine_warmup_s(a, cuda) if "decode" in a.ops else 0.0  # only decode iterations are timed warm
        table = run_profile(paths, backend, grid, cores=cores, log=con.print, device=device, warmup_s=warm,
                            ops=a.ops, cuda_graphs=a.cuda_graphs)
        table = with_predictions(table, spec, name, a.shape or "tiny")
        table.to_csv(out / "measurements.csv", index=False)
        if cuda:
            hw, report = fit_gpu(table, spec)
        else:
            hw, report = fit(table, cores=len(cores or (0,)))
        report.to_csv(out / "fit.csv", index=False)
        heldout = heldout_fit(table, spec if cuda else None, len(cores or (0,)))
        heldout.to_csv(out / "heldout.csv", index=False)
        meta = {"backend": backend, "device": name, "cores": list(cores or ()), "model": str(paths.actor), "ops": list(a.ops),
                "cuda_graphs": bool(a.cuda_graphs and backend == "torch-graph" and cuda)}
        if cuda:
            meta["suggested_defaults"] = suggested_defaults(hw)
            if not meta["cuda_graphs"] and backend == "torch-graph" and "decode" in a.ops:
                meta.update(_host_op(table, paths, out, con.print))
        save_profile(hw, out / "profile.json", meta={**meta, **_driver(a, out, con.print)})
        with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
            if spec is not None:
                con.print("measured vs uncalibrated prediction (" + spec.id + ", default cost parameters):")
                con.print(error_summary(table).to_string(index=False))
                plot_profile(table).savefig(out / "profile.png", dpi=110)
            con.print(report.to_string(index=False))
            con.print("fitted on half the grid, checked on the other half (oppo_sim.hw.fitting.holdout):")
            con.print(heldout.to_string(index=False))
        con.print(f"wrote {out}/measurements.csv, fit.csv, heldout.csv, profile.json" + (", profile.png" if spec is not None else "")
                  + f"  (use: oppo-sim run --profile {out}/profile.json)")
    return 0


def _host_op(table, paths, out: Path, log) -> dict:
    """The host's microseconds per eager op from the eager decode rows (``eager_ops.profile_host_op``):
    ``host_op.csv`` and a line saying what to pass as ``oppo-sim --host-op-us``; ``{"host_op_us": median}``."""
    from transformers import AutoConfig

    from oppo_real.profiling.eager_ops import profile_host_op

    points, summary = profile_host_op(table, AutoConfig.from_pretrained(paths.actor))
    points.to_csv(out / "host_op.csv", index=False)
    if not summary:
        log("host per eager op: not measured (no host-bound decode iteration: kernels ran half the wall time or more)")
        return {}
    log(f"host per eager op: {summary['median_us']:g} us median ({summary['min_us']:g}-{summary['max_us']:g} over "
        f"{summary['points']} iterations of {summary['ops_per_iteration']:,} ops); price this host with "
        f"oppo-sim ... --host-op-us {summary['median_us']:g}  (wrote {out}/host_op.csv)")
    return {"host_op_us": summary["median_us"]}


def _no_driver(a: argparse.Namespace) -> None:
    if a.driver:
        from oppo_sim.core.errors import ConfigError

        raise ConfigError("--driver adds the run driver's costs to the engines' profile: not with --moves or torch-static")


def _driver(a: argparse.Namespace, out: Path, log) -> dict:
    """With ``--driver``, the run driver's own costs on those workers as the profile's meta entries (else none)."""
    if not a.driver:
        return {}
    from oppo_real.config import RealConfig
    from oppo_real.profiling.driver_overheads import driver_meta

    meta = driver_meta(RealConfig(workers=a.driver, **({"cache_dir": a.cache} if a.cache else {})), out, log=lambda _m: None)
    o = meta["overheads"]
    log(f"driver on {a.driver} workers: {1e3 * o['call_s']:.2f} ms per generation round trip, {1e3 * o['step_s']:.2f} ms "
        f"per step, {1e3 * o['sample_s']:.3f} ms per sample, {1e6 * o['token_s']:.2f} us per token "
        f"(fit MAPE {100 * meta['driver']['fit_mape']:.0f}%; driver.csv)")
    return meta


def _profile_static(a: argparse.Namespace, out: Path, cores, backend: str) -> int:
    """The static decoder (TRL-style): its forwards, per-call overhead and sync, plus prefill and training."""
    import pandas as pd

    from oppo_real.models.tiny import build_models, default_cache_dir

    out.mkdir(parents=True, exist_ok=True)
    paths = build_models(Path(a.cache) if a.cache else default_cache_dir())
    table, hw, report, static = profile_engines(paths, backend, a.quick, cores)
    table.to_csv(out / "measurements.csv", index=False)
    report.to_csv(out / "fit.csv", index=False)
    save_engine_profile(hw, static, out / "profile.json", {"backend": backend, "cores": list(cores or ()),
                                                          "model": str(paths.actor)})
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(report.to_string(index=False))
    print(f"wrote {out}/measurements.csv, fit.csv, profile.json  (use: oppo-sim run --profile {out}/profile.json)")
    return 0


def _profile_moves(a: argparse.Namespace, out: Path, device: str, spec) -> int:
    """Sleep/wake and weight-sync copies at the sizes of ``--shape`` (or the tiny models)."""
    import json

    import pandas as pd

    from oppo_real.console import Console
    from oppo_real.profiling.host_moves import MoveGrid, fit_moves, run_moves

    if a.shape:
        from oppo_real.models.shaped import hf_config
        from oppo_real.profiling.model_shape import profile_shape

        config, model = hf_config(profile_shape(a.shape)), a.shape
    else:
        from transformers import AutoConfig

        from oppo_real.models.tiny import build_models, default_cache_dir

        config, model = AutoConfig.from_pretrained(build_models(Path(a.cache) if a.cache else default_cache_dir()).actor), "tiny"
    grid = MoveGrid.quick() if a.quick else MoveGrid()
    with Console(out, a.verbose) as con:
        con.print(f"oppo-real profile --moves {','.join(a.moves)}: {model} on {device}")
        table = run_moves(config, a.moves, grid, device, model, log=con.print)
        fit = fit_moves(table, spec.host_bw if spec is not None else None)
        table.to_csv(out / "moves.csv", index=False)
        fit.to_csv(out / "moves_fit.csv", index=False)
        meta = {"device": str(table["device"].iloc[0]), "model": model, "moves": list(a.moves), "gpu_table": spec.id if spec else None,
                "grid": {"fractions": list(grid.fractions), "repeats": grid.repeats, "kv_tokens": grid.kv_tokens,
                         "state_share": grid.state_share}}
        (out / "moves.json").write_text(json.dumps(meta, indent=1) + "\n")
        with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
            con.print(fit.drop(columns=["device", "model", "host_memory"]).to_string(index=False))
        con.print(f"wrote {out}/moves.csv, moves_fit.csv, moves.json")
    return 0
