"""``run_real``: a whole real run — session, driver, a checkpoint after every step, the result."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from oppo_real.checkpoints.layout import LEDGER_NAME, has_checkpoint
from oppo_real.checkpoints.save_restore import Checkpointer
from oppo_real.config import RealConfig
from oppo_real.executor.real_driver import Driver, refuse_overlap
from oppo_real.executor.real_result import RealResult, build_result
from oppo_real.executor.session import Session
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import Policy
from oppo_sim.traces.trace import Trace


def run_real(cfg: RealConfig, policy: Policy, trace: Trace | None = None, *, out_dir: str | Path | None = None,
             resume: bool = False, overwrite: bool = False, on_step: Callable[[dict], None] | None = None,
             checkpoint_steps: bool = True) -> RealResult:
    """Run ``cfg.steps`` PPO steps of ``policy`` for real, checkpointing after every step into
    ``out_dir/checkpoint`` (when given and ``checkpoint_steps``: a real-size model's optimizer state is
    gigabytes a step) — under every policy, ``async`` included (its training in flight is deferred to the
    restart, see :mod:`oppo_real.checkpoints.save_restore`). An ``out_dir`` that already holds a run is
    continued with ``resume``, replaced with ``overwrite``, and otherwise refused."""
    ckpt = Path(out_dir) / "checkpoint" if out_dir is not None and checkpoint_steps else None
    if resume and ckpt is None:
        raise ConfigError("resume needs an output directory holding a checkpoint")
    if ckpt is not None and not resume and not overwrite and has_checkpoint(Path(out_dir)):
        raise ConfigError(f"{out_dir} already holds a run (checkpoint/{LEDGER_NAME}): pass --resume to continue it "
                          f"or --overwrite to start over")
    refuse_overlap(policy, cfg.batch)  # before any worker starts
    session = Session(cfg)
    try:
        d = Driver(cfg, policy, trace, session.start(policy), on_step)
        saver = Checkpointer(d, ckpt) if ckpt is not None else None
        if resume:
            saver.restore()
        elif saver is not None:  # --overwrite: the old run is gone once this one starts
            (ckpt / LEDGER_NAME).unlink(missing_ok=True)
        while d.step < cfg.steps:
            d.run_step()
            if saver is not None:
                saver.save()
        # the trainings still in flight finish; the checkpoint stays the last step's (with them deferred to a
        # restart), so a run extended with --resume continues as one run of all its steps would have
        d.drain()
        if saver is not None:
            saver.flush()
        d.take_timeline()
        return build_result(d, session.paths)
    finally:
        session.close()
