"""Tiny models, the toy task and the reward model's fit; configs validate; imports stay light."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from oppo_real.models.task import EOS_ID, SEP_ID, PromptSampler, TaskConfig, rule_reward
from oppo_real.models.tiny import (
    TinyModelConfig,
    build_models,
    load_causal_lm,
    load_value_model,
)
from oppo_sim.core.errors import ConfigError


@pytest.mark.parametrize(
    "kwargs",
    [dict(hidden=130), dict(heads=3, kv_heads=2, hidden=96), dict(vocab=0), dict(layers=0), dict(hidden=12, heads=4, kv_heads=2)],
)
def test_model_config_validation(kwargs):
    with pytest.raises(ConfigError):
        TinyModelConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [dict(good_fraction=0.0), dict(good_fraction=1.0), dict(prompt_len_min=5, prompt_len_max=4), dict(vocab=4),
     dict(reward_train_steps=-1)],
)
def test_task_config_validation(kwargs):
    with pytest.raises(ConfigError):
        TaskConfig(**kwargs)


def test_prompt_sampler_is_deterministic_and_well_formed(task_cfg):
    a, b = PromptSampler(task_cfg).sample(20), PromptSampler(task_cfg).sample(20)
    assert a == b
    assert PromptSampler(task_cfg, seed=99).sample(20) != a
    for p in a:
        assert p[-1] == SEP_ID
        assert task_cfg.prompt_len_min + 1 <= len(p) <= task_cfg.prompt_len_max + 1
        assert all(3 <= t < task_cfg.vocab for t in p[:-1])


def test_rule_reward(task_cfg):
    good = task_cfg.good_tokens()
    bad = np.setdiff1d(np.arange(3, task_cfg.vocab), good)
    assert rule_reward(task_cfg, []) == 0.0
    assert rule_reward(task_cfg, [int(good[0])] * 4) == 1.0
    assert rule_reward(task_cfg, [int(good[0]), int(bad[0]), int(bad[1]), EOS_ID]) == 0.25
    assert abs(len(good) / (task_cfg.vocab - 3) - task_cfg.good_fraction) < 0.01


def test_build_models_layout_and_cache(models, model_cfg, task_cfg):
    for d in (models.actor, models.reference, models.reward, models.critic):
        assert (d / "config.json").exists() and (d / "model.safetensors").exists()
    assert (models.actor / "generation_config.json").exists()
    stamp = (models.reward / "model.safetensors").stat().st_mtime_ns
    again = build_models(models.root.parent, model_cfg, task_cfg)  # cached: no rebuild
    assert again == models
    assert (models.reward / "model.safetensors").stat().st_mtime_ns == stamp


def test_reference_equals_initial_actor_and_shapes(models, model_cfg):
    actor, ref = load_causal_lm(models.actor), load_causal_lm(models.reference)
    for (k, a), (k2, b) in zip(actor.state_dict().items(), ref.state_dict().items()):
        assert k == k2 and torch.equal(a, b)
    assert actor.config.vocab_size == model_cfg.vocab and actor.config.num_hidden_layers == model_cfg.layers
    critic = load_value_model(models.critic)
    out = critic(input_ids=torch.tensor([[5, 6, 7, SEP_ID]])).logits
    assert out.shape == (1, 4, 1)


def test_reward_model_tracks_the_rule(models, task_cfg):
    from oppo_real.models.task import evaluate_reward_model

    assert models.reward_fit["correlation"] > 0.85, models.reward_fit
    corr, mae = evaluate_reward_model(load_value_model(models.reward), task_cfg, n=128, seed=7)
    assert corr > 0.85 and mae < 0.15


def test_any_local_actor_dir_can_be_used(models, tmp_path):
    from oppo_real.models.tiny import build_models_from_actor

    task = TaskConfig(reward_train_steps=3, reward_eval_samples=16)
    paths = build_models_from_actor(tmp_path, models.actor, task)
    assert paths.actor == paths.reference == models.actor.resolve()
    for d in (paths.reward, paths.critic):
        assert (d / "config.json").exists()
    critic = load_value_model(paths.critic)
    assert critic(input_ids=torch.tensor([[5, 6, SEP_ID]])).logits.shape == (1, 3, 1)
    assert build_models_from_actor(tmp_path, models.actor, task) == paths  # cached
    with pytest.raises(ConfigError):
        build_models_from_actor(tmp_path, tmp_path / "nowhere", task)


def test_importing_oppo_real_does_not_import_vllm():
    code = (
        "import sys\n"
        "import oppo_real.backends.api, oppo_real.backends.vllm_actor, oppo_real.backends.torch_actor, oppo_real.backends.scorer\n"
        "import oppo_real.ppo.algo, oppo_real.models.task, oppo_real.models.tiny\n"
        "assert 'vllm' not in sys.modules, 'vllm imported'\n"
        "import oppo_real.models.task, oppo_real.models.tiny, oppo_real.backends.api\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    code_light = (
        "import sys\n"
        "import oppo_real.models.task, oppo_real.models.tiny, oppo_real.backends.api, oppo_real.backends.vllm_actor\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code_light], check=True, timeout=120)
