"""Reading the Hugging Face configs of models that are not a plain stack of attention + MLP layers.

:func:`oppo_sim.hw.models.hf_config.model_from_hf_config` sends these here; each returns the
:class:`~oppo_sim.hw.models.model_spec.ModelSpec` keywords its family adds or changes.

- **Vision-language models** (a ``text_config`` beside a ``vision_config``: Qwen2.5-VL, Qwen3-VL, Qwen3.5,
  GLM-4.1V, Gemma-3): priced by their language backbone, the ``text_config``. The vision tower is not
  modelled: its parameters are left out of every count (memory, weight sync, FLOPs) and image tokens are
  priced as text tokens; the model's note says so wherever the model is echoed.
- **Nemotron-H** (``nemotron_h``: Nemotron-H, Nemotron-Nano-v2, Nemotron-3 Nano/Super): one layer per
  character of ``hybrid_override_pattern`` — ``M`` a Mamba2 mixer, ``*`` attention, ``-`` a ReLU² MLP, ``E``
  a MoE (Nemotron-3: sigmoid router with a score bias, one shared expert, Super's experts in the
  ``moe_latent_size`` width). ``layers`` is the MLP layers; the ``*`` layers alone have a KV cache. A Mamba2
  layer's weights (``d_inner = mamba_num_heads * mamba_head_dim``, ``G = n_groups``, ``N = ssm_state_size``,
  ``H = mamba_num_heads``, ``K = conv_kernel``): ``in_proj`` hidden -> 2 d_inner + 2 G N + H, a depthwise
  conv over ``d_inner + 2 G N`` channels (K taps, bias), ``dt_bias``, ``A_log``, ``D`` (H each), a gated
  RMSNorm (d_inner), ``out_proj`` d_inner -> hidden, the layer's norm. Its state per sequence: the SSM state
  ``H * mamba_head_dim * N`` at ``mamba_ssm_cache_dtype`` (fp32 in Nemotron-3) and the conv window
  ``(d_inner + 2 G N) * (K - 1)`` at the model's dtype. Nemotron-3 Nano: 23 Mamba2 layers, 47.7 MiB a sequence.
- **Gated DeltaNet hybrids** (``qwen3_next``, ``qwen3_5*``): ``layer_types`` (else every
  ``full_attention_interval``-th layer) says which layers have full attention (with an output gate on the
  query, per-head q/k norms); the others are linear attention with ``nk = linear_num_key_heads``, ``nv =
  linear_num_value_heads``, ``dk``, ``dv``: q, k, v, z projections hidden -> 2 nk dk + 2 nv dv, b and a
  hidden -> 2 nv, a conv over ``2 nk dk + nv dv`` channels, ``dt_bias`` and ``A_log`` (nv each), a norm (dv),
  ``out_proj`` nv dv -> hidden. State per sequence: ``nv * dk * dv`` at ``mamba_ssm_dtype`` (fp32) and the
  conv window at the model's dtype.
- **gpt-oss** (``gpt_oss``): MoE on every layer (``num_local_experts``, experts ``intermediate_size`` wide,
  with biases; a router with a bias); ``layer_types``' ``sliding_attention`` layers attend to the last
  ``sliding_window`` (128) tokens, so they are priced as mixer layers: their attention weights, and a KV
  cache capped at the window (a constant state). Their attention cost within the window and the per-head
  attention sinks (64 numbers a layer) are left out (< 0.5% of a token's FLOPs).
- **MiniMax-M2** (``minimax_m2``): full attention, MoE on every layer with a router score bias.
- **MiniMax-Text-01 / M1** (``minimax``, ``minimax_m1``): ``attn_type_list`` says which layers have softmax
  attention (1; every 8th); the others are lightning (linear) attention, each with its q, k, v projections
  (``num_attention_heads`` heads of ``head_dim``, no grouping), an output gate, a norm and ``out_proj``, and
  a state per sequence of ``heads * head_dim * head_dim`` in fp32; MoE on every layer (Mixtral's keys).
- **GLM-4.5/4.6/4.7** (``glm4_moe``) and **GLM-5** (``glm_moe_dsa``) take DeepSeek's MoE and (GLM-5) MLA
  keys; GLM-5's sparse attention (each query attends to the ``index_topk`` keys its indexer picks) is priced
  as dense attention, an upper bound past 2048 tokens, and its indexer's weights are left out (the note
  says so).
"""

from __future__ import annotations

from typing import Any, Mapping

from oppo_sim.core.errors import ConfigError

__all__ = ["vlm_text_config", "hybrid_fields", "HYBRID_FAMILIES"]

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float": 4, "half": 2}
HYBRID_FAMILIES = ("nemotron_h", "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
                   "gpt_oss", "minimax", "minimax_m1")


def _bytes(name: Any, default: int) -> int:
    return _DTYPE_BYTES.get(str(name or "").lower().removeprefix("torch."), default)


def _need(config: Mapping, key: str, where: str) -> Any:
    if key not in config or config[key] is None:
        raise ConfigError(f"model config{where} missing key '{key}'")
    return config[key]


def vlm_text_config(config: Mapping) -> tuple[Mapping, str]:
    """(the config to price, a note): a vision-language model's ``text_config`` (with the wrapper's dtype and
    tied-embedding keys where it lacks them) and a note that its vision tower is not modelled; any other
    config as it is, with no note."""
    text = config.get("text_config")
    if not isinstance(text, Mapping) or not text:
        return config, ""
    merged = dict(text)
    for key in ("tie_word_embeddings", "torch_dtype", "dtype"):
        if key in config and key not in merged:
            merged[key] = config[key]
    merged.setdefault("model_type", f"{config.get('model_type', '')}_text")
    return merged, ("vision tower not modelled: its parameters are left out and image tokens are priced as "
                    "text tokens (priced by the language backbone, text_config)")


def _nemotron_h(config: Mapping, where: str, dtype_bytes: int) -> dict[str, Any]:
    pattern = str(_need(config, "hybrid_override_pattern", where))
    if set(pattern) - set("M*-E"):
        raise ConfigError(f"model config{where}: hybrid_override_pattern has layers other than M * - E: {pattern!r}")
    mamba, attn, dense, moe = (pattern.count(c) for c in "M*-E")
    if len(pattern) != int(_need(config, "num_hidden_layers", where)) or not attn or not dense + moe:
        raise ConfigError(f"model config{where}: hybrid_override_pattern ({len(pattern)} layers) must match "
                          "num_hidden_layers and have attention (*) and MLP (- or E) layers")
    h, heads = int(config["hidden_size"]), int(_need(config, "mamba_num_heads", where))
    d_inner = heads * int(_need(config, "mamba_head_dim", where))
    gn = int(config.get("n_groups") or 1) * int(_need(config, "ssm_state_size", where))
    k = int(config.get("conv_kernel") or 4)
    conv_dim = d_inner + 2 * gn
    in_out = 2 * d_inner + 2 * gn + heads
    params = h * in_out + conv_dim * (k + (1 if config.get("use_conv_bias", True) else 0)) + 3 * heads \
        + d_inner + d_inner * h + h
    state = heads * (d_inner // heads) * (gn // int(config.get("n_groups") or 1)) \
        * _bytes(config.get("mamba_ssm_cache_dtype"), dtype_bytes) + conv_dim * (k - 1) * dtype_bytes
    kw: dict[str, Any] = dict(layers=dense + moe, attn_layers=attn, mixer_layers=mamba, mixer_params=params,
                              mixer_tensors=9, mixer_act_width=h + in_out + conv_dim + d_inner,
                              mixer_state_bytes=mamba * state, gated_mlp=False)
    if config.get("attention_head_dim") is not None and config.get("head_dim") is None:
        kw["head_dim"] = config["attention_head_dim"]
    if moe:
        kw.update(experts=_need(config, "n_routed_experts", where), experts_per_token=_need(config, "num_experts_per_tok", where),
                  moe_intermediate=_need(config, "moe_intermediate_size", where), dense_layers=dense, router_bias=True,
                  shared_intermediate=int(config.get("n_shared_experts") or 0)
                  * int(config.get("moe_shared_expert_intermediate_size") or 0),
                  moe_latent=int(config.get("moe_latent_size") or 0))
    return kw


def _full_attention(config: Mapping, layers: int, where: str) -> list[bool]:
    types = config.get("layer_types")
    if types:
        if len(types) != layers:
            raise ConfigError(f"model config{where}: layer_types has {len(types)} entries for {layers} layers")
        return [t == "full_attention" for t in types]
    step = int(_need(config, "full_attention_interval", where))
    return [(i + 1) % step == 0 for i in range(layers)]


def _gated_deltanet(config: Mapping, where: str, dtype_bytes: int) -> dict[str, Any]:
    layers, h = int(config["num_hidden_layers"]), int(config["hidden_size"])
    full = sum(_full_attention(config, layers, where))
    nk, nv = (int(_need(config, f"linear_num_{x}_heads", where)) for x in ("key", "value"))
    dk, dv = (int(_need(config, f"linear_{x}_head_dim", where)) for x in ("key", "value"))
    k = int(config.get("linear_conv_kernel_dim") or 4)
    conv_dim = 2 * nk * dk + nv * dv
    proj = h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv
    params = proj + conv_dim * k + 2 * nv + dv + nv * dv * h
    state = nv * dk * dv * _bytes(config.get("mamba_ssm_dtype"), dtype_bytes) + conv_dim * (k - 1) * dtype_bytes
    if not full:
        raise ConfigError(f"model config{where}: no full_attention layer")
    return dict(attn_layers=full, mixer_layers=layers - full, mixer_params=params,
                mixer_tensors=7 if str(config.get("model_type")) == "qwen3_next" else 9,
                mixer_act_width=h + 2 * nk * dk + 2 * nv * dv + conv_dim + nv * dv,
                mixer_state_bytes=(layers - full) * state, q_gate=bool(config.get("attn_output_gate", True)),
                qk_norm=True)


def _gpt_oss(config: Mapping, where: str, dtype_bytes: int) -> dict[str, Any]:
    layers, h = int(config["num_hidden_layers"]), int(config["hidden_size"])
    heads, kv = int(config["num_attention_heads"]), int(config.get("num_key_value_heads") or config["num_attention_heads"])
    hd = int(config.get("head_dim") or h // heads)
    full = sum(_full_attention(config, layers, where)) if config.get("layer_types") else layers
    window = int(config.get("sliding_window") or 0)
    kw: dict[str, Any] = dict(experts=_need(config, "num_local_experts", where), moe_intermediate=config["intermediate_size"],
                              experts_per_token=config.get("num_experts_per_tok") or _need(config, "experts_per_token", where),
                              dense_layers=0, router_bias=True, qkv_bias=True)
    if full < layers and window:
        attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h  # q, k, v, o (their biases: per layer, as all)
        kw.update(attn_layers=full, mixer_layers=layers - full, mixer_params=attn, mixer_tensors=4,
                  mixer_act_width=2 * heads * hd + 2 * kv * hd,
                  mixer_state_bytes=(layers - full) * window * 2 * kv * hd * dtype_bytes)
    return kw


def _lightning(config: Mapping, where: str) -> dict[str, Any]:
    layers, h = int(config["num_hidden_layers"]), int(config["hidden_size"])
    types = list(_need(config, "attn_type_list", where))
    if len(types) != layers or not any(types):
        raise ConfigError(f"model config{where}: attn_type_list must give each of the {layers} layers and have a "
                          "softmax (1) layer")
    heads = int(config["num_attention_heads"])
    hd = int(config.get("head_dim") or h // heads)
    width = heads * hd
    full = sum(1 for t in types if t)
    return dict(attn_layers=full, mixer_layers=layers - full, mixer_params=5 * h * width + width, mixer_tensors=5,
                mixer_act_width=h + 5 * width, mixer_state_bytes=(layers - full) * heads * hd * hd * 4)


def hybrid_fields(config: Mapping, family: str, where: str, dtype_bytes: int) -> dict[str, Any]:
    """The ``ModelSpec`` keywords a hybrid family adds (empty for any other family)."""
    if family == "nemotron_h":
        return _nemotron_h(config, where, dtype_bytes)
    if family == "gpt_oss":
        return _gpt_oss(config, where, dtype_bytes)
    if family in ("minimax", "minimax_m1"):
        return _lightning(config, where)
    if family in HYBRID_FAMILIES:
        return _gated_deltanet(config, where, dtype_bytes)
    return {}
