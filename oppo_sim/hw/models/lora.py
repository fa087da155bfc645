"""LoRA: the trainer updates low-rank adapters on frozen weights (PEFT's ``LoraConfig``, as verl's
``actor_rollout_ref.model.lora_rank`` / ``target_modules``, OpenRLHF's ``--lora_rank`` / ``--target_modules`` and
NeMo RL's ``lora_cfg`` / ``peft`` set it).

An adapted linear layer ``W`` (``d_in x d_out``) gains ``A`` (``d_in x r``) and ``B`` (``r x d_out``): ``r (d_in +
d_out)`` trainable parameters and two tensors. ``targets`` names the adapted linears as Hugging Face models name them
(``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``, ``gate_proj``, ``up_proj``, ``down_proj``; MLA's ``q_a_proj``,
``q_b_proj``, ``kv_a_proj_with_mqa``, ``kv_b_proj``; Megatron's fused ``linear_qkv``, ``linear_proj``,
``linear_fc1``, ``linear_fc2`` are read as the linears they fuse) or ``all-linear`` — every projection of the
softmax-attention layers and the MLPs (dense, shared and every routed expert), not the output head, as PEFT's
``all-linear``. Not counted: a MoE router's and the projections of Mamba / linear-attention mixers and of the layers
the model table keeps as mixers (on a hybrid such as Nemotron-Nano-12B-v2 roughly two fifths of what PEFT adapts);
counted although PEFT may not adapt them: routed experts stored as one fused parameter (gpt-oss, and MoE models in
Transformers 5 — Megatron-Bridge's LoRA adapts its grouped expert linears). Adapters are a few percent of the
weights, so either way the error is in the adapters' own small share.

What it changes, priced where each cost is (``trainer_cost``, ``memory_plan``, ``topology.weight_sync_legs``):

- memory: the frozen weights stay (sharded as the trainer shards them); gradients and the optimizer's state exist
  for the adapters only (:meth:`LoRA.trainable_fraction` of the full ones); activations are the full model's (the
  backward still runs through every layer);
- compute: the backward computes the activations' gradients but no frozen weight's, so a training pass is two
  forwards' matmul FLOPs plus the attention's three, and the adapters' own (forward, input and weight gradients);
- the gradient collectives and the optimizer step move the adapters' bytes only;
- the weight sync (``sync``): ``merged`` hands the engines the whole merged weights every step (OpenRLHF, NeMo RL:
  ``_maybe_merge_lora_weight``); ``adapter`` only the adapters, the base weights staying in the engine (verl after its
  first sync: ``fsdp_workers.rollout_mode`` with ``base_sync_done``, vLLM serving the adapter).

Not modelled: the engine's own LoRA kernels in generation (vLLM's punica kernels add a small GEMM pair per adapted
linear), and the adapters' activations (``r`` wide: negligible).
"""

from __future__ import annotations

from dataclasses import dataclass

from oppo_sim.core.errors import ConfigError
from oppo_sim.hw.models.model_spec import ModelSpec

__all__ = ["LORA_ALIASES", "LORA_BASE_DTYPES", "LORA_SYNCS", "LORA_MODULES", "LoRA", "parse_targets"]

LORA_BASE_DTYPES = {"bf16": 2, "fp32": 4}
"""The frozen weights' dtype and bytes a parameter: bf16, or fp32 as verl's FSDP actor loads them unless
``fsdp_config.model_dtype`` says otherwise (``fsdp_workers``: fp32 for the actor, the compute cast to bf16)."""
LORA_SYNCS: tuple[str, ...] = ("merged", "adapter")
"""What a weight sync hands the engines under LoRA: the merged weights, or the adapters alone (module notes)."""
LORA_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The adaptable linears, by their Hugging Face names (an MLA model's attention projections count as q/k/v/o)."""
LORA_ALIASES = {"q_a_proj": ("q_proj",), "q_b_proj": ("q_proj",), "kv_a_proj_with_mqa": ("k_proj", "v_proj"),
            "kv_b_proj": ("k_proj", "v_proj"), "linear_qkv": ("q_proj", "k_proj", "v_proj"), "linear_proj": ("o_proj",),
            "linear_fc1": ("gate_proj", "up_proj"), "linear_fc2": ("down_proj",), "qkv_proj": ("q_proj", "k_proj", "v_proj"),
            "gate_up_proj": ("gate_proj", "up_proj"), "w1": ("gate_proj",), "w3": ("up_proj",), "w2": ("down_proj",)}


def parse_targets(text: str | list | tuple) -> tuple[str, ...]:
    """``all-linear`` (or PEFT's ``all_linear``), or module names (a list, or comma / space separated) -> the adapted
    :data:`LORA_MODULES`, in their order; an unknown name -> one-line ``ConfigError``."""
    words = [str(w) for w in text] if isinstance(text, (list, tuple)) else str(text).replace(",", " ").split()
    words = [w.strip("[]'\" ") for w in words if w.strip("[]'\" ")]
    if not words:
        raise ConfigError("LoRA target modules: none given (all-linear, or names such as q_proj,v_proj)")
    if len(words) == 1 and words[0].replace("_", "-").lower() == "all-linear":
        return LORA_MODULES
    got: set[str] = set()
    for w in words:
        name = w.rsplit(".", 1)[-1]
        if name in LORA_MODULES:
            got.add(name)
        elif name in LORA_ALIASES:
            got.update(LORA_ALIASES[name])
        else:
            raise ConfigError(f"LoRA target module {w!r}: not one oppo-sim knows (all-linear, or "
                              f"{', '.join(LORA_MODULES + tuple(LORA_ALIASES))})")
    return tuple(m for m in LORA_MODULES if m in got)


@dataclass(frozen=True)
class LoRA:
    """Rank-``rank`` adapters on the ``targets`` linears (module notes); ``sync``: what the weight sync moves."""

    rank: int
    targets: tuple[str, ...] = LORA_MODULES
    sync: str = "merged"
    base_dtype: str = "bf16"  # the frozen weights' (LORA_BASE_DTYPES): memory only, the compute and gathers are bf16

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ConfigError(f"LoRA rank must be an integer >= 1, got {self.rank!r}")
        object.__setattr__(self, "targets", parse_targets(self.targets))
        if self.sync not in LORA_SYNCS:
            raise ConfigError(f"LoRA sync must be one of {', '.join(LORA_SYNCS)}, got {self.sync!r}")
        if self.base_dtype not in LORA_BASE_DTYPES:
            raise ConfigError(f"LoRA base dtype must be one of {', '.join(LORA_BASE_DTYPES)}, got {self.base_dtype!r}")

    @property
    def base_scale(self) -> float:
        """The frozen weights' bytes over bf16's."""
        return LORA_BASE_DTYPES[self.base_dtype] / 2

    def _linears(self, model: ModelSpec) -> dict[str, tuple[float, float, float, float]]:
        """Per adapted module: (d_in + d_out summed over the model's instances of it, the routed experts' part of that
        sum, the instances, the routed experts' instances). MLA's ``kv_a_proj_with_mqa`` and ``kv_b_proj`` are split
        between ``k_proj`` and ``v_proj`` (each a half of the shared latent's width)."""
        h, att, kv = model.hidden, model.attn_width, model.kv_width
        if model.mla:
            kv_in = model.kv_lora_rank + model.qk_rope_head_dim
            q = (h + model.q_lora_rank) + (model.q_lora_rank + att) if model.q_lora_rank else h + att
            kv_a, kv_b = h + kv_in, model.kv_lora_rank  # kv_a_proj_with_mqa and kv_b_proj, split between k and v
            attn = {"q_proj": (q, 2 if model.q_lora_rank else 1),
                    "k_proj": ((kv_a + kv_b) / 2 + model.heads * model.qk_nope_head_dim, 1),
                    "v_proj": ((kv_a + kv_b) / 2 + model.heads * model.v_head_dim, 1),
                    "o_proj": (model.heads * model.v_head_dim + h, 1)}
        else:
            attn = {"q_proj": (h + att * (2 if model.q_gate else 1), 1), "k_proj": (h + kv, 1), "v_proj": (h + kv, 1),
                    "o_proj": (att + h, 1)}
        la = model.full_attn_layers
        dense_layers = model.layers - model.moe_layers
        out = {name: (la * w, 0.0, la * n, 0.0) for name, (w, n) in attn.items()}
        mlp = ("gate_proj", "up_proj", "down_proj") if model.gated_mlp else ("up_proj", "down_proj")
        e_in = model.moe_latent or h
        for name in mlp:
            w = dense_layers * (h + model.intermediate) + model.moe_layers * (h + model.shared_intermediate) * bool(
                model.shared_intermediate)
            routed = model.moe_layers * model.experts * (e_in + model.moe_intermediate)
            n = dense_layers + (model.moe_layers if model.shared_intermediate else 0)
            out[name] = (w + routed, routed, n + model.moe_layers * model.experts, model.moe_layers * model.experts)
        return {k: v for k, v in out.items() if k in self.targets}

    def params(self, model: ModelSpec) -> int:
        """Trainable adapter parameters of ``model``: ``rank x (d_in + d_out)`` over every adapted linear."""
        return int(self.rank * sum(v[0] for v in self._linears(model).values()))

    def routed_params(self, model: ModelSpec) -> int:
        """The part of :meth:`params` on the routed experts (what expert parallelism shards)."""
        return int(self.rank * sum(v[1] for v in self._linears(model).values()))

    def tensors(self, model: ModelSpec) -> int:
        """Adapter tensors (an ``A`` and a ``B`` per adapted linear): what an adapter-only sync moves one by one."""
        return int(2 * sum(v[2] for v in self._linears(model).values()))

    def routed_tensors(self, model: ModelSpec) -> int:
        return int(2 * sum(v[3] for v in self._linears(model).values()))

    def token_params(self, model: ModelSpec) -> float:
        """Adapter parameters one token multiplies through (its top-k experts' of the routed ones): ``2 x`` this is the
        adapters' forward FLOPs per token."""
        routed = self.routed_params(model)
        share = model.experts_per_token / model.experts if model.moe else 0.0
        return self.params(model) - routed + routed * share

    def trainable_fraction(self, model: ModelSpec, scalar_head: bool = False) -> float:
        """Trainable parameters over the model's (a value head's ``hidden`` trains in full): what gradients, the
        optimizer's state and step, and the gradient collectives scale by."""
        total = model.params_scalar_head if scalar_head else model.params
        return min(1.0, (self.params(model) + (model.hidden if scalar_head else 0)) / total)

    @property
    def all_linear(self) -> bool:
        return self.targets == LORA_MODULES

    def megatron_targets(self) -> list[str]:
        """The targets in Megatron's fused names (``linear_qkv`` for any of q/k/v, ``linear_fc1`` for gate or up):
        a fused linear is adapted whole, so a subset of its parts becomes all of them."""
        fused = {"q_proj": "linear_qkv", "k_proj": "linear_qkv", "v_proj": "linear_qkv", "o_proj": "linear_proj",
                 "gate_proj": "linear_fc1", "up_proj": "linear_fc1", "down_proj": "linear_fc2"}
        return list(dict.fromkeys(fused[t] for t in self.targets))

    def trainable_split(self, model: ModelSpec, scalar_head: bool = False) -> tuple[float, float]:
        """(trainable share of the parameters outside the routed experts, of the routed experts): what each part's
        gradients, optimizer state and gradient collectives scale by (expert parallelism shards the two apart)."""
        routed_total = model.routed_expert_params
        shared_total = (model.params_scalar_head if scalar_head else model.params) - routed_total
        routed = self.routed_params(model)
        shared = self.params(model) - routed + (model.hidden if scalar_head else 0)
        return min(1.0, shared / shared_total), (min(1.0, routed / routed_total) if routed_total else 0.0)

    def label(self) -> str:
        t = "all-linear" if self.all_linear else ",".join(self.targets)
        return f"LoRA r{self.rank} ({t})" + (", frozen weights in fp32" if self.base_dtype == "fp32" else "")
