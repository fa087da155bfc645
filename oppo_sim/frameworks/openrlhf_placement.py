"""Where an OpenRLHF job's models run, read from its command line for :mod:`~oppo_sim.frameworks.openrlhf`.

With ``colocate_all_models`` / ``train.colocate_all`` every model shares the actor's
``actor_num_nodes x actor_num_gpus_per_node`` GPUs: ``--placement colocated`` (vLLM sleep: ``--colocate sleep
--sleep-level 1``, else ``--colocate resident``; DeepSpeed sleep: ``--offload-train-state``). Under async
OpenRLHF colocates only the DeepSpeed models: the vLLM engines get their own GPUs (``gen-apart G+T``).
Otherwise each model has its own GPUs: ``split G+T+S`` — G = ``vllm_num_engines x vllm_tensor_parallel_size``
generate; T = the actor's GPUs (and the critic's, unless it shares the reward model's) train; S = the reward
model's and the reference's GPUs (unless colocated with the actor) score — or ``gen-apart G+T`` when nothing
scores apart. Approximated: oppo-sim trains the critic on the actor's pool and time-slices the reward and
reference models on one score pool, where OpenRLHF gives each its own GPUs. Nodes: the most of any model.
"""

from __future__ import annotations

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.openrlhf_flags import Names
from oppo_sim.frameworks.translation import Builder, as_float, as_int


def _gpus(o: dict, role: str, f: Names) -> tuple[int, int]:
    nk, pk = f"{role}_num_nodes", f"{role}_num_gpus_per_node"
    nodes, per = as_int(f(nk), o[nk]), as_int(f(pk), o[pk])
    if nodes < 1 or per < 1:
        raise ConfigError(f"{f(nk)} and {f(pk)} must be >= 1, got {nodes} and {per}")
    return nodes, nodes * per


def placement(b: Builder, o: dict, d: dict, given: dict, f: Names) -> None:
    tp = as_int(f("vllm_tensor_parallel_size"), o["vllm_tensor_parallel_size"])
    b.use(f("vllm_tensor_parallel_size"), tp, "--tp", tp, default=d["vllm_tensor_parallel_size"])
    engines = 0 if o["vllm_num_engines"] is None else as_int(f("vllm_num_engines"), o["vllm_num_engines"])
    nodes, actor = _gpus(o, "actor", f)
    if "actor_num_nodes" in given:
        b.use(f("actor_num_nodes"), nodes, note="in the placement")
    together = "colocate_all_models" in o
    if together and "async_train" in o and engines:
        label = f"gen-apart {engines * tp}+{actor}"
        b.use(f("colocate_all_models"), True, "--placement", label, "--nodes", nodes,
              note="under async OpenRLHF colocates the DeepSpeed models only: vLLM gets its own GPUs")
        b.use(f("vllm_num_engines"), engines, note=f"{engines} x tp {tp} = {engines * tp} GPUs apart; "
                                                   f"every other model on the actor's {actor}")
        if "deepspeed_enable_sleep" in o:
            b.use(f("deepspeed_enable_sleep"), True, note="no effect: generation does not share the trainer's GPUs")
        return
    if together or engines == 0:
        sleep, offload = "vllm_enable_sleep" in o, "deepspeed_enable_sleep" in o
        extra = ("--colocate", "sleep", "--sleep-level", 1) if sleep else ("--colocate", "resident")
        extra += ("--offload-train-state" if offload else "--no-offload-train-state",)
        if engines == 0:
            extra = ("--engine", "static")
            b.notes.append("no vLLM engines: the actor generates with Hugging Face generate (oppo-sim's static engine)")
        b.use(f("actor_num_gpus_per_node"), o["actor_num_gpus_per_node"], "--placement", "colocated", "--devices",
              actor, "--nodes", nodes, *extra, note="every model on the actor's GPUs", default=d["actor_num_gpus_per_node"])
        if engines:
            b.use(f("colocate_all_models"), True)
            b.use(f("vllm_num_engines"), engines, note=f"{engines} x tp {tp} = {engines * tp} GPUs"
                  + ("" if engines * tp == actor else f" (OpenRLHF requires {actor})"))
        if sleep:
            b.use(f("vllm_enable_sleep"), True, note="vLLM sleep(level=1)")
        if offload:
            b.use(f("deepspeed_enable_sleep"), True, note="the trainer's state to host while vLLM generates")
        return
    _separate(b, o, given, f, (tp, engines, nodes, actor))


def _separate(b: Builder, o: dict, given: dict, f: Names, sizes: tuple[int, int, int, int]) -> None:
    """Every model on its own GPUs: ``split G+T+S`` or ``gen-apart G+T`` (module notes)."""
    tp, engines, nodes, actor = sizes
    has_critic = o["advantage_estimator"] == "gae"
    has_ref = as_float(f("init_kl_coef"), o["init_kl_coef"]) > 0
    has_rm = "remote_rm_url" not in o and "agent_func_path" not in o
    gen, train, score = engines * tp, actor, 0
    used = [f"vLLM {engines} x tp {tp}", f"actor {actor}"]
    if has_critic and "colocate_critic_reward" not in o:
        c_nodes, c = _gpus(o, "critic", f)
        train, nodes = train + c, max(nodes, c_nodes)
        used.append(f"critic {c} (trains on the actor's pool)")
    if has_rm:
        r_nodes, r = _gpus(o, "reward", f)
        score, nodes = score + r, max(nodes, r_nodes)
        used.append(f"reward {r}" + (" with the critic" if has_critic and "colocate_critic_reward" in o else ""))
    if has_ref and "colocate_actor_ref" not in o:
        f_nodes, g = _gpus(o, "ref", f)
        score, nodes = score + g, max(nodes, f_nodes)
        used.append(f"reference {g}")
    roles = [r for r, on in (("critic", has_critic), ("reward", has_rm), ("ref", has_ref)) if on]
    label = f"split {gen}+{train}+{score}" if score else f"gen-apart {gen}+{train}"
    b.use(f("vllm_num_engines"), engines, "--placement", label, "--nodes", nodes, note="; ".join(used))
    for k in ("actor_num_gpus_per_node", "ref_num_nodes", "ref_num_gpus_per_node", "reward_num_nodes",
              "reward_num_gpus_per_node", "critic_num_nodes", "critic_num_gpus_per_node", "colocate_actor_ref",
              "colocate_critic_reward"):
        if k in given and (k.startswith(("actor", "colocate")) or k.startswith(tuple(roles))):
            b.use(f(k), given[k], note="in the placement above")
    b.notes.append(f"separate pools -> {label}: the critic trains on the actor's pool and the reward and reference "
                   "models share one score pool, where OpenRLHF gives each its own GPUs")


__all__ = ["placement"]
