"""``oppo-sim run --from-openrlhf "ARGS"``: an OpenRLHF ``train_ppo_ray`` command line as oppo-sim options.

ARGS is the argument list (``"--pretrain Qwen/Qwen2.5-7B-Instruct --rollout_batch_size 128 ..."``) or a
file holding the launch command (a script; ``ray job submit ... -- python3 -m openrlhf.cli.train_ppo_ray
...``: the words before ``train_ppo_ray`` are the launcher and listed as ignored). An option takes every
word up to the next ``--option``; an option with none is an on/off flag. Options not given take
OpenRLHF's defaults (:data:`OPENRLHF_DEFAULTS`, from ``openrlhf/cli/train_ppo_ray.py``), as OpenRLHF would.

Units and meanings, from github.com/OpenRLHF/OpenRLHF ``openrlhf/cli/train_ppo_ray.py`` (commit 021d1b0;
its argument definitions and the checks after them) and the vLLM engine wrapper's ``sleep(level=1)``:

- ``--rollout_batch_size``: prompts per rollout -> ``--batch``; ``--n_samples_per_prompt`` -> ``--n``;
- ``--train_batch_size``: the global training batch in *samples* (responses) ->
  ``--minibatches = rollout_batch_size x n_samples_per_prompt / train_batch_size``; ``--max_epochs`` ->
  ``--ppo-epochs``; ``--micro_train_batch_size`` (per GPU) is not read (oppo-sim's micro-batches are in
  tokens);
- ``--prompt_max_len`` -> ``--max-prompt`` with ``--truncate-prompt`` (OpenRLHF tokenizes prompts with
  truncation at that length); ``--generate_max_len`` -> ``--max-response``;
- ``--advantage_estimator``: gae -> ppo, group_norm -> grpo, rloo, reinforce_baseline -> reinforce++;
  ``reinforce`` and ``dr_grpo`` are approximated by reinforce++ and grpo; with ``--dynamic_filtering``
  a group estimator becomes dapo (DAPO's dynamic sampling; the advantage's form costs the same);
- ``--init_kl_coef 0`` creates no reference model -> ``--no-reference``; ``--use_kl_loss`` moves the KL into
  the loss (the same reference forward);
- ``--pretrain`` -> ``--actor``; ``--reward_pretrain`` -> ``--reward``; ``--remote_rm_url`` -> ``--reward rule``
  (as ``--agent_func_path``: a verifier outside the GPUs; its cost is ``--reward-cost-ms``);
- ``--zero_stage`` -> ``--zero`` (under 3 the reference and reward models on the actor's GPUs run as ZeRO-3
  inference engines, sharded with it); ``--gradient_checkpointing`` -> ``--recompute full`` (absent: ``none``);
  ``--ring_attn_size`` -> ``--sp``; ``--vllm_tensor_parallel_size`` -> ``--tp``;
  ``--vllm_gpu_memory_utilization`` -> ``--gpu-memory-utilization``; ``--enable_prefix_caching``.

Placement. With ``--colocate_all_models`` every model shares the actor's
``actor_num_nodes x actor_num_gpus_per_node`` GPUs: ``--placement colocated`` (``--vllm_enable_sleep``:
``--colocate sleep --sleep-level 1``, vLLM's ``sleep(level=1)``; without it ``--colocate resident``;
``--deepspeed_enable_sleep``: ``--offload-train-state``, DeepSpeed's ``offload_states`` of the trainer and the
frozen models while vLLM generates; without it ``--no-offload-train-state``). Otherwise
each model has its own GPUs, which the planner's labels express: ``split G+T+S`` — G =
``vllm_num_engines x vllm_tensor_parallel_size`` generate; T = the actor's GPUs (and the critic's, unless it
shares the reward model's) train; S = the reward model's and the reference's GPUs (unless
``--colocate_actor_ref``) score — or ``gen-apart G+T`` when nothing scores apart. Approximated: oppo-sim
trains the critic on the actor's pool and time-slices the reward and reference models on one score pool,
where OpenRLHF gives each its own GPUs. Nodes: the most ``*_num_nodes`` of any model.
"""

from __future__ import annotations

from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.translation import (
    Builder,
    Translation,
    as_float,
    as_int,
    existing_file,
    split_words,
)

OPENRLHF_DEFAULTS: dict[str, Any] = {
    "rollout_batch_size": 1024, "n_samples_per_prompt": 1, "train_batch_size": 128, "micro_train_batch_size": 4,
    "prompt_max_len": 1024, "generate_max_len": 1024, "max_epochs": 1, "advantage_estimator": "gae",
    "actor_num_nodes": 1, "actor_num_gpus_per_node": 8, "ref_num_nodes": 1, "ref_num_gpus_per_node": 8,
    "reward_num_nodes": 1, "reward_num_gpus_per_node": 8, "critic_num_nodes": 1, "critic_num_gpus_per_node": 8,
    "vllm_num_engines": None, "vllm_tensor_parallel_size": 1, "vllm_gpu_memory_utilization": 0.95,
    "zero_stage": 2, "ring_attn_size": 1, "init_kl_coef": 0.01,
}
"""OpenRLHF's defaults of the options oppo-sim reads (``openrlhf/cli/train_ppo_ray.py``, 2025)."""

ESTIMATORS: dict[str, str] = {"gae": "ppo", "group_norm": "grpo", "rloo": "rloo", "reinforce_baseline": "reinforce++",
                              "reinforce": "reinforce++", "dr_grpo": "grpo"}
"""OpenRLHF ``--advantage_estimator`` -> oppo-sim ``--algorithm``."""

FLAGS: frozenset[str] = frozenset({
    "colocate_all_models", "colocate_actor_ref", "colocate_critic_reward", "vllm_enable_sleep", "gradient_checkpointing",
    "use_kl_loss", "dynamic_filtering", "enable_prefix_caching", "async_train", "deepspeed_enable_sleep"})
READ: frozenset[str] = frozenset({*OPENRLHF_DEFAULTS, *FLAGS, "pretrain", "reward_pretrain", "remote_rm_url",
                                  "agent_func_path"})
"""Every OpenRLHF option the reader translates; any other is listed as ignored."""


_WHY = {"micro_train_batch_size": "per-GPU micro-batches; oppo-sim's are in tokens (--micro-batch-tokens)",
        "async_train": "a schedule: oppo-sim's --policy async",
        "critic_pretrain": "the critic takes the reward model's shape", "dynamic_filtering": "no group to filter under gae"}


def parse_openrlhf(text: str) -> tuple[dict[str, Any], list[str]]:
    """OpenRLHF arguments (a string, or a file holding the launch command) -> (options given, launcher words)."""
    path = existing_file(text)
    words = split_words(path.read_text() if path is not None else text, "--from-openrlhf")
    launcher: list[str] = []
    for i, w in enumerate(words):
        if w.rsplit("/", 1)[-1].removesuffix(".py").endswith("train_ppo_ray"):
            launcher, words = words[: i + 1], words[i + 1:]
            break
    given: dict[str, Any] = {}
    key: str | None = None
    for w in words:
        if w.startswith("--") and len(w) > 2:
            key, eq, value = w[2:].partition("=")
            key = key.replace("-", "_")
            given[key] = value if eq else True
            key = None if eq else key
        elif key is not None:
            prev = given[key]
            given[key] = w if prev is True else f"{prev} {w}"
        elif w not in ("\\", "$@"):
            raise ConfigError(f"--from-openrlhf: {w!r} is not an option (OpenRLHF takes --name value pairs)")
    if not given:
        raise ConfigError("--from-openrlhf: no --options found")
    return given, launcher


def translate_openrlhf(text: str) -> Translation:
    """An OpenRLHF ``train_ppo_ray`` command line -> oppo-sim arguments, every option echoed or listed."""
    given, launcher = parse_openrlhf(text)
    for k in FLAGS:
        if k in given and given[k] is not True:
            raise ConfigError(f"--{k} is an on/off flag in OpenRLHF; it takes no value, got {given[k]!r}")
    o = {**OPENRLHF_DEFAULTS, **given}
    path = existing_file(text)
    b = Builder("OpenRLHF", (str(path) if path is not None else "the arguments given",))
    d = {k: k not in given for k in o}
    _batches(b, o, d)
    _models(b, o, d)
    _training(b, o, d)
    _placement(b, o, d, given)
    echoed = {u.key for u in b.used}
    for k in sorted(k for k in given if "--" + k not in echoed):
        b.ignore("--" + k, "" if given[k] is True else given[k], _WHY.get(k, "no effect in this placement" if k in READ
                                                                        else "not modelled"))
    if launcher:
        b.ignore(" ".join(launcher), "", "the launcher")
    b.notes.append("OpenRLHF's synchronous loop is oppo-sim's baseline policy" + (
        "; --async_train is --policy async --staleness 1" if "async_train" in given else "")
        + "; --policy chooses the one simulated")
    return b.done()


def _batches(b: Builder, o: dict, d: dict) -> None:
    prompts, n = as_int("--rollout_batch_size", o["rollout_batch_size"]), as_int("--n_samples_per_prompt",
                                                                                 o["n_samples_per_prompt"])
    b.use("--rollout_batch_size", prompts, "--batch", prompts, default=d["rollout_batch_size"])
    b.use("--n_samples_per_prompt", n, "--n", n, default=d["n_samples_per_prompt"])
    train = as_int("--train_batch_size", o["train_batch_size"])
    if train < 1:
        raise ConfigError(f"--train_batch_size must be >= 1, got {train}")
    parts = max(1, -(-prompts * n // train))
    b.use("--train_batch_size", train, "--minibatches", parts, default=d["train_batch_size"],
          note=f"{prompts} x {n} samples / {train}" + ("" if prompts * n % train == 0 else ", the last one smaller"))
    b.use("--max_epochs", o["max_epochs"], "--ppo-epochs", as_int("--max_epochs", o["max_epochs"]),
          default=d["max_epochs"])
    b.use("--prompt_max_len", o["prompt_max_len"], "--max-prompt", as_int("--prompt_max_len", o["prompt_max_len"]),
          "--truncate-prompt", note="OpenRLHF truncates prompts at this length", default=d["prompt_max_len"])
    b.use("--generate_max_len", o["generate_max_len"], "--max-response",
          as_int("--generate_max_len", o["generate_max_len"]), default=d["generate_max_len"])


def _models(b: Builder, o: dict, d: dict) -> None:
    est = str(o["advantage_estimator"]).strip().lower()
    if est not in ESTIMATORS:
        raise ConfigError(f"--advantage_estimator {est}: oppo-sim simulates {', '.join(ESTIMATORS)}")
    name = ESTIMATORS[est]
    note = {"reinforce": "REINFORCE++ without a group baseline: costs as reinforce++",
            "dr_grpo": "Dr. GRPO: costs as grpo"}.get(est, "")
    if "dynamic_filtering" in o and name != "ppo":
        name, note = "dapo", "with --dynamic_filtering: DAPO's dynamic sampling" + (
            "" if est == "group_norm" else f" (advantage as {est}; the same cost)")
    b.use("--advantage_estimator", est, "--algorithm", name, note=note, default=d["advantage_estimator"])
    if name == "dapo":
        b.use("--dynamic_filtering", True, note="-> --algorithm dapo")
    kl = as_float("--init_kl_coef", o["init_kl_coef"])
    b.use("--init_kl_coef", kl, *(() if kl > 0 else ("--no-reference",)), default=d["init_kl_coef"],
          note=("KL in the loss" if "use_kl_loss" in o else "KL in the reward") if kl > 0 else "no reference model")
    if "use_kl_loss" in o:
        b.use("--use_kl_loss", True, note="same reference forward")
    if "pretrain" in o:
        b.use_model("--pretrain", o["pretrain"], "--actor")
    remote = next((k for k in ("remote_rm_url", "agent_func_path") if k in o), None)
    if remote:
        b.use("--" + remote, o[remote], "--reward", "rule", note="a verifier off the GPUs")
    elif "reward_pretrain" in o:
        b.use_model("--reward_pretrain", o["reward_pretrain"], "--reward")


def _training(b: Builder, o: dict, d: dict) -> None:
    zero = as_int("--zero_stage", o["zero_stage"])
    if zero not in (0, 1, 2, 3):
        raise ConfigError(f"--zero_stage must be 0, 1, 2 or 3, got {zero}")
    b.use("--zero_stage", zero, "--zero", zero, default=d["zero_stage"])
    gc = "gradient_checkpointing" in o
    b.use("--gradient_checkpointing", gc, "--recompute", "full" if gc else "none", default=not gc)
    b.use("--ring_attn_size", o["ring_attn_size"], "--sp", as_int("--ring_attn_size", o["ring_attn_size"]),
          default=d["ring_attn_size"])
    gmu = as_float("--vllm_gpu_memory_utilization", o["vllm_gpu_memory_utilization"])
    b.use("--vllm_gpu_memory_utilization", gmu, "--gpu-memory-utilization", gmu,
          default=d["vllm_gpu_memory_utilization"])
    if "enable_prefix_caching" in o:
        b.use("--enable_prefix_caching", True, "--enable-prefix-caching")


def _gpus(o: dict, role: str) -> tuple[int, int]:
    nodes, per = as_int(f"--{role}_num_nodes", o[f"{role}_num_nodes"]), as_int(f"--{role}_num_gpus_per_node",
                                                                              o[f"{role}_num_gpus_per_node"])
    if nodes < 1 or per < 1:
        raise ConfigError(f"--{role}_num_nodes and --{role}_num_gpus_per_node must be >= 1, got {nodes} and {per}")
    return nodes, nodes * per


def _placement(b: Builder, o: dict, d: dict, given: dict) -> None:
    tp = as_int("--vllm_tensor_parallel_size", o["vllm_tensor_parallel_size"])
    b.use("--vllm_tensor_parallel_size", tp, "--tp", tp, default=d["vllm_tensor_parallel_size"])
    engines = 0 if o["vllm_num_engines"] is None else as_int("--vllm_num_engines", o["vllm_num_engines"])
    nodes, actor = _gpus(o, "actor")
    if "actor_num_nodes" in given:
        b.use("--actor_num_nodes", nodes, note="in the placement")
    if "colocate_all_models" in o or engines == 0:
        sleep, offload = "vllm_enable_sleep" in o, "deepspeed_enable_sleep" in o
        extra = ("--colocate", "sleep", "--sleep-level", 1) if sleep else ("--colocate", "resident")
        extra += ("--offload-train-state" if offload else "--no-offload-train-state",)
        if engines == 0:
            extra = ("--engine", "static")
            b.notes.append("no vLLM engines: the actor generates with Hugging Face generate (oppo-sim's static engine)")
        b.use("--actor_num_gpus_per_node", o["actor_num_gpus_per_node"], "--placement", "colocated", "--devices", actor,
              "--nodes", nodes, *extra, note="every model on the actor's GPUs", default=d["actor_num_gpus_per_node"])
        if engines:
            b.use("--colocate_all_models", True)
            b.use("--vllm_num_engines", engines, note=f"{engines} x tp {tp} = {engines * tp} GPUs"
                  + ("" if engines * tp == actor else f" (OpenRLHF requires {actor})"))
        if sleep:
            b.use("--vllm_enable_sleep", True, note="vLLM sleep(level=1)")
        if offload:
            b.use("--deepspeed_enable_sleep", True, note="the trainer's state to host while vLLM generates")
        return
    has_critic = o["advantage_estimator"] == "gae"
    has_ref = as_float("--init_kl_coef", o["init_kl_coef"]) > 0
    has_rm = "remote_rm_url" not in o and "agent_func_path" not in o
    gen, train, score = engines * tp, actor, 0
    used = [f"vLLM {engines} x tp {tp}", f"actor {actor}"]
    if has_critic and "colocate_critic_reward" not in o:
        c_nodes, c = _gpus(o, "critic")
        train, nodes = train + c, max(nodes, c_nodes)
        used.append(f"critic {c} (trains on the actor's pool)")
    if has_rm:
        r_nodes, r = _gpus(o, "reward")
        score, nodes = score + r, max(nodes, r_nodes)
        used.append(f"reward {r}" + (" with the critic" if has_critic and "colocate_critic_reward" in o else ""))
    if has_ref and "colocate_actor_ref" not in o:
        f_nodes, f = _gpus(o, "ref")
        score, nodes = score + f, max(nodes, f_nodes)
        used.append(f"reference {f}")
    roles = [r for r, on in (("critic", has_critic), ("reward", has_rm), ("ref", has_ref)) if on]
    label = f"split {gen}+{train}+{score}" if score else f"gen-apart {gen}+{train}"
    b.use("--vllm_num_engines", engines, "--placement", label, "--nodes", nodes, note="; ".join(used))
    for k in ("actor_num_gpus_per_node", "ref_num_nodes", "ref_num_gpus_per_node", "reward_num_nodes",
              "reward_num_gpus_per_node", "critic_num_nodes", "critic_num_gpus_per_node", "colocate_actor_ref",
              "colocate_critic_reward"):
        if k in given and (k.startswith(("actor", "colocate")) or k.startswith(tuple(roles))):
            b.use("--" + k, given[k], note="in the placement above")
    b.notes.append(f"separate pools -> {label}: the critic trains on the actor's pool and the reward and reference "
                   "models share one score pool, where OpenRLHF gives each its own GPUs")


__all__ = ["ESTIMATORS", "FLAGS", "OPENRLHF_DEFAULTS", "READ", "parse_openrlhf", "translate_openrlhf"]
