"""NeMo RL's performance summary as records (``published_runs_data.RUNS`` takes them first): GRPO on
OpenMathInstruct-2 with the Megatron-core trainer and vLLM generation, on policy (colocated, vLLM asleep while the
trainer runs) and one step off policy (async GRPO, generation on its own GPUs), on H100 and GB200-NVL72, each row
with the recipe it was run from (``examples/configs/recipes/llm/performance``, read at the page's commit).
"""

from __future__ import annotations

try:
    from published_runs_record import PublishedRun, Stages
except ImportError:  # imported as paper_figs.published_runs_nemo
    from paper_figs.published_runs_record import PublishedRun, Stages

NEMO_RL = "https://github.com/NVIDIA-NeMo/RL/blob/{commit}/docs/about/performance-summary.md"
NEMO_V05 = "9dbd9adc95a10f5946cceb36e1d5b31e2429e470"  # v0.5 table (after the DeepSeek step-time fix, #1890)
NEMO_V04 = "cff17f83bf30c4f9c757b5fe707b2c32db606411"  # the page's first version: the v0.4 table (#1560)



_NEMO_NOTES = ("colocated vLLM put to sleep (level 1) while the trainer, offloaded during generation, runs (its "
               "optimizer state by move_optimizer: a blocking .to() per tensor, through pageable host memory); "
               "the reference's weights in pinned host memory, swapped with the policy's for its pass "
               "(megatron_policy_worker.use_reference_model); refit double-buffered (packed tensors, two buffers in "
               "flight: the export overlaps the hand-off); "
               "Megatron-core trainer with the table's Training [TP,CP,EP,PP] (no VPP); on-policy GRPO with NeMo RL's leave-one-out baseline (cost as grpo); k3 KL to the "
               "reference (coef 0.01); rule reward (math environment); step = generation + log-probs + training + "
               "refit, mean of 5 steps")
_NEMO_ASYNC_NOTES = ("generation on its own GPUs (vLLM's async engine, gpu_memory_utilization 0.8), training and the "
                     "reference (in pinned host memory, swapped in for its pass) on the rest; async GRPO: a step trains "
                     "on trajectories at most one policy version old (max_trajectory_age_steps 1) while the next ones "
                     "generate, weights refit in flight (in_flight_weight_updates with vLLM's async engine: the refit "
                     "does not wait for the generations in flight, a step's prompt groups start as the B x k groups in flight "
                     "free a slot; a trajectory in flight finishes on the new weights, oppo-sim keeps it on the version "
                     "it started with); Megatron-core "
                     "trainer with the table's Training [TP,CP,EP,PP]; k3 KL (coef 0.01), importance-sampling correction "
                     "(no extra pass); rule reward; published step = mean of 5 steps, predicted = the mean of the "
                     "simulated steady state (the steps between the first, with nothing to overlap yet, and the "
                     "last, with nothing left to overlap with)")
_NEMO_PROMPT = ("derived from the table: tokens/s/GPU x GPUs x step time / (prompts x n) - mean response "
                "(the table's numbers are 5-step means, so this is approximate)")


def _nemo(key: str, *, version: str, commit: str, model: str, hf: str, gpu: str, devices: int, nodes: int,
          prompts: int, n: int, train_gbs: int, max_total: int, mean_response: float, tp: int, tok_s_gpu: float,
          step_s: float, recipe: str, recompute: str | None = None, train: tuple[int, int, int, int] = (1, 1, 1, 1),
          note: str = "", off: int = 0, gen: int = 0, packed: bool = True, logprob_mbs: int = 1,
          stages: tuple[int | None, int | None] = (None, None)) -> PublishedRun:
    """``train``: the table's 'Training [TP,CP,EP,PP,VPP]' column (VPP n/a). ``off``: the table's 'N-step Off'
    rows (NeMo RL's async GRPO, ``max_trajectory_age_steps``; 0: on policy, colocated), generation on its own
    ``gen`` GPUs (``policy.generation.colocated.resources``) and training on the rest. ``packed``: the recipe's
    ``policy.sequence_packing.enabled`` (off: each micro-batch padded to the batch's longest sequence); packed, micro-batches
    of ``train_mb_tokens`` = max_total x ``train_micro_batch_size`` (1 in every recipe) tokens and log-prob ones of
    ``logprob_mb_tokens`` = max_total x ``logprob_batch_size`` (``logprob_mbs``, as the recipe composes it).
    ``stages``: the recipe's ``num_layers_in_first/last_pipeline_stage``."""
    train_tp, cp, ep, pp = train
    return PublishedRun(
        key=key, framework=f"NeMo RL {version}" + (f" ({off}-step off)" if off else ""),
        source=NEMO_RL.format(commit=commit),
        version=f"{commit[:12]} (recipe examples/configs/recipes/llm/performance/{recipe}.yaml)",
        model=model, hf_model=hf, gpu=gpu, devices=devices, nodes=nodes,
        placement=f"pools:gen={gen},train={devices - gen}" if off else "colocated", batch=prompts,
        n=n, max_prompt=max_total, max_response=max_total, total_cap=True, algorithm="grpo", reward="rule", kl=True,
        tp=tp, colocate="resident" if off else "sleep", policy="async" if off else "baseline", staleness=max(off, 1),
        in_flight=off > 0,
        published_step_s=step_s, minibatches=prompts * n // train_gbs, gpu_memory_utilization=0.8 if off else 0.6,
        recompute=recompute, ep=ep, train_backend="megatron", train_tp=train_tp, pp=pp, cp=cp, etp=1 if ep > 1 else None,
        stage_layers=stages,
        mean_response=mean_response, tokens_per_s_per_gpu=tok_s_gpu, reference_on_host=True, refit_buffers=2, refit_group="all",
        optimizer_move="pinned" if off else "pageable",  # off policy: nothing sleeps
        moe_dispatcher="allgather", moe_router_dtype="fp64", padded_batches=not packed,
        micro_batch_tokens=max_total if packed else None, logprob_micro_batch_tokens=max_total * logprob_mbs if packed else None,
        micro_batch_size=None if packed else 1, logprob_micro_batch_size=None if packed else logprob_mbs,
        stages=Stages(timers="nemo-rl-async" if off else "nemo-rl", definition="only the step time is published"),
        prompt_note=_NEMO_PROMPT,
        response_note=(f"'G-Average Seq len' {mean_response:g} read as the mean generated length (consistent with "
                       f"the tokens/s/GPU column); responses capped at max_total_sequence_length {max_total} minus "
                       f"the prompt"),
        notes=(f"{_NEMO_ASYNC_NOTES if off else _NEMO_NOTES}{'; ' + note if note else ''}"
               + (f"; sequence packing: micro-batches of {max_total} tokens (train_mb_tokens), log-prob ones of "
                  f"{max_total * logprob_mbs} (logprob_mb_tokens)" if packed else "; sequence packing off in the recipe "
                  "(policy.sequence_packing.enabled: false): micro-batches of whole sequences (1 to train, "
                  f"{logprob_mbs} for log-probs), each padded to the batch's longest, in scoring and training")
               + ("; Megatron's allgather token dispatcher (NeMo RL's default moe_token_dispatcher_type, which no "
                  "recipe changes), its combine in the fp64 of NeMo RL's moe_router_dtype" if ep > 1 else "")))


_L8 = dict(model="llama-3.1-8b", hf="meta-llama/Llama-3.1-8B-Instruct", prompts=64, n=32, train_gbs=512, max_total=4096)
_Q32 = dict(model="qwen3-32b", hf="Qwen/Qwen3-32B", prompts=64, n=32, train_gbs=512, max_total=4096)
_Q30 = dict(model="qwen3-30b-a3b", hf="Qwen/Qwen3-30B-A3B", prompts=64, n=32, train_gbs=512, max_total=4096)
_Q235 = dict(model="qwen3-235b-a22b", hf="Qwen/Qwen3-235B-A22B", prompts=16, n=32, train_gbs=512, max_total=8192)
_DSV3 = dict(model="deepseek-v3", hf="unsloth/DeepSeek-V3-0324-BF16", prompts=32, n=16, train_gbs=512, max_total=1536)
"""The recipes' model, prompts x responses per step, the trainer's global batch and max_total_sequence_length."""


NEMO_RUNS: tuple[PublishedRun, ...] = (
    _nemo("nemo-v0.5-llama3.1-8b-16xh100", version="v0.5", commit=NEMO_V05, model="llama-3.1-8b",
          hf="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", devices=16, nodes=2, prompts=64, n=32,
          train_gbs=512, max_total=4096, mean_response=1019, tp=1, tok_s_gpu=1581, step_s=92.8,
          recipe="grpo-llama3.1-8b-instruct-2n8g", recompute="full", train=(1, 1, 1, 2),
          note="training PP2 (the row's column has seven entries, [1,1,1,1,1,2,n/a]; the 2 read as PP)", logprob_mbs=2),
    _nemo("nemo-v0.5-qwen3-32b-32xh100", version="v0.5", commit=NEMO_V05, model="qwen3-32b", hf="Qwen/Qwen3-32B",
          gpu="h100-sxm", devices=32, nodes=4, prompts=64, n=32, train_gbs=512, max_total=4096, mean_response=3251,
          tp=4, tok_s_gpu=571, step_s=376, recipe="grpo-qwen3-32b-4n8g", train=(4, 1, 1, 4), note="training TP4 PP4"),
    _nemo("nemo-v0.5-qwen3-30b-a3b-32xh100", version="v0.5", commit=NEMO_V05, model="qwen3-30b-a3b",
          hf="Qwen/Qwen3-30B-A3B", gpu="h100-sxm", devices=32, nodes=4, prompts=64, n=32, train_gbs=512,
          max_total=4096, mean_response=3196, tp=2, tok_s_gpu=1066, step_s=198, recipe="grpo-qwen3-30ba3b-4n8g",
          train=(1, 1, 8, 1), note="token-dropless MoE"),
    _nemo("nemo-v0.5-qwen3-235b-a22b-128xh100", version="v0.5", commit=NEMO_V05, model="qwen3-235b-a22b",
          hf="Qwen/Qwen3-235B-A22B", gpu="h100-sxm", devices=128, nodes=16, prompts=16, n=32, train_gbs=512,
          max_total=8192, mean_response=5700, tp=16, tok_s_gpu=54.1, step_s=431, recipe="grpo-qwen3-235b-16n8g",
          recompute="full", train=(2, 2, 16, 8), note="training TP2 CP2 EP16 PP8; async vLLM engine", stages=(11, 11)),
    _nemo("nemo-v0.5-deepseek-v3-256xh100", version="v0.5", commit=NEMO_V05, model="deepseek-v3",
          hf="unsloth/DeepSeek-V3-0324-BF16", gpu="h100-sxm", devices=256, nodes=32, prompts=32, n=16,
          train_gbs=512, max_total=1536, mean_response=744, tp=32, tok_s_gpu=12.7, step_s=134,
          recipe="grpo-deepseek-v3-32n8g", recompute="full", train=(1, 1, 16, 16),
          note="training EP16 PP16; async vLLM engine", stages=(3, 2)),
    _nemo("nemo-v0.5-llama3.1-8b-8xgb200", version="v0.5", commit=NEMO_V05, model="llama-3.1-8b",
          hf="meta-llama/Llama-3.1-8B-Instruct", gpu="gb200", devices=8, nodes=2, prompts=64, n=32, train_gbs=512,
          max_total=4096, mean_response=1066, tp=1, tok_s_gpu=3359, step_s=91.0,
          recipe="grpo-llama3.1-8b-instruct-2n4g", recompute="full", note="GB200-NVL72, 4 GPUs per node", logprob_mbs=2),
    _nemo("nemo-v0.5-qwen3-32b-16xgb200", version="v0.5", commit=NEMO_V05, model="qwen3-32b", hf="Qwen/Qwen3-32B",
          gpu="gb200", devices=16, nodes=4, prompts=64, n=32, train_gbs=512, max_total=4096, mean_response=3253,
          tp=1, tok_s_gpu=1127, step_s=381, recipe="grpo-qwen3-32b-4n4g", train=(2, 1, 1, 1),
          note="GB200-NVL72, 4 GPUs per node; training TP2"),
    _nemo("nemo-v0.4-llama3.1-8b-16xh100", version="v0.4", commit=NEMO_V04, model="llama-3.1-8b",
          hf="meta-llama/Llama-3.1-8B-Instruct", gpu="h100-sxm", devices=16, nodes=2, prompts=64, n=32,
          train_gbs=512, max_total=4096, mean_response=1060, tp=1, tok_s_gpu=1562, step_s=97.7,
          recipe="grpo-llama3.1-8b-instruct-2n8g", recompute="full", train=(1, 1, 1, 2),
          note="same recipe as the v0.5 row, an earlier release's software", logprob_mbs=2),
    _nemo("nemo-v0.4-qwen3-32b-32xh100", version="v0.4", commit=NEMO_V04, model="qwen3-32b", hf="Qwen/Qwen3-32B",
          gpu="h100-sxm", devices=32, nodes=4, prompts=64, n=32, train_gbs=512, max_total=4096, mean_response=3206,
          tp=4, tok_s_gpu=540, step_s=393, recipe="grpo-qwen3-32b-4n8g", train=(4, 1, 1, 4),
          note="training TP4 PP4; same recipe as the v0.5 row, an earlier release's software (whose "
          "grpo_math_1B.yaml sets logprob_batch_size 4, v0.5's the train micro-batch's 1)", logprob_mbs=4),
    # GB200-NVL72 on policy, the MoE rows (4 GPUs per node; the NVLink domain spans the trays)
    _nemo("nemo-v0.5-deepseek-v3-128xgb200", version="v0.5", commit=NEMO_V05, **_DSV3, gpu="gb200", devices=128,
          nodes=32, mean_response=996, tp=32, tok_s_gpu=34.3, step_s=128, recipe="grpo-deepseek-v3-32n4g",
          recompute="full", train=(1, 1, 16, 8), note="training EP16 PP8, first and last stages of 7 and 6 layers; "
          "async vLLM engine", packed=False, stages=(7, 6)),
    _nemo("nemo-v0.5-qwen3-235b-a22b-64xgb200", version="v0.5", commit=NEMO_V05, **_Q235, gpu="gb200", devices=64,
          nodes=16, mean_response=5711, tp=8, tok_s_gpu=140, step_s=332, recipe="grpo-qwen3-235b-16n4g",
          recompute="full", train=(2, 2, 16, 4), note="training TP2 CP2 EP16 PP4; async vLLM engine", stages=(23, 23)),
    _nemo("nemo-v0.5-qwen3-30b-a3b-16xgb200", version="v0.5", commit=NEMO_V05, **_Q30, gpu="gb200", devices=16,
          nodes=4, mean_response=3198, tp=1, tok_s_gpu=1822, step_s=232, recipe="grpo-qwen3-30ba3b-4n4g",
          train=(1, 1, 16, 1), note="training EP16; token-dropless MoE"),
    # one step off policy (async GRPO), H100
    _nemo("nemo-v0.5-llama3.1-8b-16xh100-1off", version="v0.5", commit=NEMO_V05, **_L8, gpu="h100-sxm", devices=16,
          nodes=2, mean_response=1123, tp=1, tok_s_gpu=2478, step_s=64.8, recipe="grpo-llama3.1-8b-instruct-2n8g-async-1off",
          recompute="full", off=1, gen=8, logprob_mbs=2),
    _nemo("nemo-v0.5-deepseek-v3-512xh100-1off", version="v0.5", commit=NEMO_V05, **_DSV3, gpu="h100-sxm", devices=512,
          nodes=64, mean_response=738, tp=32, tok_s_gpu=13.1, step_s=64.9, recipe="grpo-deepseek-v3-64n8g-async-1off",
          recompute="full", train=(1, 1, 16, 16), off=1, gen=256, note="training EP16 PP16", logprob_mbs=2, stages=(3, 2)),
    _nemo("nemo-v0.5-qwen3-235b-a22b-256xh100-1off", version="v0.5", commit=NEMO_V05, **_Q235, gpu="h100-sxm",
          devices=256, nodes=32, mean_response=5707, tp=8, tok_s_gpu=58.7, step_s=203,
          recipe="grpo-qwen3-235b-32n8g-async-1off", recompute="full", train=(4, 1, 16, 8), off=1, gen=128,
          note="training TP4 EP16 PP8", stages=(11, 11)),
    _nemo("nemo-v0.5-qwen3-30b-a3b-32xh100-1off", version="v0.5", commit=NEMO_V05, **_Q30, gpu="h100-sxm", devices=32,
          nodes=4, mean_response=3201, tp=2, tok_s_gpu=1391, step_s=154, recipe="grpo-qwen3-30ba3b-4n8g-async-1off",
          train=(1, 1, 8, 2), off=1, gen=16, note="training EP8 PP2"),
    _nemo("nemo-v0.5-qwen3-32b-64xh100-1off", version="v0.5", commit=NEMO_V05, **_Q32, gpu="h100-sxm", devices=64,
          nodes=8, mean_response=3252, tp=4, tok_s_gpu=538, step_s=200, recipe="grpo-qwen3-32b-8n8g-async-1off",
          train=(4, 1, 1, 4), off=1, gen=32, note="training TP4 PP4"),
    # one step off policy (async GRPO), GB200-NVL72
    _nemo("nemo-v0.5-llama3.1-8b-8xgb200-1off", version="v0.5", commit=NEMO_V05, **_L8, gpu="gb200", devices=8,
          nodes=2, mean_response=1107, tp=1, tok_s_gpu=4463, step_s=71.1, recipe="grpo-llama3.1-8b-instruct-2n4g-async-1off",
          recompute="full", off=1, gen=4, logprob_mbs=2),
    _nemo("nemo-v0.5-deepseek-v3-256xgb200-1off", version="v0.5", commit=NEMO_V05, **_DSV3, gpu="gb200", devices=256,
          nodes=64, mean_response=994, tp=16, tok_s_gpu=31.7, step_s=64.5, recipe="grpo-deepseek-v3-64n4g-async-1off",
          recompute="full", train=(1, 1, 16, 8), off=1, gen=128, note="training EP16 PP8", packed=False, stages=(7, 6)),
    _nemo("nemo-v0.5-qwen3-235b-a22b-128xgb200-1off", version="v0.5", commit=NEMO_V05, **_Q235, gpu="gb200",
          devices=128, nodes=32, mean_response=5711, tp=8, tok_s_gpu=87.9, step_s=268,
          recipe="grpo-qwen3-235b-32n4g-async-1off", recompute="full", train=(4, 1, 16, 4), off=1, gen=64,
          note="training TP4 EP16 PP4", stages=(23, 23)),
    _nemo("nemo-v0.5-qwen3-30b-a3b-32xgb200-1off", version="v0.5", commit=NEMO_V05, **_Q30, gpu="gb200", devices=32,
          nodes=8, mean_response=3204, tp=1, tok_s_gpu=1558, step_s=136, recipe="grpo-qwen3-30ba3b-8n4g-async-1off",
          train=(1, 1, 16, 1), off=1, gen=16, note="training EP16"),
    _nemo("nemo-v0.5-qwen3-32b-32xgb200-1off", version="v0.5", commit=NEMO_V05, **_Q32, gpu="gb200", devices=32,
          nodes=8, mean_response=3258, tp=1, tok_s_gpu=1025, step_s=210, recipe="grpo-qwen3-32b-8n4g-async-1off",
          train=(2, 1, 1, 1), off=1, gen=16, note="training TP2"),
)
