"""Small Qwen2-architecture models built locally from a config and cached on disk.

`build_models(cache_dir, cfg, task)` writes, once per (model config, task config), four Hugging Face
model directories loadable by transformers and vLLM (no downloads, no tokenizer needed):

- ``actor``: ``Qwen2ForCausalLM`` (config.json + model.safetensors + generation_config.json);
- ``reference``: a copy of the initial actor;
- ``reward``: ``Qwen2ForTokenClassification`` with ``num_labels=1`` (backbone + scalar head), trained
  at build time to predict the task's rule reward; its score is the head at the last token;
- ``critic``: initialised from the trained reward model (as OpenRLHF does); its values are the head at
  every response token.

`build_models_from_actor` does the same around any local HF causal-LM directory (the reference is that
directory itself; reward and critic get its backbone plus a fresh head).

Everything is deterministic given the seeds. torch/transformers are imported lazily.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oppo_sim.core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from oppo_real.models.task import RewardFit, TaskConfig

_FORMAT_VERSION = 1
_DONE_FILE = "oppo_models.json"


@dataclass(frozen=True)
class TinyModelConfig:
    """Shape of the locally built Qwen2 models (actor, and the reward/critic backbones)."""

    vocab: int = 512
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 352
    max_position: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab", "hidden", "layers", "heads", "kv_heads", "intermediate", "max_position"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"TinyModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.vocab < 8:
            raise ConfigError(f"TinyModelConfig.vocab must be at least 8, got {self.vocab}")
        if self.hidden % self.heads:
            raise ConfigError(f"TinyModelConfig.hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ConfigError(f"TinyModelConfig.heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if (self.hidden // self.heads) % 2:
            raise ConfigError(f"TinyModelConfig head dim ({self.hidden // self.heads}) must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def key(self) -> str:
        """Stable short hash of the config (the on-disk cache key)."""
        return stable_hash(asdict(self))

    def qwen2_config(self, **overrides: Any):
        """The transformers `Qwen2Config` for this shape (special ids from `oppo_real.models.task`)."""
        from transformers import Qwen2Config

        from oppo_real.models.task import EOS_ID, PAD_ID, SEP_ID

        kwargs: dict[str, Any] = dict(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=self.max_position,
            tie_word_embeddings=False,
            use_sliding_window=False,
            pad_token_id=PAD_ID,
            bos_token_id=SEP_ID,
            eos_token_id=EOS_ID,
            torch_dtype="float32",
        )
        kwargs.update(overrides)
        return Qwen2Config(**kwargs)


@dataclass(frozen=True)
class ModelPaths:
    """Where the four role models live. Each is a Hugging Face model directory."""

    root: Path
    actor: Path
    reference: Path
    reward: Path
    critic: Path
    reward_fit: dict[str, float]

    @classmethod
    def load(cls, root: Path) -> "ModelPaths":
        meta = json.loads((root / _DONE_FILE).read_text())
        paths = {k: Path(v) if Path(v).is_absolute() else root / v for k, v in meta["paths"].items()}
        return cls(root=root, reward_fit=dict(meta["reward_fit"]), **paths)


def done_file() -> str:
    """The file a finished model directory holds (its metadata); its presence marks the build complete."""
    return _DONE_FILE


def default_cache_dir() -> Path:
    """``$OPPO_MODEL_CACHE`` or ``~/.cache/oppo/models`` (not created here)."""
    env = os.environ.get("OPPO_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "oppo" / "models"


def build_models(cache_dir: Path, cfg: TinyModelConfig = TinyModelConfig(), task: "TaskConfig | None" = None) -> ModelPaths:
    """Create (once) and return the actor/reference/reward/critic directories for `cfg` and `task`."""
    from oppo_real.models.task import TaskConfig

    task = task or TaskConfig(vocab=cfg.vocab)
    if task.vocab != cfg.vocab:
        raise ConfigError(f"task vocab ({task.vocab}) differs from model vocab ({cfg.vocab})")
    root = Path(cache_dir) / f"tiny-{stable_hash({'v': _FORMAT_VERSION, 'model': asdict(cfg), 'task': asdict(task)})}"
    if (root / _DONE_FILE).exists():
        return ModelPaths.load(root)

    def make(tmp: Path) -> dict[str, Any]:
        import torch
        from transformers import GenerationConfig, Qwen2ForCausalLM

        from oppo_real.models.task import EOS_ID, PAD_ID, SEP_ID

        torch.manual_seed(cfg.seed)
        actor = Qwen2ForCausalLM(cfg.qwen2_config()).float().eval()
        actor.generation_config = GenerationConfig(
            eos_token_id=EOS_ID, pad_token_id=PAD_ID, bos_token_id=SEP_ID, do_sample=True, temperature=1.0
        )
        actor.save_pretrained(tmp / "actor")
        actor.save_pretrained(tmp / "reference")
        _write_tokenizer(tmp / "actor", cfg.vocab)
        _write_tokenizer(tmp / "reference", cfg.vocab)
        fit = _make_reward_and_critic(tmp / "actor", tmp, task, seed=cfg.seed + 1)
        return {"paths": {"actor": "actor", "reference": "reference", "reward": "reward", "critic": "critic"},
                "reward_fit": asdict(fit), "model": asdict(cfg), "task": asdict(task)}

    build_atomically(root, make)
    return ModelPaths.load(root)


def build_models_from_actor(cache_dir: Path, actor_dir: Path, task: "TaskConfig | None" = None, seed: int = 0) -> ModelPaths:
    """Use a local HF causal-LM directory as actor and reference; build reward and critic from its backbone."""
    from oppo_real.models.task import TaskConfig

    actor_dir = Path(actor_dir).resolve()
    if not (actor_dir / "config.json").exists():
        raise ConfigError(f"{actor_dir} is not a Hugging Face model directory (no config.json)")
    vocab = int(json.loads((actor_dir / "config.json").read_text()).get("vocab_size", 0))
    task = task or TaskConfig(vocab=vocab)
    if task.vocab > vocab:
        raise ConfigError(f"task vocab ({task.vocab}) exceeds the actor's vocab ({vocab})")
    stamp = {"v": _FORMAT_VERSION, "actor": str(actor_dir), "mtime": (actor_dir / "config.json").stat().st_mtime,
             "task": asdict(task), "seed": seed}
    root = Path(cache_dir) / f"from-{actor_dir.name}-{stable_hash(stamp)}"
    if (root / _DONE_FILE).exists():
        return ModelPaths.load(root)

    def make(tmp: Path) -> dict[str, Any]:
        fit = _make_reward_and_critic(actor_dir, tmp, task, seed=seed)
        return {"paths": {"actor": str(actor_dir), "reference": str(actor_dir), "reward": "reward", "critic": "critic"},
                "reward_fit": asdict(fit), "task": asdict(task)}

    build_atomically(root, make)
    return ModelPaths.load(root)


def load_causal_lm(path: Path, dtype: str = "float32"):
    """Load an actor/reference directory as a transformers causal LM in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()


def load_value_model(path: Path, dtype: str = "float32"):
    """Load a reward/critic directory (backbone + scalar head) in eval mode."""
    import torch
    from transformers import AutoModelForTokenClassification

    return AutoModelForTokenClassification.from_pretrained(path, dtype=getattr(torch, dtype)).eval()


# ---------------------------------------------------------------- internals


def _make_reward_and_critic(actor_dir: Path, out: Path, task: "TaskConfig", seed: int) -> "RewardFit":
    import torch
    from transformers import AutoConfig, AutoModelForTokenClassification

    from oppo_real.models.task import train_reward_model

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(actor_dir, num_labels=1)
    config.classifier_dropout = 0.0
    reward = AutoModelForTokenClassification.from_pretrained(actor_dir, config=config, dtype=torch.float32)
    fit = train_reward_model(reward, task)
    reward.eval().save_pretrained(out / "reward")
    reward.save_pretrained(out / "critic")
    return fit


def build_atomically(root: Path, make) -> None:
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=root.name + ".tmp-", dir=root.parent))
    try:
        meta = make(tmp)
        (tmp / _DONE_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))
        try:
            os.rename(tmp, root)
        except OSError:
            if not (root / _DONE_FILE).exists():  # not a concurrent builder's finished copy
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_tokenizer(path: Path, vocab: int) -> None:
    """A local word-level tokenizer ("t0".."tN") so tools that insist on a tokenizer find one."""
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # pragma: no cover - tokenizers ships with transformers
        return
    from oppo_real.models.task import EOS_ID, PAD_ID, SEP_ID

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="t0", pad_token=f"t{PAD_ID}", eos_token=f"t{EOS_ID}", bos_token=f"t{SEP_ID}"
    )
    fast.save_pretrained(path)


def stable_hash(obj: Any) -> str:
    """A short stable hash of a JSON-able object (the model cache's keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]
