"""The real executor: PPO-RLHF on real engines, scheduled by the simulator's own policy objects.

The driver (this process) asks the policy what to do each step — admit how many prompts, stream how,
end generation when, defer what — exactly as the simulator's pipeline does, and tells three role
workers (see `workers.py`; Ray actors by default) to do it:

    gen   : actor generation (vLLM or torch), step by step, token ids in and out
    train : actor log-probs + critic values on whole sequences, PPO update, weights for the sync
    score : reward + reference (frozen), fed chunk by chunk while the actor decodes, or whole

Streaming uses the same rule as the simulator: chunks go to the frozen scorers on their own pool.
Deferred requests are aborted with their tokens kept and resumed next step as prompt + tokens so far;
their behaviour log-probs stay those of the policy that produced each token, and their staleness is
recorded. The result has the simulator's per-step and timeline schema, measured from the wall clock.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from oppo_real.backends.api import GenRequest, SamplingConfig
from oppo_real.models.task import PromptSampler, TaskConfig, rule_reward
from oppo_real.models.tiny import TinyModelConfig
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import (
    Policy,
    PolicyState,
    StepContext,
    StepOutcome,
    Streaming,
)
from oppo_sim.core.results import (
    STEP_COLUMNS,
    TIMELINE_COLUMNS,
    SimResult,
    busy_fraction,
    summarize,
)
from oppo_sim.traces.trace import Trace


@dataclass(frozen=True)
class RealConfig:
    """A real run. Defaults fit a 2-core CPU machine: tiny locally built models, B=8."""

    batch: int = 8
    steps: int = 10
    seed: int = 0
    backend: str = "vllm"  # actor generation: "vllm" | "torch"
    model_dir: str | None = None  # a local HF causal-LM directory replacing the tiny actor
    cache_dir: str | None = None  # where built models are cached (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    max_response: int = 64  # max new tokens (natural lengths end at EOS or here)
    length_scale: float = 1.0  # forced lengths from a trace are multiplied by this (then capped)
    temperature: float = 1.0
    ppo: Any = None  # oppo_real.ppo.algo.PPOConfig (default: its defaults)
    workers: str = "ray"  # "ray" | "local"
    ray_address: str | None = None
    main_cores: tuple[int, ...] | None = (0,)  # the generate+train pool
    score_cores: tuple[int, ...] | None = (1,)  # the scoring pool
    gen_iters_per_call: int = 32  # engine iterations per remote call at most (returns early at events)
    gpus_per_worker: float = 0.0  # Ray GPUs per role worker (GPU machines)

    def __post_init__(self) -> None:
        for name in ("batch", "steps", "max_response", "gen_iters_per_call"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.backend not in ("vllm", "torch"):
            raise ConfigError(f"unknown backend '{self.backend}'; known: vllm, torch")
        if self.workers not in ("ray", "local"):
            raise ConfigError(f"unknown workers '{self.workers}'; known: ray, local")
        if self.length_scale <= 0:
            raise ConfigError(f"length_scale must be > 0, got {self.length_scale}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.max_response + self.task.prompt_len_max + 2 > self.tiny.max_position and self.model_dir is None:
            raise ConfigError(
                f"max_response {self.max_response} + prompts up to {self.task.prompt_len_max} tokens exceed the "
                f"model's {self.tiny.max_position} positions"
            )


@dataclass
class RSample:
    """A prompt admitted into the run, from admission until it is trained."""

    sid: int
    prompt: tuple[int, ...]
    budget: int  # response tokens allowed in total (forced length, or the cap)
    forced: bool  # ignore EOS: the response is exactly `budget` tokens
    admit_step: int
    admit_version: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    segment: int = 0  # resumptions so far
    emitted: int = 0  # response tokens already fed to the streamed scorers
    opened: bool = False  # the score worker holds its KV
    finished: bool = False
    finish_reason: str | None = None
    score: float | None = None
    ref_logprobs: list[float] | None = None

    @property
    def req_id(self) -> str:
        return f"s{self.sid}.{self.segment}"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RealResult(SimResult):
    """A :class:`SimResult` (same step/timeline/summary schema) plus the real run's own outputs."""

    rollouts: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per trained sample


class Executor:
    """Runs ``policy`` for real. Use :func:`run_real` unless you need to drive it step by step."""

    def __init__(self, cfg: RealConfig, policy: Policy, trace: Trace | None = None,
                 on_step: Callable[[dict], None] | None = None) -> None:
        self.cfg = cfg
        self.policy = policy
        self.trace = trace
        self.on_step = on_step
        self.state: PolicyState = policy.initial_state()
        self.sampler = PromptSampler(cfg.task, seed=cfg.seed)
        self.next_sid = 0
        self.next_row = 0
        self.version = 0
        self.deferred: list[RSample] = []
        self.ready: list[RSample] = []
        self.records: list[dict] = []
        self.rollouts: list[dict] = []
        self.admitted_total = 0
        self.trained_total = 0
        self.trained: set[int] = set()
        self.step = 0
        self._restarted = False  # the next step is the first after a resume: its step time starts at its own start
        self._training: list[dict] = []  # PPO updates submitted and not yet synced (async plans keep some in flight)
        self.handles: dict[str, Any] = {}
        self._good = cfg.task.good_mask()
        self._feeds: list[Any] = []  # outstanding streamed-chunk work on the score worker
        self._finals: dict[int, Any] = {}  # sid -> outstanding final score of a streamed sample

    # -- set-up ----------------------------------------------------------------------------------------
    def start(self) -> None:
        from oppo_real.models.tiny import (
            build_models,
            build_models_from_actor,
            default_cache_dir,
        )
        from oppo_real.ppo.algo import PPOConfig
        from oppo_real.workers import placement
        from oppo_real.workers.roles import (
            GenWorker,
            GenWorkerConfig,
            ScoreWorker,
            ScoreWorkerConfig,
            TrainWorker,
            TrainWorkerConfig,
        )

        cfg = self.cfg
        cache = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
        if cfg.model_dir:
            if not Path(cfg.model_dir).is_dir():
                raise ConfigError(f"--model {cfg.model_dir}: not a directory")
            paths = build_models_from_actor(cache, Path(cfg.model_dir), cfg.task, seed=cfg.seed)
        else:
            paths = build_models(cache, cfg.tiny, cfg.task)
        self.paths = paths
        if cfg.workers == "ray":
            placement.start_ray(cfg.ray_address)
        ppo = cfg.ppo or PPOConfig()
        if ppo.minibatches > cfg.batch:
            raise ConfigError(f"PPO minibatches ({ppo.minibatches}) exceed the batch size ({cfg.batch})")
        sampling = SamplingConfig(temperature=cfg.temperature, seed=cfg.seed)
        max_len = cfg.tiny.max_position if not cfg.model_dir else 4096
        # Ray resources: the two main-pool workers share its cores (as generation and training share the
        # paper's 7 GPUs); the scorer has its own. Fractions keep every worker placeable on a small machine.
        main_cpus = max(1, len(cfg.main_cores or (0,))) / 2
        score_cpus = max(1, len(cfg.score_cores or (0,)))
        self.handles = {
            "gen": placement.spawn(cfg.workers, "gen", GenWorker, GenWorkerConfig(
                actor=str(paths.actor), backend=cfg.backend, sampling=sampling, max_model_len=max_len,
                cores=cfg.main_cores), num_cpus=main_cpus, num_gpus=cfg.gpus_per_worker),
            "train": placement.spawn(cfg.workers, "train", TrainWorker, TrainWorkerConfig(
                actor=str(paths.actor), critic=str(paths.critic), ppo=ppo, cores=cfg.main_cores, seed=cfg.seed),
                num_cpus=main_cpus, num_gpus=cfg.gpus_per_worker),
            "score": placement.spawn(cfg.workers, "score", ScoreWorker, ScoreWorkerConfig(
                reward=str(paths.reward), reference=str(paths.reference), cores=cfg.score_cores),
                num_cpus=score_cpus, num_gpus=cfg.gpus_per_worker),
        }
        self.t0 = time.time()

    def close(self) -> None:
        for h in self.handles.values():
            try:
                h.kill()
            except Exception:  # pragma: no cover - best effort at shutdown
                pass
        self.handles = {}

    # -- samples ---------------------------------------------------------------------------------------
    def _new_sample(self, step: int) -> RSample:
        cfg = self.cfg
        prompt = self.sampler.sample(1)[0]
        if self.trace is not None:
            _, resp = self.trace.row(self.next_row)
            self.next_row += 1
            budget, forced = max(1, min(cfg.max_response, int(round(resp * cfg.length_scale)))), True
        else:
            budget, forced = cfg.max_response, False
        s = RSample(self.next_sid, prompt, budget, forced, step, self.version)
        self.next_sid += 1
        self.admitted_total += 1
        return s

    def _request(self, s: RSample) -> GenRequest:
        return GenRequest(s.req_id, s.prompt + tuple(s.tokens), s.budget - len(s.tokens), ignore_eos=s.forced)

    # -- one step --------------------------------------------------------------------------------------
    def run_step(self) -> dict:
        cfg, t = self.cfg, self.step
        gen, score, train = self.handles["gen"], self.handles["score"], self.handles["train"]
        plan = self.policy.plan(self.state, StepContext(t, cfg.batch, carried=len(self.deferred), carried_finished=len(self.ready)))
        while self._training and self.version < t - plan.max_staleness:  # bounded staleness: wait for weights
            self._finish_training()
        streamed = plan.streaming is not Streaming.NONE
        chunk = plan.chunk if plan.streaming is Streaming.CHUNKED else None
        start = time.time()
        active: dict[str, RSample] = {}
        pause_at: dict[int, int] = {}
        admitted = finished = refilled = 0

        def launch(batch: list[RSample]) -> None:
            if not batch:
                return
            reqs = []
            opens = []
            for s in batch:
                s.segment += 1
                active[s.req_id] = s
                reqs.append(self._request(s))
                if plan.token_budget is not None:
                    pause_at[s.sid] = len(s.tokens) + plan.token_budget
                if streamed and not s.opened:
                    s.opened = True
                    opens.append((str(s.sid), s.prompt))
            if opens:
                self._feeds.append(score.submit("open", opens))
            gen.call("add", reqs)

        carried, self.deferred = self.deferred, []
        new = [self._new_sample(t) for _ in range(plan.admit)]
        admitted += len(new)
        launch(carried + new)
        end_after = plan.end_after

        def done() -> bool:
            return (end_after is not None and finished >= end_after) or not active

        while not done():
            report = {}
            for rid, s in active.items():
                marks = []
                if chunk:
                    marks.append((len(s.tokens) // chunk + 1) * chunk - len(s.tokens))
                if s.sid in pause_at:
                    marks.append(pause_at[s.sid] - len(s.tokens))
                if marks:
                    report[rid] = max(1, min(marks))
            while self._finish_training(block=False):  # a training finished meanwhile: sync its weights now
                pass
            out = gen.call("generate", t, cfg.gen_iters_per_call, report)
            feeds: dict[str, list[int]] = {}
            finals: list[RSample] = []
            paused: list[RSample] = []
            for rid, toks in out.tokens.items():
                s = active.get(rid)
                if s is None:
                    continue
                s.tokens.extend(toks)
                s.logprobs.extend(out.logprobs[rid])
            for rid, s in list(active.items()):
                if rid in out.finished:
                    s.finished, s.finish_reason = True, out.finished[rid]
                    del active[rid]
                    finished += 1
                    self.ready.append(s)
                    if streamed:
                        finals.append(s)
                elif s.sid in pause_at and len(s.tokens) >= pause_at[s.sid]:
                    del active[rid]
                    paused.append(s)
                if streamed and chunk and not s.finished:
                    full = (len(s.tokens) // chunk) * chunk
                    if full > s.emitted:
                        feeds[str(s.sid)] = s.tokens[s.emitted:full]
                        s.emitted = full
            for s in finals:  # the rest of a finished response, then its final score
                if len(s.tokens) > s.emitted:
                    feeds[str(s.sid)] = s.tokens[s.emitted:]
                    s.emitted = len(s.tokens)
            if feeds:
                self._feeds.append(score.submit("feed", t, feeds))
            for s in finals:
                self._finals[s.sid] = score.submit("finish", t, [str(s.sid)])
            if paused:
                gen.call("abort", [s.req_id for s in paused])
                self.deferred.extend(paused)
                refill = []
                for _ in paused:
                    if plan.refill and end_after is not None and finished + len(active) + len(refill) < end_after:
                        if refilled < cfg.batch:
                            refilled += 1
                            admitted += 1
                            refill.append(self._new_sample(t))
                        else:
                            refill.append(self.deferred.pop(0))
                launch(refill)
            if out.iterations == 0 and active:
                raise RuntimeError(f"step {t}: the generator has no unfinished requests but {len(active)} are active")
        # generation ends: whatever is unfinished is deferred with its tokens
        if active:
            gen.call("abort", [rid for rid in active])
            self.deferred.extend(active.values())
        gen_end = time.time()
        if len(self.ready) < cfg.batch:
            raise ConfigError(f"step {t}: only {len(self.ready)} of {cfg.batch} samples finished; the plan cannot fill a batch")
        batch, self.ready = self.ready[: cfg.batch], self.ready[cfg.batch:]
        # scoring: streamed samples only need their final answer; the rest are scored whole now
        whole = [s for s in batch if s.score is None and s.sid not in self._finals]
        results: dict[str, tuple[float, list[float]]] = {}
        if whole:
            results.update(score.call("score_whole", t, [(str(s.sid), s.prompt, tuple(s.tokens)) for s in whole]))
        self._settle(batch)
        for s in batch:
            if s.score is None:
                s.score, s.ref_logprobs = results[str(s.sid)]
        score_end = time.time()
        # training (asynchronous when the plan allows staleness), then the weight sync into the generator
        job = {
            "t": t, "plan": plan, "batch": batch, "start": start, "gen_end": gen_end, "score_end": score_end,
            "admitted": admitted, "deferred": len(self.deferred),
            "ref": train.submit("train", t, {
                "prompts": [s.prompt for s in batch], "responses": [s.tokens for s in batch],
                "scores": [s.score for s in batch], "ref_logprobs": [s.ref_logprobs for s in batch],
                "behaviour_logprobs": [s.logprobs for s in batch],
            }),
        }
        self._training.append(job)
        self.step += 1
        while len(self._training) > plan.max_staleness:  # synchronous plans wait for this very step
            self._finish_training()
        return self.records[-1] if self.records else {}

    def _finish_training(self, block: bool = True) -> bool:
        """Complete the oldest training in flight: wait for it, sync its weights into the generator, record
        the step and let the policy update. With ``block=False`` only if it is already done."""
        if not self._training:
            return False
        job = self._training[0]
        train, gen = self.handles["train"], self.handles["gen"]
        if not block and not train.ready(job["ref"]):
            return False
        self._training.pop(0)
        t, batch, plan = job["t"], job["batch"], job["plan"]
        stats = train.wait([job["ref"]])[0]
        train_end = time.time()
        weights = train.submit("weights", t)
        sync_s = gen.call("load_weights", t, t + 1, weights)
        end = time.time()
        self.version += 1
        stale = [t - s.admit_version for s in batch]
        rewards = [rule_reward(self.cfg.task, s.tokens, self._good) for s in batch]
        mean_score = float(np.mean([s.score for s in batch]))
        for s, rr in zip(batch, rewards):
            if s.sid in self.trained:
                raise AssertionError(f"sample {s.sid} trained twice")
            self.trained.add(s.sid)
            self.rollouts.append({"step": t, "sid": s.sid, "prompt_tokens": len(s.prompt), "response_tokens": len(s.tokens),
                                  "reward": rr, "rm_score": s.score, "finish_reason": s.finish_reason,
                                  "staleness": t - s.admit_version, "segments": s.segment})
        self.trained_total += len(batch)
        start = job["start"]
        prev_end = self.records[-1]["end"] if self.records and not self._restarted else start
        self._restarted = False
        rec = {
            "step": t, "start": start, "end": end, "step_time_s": end - prev_end,
            "generation_s": job["gen_end"] - start, "scoring_s": job["score_end"] - job["gen_end"],
            "training_s": train_end - job["score_end"], "sync_s": end - train_end, "samples": len(batch),
            "tokens": sum(len(s.tokens) for s in batch), "prompt_tokens": sum(len(s.prompt) for s in batch),
            "admitted": job["admitted"], "deferred": job["deferred"], "delta": plan.delta, "chunk": plan.chunk,
            "staleness_mean": float(np.mean(stale)), "staleness_max": int(max(stale)), "reward": float(np.mean(rewards)),
            "rm_score": mean_score, "policy_loss": stats.get("policy_loss", math.nan),
            "mean_kl": stats.get("mean_kl", math.nan), "weight_sync_s": sync_s,
        }
        self.records.append(rec)
        self.state = self.policy.update(self.state, StepOutcome(t, rec["step_time_s"], mean_score, len(batch), job["deferred"]))
        if self.on_step is not None:
            self.on_step(rec)
        return True

    def drain(self) -> None:
        """Finish every training still in flight (end of run, before a checkpoint)."""
        while self._training:
            self._finish_training()

    def _settle(self, samples: list[RSample]) -> None:
        """Wait for outstanding streamed work and store the final scores of ``samples`` that have one."""
        score = self.handles["score"]
        if self._feeds:
            score.wait(self._feeds)
            self._feeds = []
        for s in samples:
            ref = self._finals.pop(s.sid, None)
            if ref is not None:
                (s.score, s.ref_logprobs), = score.wait([ref])[0].values()

    def in_flight(self) -> int:
        return len(self.deferred) + len(self.ready)

    # -- results ---------------------------------------------------------------------------------------
    def result(self) -> RealResult:
        rows = []
        for h in self.handles.values():
            rows.extend(h.call("take_timeline"))
        self._timeline = getattr(self, "_timeline", []) + rows
        t0 = self.records[0]["start"] if self.records else 0.0
        tl = pd.DataFrame(self._timeline, columns=TIMELINE_COLUMNS)
        tl["start"] -= t0
        tl["end"] -= t0
        tl = tl.sort_values(["start", "pool", "devices"], kind="stable").reset_index(drop=True)
        st = pd.DataFrame(self.records)
        for c in ("start", "end"):
            st[c] -= t0
        extra = [c for c in st.columns if c not in STEP_COLUMNS]
        st = st[STEP_COLUMNS + extra]
        st["chunk"] = st["chunk"].astype("Int64")
        wall = float(st["end"].max()) if len(st) else 0.0
        busy = busy_fraction(tl, 0.0, wall)
        pools = sorted(busy)
        summary = summarize(st, tl, {p: 1 for p in pools}, {p: math.nan for p in pools}, busy, self.cfg.batch)
        summary.update({
            "policy": self.policy.label(), "backend": self.cfg.backend, "workers": self.cfg.workers,
            "admitted": self.admitted_total, "in_flight_end": self.in_flight(),
            "reward_curve": [float(x) for x in st["reward"]], "rm_score_curve": [float(x) for x in st["rm_score"]],
            "final_reward": float(st["reward"].tail(min(10, len(st))).mean()) if len(st) else math.nan,
            "trace": self.trace.name if self.trace is not None else "natural-eos",
        })
        summary["flop_utilization"] = None
        meta = {"config": _jsonable_cfg(self.cfg), "models": {k: str(v) for k, v in asdict(self.paths).items()}}
        return RealResult(st, tl, summary, meta, rollouts=pd.DataFrame(self.rollouts))

    # -- checkpoints -----------------------------------------------------------------------------------
    def save_checkpoint(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.drain()  # a checkpoint holds only completed steps
        self._settle(self.ready)  # finished extras: their final scores go into the checkpoint
        self.handles["train"].call("save", str(directory / "train.pt"))
        rows = []
        for h in self.handles.values():
            rows.extend(h.call("take_timeline"))
        self._timeline = getattr(self, "_timeline", []) + rows
        state = {
            "format": "oppo-real-checkpoint/1", "step": self.step, "version": self.version,
            "policy_state": asdict(self.state), "next_sid": self.next_sid, "next_row": self.next_row,
            "sampler": self.sampler._rng.bit_generator.state, "admitted_total": self.admitted_total,
            "trained": sorted(self.trained), "deferred": [s.to_json() for s in self.deferred],
            "ready": [s.to_json() for s in self.ready], "records": self.records, "rollouts": self.rollouts,
            "timeline": self._timeline,
        }
        tmp = directory / "driver.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(directory / "driver.json")

    def load_checkpoint(self, directory: Path) -> None:
        path = directory / "driver.json"
        if not path.exists():
            raise ConfigError(f"{directory}: no checkpoint (driver.json missing)")
        st = json.loads(path.read_text())
        if st.get("format") != "oppo-real-checkpoint/1":
            raise ConfigError(f"{path}: not an oppo-real checkpoint")
        self.handles["train"].call("load", str(directory / "train.pt"))
        weights = self.handles["train"].submit("weights", st["step"] - 1)
        self.handles["gen"].call("load_weights", st["step"] - 1, st["version"], weights)
        self.handles["gen"].call("take_timeline")
        self.handles["train"].call("take_timeline")
        ps = st["policy_state"]
        self.state = PolicyState(delta=ps["delta"], chunk=ps["chunk"], rewards=tuple(ps["rewards"]),
                                 tune_trials=tuple(tuple(x) for x in ps["tune_trials"]))
        self.step, self.version = st["step"], st["version"]
        self.next_sid, self.next_row = st["next_sid"], st["next_row"]
        self.sampler._rng.bit_generator.state = st["sampler"]
        self.admitted_total = st["admitted_total"]
        self.trained = set(st["trained"])
        self.trained_total = len(self.trained)
        self.deferred = [_sample_from_json(d) for d in st["deferred"]]
        self.ready = [_sample_from_json(d) for d in st["ready"]]
        self.records, self.rollouts, self._timeline = st["records"], st["rollouts"], st["timeline"]
        self._restarted = True  # the restart gap is not part of the next step's time
        # a streamed sample's scorer KV did not survive the restart: it is re-fed from the start
        for s in self.deferred + self.ready:
            s.opened, s.emitted = False, 0


def _sample_from_json(d: dict) -> RSample:
    d = dict(d)
    d["prompt"] = tuple(d["prompt"])
    return RSample(**d)


def _jsonable_cfg(cfg: RealConfig) -> dict:
    d = asdict(replace(cfg, ppo=None))
    d["ppo"] = asdict(cfg.ppo) if cfg.ppo is not None else None
    return d


def run_real(cfg: RealConfig, policy: Policy, trace: Trace | None = None, *, out_dir: str | Path | None = None,
             resume: bool = False, on_step: Callable[[dict], None] | None = None) -> RealResult:
    """Run ``cfg.steps`` PPO steps of ``policy`` for real (resuming from ``out_dir``'s checkpoint if asked),
    checkpointing every step into ``out_dir`` when given."""
    ex = Executor(cfg, policy, trace, on_step)
    ckpt = Path(out_dir) / "checkpoint" if out_dir is not None else None
    try:
        ex.start()
        if resume:
            if ckpt is None:
                raise ConfigError("resume needs an output directory holding a checkpoint")
            ex.load_checkpoint(ckpt)
        while ex.step < cfg.steps:
            ex.run_step()
            if ckpt is not None and not ex._training:
                ex.save_checkpoint(ckpt)
        ex.drain()
        if ckpt is not None:
            ex.save_checkpoint(ckpt)
        return ex.result()
    finally:
        ex.close()
