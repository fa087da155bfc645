"""``oppo-sim run --from-openrlhf "ARGS"``: an OpenRLHF ``train_ppo_ray`` command line as oppo-sim options.

ARGS is the argument list (``"--actor.model_name_or_path Qwen/Qwen2.5-7B-Instruct --rollout.batch_size 128
..."``) or a file holding the launch command (a script; ``ray job submit ... -- python3 -m
openrlhf.cli.train_ppo_ray ...``: the words before ``train_ppo_ray`` are the launcher and listed as
ignored). An option takes every word up to the next ``--option``; an option with none is an on/off flag.
Options not given take OpenRLHF's defaults, as OpenRLHF would.

Two command-line styles (names verified in :mod:`~oppo_sim.frameworks.openrlhf_flags`): the **dotted**
flags of OpenRLHF since 2026-04-19 (``--actor.*``, ``--vllm.*``, ``--rollout.*``, ``--train.*``, ``--ds.*``,
``--algo.*``) and the **flat** ones before (``--pretrain``, ``--rollout_batch_size``). The style is told from
the flags; a command line mixing them is refused, and the echo's first line says which one was read. A flag
of neither list that nearly spells one is refused with "did you mean"; a command line with no OpenRLHF
flag at all is refused. Below, flat name / dotted name:

- ``rollout_batch_size`` / ``rollout.batch_size``: prompts per rollout -> ``--batch``;
  ``n_samples_per_prompt`` / ``rollout.n_samples_per_prompt`` -> ``--n``;
- ``train_batch_size`` / ``train.batch_size``: the global training batch in *samples* ->
  ``--minibatches = prompts x n / train_batch_size``; ``max_epochs`` / ``train.max_epochs`` -> ``--ppo-epochs``;
- lengths: before 2026-03-24 ``--prompt_max_len`` (prompts truncated to it) -> ``--max-prompt`` with
  ``--truncate-prompt`` and ``--generate_max_len`` -> ``--max-response``; since, ``max_len`` /
  ``data.max_len`` is prompt + response and ``max_new_tokens`` / ``rollout.max_new_tokens`` the response cap:
  a prompt is truncated (its tail kept) to ``max_len - max_new_tokens`` -> ``--max-prompt`` with
  ``--truncate-prompt``, ``--max-response max_new_tokens``; without ``max_new_tokens`` a response may take
  what its prompt leaves of ``max_len``: ``--max-response max_len`` (an upper bound, said in the echo);
- ``advantage_estimator`` / ``algo.advantage.estimator``: gae -> ppo, group_norm -> grpo, rloo,
  reinforce_baseline -> reinforce++; ``reinforce`` and ``dr_grpo`` cost as reinforce++ and grpo; with
  dynamic filtering a group estimator becomes dapo;
- ``init_kl_coef`` / ``algo.kl.init_coef`` 0 creates no reference model -> ``--no-reference``;
- the models: ``pretrain`` / ``actor.model_name_or_path`` -> ``--actor``; ``reward_pretrain`` /
  ``reward.model_name_or_path`` -> ``--reward``; ``remote_rm_url`` / ``reward.remote_url`` and
  ``agent_func_path`` / ``train.agent_func_path`` -> ``--reward rule`` (a verifier off the GPUs); the critic
  (``critic_pretrain`` / ``critic.model_name_or_path``) -> ``--critic`` where it names a known model;
- ``zero_stage`` / ``ds.zero_stage`` -> ``--zero``; gradient checkpointing -> ``--recompute full`` (absent:
  ``none``); ``ring_attn_size`` / ``ds.ring_attn_size`` -> ``--sp``; vLLM's tensor parallelism and memory
  fraction -> ``--tp``, ``--gpu-memory-utilization``; prefix caching, ``enforce_eager`` (with vLLM engines) and
  ``adam_offload`` -> ``--enable-prefix-caching``, ``--enforce-eager``, ``--optimizer-offload 1``; the dynamic batch
  (``use_dynamic_batch`` / ``train.dynamic_batch_enable``) with ``train_max_tokens_per_gpu`` and
  ``rollout_max_tokens_per_gpu`` (x ``ring_attn_size``) -> ``--micro-batch-tokens``, ``--logprob-micro-batch-tokens``,
  else ``micro_train_batch_size`` and ``micro_rollout_batch_size`` -> ``--micro-batch-size``, ``--logprob-micro-batch-size``;
- async: ``async_train`` / ``train.async_enable`` -> ``--policy async --staleness Q`` with Q the sampler ->
  trainer queue (``async_queue_size`` / ``train.async_queue_size``, default 1: one step ahead).

Placement: :mod:`~oppo_sim.frameworks.openrlhf_placement`.
"""

from __future__ import annotations

from typing import Any

from oppo_sim.core.errors import ConfigError
from oppo_sim.frameworks.openrlhf_flags import BOTH, DOTTED, DOTTED_VERSION, FLAT, FLAT_VERSION, TO_FLAT, Names
from oppo_sim.frameworks.lora_keys import openrlhf_lora
from oppo_sim.frameworks.openrlhf_placement import placement
from oppo_sim.frameworks.suggest import check_typo
from oppo_sim.frameworks.translation import Builder, Translation, as_float, as_int, existing_file, model_arg, split_words

OPENRLHF_DEFAULTS: dict[str, Any] = {
    "rollout_batch_size": 1024, "n_samples_per_prompt": 1, "train_batch_size": 128, "micro_train_batch_size": 4,
    "micro_rollout_batch_size": 8,
    "max_epochs": 1, "advantage_estimator": "gae",
    "actor_num_nodes": 1, "actor_num_gpus_per_node": 8, "ref_num_nodes": 1, "ref_num_gpus_per_node": 8,
    "reward_num_nodes": 1, "reward_num_gpus_per_node": 8, "critic_num_nodes": 1, "critic_num_gpus_per_node": 8,
    "vllm_num_engines": None, "vllm_tensor_parallel_size": 1, "vllm_gpu_memory_utilization": 0.95,
    "zero_stage": 2, "ring_attn_size": 1, "init_kl_coef": 0.01, "async_queue_size": 1,
}
"""OpenRLHF's defaults of the options oppo-sim reads (``train_ppo_ray.py``; the same in both styles but the micro-batch
sizes: :data:`DOTTED_MICRO`)."""
DOTTED_MICRO = {"micro_train_batch_size": 1, "micro_rollout_batch_size": 1}
"""The micro-batch sizes' defaults since a2978694 (2026-04-11, two days before the dotted flags): 4 and 8 before."""

SPLIT_LENGTHS = {"prompt_max_len": 1024, "generate_max_len": 1024}
"""The lengths before 2026-03-24 (d0e088b6): prompt and response caps."""
TOTAL_LENGTHS = {"max_len": 2048, "max_new_tokens": None}
"""The lengths since: prompt + response, and the response cap (None: what the prompt leaves)."""

ESTIMATORS: dict[str, str] = {"gae": "ppo", "group_norm": "grpo", "rloo": "rloo", "reinforce_baseline": "reinforce++",
                              "reinforce": "reinforce++", "dr_grpo": "grpo"}
"""OpenRLHF's advantage estimator -> oppo-sim ``--algorithm``."""

FLAGS: frozenset[str] = frozenset({
    "colocate_all_models", "colocate_actor_ref", "colocate_critic_reward", "vllm_enable_sleep", "gradient_checkpointing",
    "use_kl_loss", "dynamic_filtering", "enable_prefix_caching", "async_train", "deepspeed_enable_sleep",
    "partial_rollout", "enforce_eager", "adam_offload", "use_dynamic_batch", "packing_samples"})
"""The on/off flags the reader reads (flat names)."""
READ: frozenset[str] = frozenset({*OPENRLHF_DEFAULTS, *SPLIT_LENGTHS, *TOTAL_LENGTHS, *FLAGS, "pretrain",
                                  "reward_pretrain", "remote_rm_url", "agent_func_path", "critic_pretrain",
                                  "max_tokens_per_gpu", "train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu",
                                  "lora_rank", "target_modules"})
"""Every OpenRLHF option the reader translates (flat names); any other is listed as ignored."""

_WHY = {"micro_train_batch_size": "not read with the dynamic batch", "micro_rollout_batch_size": "not read with the dynamic "
        "batch", "train_max_tokens_per_gpu": "read only with the dynamic batch",
        "rollout_max_tokens_per_gpu": "read only with the dynamic batch", "max_tokens_per_gpu": "read only with the dynamic batch",
        "dynamic_filtering": "no group to filter under gae", "async_queue_size": "no async training",
        "partial_rollout": "needs async training", "ds_tensor_parallel_size": "DeepSpeed AutoTP: not modelled "
        "(oppo-sim's DeepSpeed trainer is data parallel; Megatron TP is --train-backend megatron)"}


def parse_openrlhf(text: str) -> tuple[dict[str, Any], list[str]]:
    """OpenRLHF arguments (a string, or a file holding the launch command) -> (options given, launcher words)."""
    path = existing_file(text)
    words = split_words(path.read_text() if path is not None else text, "--from-openrlhf")
    inner = [w for w in words if "train_ppo_ray" in w and any(c.isspace() for c in w)]
    if inner:  # the command quoted inside another (srun ... bash -c "... train_ppo_ray ..."): read the quoted one
        words = split_words(inner[-1], "--from-openrlhf")
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


def style_of(given: dict[str, Any]) -> bool:
    """True for the dotted style, False for the flat one; a mix, or neither, is a one-line error."""
    dotted = [k for k in given if "." in k]
    flat = [k for k in given if "." not in k and k not in BOTH]
    if dotted and flat:
        raise ConfigError(f"--from-openrlhf: the command line mixes OpenRLHF's dotted flags (since 2026-04-19; "
                          f"--{dotted[0]}) with its older flat ones (--{flat[0]}); OpenRLHF takes one style")
    if not dotted and not flat:
        raise ConfigError("--from-openrlhf: no OpenRLHF train_ppo_ray option found in " + " ".join("--" + k for k in given))
    return bool(dotted)


def canonical(given: dict[str, Any], dotted: bool) -> tuple[dict[str, Any], list[str]]:
    """(options under their flat names, unknown options); a near-typo of a known name is a one-line error;
    a command line of which no option is known is refused."""
    known = DOTTED if dotted else FLAT
    out: dict[str, Any] = {}
    unknown: list[str] = []
    for k, v in given.items():
        if k in known or k in BOTH:
            out[TO_FLAT.get(k, k) if dotted else k] = v
        else:
            check_typo(k, known | BOTH, "--from-openrlhf", "--{}")
            unknown.append(k)
    if not out:
        raise ConfigError(f"--from-openrlhf: none of its {len(given)} options is an OpenRLHF train_ppo_ray option "
                          f"(e.g. --{unknown[0]}); is this an OpenRLHF command line?")
    return out, unknown


def _checks(o: dict, f: Names) -> None:
    """OpenRLHF's own argument checks that decide what runs (``train_ppo_ray.py``, after parsing)."""
    for k in FLAGS:
        if k in o and o[k] is not True:
            raise ConfigError(f"{f(k)} is an on/off flag in OpenRLHF; it takes no value, got {o[k]!r}")
    if "async_train" in o and "vllm_enable_sleep" in o:
        raise ConfigError(f"OpenRLHF refuses {f('async_train')} with {f('vllm_enable_sleep')} "
                          "(async RLHF is not supported with vLLM sleep)")
    if "partial_rollout" in o and "async_train" not in o:
        raise ConfigError(f"OpenRLHF refuses {f('partial_rollout')} without {f('async_train')}")
    if any(k in o for k in SPLIT_LENGTHS) and any(k in o for k in TOTAL_LENGTHS):
        raise ConfigError("--from-openrlhf: --prompt_max_len/--generate_max_len (OpenRLHF before 2026-03-24) mixed "
                          "with --max_len/--max_new_tokens (after); OpenRLHF takes one pair")
    est, n = str(o.get("advantage_estimator", "gae")), o.get("n_samples_per_prompt", 1)
    if est in ("rloo", "reinforce_baseline", "group_norm", "dr_grpo") and as_int(f("n_samples_per_prompt"), n) < 2:
        raise ConfigError(f"OpenRLHF refuses {f('advantage_estimator')} {est} with {f('n_samples_per_prompt')} {n}: "
                          "a group baseline needs > 1")
    if "dynamic_filtering" in o and not ("remote_rm_url" in o or "agent_func_path" in o):
        raise ConfigError(f"OpenRLHF refuses {f('dynamic_filtering')} without {f('remote_rm_url')} or "
                          f"{f('agent_func_path')}")


def translate_openrlhf(text: str) -> Translation:
    """An OpenRLHF ``train_ppo_ray`` command line -> oppo-sim arguments, every option echoed or listed."""
    raw, launcher = parse_openrlhf(text)
    dotted = style_of(raw)
    given, unknown = canonical(raw, dotted)
    f = Names(dotted)
    _checks(given, f)
    total = dotted or any(k in given for k in TOTAL_LENGTHS)
    o = {**OPENRLHF_DEFAULTS, **(DOTTED_MICRO if dotted else {}), **(TOTAL_LENGTHS if total else SPLIT_LENGTHS), **given}
    path = existing_file(text)
    version = DOTTED_VERSION if dotted else FLAT_VERSION
    b = Builder(f"OpenRLHF, {version},", (str(path) if path is not None else "the arguments given",))
    d = {k: k not in given for k in o}
    _batches(b, o, d, f)
    _lengths(b, o, d, f, total)
    _models(b, o, d, f)
    _training(b, o, d, f)
    _micro_batches(b, o, d, f)
    placement(b, o, d, given, f)
    b.training_loop("OpenRLHF")
    echoed = {u.key for u in b.used}
    for k in sorted(k for k in given if f(k) not in echoed):
        b.ignore(f(k), "" if given[k] is True else given[k], _WHY.get(k, "no effect in this placement" if k in READ
                                                                       else "not modelled"))
    for k in unknown:
        b.ignore("--" + k, "" if raw[k] is True else raw[k], f"not an OpenRLHF option of the {version}; "
                                                             "OpenRLHF's parser would refuse it")
    if launcher:
        b.ignore(" ".join(launcher), "", "the launcher")
    if "async_train" not in given:
        b.notes.append("OpenRLHF's synchronous loop is oppo-sim's baseline policy; --policy chooses the one simulated")
    return b.done()


def _batches(b: Builder, o: dict, d: dict, f: Names) -> None:
    prompts = as_int(f("rollout_batch_size"), o["rollout_batch_size"])
    n = as_int(f("n_samples_per_prompt"), o["n_samples_per_prompt"])
    b.use(f("rollout_batch_size"), prompts, "--batch", prompts, default=d["rollout_batch_size"])
    b.use(f("n_samples_per_prompt"), n, "--n", n, default=d["n_samples_per_prompt"])
    train = as_int(f("train_batch_size"), o["train_batch_size"])
    if train < 1:
        raise ConfigError(f"{f('train_batch_size')} must be >= 1, got {train}")
    parts = max(1, -(-prompts * n // train))
    b.use(f("train_batch_size"), train, "--minibatches", parts, default=d["train_batch_size"],
          note=f"{prompts} x {n} samples / {train}" + ("" if prompts * n % train == 0 else ", the last one smaller"))
    b.use(f("max_epochs"), o["max_epochs"], "--ppo-epochs", as_int(f("max_epochs"), o["max_epochs"]),
          default=d["max_epochs"])


def _lengths(b: Builder, o: dict, d: dict, f: Names, total: bool) -> None:
    if not total:
        b.use(f("prompt_max_len"), o["prompt_max_len"], "--max-prompt", as_int(f("prompt_max_len"), o["prompt_max_len"]),
              "--truncate-prompt", note="OpenRLHF truncates prompts at this length", default=d["prompt_max_len"])
        b.use(f("generate_max_len"), o["generate_max_len"], "--max-response",
              as_int(f("generate_max_len"), o["generate_max_len"]), default=d["generate_max_len"])
        return
    whole = as_int(f("max_len"), o["max_len"])
    new = None if o["max_new_tokens"] is None else as_int(f("max_new_tokens"), o["max_new_tokens"])
    if new is not None and not 0 < new < whole:
        raise ConfigError(f"{f('max_new_tokens')} {new} must be >= 1 and below {f('max_len')} {whole} "
                          "(OpenRLHF keeps max_len - max_new_tokens of a prompt)")
    if new is None:
        b.use(f("max_len"), whole, "--max-prompt", whole - 1, "--truncate-prompt", "--max-response", whole,
              default=d["max_len"], note="prompt + response; a response may take what its prompt leaves: "
                                         "capped at max_len here (an upper bound)")
        b.notes.append(f"no {f('max_new_tokens')}: OpenRLHF caps each response at {f('max_len')} minus its prompt's "
                       f"length; oppo-sim caps every response at {whole}")
        return
    b.use(f("max_len"), whole, "--max-prompt", whole - new, "--truncate-prompt", default=d["max_len"],
          note=f"prompt + response: prompts truncated to {whole} - {new}")
    b.use(f("max_new_tokens"), new, "--max-response", new)


def _models(b: Builder, o: dict, d: dict, f: Names) -> None:
    est = str(o["advantage_estimator"]).strip().lower()
    if est not in ESTIMATORS:
        raise ConfigError(f"{f('advantage_estimator')} {est}: oppo-sim simulates {', '.join(ESTIMATORS)}")
    name = ESTIMATORS[est]
    note = {"reinforce": "REINFORCE++ without a group baseline: costs as reinforce++",
            "dr_grpo": "Dr. GRPO: costs as grpo"}.get(est, "")
    if "dynamic_filtering" in o and name != "ppo":
        name, note = "dapo", "with dynamic filtering: DAPO's dynamic sampling" + (
            "" if est == "group_norm" else f" (advantage as {est}; the same cost)")
    b.use(f("advantage_estimator"), est, "--algorithm", name, note=note, default=d["advantage_estimator"])
    if name == "dapo":
        b.use(f("dynamic_filtering"), True, note="-> --algorithm dapo")
    kl = as_float(f("init_kl_coef"), o["init_kl_coef"])
    if kl < 0:
        raise ConfigError(f"{f('init_kl_coef')} must be >= 0 (0: no reference model), got {kl}")
    b.use(f("init_kl_coef"), kl, *(() if kl > 0 else ("--no-reference",)), default=d["init_kl_coef"],
          note=("KL in the loss" if "use_kl_loss" in o else "KL in the reward") if kl > 0 else "no reference model")
    if "use_kl_loss" in o:
        b.use(f("use_kl_loss"), True, note="same reference forward")
    if "pretrain" in o:
        b.use_model(f("pretrain"), o["pretrain"], "--actor")
    remote = next((k for k in ("remote_rm_url", "agent_func_path") if k in o), None)
    if remote:
        b.use(f(remote), o[remote], "--reward", "rule", note="a verifier off the GPUs")
    elif "reward_pretrain" in o:
        b.use_model(f("reward_pretrain"), o["reward_pretrain"], "--reward")
    if "critic_pretrain" in o and est == "gae":
        arg, how = model_arg(f("critic_pretrain"), o["critic_pretrain"])
        if arg is not None:
            b.use(f("critic_pretrain"), o["critic_pretrain"], "--critic", arg, note=how)


def _micro_batches(b: Builder, o: dict, d: dict, f: Names) -> None:
    """A rank's micro-batches. The dynamic batch (``use_dynamic_batch`` / ``train.dynamic_batch_enable``) packs them to
    ``train_max_tokens_per_gpu`` tokens (default 16192; ``max_tokens_per_gpu`` before the split into two) times the
    ring-attention degree (``seqlen_balancing.get_minimum_num_micro_batch_size``) -> ``--micro-batch-tokens``, and
    make_experience's forwards to ``rollout_max_tokens_per_gpu`` (default: the training's) ->
    ``--logprob-micro-batch-tokens``; without it they are ``micro_train_batch_size`` and ``micro_rollout_batch_size``
    samples (default 4 and 8 with the flat flags, 1 and 1 with the dotted ones) -> ``--micro-batch-size``,
    ``--logprob-micro-batch-size``."""
    if "use_dynamic_batch" not in o:
        for k, opt in (("micro_train_batch_size", "--micro-batch-size"), ("micro_rollout_batch_size", "--logprob-micro-batch-size")):
            n = as_int(f(k), o[k])
            b.use(f(k), n, opt, n, default=d[k], note="samples a micro-batch" + (
                "" if not d[k] else " (the default of the flat-flag releases; 1 since 2026-04-11)" if not f.dotted else ""))
        if as_int(f("ring_attn_size"), o["ring_attn_size"]) > 1:  # ring attention turns packing on (train_ppo_ray.py)
            b.use(f("packing_samples"), True, default="packing_samples" not in o, note="ring attention packs the samples")
        elif "packing_samples" in o:
            b.use(f("packing_samples"), True, note="samples packed: no padding")
        else:
            b.use(f("packing_samples"), False, "--padded-micro-batches", default=True,
                  note="unpacked: each micro-batch padded to its longest (prompts left, responses right)")
        return
    ring = as_int(f("ring_attn_size"), o["ring_attn_size"])
    times = f" x ring attention {ring}" if ring > 1 else ""
    b.use(f("use_dynamic_batch"), True, note="micro-batches packed to a token budget")
    if "max_tokens_per_gpu" in o and any(k in o for k in ("train_max_tokens_per_gpu", "rollout_max_tokens_per_gpu")):
        raise ConfigError(f"{f('max_tokens_per_gpu')} is the one budget of releases before train_/rollout_max_tokens_per_gpu; "
                          "no OpenRLHF release takes both: give one or the other")
    key = "max_tokens_per_gpu" if "max_tokens_per_gpu" in o else "train_max_tokens_per_gpu"
    train = as_int(f(key), o.get(key, 16192))
    b.use(f(key), train, "--micro-batch-tokens", train * ring, default=key not in o, note=f"a GPU's tokens{times}")
    if key == "train_max_tokens_per_gpu":
        fwd = as_int(f("rollout_max_tokens_per_gpu"), o.get("rollout_max_tokens_per_gpu") or train)
        b.use(f("rollout_max_tokens_per_gpu"), fwd, "--logprob-micro-batch-tokens", fwd * ring,
              default="rollout_max_tokens_per_gpu" not in o, note=f"the experience forwards' budget{times}")


def _training(b: Builder, o: dict, d: dict, f: Names) -> None:
    zero = as_int(f("zero_stage"), o["zero_stage"])
    if zero not in (0, 1, 2, 3):
        raise ConfigError(f"{f('zero_stage')} must be 0, 1, 2 or 3, got {zero}")
    b.use(f("zero_stage"), zero, "--zero", zero, default=d["zero_stage"])
    gc = "gradient_checkpointing" in o
    b.use(f("gradient_checkpointing"), gc, "--recompute", "full" if gc else "none", default=not gc)
    b.use(f("ring_attn_size"), o["ring_attn_size"], "--sp", as_int(f("ring_attn_size"), o["ring_attn_size"]),
          default=d["ring_attn_size"])
    gmu = as_float(f("vllm_gpu_memory_utilization"), o["vllm_gpu_memory_utilization"])
    b.use(f("vllm_gpu_memory_utilization"), gmu, "--gpu-memory-utilization", gmu,
          default=d["vllm_gpu_memory_utilization"])
    if "enable_prefix_caching" in o:
        b.use(f("enable_prefix_caching"), True, "--enable-prefix-caching")
    if "adam_offload" in o:
        b.use(f("adam_offload"), True, "--optimizer-offload", 1, note="DeepSpeed offload_optimizer: the Adam step on the CPU")
    if "lora_rank" in o:
        tk = f("target_modules") if "target_modules" in o else None
        openrlhf_lora(b, f("lora_rank"), as_int(f("lora_rank"), o["lora_rank"]), tk, o.get("target_modules"))
    if "enforce_eager" in o:  # vLLM's: without engines the static engine generates and it is unused
        on = o["vllm_num_engines"] is not None
        b.use(f("enforce_eager"), True, *(("--enforce-eager",) if on else ()), note="" if on else "no vLLM engines: unused")
    if "async_train" in o:
        q = as_int(f("async_queue_size"), o["async_queue_size"])
        if q < 1:
            raise ConfigError(f"{f('async_queue_size')} must be >= 1, got {q}")
        b.use(f("async_train"), True, "--policy", "async", note="the sampler runs ahead of the trainer")
        b.use(f("async_queue_size"), q, "--staleness", q, default=d["async_queue_size"],
              note=f"batches generated ahead: samples at most {q} version(s) stale")
        if "partial_rollout" in o:
            b.use(f("partial_rollout"), True, note="in-flight generation continues across a weight sync")
            b.notes.append(f"{f('partial_rollout')}: a response in flight at a weight sync finishes on the new "
                           "weights; oppo-sim's async policy keeps each response on the version it started with")


__all__ = ["ESTIMATORS", "FLAGS", "OPENRLHF_DEFAULTS", "READ", "canonical", "parse_openrlhf", "style_of",
           "translate_openrlhf"]
