"""Building a real run's session: the models (built locally from a config and cached, or taken from a
local checkpoint), Ray (started, or joined by address), and the three role workers placed on the run's
pools — ``gen`` and ``train`` share the "main" cores (as generation and training share the paper's 7
GPUs), ``score`` has its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oppo_real.config import RealConfig
from oppo_real.workers.placement import Handle
from oppo_sim.core.errors import ConfigError


def build_run_models(cfg: RealConfig):
    """The run's model directories (``ModelPaths``), built once into the cache."""
    from oppo_real.models.tiny import (
        build_models,
        build_models_from_actor,
        default_cache_dir,
    )

    cache = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    if cfg.model_dir:
        if not Path(cfg.model_dir).is_dir():
            raise ConfigError(f"--model {cfg.model_dir}: not a directory")
        return build_models_from_actor(cache, Path(cfg.model_dir), cfg.task, seed=cfg.seed)
    return build_models(cache, cfg.tiny, cfg.task)


class Session:
    """The run's models and worker handles (``gen``, ``train``, ``score``)."""

    def __init__(self, cfg: RealConfig) -> None:
        self.cfg = cfg
        self.paths: Any = None
        self.handles: dict[str, Handle] = {}

    def start(self) -> dict[str, Handle]:
        from oppo_real.backends.api import SamplingConfig
        from oppo_real.ppo.algo import PPOConfig
        from oppo_real.workers import placement
        from oppo_real.workers.gen import GenWorker, GenWorkerConfig
        from oppo_real.workers.score import ScoreWorker, ScoreWorkerConfig
        from oppo_real.workers.train import TrainWorker, TrainWorkerConfig

        cfg = self.cfg
        self.paths = paths = build_run_models(cfg)
        ppo = cfg.ppo or PPOConfig()
        if ppo.minibatches > cfg.batch:
            raise ConfigError(f"PPO minibatches ({ppo.minibatches}) exceed the batch size ({cfg.batch})")
        if cfg.workers == "ray":
            placement.start_ray(cfg.ray_address)
        sampling = SamplingConfig(temperature=cfg.temperature, seed=cfg.seed)
        # Ray resources: fractions keep every worker placeable on a small machine
        main_cpus = max(1, len(cfg.main_cores or (0,))) / 2
        score_cpus = max(1, len(cfg.score_cores or (0,)))
        spawn = placement.spawn
        self.handles = {
            "gen": spawn(cfg.workers, "gen", GenWorker, GenWorkerConfig(
                actor=str(paths.actor), backend=cfg.backend, gen_batch=cfg.gen_batch, sampling=sampling,
                max_model_len=cfg.max_model_len, engine=cfg.engine, cores=cfg.main_cores), num_cpus=main_cpus, num_gpus=cfg.gpus_per_worker),
            "train": spawn(cfg.workers, "train", TrainWorker, TrainWorkerConfig(
                actor=str(paths.actor), critic=str(paths.critic), ppo=ppo, cores=cfg.main_cores, seed=cfg.seed),
                num_cpus=main_cpus, num_gpus=cfg.gpus_per_worker),
            "score": spawn(cfg.workers, "score", ScoreWorker, ScoreWorkerConfig(
                reward=str(paths.reward), reference=str(paths.reference), cores=cfg.score_cores),
                num_cpus=score_cpus, num_gpus=cfg.gpus_per_worker),
        }
        return self.handles

    def close(self) -> None:
        for h in self.handles.values():
            try:
                h.kill()
            except Exception:  # pragma: no cover - best effort at shutdown
                pass
        self.handles = {}
