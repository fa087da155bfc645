"""Defaults and argument types shared by the ``oppo-real`` commands."""

from __future__ import annotations

import argparse

from oppo_sim.cliargs import nonneg_float

DEFAULT_TRACE = "oppo-longtail-default"
CPU_RUN_LENGTH_SCALE = 0.1
"""``--length-scale`` of the real commands: the trace's response lengths shrunk for a CPU-sized run."""
CPU_RUN_MAX_RESPONSE = 256
"""``--max-response`` of the real commands: new tokens at most in a CPU-sized run (the simulator's cap,
``oppo_sim.traces.trace.DEFAULT_MAX_RESPONSE``, is the paper-size 8192)."""
BACKENDS = ("vllm", "torch", "torch-graph", "torch-static", "torch-static-graph")  # oppo_real.config.BACKENDS (not imported here: keeps --help light)
BACKEND_HELP = ("actor generation engine: vllm (continuous batching), torch (per-request decode loop), torch-graph "
                "(torch on static KV slots, decode replayed as CUDA graphs on a GPU, eager on the CPU), torch-static "
                "(TRL-style static padded batches generated in calls of the step's chunk size C, KV carried across calls) "
                "or torch-static-graph (torch-static on static KV slots, decode replayed as CUDA graphs on a GPU)")


class DefaultsHelp(argparse.HelpFormatter):
    """Every option's help states its default: a default the help text does not mention is appended
    (``(default: off)`` for a flag); an option whose default is None says in its own words what it means."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "default" in text or action.default in (None, argparse.SUPPRESS):
            return text
        if action.default is False:
            return f"{text} (default: off)".strip()
        return f"{text} (default: %(default)s)".strip()


def cores(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated core ids, got {text!r}") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"expected core ids >= 0, got {text!r}")
    return vals


def profile_engines(paths, backend: str, quick: bool, cores, log=print):
    """Time this machine's engines for ``backend`` and fit the cost model: ``(table, hw, report, static)``;
    ``static`` (the static decoder's per-call overhead, ``StaticCostParams``) is None unless the backend is
    a static decoder (``torch-static``, ``torch-static-graph``), which is profiled with ``oppo_real.profiling.static_decoder`` (its forwards, calls and sync)."""
    from oppo_real.profiling.engine_ops import ProfileGrid, fit, run_profile

    grid = ProfileGrid.quick() if quick else ProfileGrid()
    if backend.startswith("torch-static"):
        from oppo_real.profiling.static_decoder import (
            StaticProfileGrid,
            fit_static,
            run_static_profile,
        )

        table = run_static_profile(paths, grid, StaticProfileGrid.quick() if quick else StaticProfileGrid(), cores, log, backend)
        hw, static, report = fit_static(table, cores=len(cores or (0,)))
        return table, hw, report, static
    table = run_profile(paths, backend, grid, cores=cores, log=log)
    hw, report = fit(table, cores=len(cores or (0,)))
    return table, hw, report, None


def save_engine_profile(hw, static, path, meta: dict | None = None) -> None:
    from oppo_real.profiling.static_decoder import save_static_profile
    from oppo_sim.hw.fitting.profiles import save_profile

    if static is not None:
        save_static_profile(hw, static, path, meta)
    else:
        save_profile(hw, path, meta=meta)


def device_map(text: str):
    """``--device``: ``cpu``, ``cuda``, ``cuda:N`` or ``gen=cuda:0,score=cuda:1,train=cuda:0``."""
    from oppo_real.devices.device_map import DeviceMap
    from oppo_sim.core.errors import ConfigError

    try:
        return DeviceMap.parse(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


GPU_WARMUP_S = 45.0
"""Default engine warm-up on a GPU (``oppo_real.backends.warmup``: the first ~50 s of a process ran ~2.4x slower)."""


def add_engine_warmup_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine-warmup", type=nonneg_float, default=None, metavar="S",
                   help="decode throw-away requests for S seconds before timing (once per process; default 45 on a GPU, 0 on the CPU)")


def engine_warmup_s(a: argparse.Namespace, cuda: bool) -> float:
    """``--engine-warmup``, or its default for the device (``GPU_WARMUP_S`` on a GPU, none on the CPU)."""
    warm = getattr(a, "engine_warmup", None)
    return warm if warm is not None else (GPU_WARMUP_S if cuda else 0.0)


def add_device_args(p: argparse.ArgumentParser, verbose: bool = True) -> None:
    """The device, model-shape and console options shared by ``run``, ``validate`` and ``profile``."""
    p.add_argument("--device", type=device_map, default=None,
                   help="cpu (default), cuda, cuda:N, or a per-role map gen=cuda:0,score=cuda:1,train=cuda:0 (bf16 on GPUs)")
    p.add_argument("--shape", default=None,
                   help="random-weight models of a model-table shape, e.g. qwen2.5-0.5b (see oppo_sim.hw.models.lookup; "
                        "default: the tiny built models)")
    p.add_argument("--gpu-memory", type=float, default=None, metavar="GiB",
                   help="memory per device for the fit check (default: what the GPU reports; the CPU is not checked)")
    p.add_argument("--colocate", choices=("sleep", "resident"), default=None,
                   help="generator on the trainer's GPU: release its memory while training (sleep, default there) or keep it")
    p.add_argument("--sleep-level", type=int, choices=(1, 2), default=1, help="vLLM sleep level (default 1)")
    add_engine_warmup_arg(p)
    if verbose:
        p.add_argument("--verbose", action="store_true", help="engine logs (vLLM, Ray, transformers) on the console too")


def device_fields(a: argparse.Namespace) -> dict:
    """``RealConfig`` fields from the shared options: devices, shape (with a task over its whole vocabulary),
    stated memory, colocation, and the cores (pinned on the CPU, not pinned when a role runs on a GPU)."""
    from oppo_real.devices.device_map import DeviceMap
    from oppo_real.models.task import TaskConfig
    from oppo_sim.hw.models.lookup import get_model

    dev = a.device or DeviceMap()
    out = {"devices": dev, "shape": a.shape, "gpu_memory_gib": a.gpu_memory, "colocate": a.colocate,
           "sleep_level": a.sleep_level}
    if a.shape:
        out["task"] = TaskConfig(vocab=get_model(a.shape).vocab)
    cuda = dev.uses_cuda
    out["engine_warmup_s"] = engine_warmup_s(a, cuda)
    main = getattr(a, "main_cores", None)
    score = getattr(a, "score_cores", None)
    out["main_cores"] = main if main is not None else (None if cuda else (0,))
    out["score_cores"] = score if score is not None else (None if cuda else (1,))
    return out


ALGORITHMS = ("ppo", "grpo", "rloo", "reinforce++", "dapo")  # oppo_sim.core.algorithms.ALGORITHM_NAMES (kept light)


def add_algorithm_args(p: argparse.ArgumentParser) -> None:
    """``--algorithm``, ``--n``, ``--reward`` and ``--no-reference`` (shared by ``run`` and ``validate``)."""
    p.add_argument("--algorithm", default="ppo", choices=ALGORITHMS,
                   help="RL algorithm: ppo (critic + GAE) or a critic-free group algorithm (default ppo)")
    p.add_argument("--n", type=int, default=1, metavar="N",
                   help="responses per prompt; a step trains B x N responses (default 1)")
    p.add_argument("--reward", choices=("model", "rule"), default=None,
                   help="the reward model, or the task's rule as a verifier on the CPU "
                        "(default: model for ppo, rule for the others)")
    p.add_argument("--no-reference", action="store_true", help="no reference model and no KL term")
    p.add_argument("--gen-batch-size", type=int, default=None, metavar="P",
                   help="dapo only: prompts per generation round, verl data.gen_batch_size (default: --batch)")
    p.add_argument("--max-gen-batches", "--max-num-gen-batches", dest="max_gen_batches", type=int, default=None,
                   metavar="R", help="dapo only: most generation rounds per step, verl "
                                     "algorithm.filter_groups.max_num_gen_batches (default 0: no limit)")


def algorithm_of(a: argparse.Namespace):
    """The ``Algorithm`` the options name (a bad combination is a one-line ConfigError)."""
    from oppo_sim.core.algorithms import Algorithm, round_settings

    reward = a.reward or ("model" if a.algorithm == "ppo" else "rule")
    rounds = round_settings(a.algorithm, {k: getattr(a, k, None) for k in ("gen_batch_size", "max_gen_batches")})
    return Algorithm(a.algorithm, n=a.n, reward=reward, kl=not a.no_reference, **rounds)
