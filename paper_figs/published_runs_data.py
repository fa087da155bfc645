"""Published RL training runs with a per-step time, each as its framework ran it (the data behind
``published_runs.py``).

Every record names its source (URL, and the commit or version it was read at), the setup as the framework
states it (model, GPU, devices, nodes, placement, prompts per step, responses per prompt, prompt/response
caps, algorithm, reward, KL, tensor parallelism, epochs and mini-batches, memory fraction of the generation
engine, recomputation) and the published step time, with per-stage times where the source gives them.
What the source does not state is an assumption, written in the record: ``response_note`` (how the response
lengths are drawn), ``prompt_note`` (where the prompt length comes from) and ``notes`` (what the framework
does that the simulator does not model, written before the comparison was run). Nothing here is fitted to a
published step time.

Ids: ``model`` and ``gpu`` are oppo-sim table ids; a run whose id the tables do not know yet is kept and
reported as needing it (the ``status`` column of the table).
"""

from __future__ import annotations

try:
    from published_runs_nemo import NEMO_RUNS
    from published_runs_record import PublishedRun, Stages
except ImportError:  # imported as paper_figs.published_runs_data
    from paper_figs.published_runs_nemo import NEMO_RUNS
    from paper_figs.published_runs_record import PublishedRun, Stages

__all__ = ["PublishedRun", "Stages", "NEMO_RUNS", "VERL_RUNS", "OPENRLHF_RUNS", "PAPER_RUNS", "RUNS"]
VERL = "b178a3cd56f58b2d502255daba591e92833930a7"  # volcengine/verl main, 2026-01-29
VERL_ONE_STEP = f"https://github.com/volcengine/verl/blob/{VERL}/verl/experimental/one_step_off_policy/README.md"
VERL_FULLY_ASYNC = f"https://github.com/volcengine/verl/blob/{VERL}/docs/advance/fully_async.md"
VERL_DPSK = f"https://github.com/volcengine/verl/blob/{VERL}/docs/perf/dpsk.md"
OPENRLHF = "dbdd43b0899b069a276fbc8813c6769011975806"  # OpenRLHF benchmark/README.md, 2024-03-26
OPENRLHF_BENCH = f"https://github.com/OpenRLHF/OpenRLHF/blob/{OPENRLHF}/benchmark/README.md"
OPPO_PAPER = "https://arxiv.org/abs/2509.25762"


# --------------------------------------------------------------------------------------------------
# verl: the colocated synchronous baselines of its one-step-off and fully-async pages (H20), and its
# DeepSeek-671B benchmark


_VERL_STAGES = ("verl timing_s: gen (which, in the releases these pages were timed with, also wakes the engine, "
                "reshards the weights into it and puts it back to sleep), old_log_prob (+ ref where given) as "
                "scoring, update_actor as training")
_DAPO_RESPONSE = ("no mean response length is published; assumed 2,500 tokens (a DAPO-Math run on a 7B math base "
                  "model mid-training), lognormal spread 1.0, capped at max_response_length")
_DAPO_PROMPT = "not published; assumed a 150-token mean (DAPO-Math-17k prompts with the template)"
_DAPO_NOTES = ("hybrid engine: vLLM sleeps (level 1) while the offloaded trainer runs; DAPO recipe settings run as grpo (clip-higher, token-mean loss and overlong shaping cost nothing "
               "extra; no dynamic sampling in these scripts); no KL, no reference; rule reward; dynamic batch size "
               "by tokens where the script sets it (2x the longest sequence a GPU to train, 3x for log-probs, x the "
               "Ulysses degree); vLLM max_num_batched_tokens = max prompt + max response (the scripts), max_num_seqs 1024 "
               "(verl's default when these runs were published; 256 from 2026-01-24); ")


_EAGER_THEN = ("vLLM without CUDA graphs: the page's numbers date from 2025-07-17 (verl #2231), when verl's "
               "rollout.enforce_eager defaulted to True (False from 2025-08-08, #2956) and the script does not set it")


def _verl_7b(key: str, *, source: str, devices: int, nodes: int, n: int, max_response: int, tp: int, sp: int,
             step_s: float, gen_s: float, score_s: float, train_s: float, script: str, note: str,
             megatron: tuple[int, int] | None = None, enforce_eager: bool = False, fsdp_size: int = 8,
             dynamic_bsz: bool = True, fixed: tuple[int, int] = (1, 1)) -> PublishedRun:
    """``megatron``: the script's (train_tp, train_pp) where it trains with Megatron (else FSDP, full-shard, with
    the script's ``fsdp_size``). ``dynamic_bsz``: the script's ``use_dynamic_bsz``, with its budgets per GPU of 2x
    (training) and 3x (log-probs) the longest sequence, times the Ulysses degree as verl scales them; without it,
    ``fixed``: the script's ``ppo_micro_batch_size_per_gpu`` and ``log_prob_micro_batch_size_per_gpu``."""
    longest = 2048 + max_response
    budgets = {"micro_batch_tokens": 2 * longest * sp, "logprob_micro_batch_tokens": 3 * longest * sp} if dynamic_bsz else \
        {"micro_batch_size": fixed[0], "logprob_micro_batch_size": fixed[1]}
    layout = ({"train_backend": "megatron", "train_tp": megatron[0], "pp": megatron[1]} if megatron
              else {"zero": 3, "fsdp_size": fsdp_size})  # FSDP2 full-shard (verl's default), the script's fsdp_size
    return PublishedRun(
        key=key, framework="verl (colocated, synchronous)", source=source, version=f"{VERL[:12]} (script {script})",
        model="qwen2.5-math-7b", hf_model="Qwen/Qwen2.5-Math-7B (max_position_embeddings raised to 32768)",
        gpu="h20", devices=devices, nodes=nodes, placement="colocated", batch=512, n=n, max_prompt=2048,
        max_response=max_response, algorithm="grpo", reward="rule", kl=False, tp=tp, published_step_s=step_s,
        minibatches=512 // 32, gpu_memory_utilization=0.8, recompute="full", sp=sp, max_num_seqs=1024,
        max_num_batched_tokens=2048 + max_response,
        assumed_mean_response=2500, mean_prompt=150, response_sigma=1.0,
        stages=Stages(gen_s, score_s, train_s, timers="verl-0.7", definition=_VERL_STAGES), enforce_eager=enforce_eager,
        prompt_note=_DAPO_PROMPT, response_note=_DAPO_RESPONSE, notes=_DAPO_NOTES + note, **layout, **budgets)


VERL_RUNS: tuple[PublishedRun, ...] = (
    _verl_7b("verl-onestep-colocate-fsdp2-16xh20", source=VERL_ONE_STEP, devices=16, nodes=2, n=12,
             max_response=20480, tp=2, sp=4, step_s=749, gen_s=321, score_s=88, train_s=286,
             script="verl/experimental/one_step_off_policy/shell/dapo_7b_math_fsdp2_colocate.sh",
             note="FSDP2 with parameter and optimizer offload (the page states max response 20,480 for FSDP2; "
                  "the script at this commit has 8,192); fsdp_size 2; " + _EAGER_THEN, enforce_eager=True, fsdp_size=2),
    _verl_7b("verl-onestep-colocate-megatron-16xh20", source=VERL_ONE_STEP, devices=16, nodes=2, n=16,
             max_response=8192, tp=2, sp=1, step_s=699, gen_s=207, score_s=119, train_s=344,
             script="verl/experimental/one_step_off_policy/shell/dapo_7b_math_megatron_colocate.sh",
             note="Megatron TP2 PP2 with parameter, gradient and optimizer offload; the script's use_dynamic_bsz lines "
                  "are commented out: micro-batches of 2 sequences to train, 4 for log-probs; " + _EAGER_THEN,
             megatron=(2, 2), enforce_eager=True, dynamic_bsz=False, fixed=(2, 4)),
    _verl_7b("verl-fullyasync-colocate-32xh20", source=VERL_FULLY_ASYNC, devices=32, nodes=4, n=16,
             max_response=28672, tp=4, sp=4, step_s=790.10, gen_s=357.41, score_s=107.71, train_s=269.80,
             script="verl/experimental/fully_async_policy/shell/dapo_7b_math_fsdp2_*.sh (colocate sync row)",
             note="FSDP2 (fsdp_size 8: hybrid sharding); step averaged over 400 steps while response lengths drift"),
    _verl_7b("verl-fullyasync-colocate-64xh20", source=VERL_FULLY_ASYNC, devices=64, nodes=8, n=16,
             max_response=28672, tp=4, sp=4, step_s=365.28, gen_s=150.72, score_s=70.26, train_s=133.41,
             script="verl/experimental/fully_async_policy/shell/dapo_7b_math_fsdp2_*.sh (colocate sync row)",
             note="FSDP2 (fsdp_size 8: hybrid sharding); step averaged over 400 steps while response lengths drift"),
    _verl_7b("verl-fullyasync-colocate-128xh20", source=VERL_FULLY_ASYNC, devices=128, nodes=16, n=16,
             max_response=28672, tp=4, sp=4, step_s=356.30, gen_s=177.85, score_s=53.92, train_s=113.81,
             script="verl/experimental/fully_async_policy/shell/dapo_7b_math_fsdp2_*.sh (colocate sync row)",
             note="FSDP2 (fsdp_size 8: hybrid sharding); step averaged over 400 steps while response lengths drift"),
    PublishedRun(
        key="verl-fullyasync-colocate-qwen3-30b-a3b-128xh20", framework="verl (colocated, synchronous)",
        source=VERL_FULLY_ASYNC,
        version=f"{VERL[:12]} (script verl/experimental/fully_async_policy/shell/grpo_30b_a3b_base_math_megatron_96_32.sh)",
        model="qwen3-30b-a3b", hf_model="Qwen/Qwen3-30B-A3B-Base", gpu="h20", devices=128, nodes=16,
        placement="colocated", batch=512, n=16, max_prompt=2048, max_response=8192, algorithm="grpo", reward="rule",
        kl=True, tp=4, published_step_s=497.89, minibatches=512 // 128, gpu_memory_utilization=0.7,
        recompute="full", ep=8, train_backend="megatron", train_tp=2, cp=2, etp=1, max_num_seqs=1024,
        max_num_batched_tokens=2048 + 8192, assumed_mean_response=2500, mean_prompt=150, response_sigma=1.0,
        enforce_eager=True, optimizer_offload=1.0, micro_batch_tokens=2 * (2048 + 8192), logprob_micro_batch_tokens=2 * (2048 + 8192),
        stages=Stages(348.05, 28.73 + 20.86, 86.27, timers="verl-0.7", definition=_VERL_STAGES),
        prompt_note=_DAPO_PROMPT,
        response_note=("no mean response length is published; assumed 2,500 tokens, lognormal spread 1.0, capped "
                       "at 8,192"),
        notes=("Megatron TP2 CP2 EP8 (ETP1, the script's COMMON_* defaults; dynamic batch size: prompt + response "
               "tokens a GPU, x CP 2, to train and for log-probs) with parameter, gradient and optimizer "
               "offload and the optimizer on the CPU (optimizer_offload_fraction 1, optimizer_cpu_offload); GRPO with a low-variance KL "
               "loss (reference forward); rule reward; vLLM without CUDA graphs (the script's rollout.enforce_eager=True)")),
    PublishedRun(
        key="verl-deepseek-v3-96xh20", framework="verl (colocated, synchronous)", source=VERL_DPSK,
        version=f"{VERL[:12]} (script examples/grpo_trainer/run_deepseek671b_math_megatron_96gb.sh)",
        model="deepseek-v3", hf_model="deepseek-ai/DeepSeek-V3 (MTP off)", gpu="h20", devices=96, nodes=12,
        placement="colocated", batch=96, n=8, max_prompt=2048, max_response=9632, algorithm="grpo", reward="rule",
        kl=True, tp=32, published_step_s=1700, minibatches=96 // 32, gpu_memory_utilization=0.6, recompute="full", ep=8,
        train_backend="megatron", train_tp=8, pp=12, etp=1, stage_layers=(None, 6), moe_dispatcher="flex",
        max_num_seqs=1024, max_num_batched_tokens=2048 + 9632, enforce_eager=True, optimizer_offload=1.0,
        vllm_version="0.8.5", mean_response=1960, mean_prompt=150, micro_batch_tokens=2048 + 9632,
        logprob_micro_batch_tokens=2048 + 9632,
        stages=Stages(generation_s=1050, timers="verl-0.7", definition="rollout time (s): verl's gen"),
        prompt_note="not published; assumed a 150-token mean (math prompts)",
        response_note="mean response 1,960 published; lognormal spread 0.7, capped at 9,632 (1204 x 8, as the script)",
        notes=("Megatron TP8 PP12 EP8 (ETP1; the last pipeline stage 6 layers, the script's LAST_LAYER, the other 11 of 5; dynamic batch size: prompt + response tokens a GPU to train and for "
               "log-probs), DeepEP's flex token dispatcher (priced as all-to-all), with the optimizer on the CPU (optimizer_offload_fraction 1 with "
               "optimizer_cpu_offload; 1.5 TB CPU memory per node); GRPO with a KL loss; rule reward; vLLM without CUDA graphs (the script's "
               "rollout.enforce_eager=True), vLLM 0.8.5 (the page's recommended image, "
               "verlai/verl:app-verl0.4-vllm0.8.5-mcore0.13.0-preview)")),
)


# --------------------------------------------------------------------------------------------------
# OpenRLHF benchmark (A800, Llama-2, PPO with a reward model and a critic) and DeepSpeed-Chat beside it


_OPENRLHF_STAGES = ("OpenRLHF 'Generation' latency is make_experience: generation plus the actor, reference, "
                    "reward and critic forwards; 'Training' is ppo_train: the actor and critic updates and the "
                    "weight broadcast to the vLLM engines")
_OPENRLHF_LENGTHS = ("no response lengths are published; the benchmark follows DeepSpeed-Chat's fixed-length "
                     "setting with max_prompt_seq_len = max_answer_seq_len = 1024 (its FLOP count assumes both at "
                     "the cap), so every response is taken at the 1,024 cap")
_OPENRLHF_PROMPT = "not published; assumed a 256-token mean (HH/rm-static prompts), capped at 1,024"


def _openrlhf(key: str, *, framework: str, model: str, hf: str, devices: int, placement: str, tp: int,
              step_s: float, gen_s: float, train_s: float, micro: tuple[int, int], engine: str = "continuous",
              gen_batch: int | None = None,
              max_num_seqs: int | None = None, nodes: int = 1, colocate: str = "sleep", note: str = "",
              optimizer_offload: float = 1.0, prompt: tuple[float, float | None, str] = (256, None, "")) -> PublishedRun:
    """An OpenRLHF benchmark row. ``optimizer_offload`` 1 by default: the benchmark does not list its flags, and
    every PPO script of the repository at that commit passes ``--adam_offload`` (the Adam step on the CPU:
    ``train_ppo_llama.sh``, ``train_ppo_llama_ray.sh``, ``_34b.sh``, ``_70b.sh``); without it the 13B row does
    not fit its 4-GPU training pool. ``micro``: the table's (generation, training) ``micro_batch_size`` columns —
    the experience forwards run in the micro rollout batches, the updates in the micro train batches. ``prompt``: the
    prompts' (mean, log-space spread — None: the default —, note — empty: the assumed HH/rm-static mean)."""
    return PublishedRun(
        key=key, framework=framework, source=OPENRLHF_BENCH, version=OPENRLHF, model=model, hf_model=hf,
        gpu="a800-80gb", devices=devices, nodes=nodes, placement=placement, batch=1024, n=1, max_prompt=1024,
        max_response=1024, algorithm="ppo", reward=model, kl=True, tp=tp, published_step_s=step_s,
        minibatches=1024 // 128, engine=engine, optimizer_offload=optimizer_offload, gen_batch=gen_batch,
        micro_batch_size=micro[1], logprob_micro_batch_size=micro[0],
        padded_micro_batches=not framework.startswith("DeepSpeed-Chat"),
        max_num_seqs=max_num_seqs, colocate=colocate,
        recompute="full",
        mean_response=1024,
        mean_prompt=prompt[0], prompt_sigma=prompt[1], response_sigma=0.0,
        stages=Stages(generation_s=gen_s, training_s=train_s, definition=_OPENRLHF_STAGES,
                      timers="deepspeed-chat" if framework.startswith("DeepSpeed-Chat") else "openrlhf"),
        prompt_note=prompt[2] or _OPENRLHF_PROMPT, response_note=_OPENRLHF_LENGTHS,
        notes=("PPO, reward model and critic initialised from the actor's size; rollout 1024 prompts, train "
               f"batch 128, 1 epoch; gradient checkpointing; micro-batches (the table's columns) of {micro[0]} samples "
               f"for generation and the experience forwards, {micro[1]} to train; "
               + ("Adam on the CPU (--adam_offload, as every PPO script of the repository at this commit); "
                  if optimizer_offload and not framework.startswith("DeepSpeed-Chat") else "")
               + ("no sample packing at this commit (--packing_samples came in 2024-09): each micro-batch padded to "
                  "its longest, the experience forwards' prompts left and responses right, the updates' sequences "
                  "left (experience_maker.py, replay_buffer.py); " if not framework.startswith("DeepSpeed-Chat") else "")
               + note))


OPENRLHF_RUNS: tuple[PublishedRun, ...] = (
    _openrlhf("openrlhf-ray-vllm-llama2-7b-8xa800", framework="OpenRLHF (Ray + vLLM)", model="llama-2-7b",
              hf="meta-llama/Llama-2-7b-hf", devices=8, placement="pools:gen=2,train=4,score=2", tp=1,
              micro=(16, 8), step_s=885.16, gen_s=481.86, train_s=403.29, max_num_seqs=16,
              note=("GPUs ref:reward:actor:critic:vLLM = 1:1:2:2:2 (actor and critic share the 4-GPU train pool "
                    "here); each actor rank sends its micro rollout batch of 16 to one of the 2 engines, so an "
                    "engine runs at most 16 sequences (max_num_seqs 16)")),
    _openrlhf("openrlhf-ray-vllm-llama2-13b-8xa800", framework="OpenRLHF (Ray + vLLM)", model="llama-2-13b",
              hf="meta-llama/Llama-2-13b-hf", devices=8, placement="pools:gen=2,train=4,score=2", tp=1,
              micro=(8, 4), step_s=2392.91, gen_s=1425.75, train_s=967.15, max_num_seqs=8,
              note=("GPUs ref:reward:actor:critic:vLLM = 1:1:2:2:2; micro rollout batch 8 per actor rank, one rank "
                    "per engine (max_num_seqs 8)")),
    _openrlhf("openrlhf-ray-vllm-llama2-70b-16xa800", framework="OpenRLHF (Ray + vLLM)", model="llama-2-70b",
              hf="meta-llama/Llama-2-70b-hf", devices=16, nodes=2, placement="pools:gen=4,train=8,score=4", tp=2,
              micro=(4, 4), step_s=9822.62, gen_s=7122.65, train_s=2699.97, max_num_seqs=4,
              note=("GPUs ref:reward:actor:critic:vLLM = 2:2:4:4:4, two vLLM engines of TP2 (as the repository's "
                    "70B script); micro rollout batch 4 per actor rank, two ranks per engine, whose calls run one "
                    "after the other: the engine is a synchronous Ray actor (LLMRayActor, one method call at a time) "
                    "and LLM.generate returns when its call's requests are done, so an engine decodes one rank's 4 "
                    "at a time (max_num_seqs 4); ZeRO-3 (the 70B script's --zero_stage 3)")),
    _openrlhf("openrlhf-deepspeed-llama2-7b-8xa800", framework="OpenRLHF (DeepSpeed, no Ray)", model="llama-2-7b",
              hf="meta-llama/Llama-2-7b-hf", devices=8, placement="colocated", tp=1, micro=(8, 8), step_s=1177.78,
              gen_s=920.81,
              train_s=256.97, engine="static", gen_batch=8, colocate="resident",
              note=("all models resident on the 8 GPUs (no sleep/wake); Hugging Face generate, micro rollout batch 8 "
                    "per GPU")),
    _openrlhf("dschat-llama2-7b-8xa800", framework="DeepSpeed-Chat (no offload, hybrid engine off)", model="llama-2-7b",
              hf="meta-llama/Llama-2-7b-hf", devices=8, placement="colocated", tp=1, micro=(4, 4), step_s=1184.31,
              gen_s=975.36,
              train_s=209.05, engine="static", gen_batch=4, colocate="resident", optimizer_offload=0.0,
              prompt=(1024, 0.0, "every prompt as DeepSpeed-Chat computes on it: padded to max_prompt_seq_len, 1,024 "
                      "tokens (its DataCollatorRLHF pads each batch's prompts to max_token_len before generation, and "
                      "generation, the experience forwards and the updates run on the padded rows)"),
              note=("DeepSpeed-Chat as optimised by OpenRLHF's benchmark, which turns DeepSpeed's hybrid engine off (its "
                    "README: it does not work with ZeRO-3; its llama_7b.sh has no --enable_hybrid_engine): Hugging Face "
                    "generate on the actor's own modules, 4 per GPU; every "
                    "model resident (no sleep/wake)")),
)


# --------------------------------------------------------------------------------------------------
# The OPPO paper's own TRL baseline


PAPER_RUNS: tuple[PublishedRun, ...] = (
    PublishedRun(
        key="oppo-paper-trl-2x4xa100", framework="TRL PPOTrainer (the OPPO paper's baseline)", source=OPPO_PAPER,
        version="arXiv 2509.25762v2", model="qwen2.5-7b", hf_model="Qwen/Qwen2.5-7B (7B reward model)",
        gpu="a100-80gb", devices=8, nodes=2, placement="paper", batch=112, n=1, max_prompt=2048, max_response=8192,
        algorithm="ppo", reward="qwen2.5-7b", kl=True, tp=1, published_step_s=498.3, ppo_epochs=4, minibatches=1,
        engine="static", gen_batch=64, colocate="resident",
        trace=("servegen_deepseek_r1_sampled", "oppo-longtail-default"),
        stages=Stages(definition="only the step time is published"),
        prompt_note="from the trace, prompts clipped at 2,048 tokens (as paper_vs_ours.py)",
        response_note=("no lengths are published; the reasoning-length trace servegen_deepseek_r1_sampled where it "
                       "is on the trace search path, else the shipped oppo-longtail-default (the trace column says "
                       "which), capped at 8,192 — as paper_vs_ours.py"),
        notes=("TRL PPO defaults: 4 epochs x 1 mini-batch, generate in batches of 64 rows; 7 GPUs generate and "
               "train, 1 scores, everything resident (TRL has no sleep mode); two nodes of 4 A100 (inter-node "
               "traffic for the trainer)")),
)


RUNS: tuple[PublishedRun, ...] = (*NEMO_RUNS, *VERL_RUNS, *OPENRLHF_RUNS, *PAPER_RUNS)
"""Every published run, in table order."""
