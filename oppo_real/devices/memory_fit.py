"""Will the run fit its devices? Checked from the models' shapes before anything is loaded.

Per device of the run's :class:`~oppo_real.devices.device_map.DeviceMap`, the roles placed on it hold (bytes, from
the shapes alone — config.json or the model table, never the weights):

- ``generate``: the actor's weights in the generation dtype, and the KV cache: vLLM's explicit budget, or
  for the torch decoders what ``2B`` sequences of the longest length need (B in flight plus up to B more
  under inter-step overlap);
- ``score``: reward and reference weights, the streamed sequences' KV caches, and the largest transient
  of whole-sequence scoring (the reference's logits over the batch, bf16 and fp32, and a log-softmax row);
- ``train``: actor and critic in mixed precision — fp32 master weights (4 bytes per parameter), fp32
  gradients (4) and Adam's two moments (8): the 16 bytes per parameter of the ZeRO paper's count — and
  the larger transient of a training step: one mini-batch's activations (``oppo_sim.hw.memory.train_memory``'s count,
  logits included) or the no-grad log-prob pass over the whole batch (its logits).

Where generation shares its GPU with training and the generator sleeps (``colocate == "sleep"``), the
generator's memory and the training step's transients take turns (the simulator's ``generate`` /
``other`` phases); otherwise both are resident. A policy that generates while an earlier step trains
(``async``) cannot take turns: the real driver never puts its generator to sleep, so on a shared device the
check plans everything resident — the simulator's rule, :func:`oppo_sim.hw.memory.pool_memory.colocate_for` — and
refuses it in the simulator's line (:func:`oppo_sim.hw.memory.pool_memory.resident_refusal`) where it does not fit.
The check is :class:`oppo_sim.hw.memory.pool_memory.PoolMemory`'s, so a refusal reads like the simulator's: one line,
the role, the device and the numbers.

The device's memory is the one stated (``RealConfig.gpu_memory_gib``, every device of the map, the CPU
too: what tests use) or, on a GPU, what the driver reports (``torch.cuda.mem_get_info``): usable =
``min(free, 0.92 x total)`` (CUDA context, allocator fragmentation). Unstated CPU memory is not checked.
"""

from __future__ import annotations

import json
from pathlib import Path

from oppo_real.config import RealConfig
from oppo_real.devices.device_map import DeviceMap, check_available, device_memory
from oppo_sim.core.errors import ConfigError
from oppo_sim.core.policies import Policy
from oppo_sim.hw.devices.hardware import GiB
from oppo_sim.hw.memory.train_memory import activation_bytes
from oppo_sim.hw.models.lookup import ModelSpec, get_model, model_from_hf_config
from oppo_sim.hw.memory.pool_memory import ALWAYS, GENERATE, OTHER, PoolMemory, RoleMemory, colocate_for, resident_refusal

USABLE_FRACTION = 0.92
TRAIN_BYTES_PER_PARAM = (4, 4, 8)  # fp32 master weights, fp32 gradients, Adam moments (m, v)


def run_specs(cfg: RealConfig) -> tuple[ModelSpec, ModelSpec]:
    """(actor shape, reward/critic backbone shape) of the run, read without loading any weights."""
    if cfg.shape:
        spec = get_model(cfg.shape)
        return spec, spec
    if cfg.model_dir:
        if not Path(cfg.model_dir).is_dir():
            raise ConfigError(f"--model {cfg.model_dir}: not a directory")
        path = Path(cfg.model_dir) / "config.json"
        if not path.exists():
            raise ConfigError(f"--model {cfg.model_dir}: no config.json (not a Hugging Face model directory)")
        spec = model_from_hf_config(json.loads(path.read_text()), id=Path(cfg.model_dir).name or "model")
        return spec, spec
    t = cfg.tiny
    spec = ModelSpec("tiny", "tiny Qwen2", t.layers, t.hidden, t.heads, t.kv_heads, t.intermediate, t.vocab, qkv_bias=True)
    return spec, spec


def seq_tokens(cfg: RealConfig) -> int:
    return cfg.task.prompt_len_max + cfg.max_response


def kv_cache_bytes(cfg: RealConfig, actor: ModelSpec) -> float:
    """Bytes the generator's KV cache takes: vLLM's explicit budget on the CPU; on a GPU (and for the
    torch decoders anywhere) what ``2 * batch`` sequences of the longest length need, at least vLLM's budget;
    the graph-captured torch decoders (static slots of ``max_model_len`` positions) ``2 * batch`` slots, at
    most ``max_num_seqs``."""
    per_token = actor.with_(dtype_bytes=cfg.devices.dtype_bytes("gen")).kv_bytes_per_token()
    if cfg.backend in ("torch-graph", "torch-static-graph"):
        return float(min(cfg.engine.max_num_seqs, 2 * cfg.batch * cfg.algorithm.n) * cfg.max_model_len * per_token)
    need = 2 * cfg.batch * cfg.algorithm.n * seq_tokens(cfg) * per_token
    if cfg.backend == "vllm":
        return float(cfg.engine.kv_cache_bytes if not cfg.devices.is_cuda("gen") else max(need, cfg.engine.kv_cache_bytes))
    return float(need)


def colocation(cfg: RealConfig, policy: Policy | None = None) -> str:
    """``sleep`` or ``resident``: the run's colocation as ``policy`` runs it (the simulator's rule: a policy that
    trains while it generates keeps a shared device resident)."""
    trains_beside = policy is not None and policy.trains_while_generating()
    return colocate_for(cfg.colocate_mode, cfg.devices.shared("gen", "train"), trains_beside)


def role_memory(cfg: RealConfig, actor: ModelSpec, reward: ModelSpec, colocate: str | None = None) -> dict[str, list[RoleMemory]]:
    """What each role worker holds, per role (``gen``, ``score``, ``train``), as the simulator's RoleMemory
    (``colocate``: as :func:`colocation` says; None: the configuration's own)."""
    from oppo_real.ppo.algo import PPOConfig

    dev, s = cfg.devices, seq_tokens(cfg)
    sleeps = (colocate or cfg.colocate_mode) == "sleep"
    gb, sb = dev.dtype_bytes("gen"), dev.dtype_bytes("score")
    gen_phase = GENERATE if sleeps else ALWAYS
    gen = [RoleMemory("generate", f"actor {actor.id}", gen_phase, weights=actor.params * gb,
                      activations=kv_cache_bytes(cfg, actor), note="KV cache as activations")]
    algo = cfg.algorithm  # the roles it has not are never loaded: no reward model (rule), reference (no KL), critic
    rm, ref = algo.reward == "model", algo.kl
    batch = cfg.batch * algo.n  # responses per step
    ref_kv = (actor.with_(dtype_bytes=sb).kv_bytes_per_token() * ref + reward.with_(dtype_bytes=sb).kv_bytes_per_token() * rm)
    score_logits = (batch * s * actor.vocab * (sb + 4) + s * actor.vocab * 4) if ref else 0
    held = " + ".join([f"reward {reward.id}"] * rm + [f"reference {actor.id}"] * ref) or "nothing (rule reward, no KL)"
    score = [RoleMemory("score", held, ALWAYS, weights=reward.params_scalar_head * sb * rm + actor.params * sb * ref,
                        activations=2 * batch * s * ref_kv + score_logits, note="streamed KV + scoring logits")]
    w, g, o = TRAIN_BYTES_PER_PARAM
    n = actor.params + reward.params_scalar_head * algo.critic
    ppo = cfg.ppo or PPOConfig()
    mb = max(1, -(-batch // ppo.minibatches))
    tb = dev.dtype_bytes("train")
    act = max(activation_bytes(actor.with_(dtype_bytes=tb), mb * s, s, "none", flash_attention=dev.is_cuda("train"),
                               full_logits=True),  # oppo_real's trainer takes log-probs from the whole logits
              batch * s * actor.vocab * (tb + 8))
    trained = f"actor {actor.id}" + (f" + critic {reward.id}" if algo.critic else "")
    train = [RoleMemory("train", trained, ALWAYS, weights=w * n, grads=g * n,
                        optimizer=o * n, note="fp32 master weights, Adam"),
             RoleMemory("train-step", "activations of a PPO step", OTHER if sleeps else ALWAYS, activations=act)]
    return {"gen": gen, "score": score, "train": train}


def _memory_of(device: str, stated_gib: float | None) -> tuple[float, float, str]:
    """(bytes, usable fraction, name) of ``device``."""
    if stated_gib is not None:
        return stated_gib * GiB, USABLE_FRACTION, f"{device} ({stated_gib:g} GiB stated)"
    free, total, name = device_memory(device)
    return total, min(USABLE_FRACTION, free / total), name


def pools(cfg: RealConfig, actor: ModelSpec, reward: ModelSpec, colocate: str | None = None) -> list[PoolMemory]:
    """One ``PoolMemory`` per checked device (every device if memory is stated, else the GPUs)."""
    roles = role_memory(cfg, actor, reward, colocate)
    dev: DeviceMap = cfg.devices
    devices = dict.fromkeys(dev.of(r) for r in ("gen", "score", "train"))
    out = []
    for d in devices:
        if cfg.gpu_memory_gib is None and not d.startswith("cuda"):
            continue
        mem, util, name = _memory_of(d, cfg.gpu_memory_gib)
        held = tuple(m for r in dev.roles_on(d) for m in roles[r])
        out.append(PoolMemory(pool=d, gpu=name, devices=1, mem_bytes=mem, utilization=util, roles=held))
    return out


def check_fit(cfg: RealConfig, policy: Policy | None = None) -> list[PoolMemory]:
    """The run's memory per checked device under ``policy`` (None: as the configuration says); a one-line
    ``ConfigError`` with the numbers if one cannot hold its roles — for a policy that must keep a shared device
    resident, the simulator's line saying so. Stated memory is checked before asking whether the GPUs exist
    (nothing is touched)."""
    if cfg.gpu_memory_gib is None:
        check_available(cfg.devices)
    actor, reward = run_specs(cfg)
    mode = colocation(cfg, policy)
    checked = pools(cfg, actor, reward, mode)
    for p in checked:
        err = p.error()
        if err is None:
            continue
        if mode != cfg.colocate_mode and all(q.error() is None for q in pools(cfg, actor, reward)):
            raise ConfigError(resident_refusal(policy.label(), p.pool, err, "give generation a device of its own "
                                               "(--device gen=...) or use a policy that takes turns (e.g. oppo)"))
        raise ConfigError(f"{err} (devices {cfg.devices.describe()}, B={cfg.batch}, sequences up to "
                          f"{seq_tokens(cfg)} tokens; try a smaller model, B or --max-response, or more devices)")
    if cfg.gpu_memory_gib is not None:
        check_available(cfg.devices)
    return checked


def describe(checked: list[PoolMemory]) -> str:
    """``cuda:0 61.2 of 73.6 GiB`` per checked device (the peak phase)."""
    return ", ".join(f"{p.pool} {p.peak / GiB:.1f} of {p.capacity / GiB:.1f} GiB" for p in checked)
