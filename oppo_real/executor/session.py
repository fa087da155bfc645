"""Building a real run's session: the models (built locally from a config and cached, or taken from a
local checkpoint), Ray (started, or joined by address), and the three role workers placed on the run's
pools — ``gen`` and ``train`` share the "main" cores (as generation and training share the paper's 7
GPUs), ``score`` has its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oppo_real.config import IN_PROCESS, RealConfig
from oppo_real.devices.device_map import ray_gpu_plan, worker_device
from oppo_real.workers.handles import Handle
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import Policy


def build_run_models(cfg: RealConfig):
    """The run's model directories (``ModelPaths``), built once into the cache: the tiny models, random
    weights of a model-table shape (``cfg.shape``), or around a local checkpoint (``cfg.model_dir``)."""
    from oppo_real.models.tiny import (
        build_models,
        build_models_from_actor,
        default_cache_dir,
    )

    cache = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    if cfg.shape:
        from oppo_real.models.shaped import build_shaped_models

        dev = cfg.devices.gen if cfg.devices.is_cuda("gen") else "cpu"
        return build_shaped_models(cache, cfg.shape, seed=cfg.tiny.seed, device=dev)
    if cfg.model_dir:
        if not Path(cfg.model_dir).is_dir():
            raise ConfigError(f"--model {cfg.model_dir}: not a directory")
        return build_models_from_actor(cache, Path(cfg.model_dir), cfg.task, seed=cfg.seed)
    return build_models(cache, cfg.tiny, cfg.task)


def worker_specs(cfg: RealConfig, paths, ppo) -> dict[str, tuple[type, Any]]:
    """Each role worker's class and config: its device (as the worker will see it), dtype and pool."""
    from dataclasses import replace

    from oppo_real.backends.api import SamplingConfig
    from oppo_real.devices.memory_fit import kv_cache_bytes, run_specs
    from oppo_real.workers.gen import GenWorker, GenWorkerConfig
    from oppo_real.workers.score import ScoreWorker, ScoreWorkerConfig
    from oppo_real.workers.train import TrainWorker, TrainWorkerConfig

    dev = cfg.devices
    on = {r: worker_device(dev.of(r), cfg.workers) for r in ("gen", "score", "train")}
    engine = replace(cfg.engine, kv_cache_bytes=int(kv_cache_bytes(cfg, run_specs(cfg)[0])))
    same = cfg.workers in IN_PROCESS and dev.gen == dev.train
    gen = GenWorkerConfig(actor=str(paths.actor), backend=cfg.backend, gen_batch=cfg.gen_batch, sampling=SamplingConfig(temperature=cfg.temperature, seed=cfg.seed),
                          max_model_len=cfg.max_model_len, engine=engine, cores=cfg.main_cores, device=on["gen"],
                          dtype=dev.dtype("gen"), release=cfg.colocate_mode == "sleep", sleep_level=cfg.sleep_level,
                          warmup_s=cfg.engine_warmup_s)
    algo = cfg.algorithm  # roles the algorithm has not are never loaded: no critic, reward model or reference
    train = TrainWorkerConfig(actor=str(paths.actor), critic=str(paths.critic) if algo.critic else None, ppo=ppo,
                              cores=cfg.main_cores, seed=cfg.seed, device=on["train"], export="same" if same else "cpu",
                              export_dtype=None if dev.dtype("gen") == "float32" else dev.dtype("gen"), algorithm=algo)
    score = ScoreWorkerConfig(reward=str(paths.reward) if algo.reward == "model" else None,
                              reference=str(paths.reference) if algo.kl else None, cores=cfg.score_cores,
                              pool=cfg.placement().pool_of("reward"), device=on["score"], dtype=dev.dtype("score"))
    return {"gen": (GenWorker, gen), "train": (TrainWorker, train), "score": (ScoreWorker, score)}


def worker_resources(cfg: RealConfig) -> dict[str, dict]:
    """Ray resources per role: CPUs (fractions keep every worker placeable on a small machine) and, on GPUs,
    the fraction of its GPU and the placement-group bundle of that GPU (:func:`oppo_real.devices.device_map.ray_gpu_plan`)."""
    main_cpus = max(1, len(cfg.main_cores or (0,))) / 2
    cpus = {"gen": main_cpus, "train": main_cpus, "score": float(max(1, len(cfg.score_cores or (0,))))}
    if not cfg.devices.uses_cuda:
        return {r: {"num_cpus": c, "num_gpus": cfg.gpus_per_worker} for r, c in cpus.items()}
    plan = ray_gpu_plan(cfg.devices, cpus)
    return {r: {"num_cpus": c, "num_gpus": plan.num_gpus[r], "bundle": plan.bundle[r], "bundles": plan.bundles}
            for r, c in cpus.items()}


class Session:
    """The run's models and worker handles (``gen``, ``train``, ``score``)."""

    def __init__(self, cfg: RealConfig) -> None:
        self.cfg = cfg
        self.paths: Any = None
        self.memory: list = []  # PoolMemory per checked device
        self.handles: dict[str, Handle] = {}

    def start(self, policy: Policy | None = None) -> dict[str, Handle]:
        """Checks the fit under ``policy`` (:func:`oppo_real.devices.memory_fit.check_fit`), then builds and spawns."""
        from oppo_real.devices.memory_fit import check_fit
        from oppo_real.ppo.algo import PPOConfig
        from oppo_real.workers.handles import spawn, start_ray

        cfg = self.cfg
        ppo = cfg.ppo or PPOConfig()
        if ppo.minibatches > cfg.batch * cfg.algorithm.n:
            raise ConfigError(f"PPO minibatches ({ppo.minibatches}) exceed the samples per step ({cfg.batch * cfg.algorithm.n})")
        self.memory = check_fit(cfg, policy)  # from the shapes alone: nothing is built or loaded before this
        self.paths = paths = build_run_models(cfg)
        if cfg.workers == "ray":
            start_ray(cfg.ray_address)
        res = worker_resources(cfg)
        specs = worker_specs(cfg, paths, ppo)
        self.handles = {role: spawn(cfg.workers, role, cls, wcfg, **res[role]) for role, (cls, wcfg) in specs.items()}
        return self.handles

    def close(self) -> None:
        for h in self.handles.values():
            try:
                h.kill()
            except Exception:  # pragma: no cover - best effort at shutdown
                pass
        self.handles = {}
        if self.cfg.workers in IN_PROCESS:
            release_local_memory()


def release_local_memory() -> None:
    """Give back what in-process workers held: their models go with the last reference, and the CUDA
    allocator's cached blocks are returned to the driver, so the next run in this process (``validate``
    runs one per policy) sees the device's memory free again."""
    import gc
    import sys

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
