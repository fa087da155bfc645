"""GRPO-family runs on the real executor: `oppo-real run --algorithm grpo --n 4` end to end on CPU (local
workers and Ray), the rule reward as the default (a real function of the tokens, computed in the driver
on the "cpu" pool), no critic built and no reward model loaded, the n members of a group sharing one
prompt, whole groups in every trained batch, and dapo's dynamic sampling.

Whole-group batches (a step trains B x n responses) and dapo's drops are the step machine's rules
(``oppo_sim.core``); the real side reports each finished response's rule reward for dapo.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from oppo_real.cli import main
from oppo_real.config import RealConfig
from oppo_real.executor.real_driver import Driver
from oppo_real.executor.sample_store import SampleStore
from oppo_real.executor.session import Session
from oppo_real.models.task import TaskConfig, rule_reward
from oppo_real.ppo.algo import PPOConfig
from oppo_sim.core.algorithms import Algorithm
from oppo_sim.core.policies import make_policy

B, N, STEPS = 2, 4, 3


def _cfg(models, algorithm: Algorithm, **kw) -> RealConfig:
    base = dict(batch=B, steps=STEPS, backend="torch", workers="local", max_response=16, cache_dir=str(models.root.parent),
                seed=0, ppo=PPOConfig(epochs=1, minibatches=2, lr_actor=1e-3), algorithm=algorithm)
    base.update(kw)
    return RealConfig(**base)


def _drive(cfg: RealConfig, policy: str = "oppo"):
    """Run ``cfg`` step by step: (the TrainBatches handed to the train worker, the driver's timeline)."""
    session = Session(cfg)
    batches = []
    try:
        d = Driver(cfg, make_policy(policy, chunk=8, delta=2), None, session.start())
        worker = session.handles["train"].obj
        real_train = worker.train
        worker.train = lambda batch: (batches.append(batch), real_train(batch))[1]
        while d.step < cfg.steps:
            d.run_step()
        d.drain()
        d.take_timeline()
        return batches, pd.DataFrame(d.timeline, columns=["pool", "devices", "activity", "role", "step", "start", "end",
                                                           "tokens", "flops", "recompute_flops"])
    finally:
        session.close()


def _admitted(store: SampleStore, sid: int):
    """Create ``sid`` as the driver does: admitted first (``target_of`` gives its budget), then created."""
    store.target_of(sid, 0)
    return store.create(sid)


def test_group_members_share_one_prompt(task_cfg):
    store = SampleStore(RealConfig(batch=B, algorithm=Algorithm("grpo", n=N, reward="rule")), None)
    prompts = [_admitted(store, sid).prompt for sid in range(3 * N)]
    for g in range(3):
        assert len(set(prompts[g * N:(g + 1) * N])) == 1
    assert len({prompts[0], prompts[N], prompts[2 * N]}) == 3
    ppo = SampleStore(RealConfig(batch=B), None)  # n = 1: every sample its own prompt, as before
    assert len({_admitted(ppo, sid).prompt for sid in range(4)}) == 4


def test_rule_reward_is_a_function_of_the_tokens(task_cfg):
    store = SampleStore(RealConfig(batch=B, algorithm=Algorithm("grpo", n=N, reward="rule")), None)
    good, bad = task_cfg.good_tokens(), np.setdiff1d(np.arange(3, task_cfg.vocab), task_cfg.good_tokens())
    for sid, toks, want in ((0, good[:6], 1.0), (1, bad[:6], 0.0), (2, [*good[:3], *bad[:1]], 0.75)):
        _admitted(store, sid).tokens.extend(int(t) for t in toks)
        assert store.rule_reward(sid) == pytest.approx(want)


def test_rule_reward_and_no_critic_are_the_defaults_for_grpo(models):
    """The CLI's defaults: rule reward for grpo, reward model for ppo; the workers load no critic and no
    reward model under grpo, and no reference without the KL term."""
    from oppo_real.cli import build_parser
    from oppo_real.commands.common import algorithm_of
    from oppo_real.executor.session import build_run_models, worker_specs

    parse = build_parser().parse_args
    assert algorithm_of(parse(["run", "--algorithm", "grpo", "--n", "4"])).reward == "rule"
    assert algorithm_of(parse(["run"])).reward == "model"
    assert algorithm_of(parse(["run", "--algorithm", "grpo", "--reward", "model"])).reward == "model"
    assert algorithm_of(parse(["run", "--algorithm", "rloo", "--no-reference"])).kl is False
    cfg = _cfg(models, algorithm_of(parse(["run", "--algorithm", "grpo", "--n", "4"])))
    specs = worker_specs(cfg, build_run_models(cfg), cfg.ppo)
    assert specs["train"][1].critic is None and specs["score"][1].reward is None and specs["score"][1].reference
    off = _cfg(models, Algorithm("grpo", n=N, reward="rule", kl=False))
    assert worker_specs(off, build_run_models(off), off.ppo)["score"][1].reference is None
    ppo = _cfg(models, Algorithm())
    s = worker_specs(ppo, build_run_models(ppo), ppo.ppo)
    assert s["train"][1].critic and s["score"][1].reward and s["score"][1].reference


@pytest.mark.parametrize("kl", [True, False])
def test_grpo_trains_groups_with_rule_rewards_and_no_critic(models, kl):
    batches, tl = _drive(_cfg(models, Algorithm("grpo", n=N, reward="rule", kl=kl)))
    assert len(batches) == STEPS
    roles = set(tl["role"])
    assert "critic" not in roles and "reward" not in roles  # no critic pass, no reward model
    assert ("reference" in roles) == kl
    rule = tl[tl["role"] == "rule"]
    assert len(rule) and set(rule["pool"]) == {"cpu"} and set(rule["activity"]) == {"score"}
    for b in batches:
        assert b.groups and len(b.groups) == len(b.prompts)
        for g in set(b.groups):  # the members of a group in a batch share their prompt
            assert len({p for p, gg in zip(b.prompts, b.groups) if gg == g}) == 1
        assert list(b.scores) == pytest.approx([rule_reward(TaskConfig(), r) for r in b.responses])
        if not kl:
            assert all(set(ref) <= {0.0} for ref in b.ref_logprobs)


def test_a_step_trains_b_whole_groups(models):
    batches, _ = _drive(_cfg(models, Algorithm("grpo", n=N, reward="rule")))
    for b in batches:
        assert len(b.prompts) == B * N
        assert sorted(pd.Series(b.groups).value_counts().tolist()) == [N] * B


def test_dapo_drops_all_equal_groups(models):
    """One-token responses make 0/1 rule rewards, so some groups of 4 are all equal: dapo drops them and
    samples on; every trained group has rewards that differ."""
    cfg = _cfg(models, Algorithm("dapo", n=N, reward="rule"), max_response=1)
    session = Session(cfg)
    try:
        d = Driver(cfg, make_policy("oppo", chunk=8, delta=2), None, session.start())
        while d.step < cfg.steps:
            d.run_step()
        d.drain()
        assert d.ledger.dropped and not set(d.ledger.dropped) & {s for s in d.store.samples}
    finally:
        session.close()
    batches, _ = _drive(cfg)
    for b in batches:
        for g in set(b.groups):
            assert len({s for s, gg in zip(b.scores, b.groups) if gg == g}) > 1


def _run_cli(models, tmp_path, *extra):
    out = tmp_path / "run"
    argv = ["run", "--algorithm", "grpo", "--n", str(N), "--steps", str(STEPS), "--batch", str(B), "--max-response", "16",
            "--cache", str(models.root.parent), "--out", str(out), "--overwrite", *extra]
    assert main(argv) == 0
    return out


def _check_run(out, capsys):
    text = capsys.readouterr().out
    assert "grpo n=4 rule reward" in text  # the console names the algorithm
    st = pd.read_csv(out / "steps.csv")
    assert st["step"].tolist() == list(range(STEPS))
    tl = pd.read_csv(out / "timeline.csv")
    assert "critic" not in set(tl["role"]) and "rule" in set(tl["role"])
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["reward_curve"]) == STEPS
    assert pd.read_csv(out / "conservation.csv")["balanced"].all()
    ro = pd.read_csv(out / "rollouts.csv")
    assert (ro.groupby(ro["sid"] // N)["prompt_tokens"].nunique() == 1).all()
    return st


def test_grpo_cli_end_to_end_local(models, tmp_path, capsys):
    _check_run(_run_cli(models, tmp_path, "--backend", "torch", "--workers", "local"), capsys)


def test_grpo_cli_end_to_end_vllm_on_ray(models, vllm_ok, ray_started, tmp_path, capsys):
    """vLLM gets the n requests of a group with the same prompt ids (its prefix cache shares them)."""
    _check_run(_run_cli(models, tmp_path, "--backend", "vllm", "--workers", "ray"), capsys)


def test_bad_n_is_a_one_line_error(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "oppo_real.cli", "run", "--algorithm", "dapo", "--n", "1", "--steps", "1",
                        "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len([ln for ln in p.stderr.splitlines() if ln.strip()]) == 1 and "n >= 2" in p.stderr


def test_grpo_resume_continues_the_run(models, tmp_path, capsys):
    """A checkpoint without a critic (actor and its optimizer only) and the open groups' prompts; --resume
    continues to the same steps and samples as one run."""
    common = ["run", "--algorithm", "grpo", "--n", str(N), "--batch", str(B), "--max-response", "16", "--backend", "torch",
              "--workers", "local", "--cache", str(models.root.parent)]
    assert main([*common, "--steps", "2", "--out", str(tmp_path / "r")]) == 0
    assert main([*common, "--steps", "3", "--out", str(tmp_path / "r"), "--resume"]) == 0
    assert main([*common, "--steps", "3", "--out", str(tmp_path / "one")]) == 0
    capsys.readouterr()
    a, b = (pd.read_csv(tmp_path / d / "rollouts.csv") for d in ("r", "one"))
    assert a["step"].tolist() == b["step"].tolist() and a["sid"].tolist() == b["sid"].tolist()
    assert a["prompt_tokens"].tolist() == b["prompt_tokens"].tolist()
    assert a["response_tokens"].tolist() == b["response_tokens"].tolist()
