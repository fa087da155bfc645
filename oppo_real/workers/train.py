"""The training worker: the actor's log-probs and the critic's values on whole sequences, the PPO update
of actor and critic (:func:`oppo_real.ppo.step.run_ppo_step`), and the weights for the sync. Under a
critic-free algorithm (grpo, rloo, reinforce++, dapo) the critic is never loaded: no values, no critic
optimizer, no critic weights in its checkpoints (:func:`oppo_real.ppo.step.run_group_step`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oppo_real.executor.messages import TrainBatch
from oppo_real.workers.recorder import Recorder
from oppo_sim.core.algorithms import Algorithm


@dataclass(frozen=True)
class TrainWorkerConfig:
    actor: str
    critic: str | None  # the value model's directory; None (never loaded) for a critic-free algorithm
    ppo: Any = None  # oppo_real.ppo.algo.PPOConfig
    cores: tuple[int, ...] | None = None
    pool: str = "main"
    seed: int = 0
    device: str = "cpu"  # fp32 master weights here; forwards under bf16 autocast on a GPU
    export: str = "same"  # the weights for the sync: on the trainer's device ("same") or staged in host memory ("cpu")
    export_dtype: str | None = None  # the generator's dtype (None: as trained)
    algorithm: Algorithm = Algorithm()  # ppo: critic + GAE; the others: group advantages, no critic


class TrainWorker(Recorder):
    """Actor log-probs and critic values on whole sequences, the PPO update, and weight export."""

    def __init__(self, cfg: TrainWorkerConfig) -> None:
        super().__init__()
        import torch

        from oppo_real.models.tiny import load_causal_lm, load_value_model
        from oppo_real.ppo.algo import PPOConfig, make_optimizers
        from oppo_sim.core.errors import ConfigError

        self._place(cfg.pool, cfg.cores)
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.ppo_cfg = cfg.ppo or PPOConfig()
        self.device = torch.device(cfg.device)
        self.actor = load_causal_lm(Path(cfg.actor)).to(self.device)
        self.critic = None
        if cfg.algorithm.critic:
            if cfg.critic is None:
                raise ConfigError(f"{cfg.algorithm.name} trains a critic: the train worker needs its model directory")
            self.critic = load_value_model(Path(cfg.critic)).to(self.device)
            self.opt = make_optimizers(self.actor, self.critic, self.ppo_cfg)
        else:
            self.opt = {"actor": torch.optim.Adam(self.actor.parameters(), lr=self.ppo_cfg.lr_actor)}
        self.version = 0

    def train(self, batch: TrainBatch) -> dict[str, float]:
        """One PPO update on ``batch`` (old log-probs and values are computed here, with the current weights).
        The stats carry ``scored_at``: when the last scoring pass here (critic, logprob) ended -- where the
        step's scoring ends and its training begins, as the simulator counts them."""
        from oppo_real.ppo.step import run_group_step, run_ppo_step
        from oppo_sim.core.placement import SCORING_ROLES

        n_tok, step = batch.tokens, batch.step
        scored = [0.0]

        def on_phase(activity: str, role: str, a: float, b: float) -> None:
            self._rec(activity, role, step, a, b, n_tok)
            if role in SCORING_ROLES:
                scored[0] = max(scored[0], b)

        if self.critic is not None:
            stats = run_ppo_step(self.actor, self.critic, self.opt, batch, self.ppo_cfg, on_phase=on_phase)
        else:
            stats = run_group_step(self.actor, self.opt["actor"], batch, self.ppo_cfg, self.cfg.algorithm, on_phase=on_phase)
        self.version += 1
        if scored[0]:
            stats["scored_at"] = scored[0]
        return stats

    def weights(self, step: int) -> dict:
        """A copy of the actor's weights for the generator: cast to its dtype, on this device or in host memory."""
        import torch

        from oppo_real.devices.device_map import synchronize

        t0 = time.time()
        dt = getattr(torch, self.cfg.export_dtype) if self.cfg.export_dtype else None
        dev = "cpu" if self.cfg.export == "cpu" else self.device
        sd = {k: v.detach().to(device=dev, dtype=dt or v.dtype, copy=True) for k, v in self.actor.state_dict().items()}
        synchronize(str(self.device))
        self._rec("sync", "sync", step, t0, time.time(), 0)
        return sd

    def save(self, path: str) -> int:
        """Write the trainer's state (models, optimizers, RNG and the policy version) to ``path`` crash-safe:
        to ``path.tmp``, flushed to disk, then renamed. Returns the version saved."""
        import os

        import torch

        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            state = {"actor": self.actor.state_dict(), "opt_actor": self.opt["actor"].state_dict(),
                     "version": self.version, "torch_rng": torch.get_rng_state()}
            if self.critic is not None:
                state.update(critic=self.critic.state_dict(), opt_critic=self.opt["critic"].state_dict())
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return self.version

    def load(self, path: str) -> int:
        import torch

        st = torch.load(path, weights_only=False, map_location=self.device)
        self.actor.load_state_dict(st["actor"])
        self.opt["actor"].load_state_dict(st["opt_actor"])
        if self.critic is not None:
            self.critic.load_state_dict(st["critic"])
            self.opt["critic"].load_state_dict(st["opt_critic"])
        self.version = st["version"]
        torch.set_rng_state(st["torch_rng"].cpu())
        return self.version


