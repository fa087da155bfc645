"""``run_real``: a whole real run — session, driver, a checkpoint after every step, the result."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from oppo_real.config import RealConfig
from oppo_real.executor.real_driver import Driver
from oppo_real.executor.real_result import RealResult, build_result
from oppo_real.executor.sample_store import has_checkpoint, load_checkpoint, save_checkpoint
from oppo_real.executor.session import Session
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import Policy
from oppo_sim.traces.trace import Trace


def checkpoint(d: Driver, directory: Path) -> None:
    """Write a checkpoint holding only completed steps (trainings drained, streamed scores settled)."""
    d.drain()
    d.settle(list(d.ledger.ready))
    directory.mkdir(parents=True, exist_ok=True)
    d.train.call("save", str(directory / "train.pt"))
    d.take_timeline()
    save_checkpoint(directory, d.ledger, d.store, d.step, {"records": d.records, "rollouts": d.rollouts, "timeline": d.timeline})


def restore(d: Driver, directory: Path) -> None:
    """Continue from ``directory``: models, optimizers, weights in the generator, ledger and samples."""
    rest = load_checkpoint(directory, d.ledger, d.store)
    d.train.call("load", str(directory / "train.pt"))
    step = rest["step"]
    d.gen.call("load_weights", step - 1, d.ledger.version, d.train.submit("weights", step - 1))
    for h in (d.gen, d.train, d.score):
        h.call("take_timeline")  # loading is not part of any step
    d.step, d.records, d.rollouts, d.timeline = step, rest["records"], rest["rollouts"], rest["timeline"]
    d.resumed_at = d.records[-1]["end"] if d.records else None


def run_real(cfg: RealConfig, policy: Policy, trace: Trace | None = None, *, out_dir: str | Path | None = None,
             resume: bool = False, overwrite: bool = False, on_step: Callable[[dict], None] | None = None,
             checkpoint_steps: bool = True) -> RealResult:
    """Run ``cfg.steps`` PPO steps of ``policy`` for real, checkpointing every step into ``out_dir`` (when
    given and ``checkpoint_steps``: a real-size model's optimizer state is gigabytes a step). An ``out_dir``
    that already holds a run is continued with ``resume``, replaced with ``overwrite``, and otherwise refused."""
    ckpt = Path(out_dir) / "checkpoint" if out_dir is not None and checkpoint_steps else None
    if resume and ckpt is None:
        raise ConfigError("resume needs an output directory holding a checkpoint")
    if ckpt is not None and not resume and not overwrite and has_checkpoint(Path(out_dir)):
        raise ConfigError(f"{out_dir} already holds a run (checkpoint/driver.json): pass --resume to continue it "
                          f"or --overwrite to start over")
    session = Session(cfg)
    try:
        d = Driver(cfg, policy, trace, session.start(), on_step)
        if resume:
            restore(d, ckpt)
        while d.step < cfg.steps:
            d.run_step()
            if ckpt is not None and not d.training:
                checkpoint(d, ckpt)
        d.drain()
        if ckpt is not None:
            checkpoint(d, ckpt)
        d.take_timeline()
        return build_result(d, session.paths)
    finally:
        session.close()
