"""Models of real shape, built locally with random weights: the exact architecture of an entry of the
simulator's model table (``oppo_sim.hw.models.lookup``, e.g. ``qwen2.5-0.5b``) — layers, hidden size, heads,
KV heads, MLP width, vocabulary, tied embeddings, q/k/v bias (Qwen2.5) or q/k-norm (Qwen3) — so a
forward, a decode iteration or a training pass costs what it costs on the trained checkpoint. Nothing is
downloaded.

:func:`build_shaped_models` writes, once per (shape, seed, positions), into the model cache:

- ``actor``: the causal LM (``Qwen2ForCausalLM``, ``Qwen3ForCausalLM`` or ``LlamaForCausalLM``), saved in
  bf16; the **reference** is the same directory (the frozen initial actor);
- ``reward``: the same backbone with a randomly initialised scalar head (``*ForTokenClassification``,
  one label); the **critic** starts from it (as OpenRLHF initialises the critic from the reward model).

What the reward then means: the reward model is *not* trained (that is done at build time only for the
tiny models, whose reward model learns the toy task's rule). Its score is a fixed random projection of
the last token's hidden state: deterministic for a sequence, unrelated to the task. PPO still runs
every pass of a real step on it, so step times, memory and utilization are those of the real-size
pipeline; the rule reward in ``steps.csv`` still measures the task, but a policy cannot learn it from
this reward model. Use real-shaped models to measure time, the tiny ones to see learning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.models.lookup import ModelSpec, get_model

DEFAULT_MAX_POSITION = 32768  # Qwen2.5's max_position_embeddings (0.5B-7B)


def family(spec: ModelSpec) -> str:
    """The Hugging Face architecture that has this shape: ``qwen3_moe`` (q/k-norm, routed experts, no shared
    one), ``qwen3`` (q/k-norm), ``qwen2`` (q/k/v bias) or ``llama``; another mixture of experts (shared
    experts, DeepSeek's router bias or MLA) -> ConfigError."""
    if spec.moe:
        if not spec.qk_norm or spec.shared_intermediate or spec.router_bias or spec.mla:
            raise ConfigError(f"model '{spec.id}': only Qwen3-MoE-like mixtures of experts (q/k-norm, routed experts, "
                              "no shared expert, no MLA) are built with random weights here")
        return "qwen3_moe"
    if spec.qk_norm:
        return "qwen3"
    return "qwen2" if spec.qkv_bias else "llama"


def hf_config(spec: ModelSpec, max_position: int = DEFAULT_MAX_POSITION, **overrides: Any):
    """The transformers config of ``spec`` (special token ids from the toy task, as the tiny models)."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig

    from oppo_real.models.task import EOS_ID, PAD_ID, SEP_ID

    kw: dict[str, Any] = dict(
        vocab_size=spec.vocab, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
        max_position_embeddings=max_position, tie_word_embeddings=spec.tied_embeddings, rms_norm_eps=1e-6,
        pad_token_id=PAD_ID, bos_token_id=SEP_ID, eos_token_id=EOS_ID, torch_dtype="bfloat16",
    )
    fam = family(spec)
    if fam == "qwen2":
        cls = Qwen2Config
        kw.update(use_sliding_window=False, rope_theta=1e6)
    elif fam == "qwen3":
        cls = Qwen3Config
        kw.update(head_dim=spec.hd, attention_bias=False, use_sliding_window=False, rope_theta=1e6)
    elif fam == "qwen3_moe":
        cls = Qwen3MoeConfig
        kw.update(head_dim=spec.hd, attention_bias=False, use_sliding_window=False, rope_theta=1e6,
                  num_experts=spec.experts, num_experts_per_tok=spec.experts_per_token,
                  moe_intermediate_size=spec.moe_intermediate, decoder_sparse_step=1,
                  mlp_only_layers=list(range(spec.dense_layers)), norm_topk_prob=True, output_router_logits=False)
    else:
        cls = LlamaConfig
        kw.update(head_dim=spec.hd, attention_bias=False, mlp_bias=False, rope_theta=5e5)
    kw.update(overrides)
    return cls(**kw)


def resolve_spec(shape: str | ModelSpec) -> ModelSpec:
    return shape if isinstance(shape, ModelSpec) else get_model(shape)


def meta_param_counts(shape: str | ModelSpec) -> tuple[int, int]:
    """(causal LM parameters, scalar-head model parameters) of the built architecture, counted on the
    meta device (no memory, no time: usable for 72B)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    spec = resolve_spec(shape)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(hf_config(spec))
        head = AutoModelForTokenClassification.from_config(hf_config(spec, num_labels=1))
    return sum(p.numel() for p in lm.parameters()), sum(p.numel() for p in head.parameters())


def build_shaped_models(cache_dir: Path, shape: str | ModelSpec, seed: int = 0, max_position: int = DEFAULT_MAX_POSITION,
                        device: str = "cpu"):
    """Create (once) and return the ``ModelPaths`` of random-weight models shaped as ``shape`` (a model
    table id or a ``ModelSpec``). ``device`` is where the weights are initialised (a GPU is much faster
    for billions of parameters); they are saved in bf16."""
    from dataclasses import asdict

    from oppo_real.models.tiny import (
        ModelPaths,
        build_atomically,
        done_file,
        stable_hash,
    )

    spec = resolve_spec(shape)
    if max_position < 2:
        raise ConfigError(f"max_position must be >= 2, got {max_position}")
    stamp = {"v": 1, "spec": asdict(spec), "seed": seed, "max_position": max_position}
    root = Path(cache_dir) / f"shaped-{spec.id}-{stable_hash(stamp)}"
    if (root / done_file()).exists():
        return ModelPaths.load(root)

    def make(tmp: Path) -> dict[str, Any]:
        _write_actor(spec, tmp / "actor", seed, max_position, device)
        _write_reward(tmp / "actor", tmp / "reward", seed + 1)
        return {"paths": {"actor": "actor", "reference": "actor", "reward": "reward", "critic": "reward"},
                "reward_fit": {"steps": 0}, "shape": asdict(spec), "seed": seed,
                "note": "random weights of real shape; the reward head is random (not trained)"}

    build_atomically(root, make)
    return ModelPaths.load(root)


def _write_actor(spec: ModelSpec, out: Path, seed: int, max_position: int, device: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from oppo_real.models.task import EOS_ID, PAD_ID, SEP_ID

    torch.manual_seed(seed)
    with torch.device(device):
        actor = AutoModelForCausalLM.from_config(hf_config(spec, max_position), dtype=torch.bfloat16)
    actor.generation_config = GenerationConfig(eos_token_id=EOS_ID, pad_token_id=PAD_ID, bos_token_id=SEP_ID,
                                               do_sample=True, temperature=1.0)
    actor.eval().save_pretrained(out)
    del actor


def _write_reward(actor_dir: Path, out: Path, seed: int) -> None:
    """The actor's backbone (read back from disk) with a fresh scalar head."""
    import torch
    from transformers import AutoConfig, AutoModelForTokenClassification

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(actor_dir, num_labels=1)
    config.classifier_dropout = 0.0
    reward = AutoModelForTokenClassification.from_pretrained(actor_dir, config=config, dtype=torch.bfloat16)
    reward.eval().save_pretrained(out)
    del reward
