"""Role workers of the real executor. Each runs in its own process (a Ray actor, see `placement.py`) so
stages really overlap, and records the start/end of every engine call in the simulator's timeline
schema (``oppo_sim.pipeline.devices.TIMELINE_COLUMNS``).

- :class:`GenWorker` — actor generation (vLLM, or plain torch), token ids in and out, step by step;
- :class:`TrainWorker` — the actor's log-probs and the critic's values on whole sequences, the PPO
  update of actor and critic, and the weights exported for the sync into the generator;
- :class:`ScoreWorker` — the frozen models, reward and reference, fed incrementally (streamed chunks,
  KV kept per sequence) or on whole sequences.

The paper's placement maps to processes and cores as pools: GenWorker and TrainWorker share the "main"
pool (its cores are time-shared, as the 7 generate+train GPUs are), ScoreWorker has the "score" pool.

Workers know nothing of policies: the driver (`executor.py`) asks the policy and tells them what to do.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from oppo_real.backends.api import GenRequest, SamplingConfig

Row = list  # [pool, devices, activity, role, step, start, end, tokens, flops, recompute_flops]


def pin_to_cores(cores: Sequence[int] | None) -> None:
    """Pin this process (and torch's intra-op threads) to ``cores``; no-op if None or unsupported."""
    if not cores:
        return
    import torch

    try:
        os.sched_setaffinity(0, set(cores))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        pass
    torch.set_num_threads(len(cores))


class _Recorder:
    pool = "worker"
    devices = "all"  # the pool's cores this worker runs on

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def _place(self, pool: str, cores: Sequence[int] | None) -> None:
        self.pool = pool
        self.devices = ",".join(map(str, cores)) if cores else "all"
        pin_to_cores(cores)

    def _rec(self, activity: str, role: str, step: int, t0: float, t1: float, tokens: int = 0) -> None:
        self.rows.append([self.pool, self.devices, activity, role, step, t0, t1, int(tokens), 0.0, 0.0])

    def take_timeline(self) -> list[Row]:
        rows, self.rows = self.rows, []
        return rows

    def ping(self) -> str:
        return f"{self.pool} pid {os.getpid()}"


@dataclass(frozen=True)
class GenWorkerConfig:
    actor: str  # HF model dir of the initial actor
    backend: str = "vllm"  # "vllm" | "torch"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_model_len: int = 1024
    max_num_seqs: int = 256
    cores: tuple[int, ...] | None = None
    pool: str = "main"


@dataclass
class GenOutput:
    """What one `generate` call produced: new tokens per request, and which requests finished."""

    tokens: dict[str, list[int]]
    logprobs: dict[str, list[float]]
    finished: dict[str, str]  # req_id -> finish reason
    iterations: int
    version: int  # policy version of the weights that generated these tokens


class GenWorker(_Recorder):
    """Actor generation (vLLM or plain torch) behind the `ActorBackend` contract."""

    def __init__(self, cfg: GenWorkerConfig) -> None:
        super().__init__()
        self._place(cfg.pool, cfg.cores)
        self.cfg = cfg
        t0 = time.time()
        self.gen = self._make_backend()
        self.init_seconds = time.time() - t0
        self.version = 0

    def _make_backend(self):
        cfg = self.cfg
        if cfg.backend == "vllm":
            from oppo_real.backends.vllm_actor import VLLMActor, VLLMActorConfig

            bind = ",".join(map(str, cfg.cores)) if cfg.cores else None
            return VLLMActor(VLLMActorConfig(model=cfg.actor, sampling=cfg.sampling, max_model_len=cfg.max_model_len,
                                             max_num_seqs=cfg.max_num_seqs, cpu_threads_bind=bind))
        if cfg.backend == "torch":
            from oppo_real.backends.torch_actor import TorchActor, TorchActorConfig

            return TorchActor(TorchActorConfig(model=cfg.actor, sampling=cfg.sampling, max_model_len=cfg.max_model_len))
        from oppo_sim.core.errors import ConfigError

        raise ConfigError(f"unknown actor backend '{cfg.backend}'; known: vllm, torch")

    def add(self, reqs: Sequence[GenRequest]) -> None:
        for r in reqs:
            self.gen.add(r)

    def abort(self, req_ids: Sequence[str]) -> None:
        for rid in req_ids:
            self.gen.abort(rid)

    def generate(self, step: int, max_iters: int, report_at: dict[str, int] | None = None) -> GenOutput:
        """Step the engine up to ``max_iters`` iterations; return early once a request finishes or a request
        in ``report_at`` has produced that many new tokens during this call (chunk boundary, budget)."""
        report_at = report_at or {}
        toks: dict[str, list[int]] = {}
        lps: dict[str, list[float]] = {}
        fin: dict[str, str] = {}
        t0 = time.time()
        it = produced = 0
        while it < max_iters and self.gen.has_unfinished():
            deltas = self.gen.step()
            it += 1
            hit = False
            for d in deltas:
                toks.setdefault(d.req_id, []).extend(d.token_ids)
                lps.setdefault(d.req_id, []).extend(d.logprobs)
                produced += len(d.token_ids)
                if d.finished:
                    fin[d.req_id] = d.finish_reason or "length"
                    hit = True
                need = report_at.get(d.req_id)
                if need is not None and len(toks[d.req_id]) >= need:
                    hit = True
            if hit:
                break
        if it:
            self._rec("generate", "generate", step, t0, time.time(), produced)
        return GenOutput(toks, lps, fin, it, self.version)

    def has_unfinished(self) -> bool:
        return self.gen.has_unfinished()

    def load_weights(self, step: int, version: int, state_dict: dict) -> float:
        """Weight sync from the trainer; returns the seconds the engine spent loading."""
        t0 = time.time()
        secs = self.gen.load_weights(state_dict)
        self._rec("sync", "sync", step, t0, time.time(), 0)
        self.version = version
        return secs

    def close(self) -> None:
        self.gen.close()


@dataclass(frozen=True)
class TrainWorkerConfig:
    actor: str
    critic: str
    ppo: Any = None  # oppo_real.ppo.algo.PPOConfig
    cores: tuple[int, ...] | None = None
    pool: str = "main"
    seed: int = 0


class TrainWorker(_Recorder):
    """Actor log-probs and critic values on whole sequences, the PPO update, and weight export."""

    def __init__(self, cfg: TrainWorkerConfig) -> None:
        super().__init__()
        import torch

        from oppo_real.models.tiny import load_causal_lm, load_value_model
        from oppo_real.ppo.algo import PPOConfig

        self._place(cfg.pool, cfg.cores)
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.ppo_cfg = cfg.ppo or PPOConfig()
        self.actor = load_causal_lm(Path(cfg.actor))
        self.critic = load_value_model(Path(cfg.critic))
        self.opt_actor = torch.optim.Adam(self.actor.parameters(), lr=self.ppo_cfg.lr_actor)
        self.opt_critic = torch.optim.Adam(self.critic.parameters(), lr=self.ppo_cfg.lr_critic)
        self.version = 0

    def train(self, step: int, batch: dict[str, Any]) -> dict[str, float]:
        """``batch``: prompts, responses (token-id lists), behaviour_logprobs (per response token, from the
        policy that generated it), ref_logprobs (per response token) and scores (reward per sequence)."""
        from oppo_real.ppo.step import run_ppo_step

        n_tok = sum(len(p) + len(r) for p, r in zip(batch["prompts"], batch["responses"]))
        stats = run_ppo_step(
            self.actor, self.critic, self.opt_actor, self.opt_critic, batch, self.ppo_cfg,
            on_phase=lambda activity, role, a, b: self._rec(activity, role, step, a, b, n_tok),
        )
        self.version += 1
        return stats

    def weights(self, step: int) -> dict:
        t0 = time.time()
        sd = {k: v.detach().clone() for k, v in self.actor.state_dict().items()}
        self._rec("sync", "sync", step, t0, time.time(), 0)
        return sd

    def save(self, path: str) -> None:
        import torch

        torch.save({
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "opt_actor": self.opt_actor.state_dict(), "opt_critic": self.opt_critic.state_dict(),
            "version": self.version, "torch_rng": torch.get_rng_state(),
        }, path)

    def load(self, path: str) -> int:
        import torch

        st = torch.load(path, weights_only=False)
        self.actor.load_state_dict(st["actor"])
        self.critic.load_state_dict(st["critic"])
        self.opt_actor.load_state_dict(st["opt_actor"])
        self.opt_critic.load_state_dict(st["opt_critic"])
        self.version = st["version"]
        torch.set_rng_state(st["torch_rng"])
        return self.version


@dataclass(frozen=True)
class ScoreWorkerConfig:
    reward: str
    reference: str
    cores: tuple[int, ...] | None = None
    pool: str = "score"


class ScoreWorker(_Recorder):
    """The frozen scorers: reward and reference, streamed (incremental prefill) or on whole sequences."""

    def __init__(self, cfg: ScoreWorkerConfig) -> None:
        super().__init__()
        from oppo_real.backends.scorer import IncrementalScorer, ScorerConfig

        self._place(cfg.pool, cfg.cores)
        self.reward = IncrementalScorer(ScorerConfig(kind="reward", model=cfg.reward))
        self.reference = IncrementalScorer(ScorerConfig(kind="reference", model=cfg.reference))

    def open(self, seqs: Sequence[tuple[str, Sequence[int]]]) -> None:
        for sid, prompt in seqs:
            for sc in (self.reward, self.reference):
                if sid not in sc.open_ids():
                    sc.open(sid, prompt)

    def feed(self, step: int, chunks: dict[str, Sequence[int]]) -> None:
        """Prefill streamed chunks incrementally (KV kept per sequence)."""
        n = sum(len(c) for c in chunks.values())
        for role, sc in (("reward", self.reward), ("reference", self.reference)):
            t0 = time.time()
            sc.feed_many(chunks)
            self._rec("score", role, step, t0, time.time(), n)

    def finish(self, step: int, sids: Sequence[str]) -> dict[str, tuple[float, list[float]]]:
        """Final reward and reference log-probs of streamed sequences (only their last chunk is left)."""
        out: dict[str, tuple[float, list[float]]] = {}
        t0 = time.time()
        rewards = {sid: self.reward.finish(sid) for sid in sids}
        t1 = time.time()
        refs = {sid: self.reference.finish(sid) for sid in sids}
        t2 = time.time()
        n = sum(r.n_response for r in rewards.values())
        self._rec("score", "reward", step, t0, t1, n)
        self._rec("score", "reference", step, t1, t2, n)
        for sid in sids:
            out[sid] = (float(rewards[sid].reward), list(refs[sid].logprobs))
        return out

    def score_whole(self, step: int, items: Sequence[tuple[str, Sequence[int], Sequence[int]]]) -> dict[str, tuple[float, list[float]]]:
        """Reward and reference log-probs of whole sequences (no streaming), batched."""
        n = sum(len(p) + len(r) for _, p, r in items)
        t0 = time.time()
        rw = self.reward.score_batch(items)
        t1 = time.time()
        rf = self.reference.score_batch(items)
        t2 = time.time()
        self._rec("score", "reward", step, t0, t1, n)
        self._rec("score", "reference", step, t1, t2, n)
        return {it[0]: (float(a.reward), list(b.logprobs)) for it, a, b in zip(items, rw, rf)}

    def drop(self, sids: Sequence[str]) -> None:
        for sid in sids:
            for sc in (self.reward, self.reference):
                if sid in sc.open_ids():
                    sc.drop(sid)
