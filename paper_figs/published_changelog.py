"""Every change to a published-run record or to the model made after the published table was seen, with the
table's median (and worst) |step-time error| before and after it — the data behind the changelog of
``docs/published.md`` (``scripts/docs_tables.py`` renders it). The published table is a development set:
this list is what a reader needs to discount it, and a hold-out set judges the model apart.

Each entry's medians are the uncalibrated table's (``python paper_figs/published_runs.py``, 3 steps a run)
just before and just after the change; ``tests/test_paper_figs.py`` checks that the last entry's "after" is
the committed table's median. Entries are appended, never edited.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Change", "CHANGES"]


@dataclass(frozen=True)
class Change:
    date: str  # ISO date
    kind: str  # "model" (the simulator), "record" (a published run's data) or "comparison" (how it is compared)
    what: str
    median_before: float  # median |step-time error| over the simulated runs, %
    median_after: float
    worst_before: float
    worst_after: float
    note: str = ""


CHANGES: tuple[Change, ...] = (
    Change("2026-11-25", "model",
           "Fixed costs (issue 23, item 3): per-tensor weight sync on every path (ModelSpec.param_tensors x 0.15 ms "
           "+ one NCCL call's latency); NCCL's latency model by path and rank count; Hugging Face generate's host "
           "time per forward (50 launch-bound ops a layer x 10 us) and a ZeRO-3 trainer's gather in the static "
           "engine; sleep/wake at measured pinned-copy rates",
           41.0, 30.6, 178.4, 178.3,
           note=("The median moves mostly through the static-engine runs: DeepSpeed-Chat -45% -> -1%, OpenRLHF "
                 "without Ray -62% -> -40%, the OPPO paper's TRL baseline -44% -> -21%. The 10 us per op is the "
                 "upper end of the 5-10 us first-principles range and was chosen with the arithmetic against "
                 "DeepSpeed-Chat's published 29.8 ms per decode step in view (50 ops x 32 layers x 10 us = 16 ms "
                 "on a ~14 ms step): treat that run's agreement as seen, not predicted. Per-tensor sync moves the "
                 "MoE runs (DeepSeek-V3 45,395 tensors: 8.7 s a sync on 256 H100)")),
    Change("2026-11-25", "comparison",
           "Stages as the frameworks time them (issue 23, item 5): the table's stage columns come from each "
           "framework's own timers (oppo_sim.frameworks.stages), replacing the ad-hoc generation_includes_scoring "
           "flag: verl's gen now holds the engine's wake, the resharding and its sleep; OpenRLHF's training the "
           "weight broadcast",
           30.6, 30.6, 178.3, 178.3,
           note="stage columns only: the step times do not move"),
    Change("2026-11-25", "model",
           "Trainer backends (issue 23, item 1), merged onto the fixed costs: training and every forward-only pass "
           "wait for the slowest data-parallel rank (verl balance_batch: equal counts balanced by tokens); the fixed "
           "cost per micro-batch; Megatron pricing (TP+SP collectives, PP point-to-point and bubble, CP ring, EP "
           "all-to-all, the distributed optimizer's shard traffic) and memory per rank; the EP all-to-all over "
           "NVLink when its group sits in one domain; frozen models under Megatron hold their shard (no gather); "
           "collectives told the nodes their group spans (NCCL latency by path)",
           30.6, 36.9, 178.3, 199.8,
           note=("Measured on its own branch before the fixed costs, step by step (median / worst): 41.0 / 178.4 -> "
                 "slowest rank, per-micro-batch cost, Megatron pricing and memory 40.9 / 225.6 -> forward passes per "
                 "rank 40.9 / 225.6 -> records: Megatron layouts where the source states them (NeMo RL's "
                 "[TP,CP,EP,PP,VPP] column, verl's scripts) 42.0 / 201.2 -> a frozen MoE under Megatron holds its "
                 "experts over ep 42.0 / 199.4 -> Ulysses all-to-alls in forwards 41.9 / 199.6. Largest moves: NeMo RL "
                 "DeepSeek-V3 scoring 36 s -> 4 s (no whole-weight gather), step -32% -> -62% (the gather had hidden "
                 "other missing costs); verl's 7B series on 32/64/128 H20 over-predicted more (training waits for the "
                 "slowest of 8-32 ranks); 64 -> 128 GPU training scaling 1.93x -> 1.69x (published 1.17x), log-prob "
                 "1.96x -> 1.99x (published 1.30x, not explained by imbalance). No default was tuned.")),
    Change("2026-11-25", "model",
           "The trainer's usable memory is its own setting (issue 23, item 4): --train-memory-fraction 0.9 caps the "
           "phase where the engine does not run; the engine's gpu_memory_utilization caps only its own phase",
           36.9, 37.3, 199.8, 199.8,
           note=("Three runs no longer refused by the memory check (NeMo RL Qwen3-30B-A3B, DeepSeek-V3, GB200 "
                 "Qwen3-32B at the engine's 0.6); the median moves with the setups the check now picks")),
    Change("2026-11-25", "model",
           "Measured kernel costs (issue 23, item 2), opt-in: --op-costs tables prices a generation iteration as the "
           "sum of its kernels (dense GEMMs by tokens, grouped expert GEMMs by tokens per expert, paged decode "
           "attention, MLA decode, prefill attention) from fractions of AIConfigurator's measurements (aiconfigurator-core "
           "0.12.0, vLLM 0.24.0 / NCCL 2.29.2), scales the scorer's and trainer's compute efficiency by the GPU's "
           "large-GEMM fraction over the H100's and sets the collectives' latency and bus efficiency; H20/H800 "
           "borrow the H100/H200 fractions at their ridge point, A800 the A100's. The default stays roofline",
           37.3, 37.3, 199.8, 199.8,
           note=("With --op-costs tables the table reads: median 37.3 -> 32.3%, worst 199.8 -> 197.6%; with a published "
                 "mean response 21.3 -> 18.9% (worst 77.2 -> 72.3%); without the contradicted runs 35.2 -> 25.0%; the "
                 "calibration check's held-out runs 40.2 -> 42.2% uncalibrated. Better: 14 of 22, every NeMo RL run but "
                 "Qwen3-30B-A3B (-41 -> -44%) (DeepSeek-V3 -62 -> -47%, GB200 Qwen3-32B -17 -> +4%), verl DeepSeek-V3 "
                 "and Qwen3-30B-A3B, OpenRLHF 70B. Worse: verl's dense H20 runs but the Megatron one (+2 to +7 "
                 "points), OpenRLHF Ray 7B/13B on A800 (+8 -> +19%, +1 -> +15%), DeepSpeed-Chat (0 -> +8%). "
                 "GB200/H100 step-time ratio per GPU on NeMo RL's pairs (published 2.04x Llama-8B, 1.97x Qwen3-32B): "
                 "roofline 2.89x / 1.99x, tables 2.49x / 1.65x. MoE decode on H20 TP4 at batch 256 (1,500 cached tokens "
                 "each): Qwen3-30B-A3B 13.2 -> 18.9 ms an iteration, Qwen2.5-7B 16.8 -> 15.2 ms, the MoE no longer the "
                 "cheaper; decided before the table was run. Seen afterwards: verl's Qwen3-30B-A3B on 128 H20 "
                 "generation 98.6 -> 114.7 s (published 348 s) and its 7B on 128 H20 175.7 -> 194.6 s (published "
                 "177.8 s): the MoE gap is not closed. Kept opt-in: rows moved both ways, the held-out half got worse, "
                 "and replay against real vLLM timings was not measured. No number of the table was tuned.")),
    Change("2026-11-25", "model",
           "The KV cache sized as vLLM sizes it (issue 23, item 4): the engine's share less its weights and what vLLM's "
           "memory profiling takes (the profile forward's or the sampler run's peak, CUDA graphs, non-torch "
           "allocations; hw/engine_memory, checked against vLLM's published profiling lines); the engine's share is "
           "its own, roles resident beside it fit the trainer's share of the device together with it",
           37.3, 37.3, 199.8, 199.8,
           note=("Four runs move, none past 2.3 points: the three NeMo RL Qwen3-32B runs (KV cache smaller by what the "
                 "profiling takes, 2.0 GiB per GPU at TP4: the sampler run over 256 sequences, non-torch buffers; steps "
                 "0.2-2.3% longer) and verl's DeepSeek-V3 (5.3 GiB per GPU: the sampler over 1024 sequences; +2.5%); "
                 "no record is newly refused. No default was tuned.")),
    Change("2026-11-26", "model",
           "vLLM's eager mode (enforce_eager): a decode step costs the larger of the host's time issuing its kernels "
           "(ops counted per layer from vLLM 0.11's model code x the 10 us per op Hugging Face generate is priced "
           "with) and the GPU's; no CUDA-graph memory; read from verl rollout.enforce_eager, OpenRLHF --enforce_eager, "
           "NeMo RL vllm_cfg.enforce_eager. Records: verl's DeepSeek-V3 and Qwen3-30B-A3B scripts set it; the "
           "one-step-off page dates from when verl's default was True",
           37.3, 37.3, 199.8, 199.8,
           note=("Found by reading the two verl MoE scripts, whose generation was predicted at under a third of the "
                 "published: both set rollout.enforce_eager=True, which the simulator ignored. Two runs move: "
                 "DeepSeek-V3 on 96 H20 -77% -> -69% (gen 237 -> 380 s, published 1,050 s; ~3,000 ops a step: 30 ms "
                 "of host time against ~5 ms of GPU work at batch 1, the rollout's tail), Qwen3-30B-A3B on 128 H20 -50% -> -44% "
                 "(gen 99 -> 128 s, published 348 s). The 7B dense runs do not move: at TP2 on H20 the GPU's step "
                 "outlasts the host's 3.9 ms even at batch 1. The op counts were taken before the table was re-run "
                 "(a separate read of vLLM 0.8.5 and 0.11.0; 0.8.5, which verl's DeepSeek-V3 image ran, issues ~17% "
                 "more on DeepSeek-V3 and ~50% more on Qwen3 MoE) and the per-op cost is the existing constant; "
                 "nothing was tuned. The gap left on both MoE runs is not host time alone.")),
    Change("2026-11-26", "model",
           "The optimizer on the CPU (--optimizer-offload; DeepSpeed offload_optimizer / OpenRLHF --adam_offload, "
           "Megatron's hybrid optimizer: verl override_optimizer_config.optimizer_cpu_offload + "
           "optimizer_offload_fraction, NeMo RL megatron_cfg.optimizer): that share of the Adam state leaves the GPUs "
           "and its step runs on the node's CPU (2e9 parameters a second a node, from a DeepSpeed measurement) after "
           "the bf16 gradients go down and the weights come back over the host link. Records: OpenRLHF's 70B script "
           "(--adam_offload) and verl's DeepSeek-V3 and Qwen3-30B-A3B scripts (fraction 1) set it",
           37.3, 35.2, 199.8, 199.8,
           note=("Three runs move: OpenRLHF Llama-2-70B training 1,780 -> 2,348 s (published 2,700; step -40% -> -34%, "
                 "still past the memory check: its 70B reference and reward on their 4 GPUs are not sharded here), verl "
                 "DeepSeek-V3 -69% -> -64% (training and log-probs 121 -> 207 s; now fits: 13.2 GiB of weights, 26.4 of "
                 "gradients per H20, the 79 GiB of Adam state on the host), Qwen3-30B-A3B -44% -> -44% (a rank's share "
                 "is small at TP2 CP2 EP8 on 128 GPUs). The CPU rate is DeepSpeed's CPU Adam on a ZeRO-3 Qwen-72B over "
                 "4 A100 nodes (~10 s a step, deepspeedai/DeepSpeed#6834), read before the table was re-run; the "
                 "median moves because the 70B crosses it. Nothing was tuned.")),
    Change("2026-11-26", "model",
           "A frozen model (reference, reward) under a ZeRO-3 trainer is sharded over its own pool's GPUs wherever it "
           "sits, not only on the training pool: OpenRLHF runs its reference and reward as DeepSpeed ZeRO-3 inference "
           "engines on their own GPUs under --zero_stage 3, verl FSDP-wraps its reward model on its own pool; each "
           "forward gathers the weights (as on the training pool)",
           35.2, 35.2, 199.8, 199.8,
           note=("One record changes status: OpenRLHF Llama-2-70B fits (its 70B reference and reward took 128 GiB a GPU "
                 "unsharded on their 4 GPUs); its step time does not move (-34%): the scoring pool's forwards, with "
                 "their gathers, finish before the training pool's actor and critic forwards. The module's docstring "
                 "already said OpenRLHF shards them; the code did so only on the training pool.")),
    Change("2026-11-26", "model",
           "verl's balance_batch order within a rank: each data-parallel rank's share is ordered as verl's "
           "ray_trainer._balance_batch orders it (ascending by length, the even places then the odd ones reversed) "
           "before it is split into mini-batches, so mini-batch i holds sequences of about the same length on every "
           "rank; the simulator split each share in batch order, so every optimizer step waited for a rank that "
           "drew the long sequences",
           35.2, 35.6, 199.8, 186.1,
           note=("Found reading verl's _balance_batch for the 64 -> 128-GPU scaling question. Training falls on every run "
                 "with several data-parallel ranks and mini-batches: verl's 7B DAPO runs on H20 by 7-31% (one-step-off "
                 "+122% -> +112% and +200% -> +186%; fully-async 32/64/128 GPUs +56% -> +44%, +103% -> +77%, +36% -> "
                 "+12%), verl Qwen3-30B-A3B -44% -> -48%; the NeMo RL runs (which the records run with the default "
                 "balance_batch) 1-2 points lower. The median rises 0.4 points (the NeMo RL runs move away); without "
                 "the contradicted runs it falls 34.6 -> 27.6%. verl's 64 -> 128 training speed-up: 1.69x -> 1.92x "
                 "(published 1.17x): further off. Nothing was tuned.")),
    Change("2026-11-26", "record",
           "verl's mini-batch order dated: the length order of the previous entry came with verl PR #3605 "
           "(2025-10-23, release 0.6.1); before it each rank's share stayed in batch order. It is now its own setting "
           "(--balance-order length|batch, TrainerLayout.balance_order; verl's reader, at release 0.7.0, keeps length) "
           "and every record runs with batch order: verl's pages predate the PR (one-step-off 2025-07-17, fully-async "
           "2025-10-17) and NeMo RL and OpenRLHF do not use verl's balancing",
           35.6, 35.2, 186.1, 199.8,
           note=("Found by a review of this session's changes: the previous entry applied verl's newer order to runs "
                 "made before verl had it; the table is back to its values before that entry, to the digit. Two "
                 "corrections to the day's other entries, found in the same review: the eager-mode entry's reason why "
                 "the 7B dense runs do not move is wrong — at TP2 on H20 the GPU's part of a batch-1 step (~3.2 ms) is "
                 "below the host's 3.9 ms, so tail steps do cost more (6.2 -> 6.9 ms), but the runs' tails are too "
                 "short for it to show; and the optimizer entry also changed a ZeRO-0 trainer's GPU Adam traffic to a "
                 "full copy's (16 bytes a parameter per rank, was 16 / devices), which no record uses.")),
    Change("2026-11-26", "model",
           "Kernel tables by default where the GPU has its own: --op-costs now defaults to tables, which prices a GPU "
           "from its own shipped table (H100, H200, GB200, B200, A100, L40S, RTX PRO 6000) and keeps the roofline "
           "elsewhere; borrowing an architecture's tables (H20, H800, A800, GH200) is the opt-in tables+arch, what "
           "--op-costs tables meant before",
           35.2, 35.0, 199.8, 199.8,
           note=("Decided on the H200 measurement of issue 25 (paper_figs/gpu_op_costs_check.py, made before this run): "
                 "the H200's own table priced the graph-captured engine's decode grid, uncalibrated, at a median error "
                 "of 14 / 18 / 29% (Qwen2.5-1.5B / 3B / the Qwen3-MoE shape) against the roofline's 27 / 35 / 33%, "
                 "and a linear map of it explains more of the grid (r2 0.94 / 0.89 / 0.94 against 0.77 / 0.71 / "
                 "0.90). Borrowing has no such check, and the table with borrowing had been seen (the 2026-11-25 "
                 "entry: verl's dense H20 runs and the A800 runs further off, the held-out half 40.2 -> 42.2%); today "
                 "with borrowing the table reads 29.4% median, the held-out half 42.2% uncalibrated against 39.1% "
                 "without — seen before the split was chosen, so the split is informed by this table too. Moved: the "
                 "NeMo RL runs (H100, GB200) as in the 2026-11-25 entry (DeepSeek-V3 -62 -> -48%, GB200 Llama-8B "
                 "-35 -> -21%, GB200 Qwen3-32B -16 -> +4%, Qwen3-30B-A3B -41 -> -44%) and the OPPO paper's TRL "
                 "baseline on A100 (-21 -> -15%); the H20 and A800 runs not at all. With a published mean response "
                 "19.4 -> 16.9%; without the contradicted runs 34.6 -> 27.5%; the calibration check's held-out runs "
                 "39.1% uncalibrated either way, 34.5 -> 32.2% calibrated. GB200/H100 step-time ratio per GPU "
                 "(published 2.04x Llama-8B, 1.97x Qwen3-32B): 2.89x / 2.02x -> 2.49x / 1.67x. Nothing was tuned.")),
    Change("2026-11-26", "model",
           "The host's seconds per eager op measured, not assumed: EAGER_HOST_OP_S (vLLM's enforce_eager, and Hugging "
           "Face generate's launch-bound ops through HF_HOST_OP_S) 10 -> 22 us, the median of the H200's eager decode "
           "iterations (issue 25's decode-eager stage: the project's decoder with CUDA graphs off, Qwen2.5-1.5B shape, 14 "
           "points, kernels 15-26% of the wall time) over the 1,281 ops one iteration issues, counted on the CPU from the "
           "same code (paper_figs/eager_host_op.py; 15.9-34.1 us over the points)",
           35.0, 27.5, 199.8, 199.7,
           note=("The 10 us it replaces was first-principles and had been chosen with DeepSpeed-Chat's published decode "
                 "step in view (the 2026-11-25 entry); the measurement was taken for issue 25 before this use and its "
                 "median is used as it came out. Moved: verl Qwen3-30B-A3B on 128 H20 -44 -> -21% (gen 128 -> 244 s, "
                 "published 348), verl DeepSeek-V3 on 96 H20 -64 -> -44% (gen 377 -> 716 s, published 1,050), OpenRLHF "
                 "without Ray -39 -> -12% (gen 569 -> 884 s, published 921), the OPPO paper's TRL baseline -15 -> +12%, "
                 "verl one-step-off FSDP2 +122 -> +131% (gen 332 -> 374 s, published 321), and DeepSpeed-Chat -0.2 -> "
                 "+52.9% (gen 1,034 -> 1,663 s, published 975: 50 ops x 32 layers x 22 us = 35 ms of host a step against "
                 "the 29.8 ms the run's generation implies, so either that 2024 host issued ops faster than the H200 "
                 "machine's median or generate issued fewer than 50 launch-bound ops a layer; neither was changed). With "
                 "a published mean response 16.9 -> 16.9% (worst 52.9%); without the contradicted runs 27.5 -> 20.6%; "
                 "the calibration check's held-out runs 39.1 -> 35.6% uncalibrated, 32.2 -> 35.2% calibrated.")),
    Change("2026-11-26", "record",
           "DeepSpeed-Chat's record no longer says it generated with DeepSpeed's hybrid engine: OpenRLHF's benchmark "
           "turned it off (its README: it does not work with ZeRO-3; llama_7b.sh has no --enable_hybrid_engine), so "
           "Hugging Face generate ran on the actor's own modules, as the record was already priced",
           27.5, 27.5, 199.7, 199.7,
           note=("A description fix found while checking which ops the run's generate issued (the hybrid engine's "
                 "DeepSpeed-Inference layers issue ~14-20 a layer, Hugging Face's ~40-50); no number moved. The script "
                 "also trains the actor under ZeRO-2 (the critic ZeRO-3); the simulator plans one stage for the pool "
                 "(ZeRO-3 here), which makes generate gather the actor's weights once per call — left.")),
    Change("2026-11-26", "model",
           "A MoE's routed experts in training and scorer forwards priced at the GPU's measured grouped-GEMM fraction "
           "(where the GPU has a table): their share of the matmul FLOPs costs dense-large-GEMM fraction / grouped "
           "fraction more, at the tokens an expert receives from a micro-batch (ep x micro-batch tokens x top-k / "
           "experts); generation already priced them so",
           27.5, 27.5, 199.7, 199.7,
           note=("Issue 23 item 2 (the op-cost layer between the trainer and the roofline) for the grouped MoE GEMM class: "
                 "the kernel class was priced for generation only. Decided from the tables (H100: a 768-wide expert 0.43-0.45 "
                 "of its roofline from 256 tokens an expert, a large dense GEMM 0.77) before the table was run. Moved, all "
                 "NeMo RL on H100 (the only MoE runs on GPUs with tables): Qwen3-30B-A3B -43.9 -> -40.3% (training 19.6 -> "
                 "24.5 s, scoring 6.0 -> 8.1 s), Qwen3-235B-A22B -38.9 -> -38.2%, DeepSeek-V3 -47.5 -> -46.9%. Nothing "
                 "was tuned.")),
    Change("2026-11-26", "model",
           "Hugging Face generate priced by vLLM's eager rule: a forward costs the larger of the host's time issuing its "
           "ops and the GPU's (it was the GPU's plus the host's for 50 'launch-bound' small ops a layer), the host's time "
           "(50 ops a layer + 46 a token) x the measured 22 us, the ops counted on transformers 4.38.2's Llama (SDPA) with "
           "oppo_real.profiling.eager_ops.count_ops — the release OpenRLHF's benchmark ran",
           27.5, 26.9, 199.7, 199.7,
           note=("One rule in one place: generate syncs once a token, as vLLM once a step, so the host runs ahead of the GPU "
                 "within a forward and the two overlap; the additive form charged a host-bound forward its GPU time on top. "
                 "Made for that reason after the previous entries; its effect on the table was seen only after. Moved: "
                 "DeepSpeed-Chat +52.9 -> +25.9% (gen 1,663 -> 1,343 s, published 975), OpenRLHF without Ray -12.4 -> "
                 "-27.9% (gen 884 -> 701 s, published 921), the OPPO paper's TRL baseline +12.4 -> -15.8%. With a published "
                 "mean response 16.9 -> 20.7% (worst 52.9 -> 46.9%); without the contradicted runs 20.6 -> 23.3%; the "
                 "calibration check's held-out runs 35.6 -> 34.4% uncalibrated, 35.2 -> 32.6% calibrated.")),
    Change("2026-11-26", "model",
           "A weight sync is the trainer's export plus the hand-off: every framework materialises each whole tensor on "
           "every trainer rank before the engines load it (verl's FSDP full_tensor() and Megatron per_tensor_generator, "
           "OpenRLHF's GatheredParameters, NeMo RL through Megatron-Bridge's export_hf_weights: a pipeline broadcast, "
           "then TP and EP all-gathers), priced by the trainer's layout and where each group sits "
           "(oppo_sim.hw.costs.weight_export); the engines then take it in place when colocated ('ipc': their share "
           "copied in device memory) or receive every whole tensor over the link (was: W / tp over the pool's path)",
           26.9, 24.2, 199.7, 199.7,
           note=("Read from the frameworks' source (verl megatron_utils.per_tensor_generator at b178a3cd; NeMo RL's "
                 "megatron_policy_worker at the v0.5 commit 9dbd9adc, whose Megatron-Bridge export 'does PP/TP/EP gathers "
                 "to materialize full unsharded tensors'), not from the table: a MoE trained with EP across two nodes "
                 "gathers almost all its experts over the network every step. Predicted refit: NeMo RL DeepSeek-V3 on "
                 "256 H100 8.7 -> 41.4 s (EP16 over two nodes: 1.2 TB a rank, 31.6 s; the PP16 broadcast 3.0 s); an "
                 "independent figure, NeMo RL PR #638's ~55 s measured for DeepSeek-V3 in July 2025 (an earlier "
                 "release), was not used to set anything. Moved: NeMo RL DeepSeek-V3 -46.9 -> -22.5%, Qwen3-235B-A22B "
                 "-38.2 -> -35.7% (sync 7.0 -> 17.5 s), OpenRLHF Llama-2-70B -34.4 -> -34.3% (sync 4.8 -> 15.4 s: every "
                 "vLLM rank receives the whole 138 GB over the network), verl DeepSeek-V3 -43.9 -> -43.6%; the rest within "
                 "0.5 points. With a published mean response 20.7 -> 20.7% (worst 46.9 -> 43.6%); without the "
                 "contradicted runs 23.3 -> 21.6%; the calibration check's held-out runs 34.4 -> 34.3% uncalibrated, "
                 "32.6 -> 32.1% calibrated.")),
    Change("2026-11-26", "record",
           "OpenRLHF's three benchmark rows run Adam on the CPU (--adam_offload), as every PPO script of the repository "
           "at the benchmark's commit passes it (train_ppo_llama.sh, train_ppo_llama_ray.sh, _34b.sh, _70b.sh; the "
           "benchmark lists no flags, and only the 70B record had it); DeepSpeed-Chat's row (no offload) unchanged",
           24.2, 21.6, 199.7, 199.7,
           note=("Found while reading the repository's scripts for the DeepSpeed-Chat / OpenRLHF-without-Ray pair: the 13B "
                 "row did not fit its 4-GPU training pool without it (it was timed past the memory check) and fits with "
                 "it; the effect on the table was computed before the records were changed and is reported as it came "
                 "out. Training (the CPU's Adam step: 7 s a step for 7B actor + critic on one node) moves toward the "
                 "published training time on all three, the step time away on two: OpenRLHF Ray 7B +8.4 -> +14.8% "
                 "(training -28 -> -14%), 13B +0.5 -> +5.0% (training -42 -> -31%; ZeRO-2 now, was refused), without "
                 "Ray -27.9 -> -20.1% (training -42 -> -21%, generation -24 -> -20%: ZeRO-2 with the Adam state on the "
                 "host, generate gathers no ZeRO-3 shards). Every run now fits the memory check. With a published mean "
                 "response 20.7 -> 20.1%; without the contradicted runs 21.6 -> 20.6%; the calibration check's held-out "
                 "runs 34.3% uncalibrated either way, 32.1 -> 38.1% calibrated (the NeMo RL factor, 1.20, now pushes "
                 "two over-predicted rows further).")),
    Change("2026-11-26", "model",
           "vLLM's eager op counts by release: --vllm-version 0.11.0 (the default, as before) or 0.8.5, both counted from "
           "the wheels' sources (0.8.5: Qwen3's q/k norms as 16 native torch ops a layer, DeepSeek-V3's grouped top-k "
           "compiled by Inductor, the expert alignment's fill and zeros, no zero fill of the attention output); verl's "
           "DeepSeek-V3 record runs 0.8.5, the release of its page's recommended image",
           21.6, 21.6, 199.7, 199.7,
           note=("The counts were made in an earlier session (the 'What is not modelled' list named the gap: DeepSeek-V3 "
                 "~3,450 ops a step against ~2,980, Qwen3-30B-A3B at TP4 ~1,800 against ~1,180); the record's release is "
                 "the page's (verlai/verl:app-verl0.4-vllm0.8.5-mcore0.13.0-preview). Moved: verl DeepSeek-V3 on 96 H20 "
                 "-43.6 -> -37.6% (gen 722 -> 825 s, published 1,050). verl's Qwen3-30B-A3B run names no release and "
                 "keeps 0.11.0. With a published mean response 20.1 -> 20.1% (worst 43.6 -> 40.8%); the rest unchanged.")),
    Change("2026-11-26", "record",
           "verl's FSDP2 records train as their scripts and verl's reader say: full-shard FSDP (ZeRO-3, verl's default; "
           "the planner had picked ZeRO-2) with the scripts' fsdp_size (8 in the fully-async scripts, 2 in the one-step "
           "colocate one) — hybrid sharding, now modelled (--fsdp-size: the state sharded inside groups of N, the gradients "
           "reduced inside a group and all-reduced across groups, the ZeRO-3 gathers inside a group)",
           21.6, 21.6, 199.7, 199.7,
           note=("Made with hybrid sharding, which verl's reader had listed as not modelled (fsdp_config.fsdp_size). Moved "
                 "(training: the gradients cross the network as 1/8 of them): fully-async 32 / 64 / 128 H20 +55.6 -> "
                 "+54.4%, +103.0 -> +100.6%, +35.6 -> +33.1%; one-step-off FSDP2 +130.7 -> +130.2%. Median and worst "
                 "unchanged; the calibration check's held-out runs 34.3 -> 33.1% uncalibrated, 38.1% calibrated either "
                 "way. verl's 64 -> 128 training speed-up 1.69x -> 1.71x (published 1.17x).")),
    Change("2026-11-26", "record",
           "OpenRLHF's Llama-2-70B row: an engine decodes one actor rank's micro rollout batch at a time (max_num_seqs "
           "8 -> 4). The vLLM engine is a synchronous Ray actor (LLMRayActor at the benchmark's commit: no "
           "max_concurrency, so one method call at a time) and LLM.generate returns when its call's requests are done; "
           "the 70B script's four actor ranks share two engines, so two ranks' calls of 4 run one after the other, "
           "never as one batch of 8 (the 7B and 13B rows have one rank per engine and are unchanged)",
           21.6, 20.6, 199.7, 199.7,
           note=("Found while looking for the 70B row's missing generation time (the largest miss among the runs with a "
                 "published mean response), by reading openrlhf/trainer/ray/vllm_engine.py and "
                 "ppo_utils/experience_maker.py (make_experience: one blocking generate call per micro rollout batch) "
                 "at dbdd43b0; the record's batch was set from the Ray semantics, not from the published time. Moved: "
                 "OpenRLHF Llama-2-70B -34.3 -> +0.7% (make_experience -42.6 -> +5.8%, training -12.7% either way). "
                 "With a published mean response 20.1 -> 16.9%; without the contradicted runs 20.6 -> 20.3%; the "
                 "calibration check's held-out runs 33.1 -> 25.9% uncalibrated, 38.1% calibrated either way.")),
    Change("2026-11-26", "model",
           "NeMo RL's reference is held on the host (--reference-on-host, SimConfig.reference_on_host; the NeMo RL "
           "reader sets it wherever the loss has a KL term): its weights stay in pinned host memory and, for its pass, "
           "the policy's weights are copied out, the reference's in, and the policy's back (one copy to the host, two "
           "from it, at the pinned-copy rate); it takes no GPU memory of its own. The NeMo RL records set it",
           20.6, 20.5, 199.7, 199.7,
           note=("Read from NeMo RL's megatron_policy_worker.use_reference_model and setup_reference_model_state "
                 "(pin_memory=True) at the v0.5 commit 9dbd9adc; made because NeMo RL's own 1-step-off Llama-3.1-8B "
                 "recipe (8 training H100s, the reference beside the trainer) was refused by the memory check with the "
                 "reference's 15 GiB held on the GPUs. Moved: the swap adds 0.3-1.1 s a step; with the reference's GPU "
                 "memory freed, the memory plan now runs the Qwen3-32B recipes without recomputation, as their "
                 "activation_checkpointing: false says (it had chosen full recomputation on GB200 to fit): GB200 "
                 "Qwen3-32B +4.2 -> -5.7%; the rest within 0.4 points. GB200/H100 step-time ratio per GPU on NeMo RL's "
                 "pairs (published 2.04x Llama-8B, 1.97x Qwen3-32B): 2.49x / 1.67x -> 2.49x / 1.84x. With a published "
                 "mean response 16.9 -> 16.8%; without the contradicted runs 20.3 -> 20.2%; the calibration check's "
                 "held-out runs 25.9% uncalibrated either way, 38.1 -> 38.0% calibrated.")),
    Change("2026-11-26", "record",
           "Thirteen more rows of NeMo RL's v0.5 performance summary, every row of its BF16 tables the records lacked "
           "(none chosen by its error): the three GB200 on-policy MoE rows (DeepSeek-V3 on 128, Qwen3-235B-A22B on 64, "
           "Qwen3-30B-A3B on 16 GPUs) and the ten one-step-off rows, H100 and GB200 (async GRPO: generation on its own "
           "half of the GPUs, gpu_memory_utilization 0.8, training and the host-held reference on the other, "
           "trajectories at most one step old), each from its recipe at the page's commit. The table runs each "
           "record under its framework's schedule (PublishedRun.policy: async here) and times an async run's steady "
           "state (the mean of its steps after the first)",
           20.5, 25.8, 199.7, 199.7,
           note=("Added to test the overlap itself against published runs (the project's question) and the GB200 "
                 "ratio on more than two recipes. The 22 earlier rows are unchanged (median 20.5%); the 13 new ones "
                 "are predicted as they came out: one step off on H100 Llama-8B +8%, Qwen3-32B -12%, Qwen3-30B-A3B "
                 "-33%, Qwen3-235B +33%, DeepSeek-V3 +90%; on GB200 Llama-8B -14%, Qwen3-32B -25%, Qwen3-30B-A3B "
                 "-52%, Qwen3-235B -39%, DeepSeek-V3 +26%; GB200 on policy Qwen3-30B-A3B -59%, Qwen3-235B -46%, "
                 "DeepSeek-V3 -54%. The speed-up of one step off over on policy on the same GPUs is predicted 7-12% "
                 "below the published (1.29x / 1.14x / 1.19x against 1.43x / 1.29x / 1.28x); the large MoE runs' "
                 "refit between separate pools (the export's gathers, then every whole tensor to every engine rank, "
                 "sharing the generation GPUs with decoding) is predicted longer than NeMo RL's whole published step "
                 "(DeepSeek-V3 on 512 H100: ~87 s of transfers against a 64.9 s step), an over-estimate the on-policy "
                 "rows (in-place refit) could not show. GB200/H100 per GPU on the MoE recipes: Qwen3-30B-A3B 2.47x "
                 "(published 1.71x), Qwen3-235B 3.09x (2.60x), DeepSeek-V3 3.50x (2.09x). With a published mean "
                 "response 28 runs, median 23.3% (worst 90.0%); without the contradicted runs 24.5%; the calibration "
                 "check's factor 1.23, its held-out runs 25.9% uncalibrated, 41.1% calibrated.")),
    Change("2026-11-26", "model",
           "NeMo RL's double-buffered refit (--refit-buffers 2, SimConfig.refit_buffers; the NeMo RL reader sets it): "
           "its refit packs the exported tensors into buffers with two in flight, so each buffer's export overlaps the "
           "previous one's hand-off — the sync takes the longer of the two, and one NCCL call a buffer replaces one a "
           "tensor. The NeMo RL records set it",
           25.8, 24.5, 199.7, 199.7,
           note=("Read from NeMo RL's packed_broadcast_producer (nemo_rl/utils/packed_tensor.py: NRL_REFIT_NUM_BUFFERS "
                 "= 2, buffers of 2% of the GPU's memory up to 5 GB, one stream each) and "
                 "stream_weights_via_ipc_zmq_impl ('ping-pong double buffering to enable overlapping communication') "
                 "at the v0.5 commit 9dbd9adc, after the one-step-off DeepSeek-V3 row showed a refit longer than the "
                 "published step (the previous entry). Moved: one step off DeepSeek-V3 on 512 H100 +90.0 -> +36.1%, on "
                 "256 GB200 +25.8 -> +16.3%, Qwen3-235B on 256 H100 +32.6 -> +28.5%; the colocated rows (in-place "
                 "hand-off, nothing to overlap) and the rest within 0.6 points. With a published mean response 23.3 -> "
                 "21.3% (worst 90.0 -> 59.0%); without the contradicted runs 24.5 -> 22.2%; the calibration check "
                 "unchanged (1.23; 25.9% / 41.1%).")),
    Change("2026-11-26", "comparison",
           "An async run is timed at its steady state: the mean over an even number of steps between its first "
           "(nothing to overlap yet) and its last (nothing left to overlap with: the pipeline drains, and the last "
           "step's refit shares no GPUs with generation), six steps simulated for three timed; it was the mean of the "
           "steps after the first, the drained last one included",
           24.5, 25.9, 199.7, 199.7,
           note=("Seen on seven simulated steps of the one-step-off rows, after the previous entries: the last step ran "
                 "~45% shorter than the ones before it on DeepSeek-V3 (57 against ~102 s), and some rows alternate "
                 "between a generation-bound and a training-bound step (Llama-8B ~57 / ~95 s), so an odd count of "
                 "timed steps leans one way. Moved (the one-step-off rows only): Llama-8B H100 +8.0 -> +19.2%, GB200 "
                 "-14.1 -> -4.2%; DeepSeek-V3 H100 +36.1 -> +56.9%, GB200 +16.3 -> +31.2%; Qwen3-32B H100 -11.6 -> "
                 "-0.5%, GB200 -24.5 -> -14.1%; Qwen3-235B +28.5 -> +31.8% / -39.7 -> -37.3%; Qwen3-30B-A3B within 1 "
                 "point. The gain of one step off over on policy on the same GPUs is now predicted 12-19% short (1.17x "
                 "/ 1.13x / 1.06x against 1.43x / 1.29x / 1.28x). With a published mean response 21.3% either way; "
                 "without the contradicted runs 22.2% either way; the calibration check's factor 1.23 -> 1.18, its "
                 "held-out runs 25.9% uncalibrated, 41.1 -> 35.8% calibrated.")),
    Change("2026-11-26", "model",
           "A MoE model's forward-only passes under expert parallelism (log-probs, reference, rewards, values) pay each "
           "MoE layer's dispatch and combine per micro-batch, as training already did: they were priced without them",
           25.9, 25.9, 199.7, 199.7,
           note=("Found reading trainer_cost.forward_seconds while looking for the MoE rows' missing time: an omission, "
                 "not a fit. Moved (the MoE rows under --ep only): NeMo RL Qwen3-30B-A3B H100 -40.7 -> -39.0%, GB200 "
                 "-59.0 -> -57.1%; Qwen3-235B H100 -35.7 -> -32.2% (its EP16 spans two nodes), GB200 -46.0 -> -45.3%; "
                 "DeepSeek-V3 H100 -22.2 -> -20.8%; verl Qwen3-30B-A3B -20.6 -> -19.8%; the rest within 0.4 points. "
                 "With a published mean response 21.3 -> 20.6% (worst 59.0 -> 57.1%); without the contradicted runs "
                 "22.2 -> 20.8%; the calibration check unchanged (1.18; 25.9% / 35.8%).")),
    Change("2026-11-26", "model",
           "Megatron's token dispatcher (--moe-dispatcher, TrainerLayout.moe_dispatcher, Megatron's "
           "moe_token_dispatcher_type): allgather all-gathers every rank's tokens over the expert-parallel group and "
           "reduce-scatters the experts' output, (ep - 1) hidden vectors a token against the all-to-all's top-k x "
           "(ep - 1) / ep; the NeMo RL reader reads it (NeMo RL's default allgather), the verl reader too (verl sets "
           "alltoall). The NeMo RL records set allgather, which no NeMo RL recipe changes; verl's DeepSeek-V3 record "
           "flex (its script's, priced as alltoall)",
           25.9, 25.3, 199.7, 199.7,
           note=("Read from NeMo RL's base config (examples/configs/grpo_math_1B.yaml at 9dbd9adc: "
                 "moe_token_dispatcher_type \"allgather\", no performance recipe overrides it) and Megatron-Core's "
                 "MoEAllGatherTokenDispatcher, while looking for the MoE rows' missing time. It costs more only where ep "
                 "exceeds the top-k (8): Qwen3-235B H100 (EP16 over two nodes) -32.2 -> -25.3%, DeepSeek-V3 H100 -20.8 -> "
                 "-17.9%, Qwen3-30B-A3B GB200 (EP16) -57.1 -> -53.1%, Qwen3-235B GB200 -45.3 -> -44.1%; the rest within 0.4 "
                 "points. With a published mean response 20.6 -> 20.2% (worst 57.1 -> 56.9%); without the contradicted "
                 "runs 20.8 -> 20.4%; the calibration check unchanged (1.18; 25.9% / 35.8%).")),
    Change("2026-11-26", "model",
           "Megatron's router dtype (--moe-router-dtype, TrainerLayout.moe_router_dtype, Megatron's moe_router_dtype): "
           "the allgather dispatcher reduce-scatters the experts' output in the router's dtype, so NeMo RL's fp64 "
           "router moves four times the bf16 bytes in the combine and in its backward all-gather; the NeMo RL reader "
           "reads it (NeMo RL's default fp64), the verl reader where a script sets it; the NeMo RL records set fp64, "
           "which no BF16 recipe changes",
           25.3, 20.4, 199.7, 199.7,
           note=("Read in Megatron-Core's MoEAllGatherTokenDispatcher.token_combine (hidden_states.to(self.local_probs"
                 ".dtype) before the reduce-scatter; Megatron-LM 2f3fa0fce5, about NeMo RL v0.5's fork) and NeMo RL's "
                 "base config (moe_router_dtype \"fp64\", applied in nemo_rl/models/megatron/setup.py _apply_moe_config), "
                 "while counting the ops of NeMo RL's MoE layer for the host-time question. Moved: Qwen3-235B H100 (EP16 "
                 "over two nodes) -25.3 -> -4.6%, GB200 -44.1 -> -40.7%; DeepSeek-V3 H100 -17.9 -> -9.3%, GB200 -52.9 -> "
                 "-51.8%; Qwen3-30B-A3B H100 -38.9 -> -33.6%, GB200 -53.1 -> -41.5%; one step off Qwen3-30B-A3B GB200 "
                 "-51.6 -> -43.9%, H100 -32.2 -> -33.7% (its steady-state mean moves with the trainer's share); the rest "
                 "within 0.4 points. With a published mean response 20.2 -> 19.6% (worst 56.9% either way); without the "
                 "contradicted runs 20.4 -> 20.1%; the calibration check's factor 1.18 -> 1.12, its held-out runs 25.9% "
                 "uncalibrated, 35.8 -> 30.1% calibrated.")),
    Change("2026-11-26", "model",
           "Megatron-Core's host time (oppo_sim.hw.costs.megatron_host): each micro-batch's forward and backward through "
           "a pipeline stage cost at least the host's time issuing their kernels — ops per layer counted from "
           "Megatron-Core's source (a Qwen3-30B-A3B layer at EP 8: 96 forward, 157 backward; a dense Llama layer 18 / "
           "34), at the measured 22 us an eager op (SimConfig.eager_host_op_s, the vLLM eager constant)",
           20.4, 20.4, 199.7, 199.7,
           note=("The leading reading of the MoE misses (the previous entries' closing note: the miss grows with the GPU's "
                 "speed). Counted from Megatron-LM 2f3fa0fce5, Transformer Engine 2.8 and NeMo RL 9dbd9adc's settings "
                 "(eager training, one GEMM per local expert in TE's grouped linear, one DDP hook add per weight). No run "
                 "moved: with the allgather dispatcher's fp64 combine priced, every NeMo RL and verl MoE pass stays "
                 "GPU-bound (Qwen3-30B-A3B on GB200: 0.08 s of host time against 0.13 s of GPU time a forward micro-batch, "
                 "0.20 against 0.36 s a training one). Syncs inside a MoE layer's forward (2-3) would serialize part of "
                 "it: an upper bound of +12 s a step there, not modelled. So the host, priced this way, does not explain "
                 "the MoE misses.")),
    Change("2026-11-26", "record",
           "NeMo RL without sequence packing: a recipe with policy.sequence_packing.enabled and dynamic_batching.enabled "
           "false trains and scores micro-batches of whole sequences, each padded to the batch's longest "
           "(nemo_rl/models/megatron/data.py get_microbatch_iterator); the NeMo RL reader sets --padded-batches there "
           "(it only said so before), and the two DeepSeek-V3 GB200 records, whose recipes turn packing off, pad",
           20.4, 20.4, 199.7, 199.7,
           note=("Left as a noted difference at the last stop; read in NeMo RL 9dbd9adc's megatron/data.py (slices of the "
                 "batch at its padded length) and the two recipes (grpo-deepseek-v3-32n4g, -64n4g-async-1off). Moved: "
                 "DeepSeek-V3 on 128 GB200 -51.8 -> -49.8% (its scoring and training on 1,536-token rows); its one-step-off "
                 "row is generation-bound and did not move; nothing else did.")),
    Change("2026-11-26", "model",
           "Weights refit in flight (async --in-flight-weight-updates, Async.in_flight, StepPlan.overlap; NeMo RL's "
           "grpo.async_grpo.in_flight_weight_updates with vLLM's async engine): a step's generation starts once the "
           "staleness gate opens, beside the previous step's still in flight, within a window of B x k prompt groups "
           "generating at once (NeMo RL's semaphore of num_prompts_per_step x max_trajectory_age_steps: a step admits "
           "as groups complete), and each step trains the groups it admitted; the NeMo RL reader sets it, the NeMo RL "
           "one-step-off records run it",
           20.4, 20.4, 199.7, 199.7,
           note=("The reading the last stop named for the over-predicted one-step-off refits (the simulator drained each "
                 "step's generation before starting the next), read in NeMo RL 9dbd9adc's async_utils.py "
                 "(prepare_for_refit skips the wait for pending generations with the async engine; _inflight_sema bounds "
                 "the prompt groups in flight). Tested, it is not the missing overlap: with the window the tail of one "
                 "step overlaps only the next step's first groups. Moved: Qwen3-235B on 256 H100 +32.6 -> +30.7%, "
                 "Qwen3-32B on 32 GB200 -14.1 -> -17.2%, Qwen3-30B-A3B on 32 H100 -33.7 -> -35.4%, the other one-step-off "
                 "rows within 1 point; DeepSeek-V3's (whose step is the refit and a generation sharing the engine) not "
                 "at all. With a published mean response 19.6 -> 19.9%; without the contradicted runs 20.1% either way. "
                 "Without the window (the next step's whole batch at once) Qwen3-235B had moved to +20.5% and its GB200 "
                 "row to -54%: the window is NeMo RL's, not a choice.")),
    Change("2026-11-26", "record",
           "Micro-batch token budgets as the frameworks set them: the forward-only passes get their own "
           "(--logprob-micro-batch-tokens, TrainMemoryConfig.logprob_micro_batch_tokens); the NeMo RL reader reads "
           "sequence packing's (or dynamic batching's) train_mb_tokens and logprob_mb_tokens, the verl reader "
           "use_dynamic_bsz with ppo_max_token_len_per_gpu and log_prob_max_token_len_per_gpu (x the Ulysses or "
           "context-parallel degree, as verl scales them); the NeMo RL records pack to max_total x the recipe's "
           "train_micro_batch_size and logprob_batch_size, the verl records to their scripts' budgets",
           20.4, 20.6, 199.7, 199.7,
           note=("Noted at the last stop as a reader gap (the readers listed the budgets as not modelled). Read in NeMo "
                 "RL 9dbd9adc's lm_policy.py (each data-parallel rank's micro-batches of max_tokens_per_microbatch) and "
                 "its recipes (logprob_batch_size 2 for Llama-3.1-8B and DeepSeek-V3 one step off; 1 elsewhere through "
                 "v0.5's interpolation; 4 in v0.4's base config), and in verl b178a3cd's dp_actor.py / megatron_actor.py "
                 "and the records' scripts (the Megatron 7B one's dynamic-batch lines are commented out). Moved: "
                 "Qwen3-32B v0.4 on 32 H100 -16.8 -> -15.5% (16,384-token log-prob micro-batches: fewer micro-batches, a "
                 "larger PP4 bubble); DeepSeek-V3 on 96 H20 -37.5 -> -37.2%; the rest within 0.4 points. The median rises "
                 "20.4 -> 20.6%: the row at the median (Llama-3.1-8B on 8 GB200) moved -20.4 -> -20.6%. With a published "
                 "mean response 19.9 -> 19.7%; without the contradicted runs 20.1% either way.")),
    Change("2026-11-26", "model",
           "Micro-batches of a fixed count of sequences (--micro-batch-size, --logprob-micro-batch-size; verl's "
           "ppo_micro_batch_size_per_gpu / log_prob_micro_batch_size_per_gpu without the dynamic batch size, OpenRLHF's "
           "micro_train_batch_size / micro_rollout_batch_size, NeMo RL's train_micro_batch_size / logprob_batch_size "
           "without packing), read by the three readers and written by the exports; the OpenRLHF and DeepSpeed-Chat "
           "records take the benchmark table's own micro_batch_size columns, verl's Megatron 7B record its script's (2 "
           "and 4), NeMo RL's unpacked records their recipes'. With them, two memory rules: a static engine (Hugging Face "
           "generate in the trainer's process) takes turns with the trainer's activations, as a sleeping engine does; and "
           "DeepSpeed's ZeRO-Offload (and FSDP2's CPU offload) moves the gradient shards to the host with the Adam state",
           20.6, 23.6, 199.7, 199.0,
           note=("The readers listed the fixed micro-batch sizes as not modelled; the OpenRLHF benchmark publishes them per "
                 "row (generation 16/8/4/8/4, training 8/4/4/8/4). With the sizes alone the OpenRLHF DeepSpeed row's "
                 "generation ran 7x slower: the memory plan held eight sequences' training activations beside Hugging "
                 "Face generate's KV cache, which never coexist in one process (and the 70B row no longer fit, holding "
                 "gradients DeepSpeed's offload keeps on the host: ZeRO-Offload, stage_1_and_2.py's CPU gradient "
                 "partitions). Both memory rules are the frameworks' behaviour, not fitted. Moved: OpenRLHF DeepSpeed "
                 "Llama-2-7B -20.1 -> -23.6% (its generation's KV cache larger, no longer counted beside the "
                 "activations); OpenRLHF Ray 7B +14.8 -> +14.4%; verl's Megatron 7B +199.7 -> +199.0%; the rest within 0.4 "
                 "points; the 70B row fits again. The median rises 20.6 -> 23.6%: the OpenRLHF DeepSpeed row was just "
                 "under it and the next error above is its own. With a published mean response 19.7 -> 20.0%; without the "
                 "contradicted runs 20.1 -> 20.6%.")),
    Change("2026-11-27", "model",
           "Ring collectives across nodes at the NICs of the group's GPUs in a node side by side (hw/costs/links.py: "
           "min(link_bw, k x net_bw) for k of the group's GPUs in a scale-up domain; a group strided one rank a node gets "
           "one NIC): the data-parallel reductions, the TP all-gathers, Megatron's allgather token dispatcher, ZeRO-3 "
           "gathers, the weight export's gathers and a TP decode group's all-reduces; point-to-point and all-to-all "
           "traffic stays at each GPU's NIC. The sync's broadcast between pools by who joins it (--refit-group: rank0, "
           "OpenRLHF's trainer rank 0 and engines, the default; all, NeMo RL's and verl's groups of every trainer and "
           "engine rank), set by the NeMo RL and verl readers and on the NeMo RL records",
           23.6, 24.2, 199.0, 199.0,
           note=("Found reading why the one-step-off DeepSeek-V3 refit (~87 s a step) outlasted NeMo RL's whole published "
                 "step (64.9 s): the model sent every cross-node collective through one 50 GB/s NIC a GPU, where NCCL lays "
                 "a ring through a node's GPUs over NVLink and crosses to the next node on as many channels as NICs "
                 "(nccl-tests across nodes of 8 H100 + 8 x 400 Gb/s: ~400-450 GB/s bus bandwidth), and NeMo RL's "
                 "model_update_group holds every training and inference worker (grpo.py), as verl's actor_rollout "
                 "group does; OpenRLHF's holds only the trainer's rank 0 besides the engines. Moved: DeepSeek-V3 one "
                 "step off on 512 H100 +56.9 -> -4.2% (refit legs 51.6 -> 13.8 s), on 256 GB200 +31.2 -> -29.2%; "
                 "Qwen3-235B one step off on 256 H100 +30.7 -> +24.2%, on 128 GB200 -38.1 -> -43.2%; on policy "
                 "Qwen3-235B on 128 H100 -4.6 -> -42.9% and DeepSeek-V3 on 256 H100 -9.3 -> -45.7% (the allgather "
                 "dispatcher's rings over EP16's two nodes and TP32 decode's all-reduces: their earlier agreement was "
                 "one NIC's network time standing in for what is missing on GB200 as well); the rest within 2.5 points. "
                 "GB200/H100 per GPU: Qwen3-235B +61% -> -4%, DeepSeek-V3 +81% -> +12%, Qwen3-30B-A3B +14% -> +13%. "
                 "With a published mean response 20.0 -> 22.1%; without the contradicted runs 20.6 -> 23.6%; the "
                 "calibration check's factor 1.12 -> 1.23, its held-out runs 25.8% uncalibrated either way, 29.8 -> "
                 "41.1% calibrated. NeMo RL measured ~55 s for the colocated DeepSeek-V3 refit in PR #638 (an earlier "
                 "release without the packed refit); the on-policy sync is now 14 s (was 41). Nothing was tuned: the "
                 "bandwidth is the NICs the GPU table already lists.")),
    Change("2026-11-27", "model",
           "All-to-alls across nodes (expert dispatch and combine under the alltoall dispatcher, Ulysses, a TP decode "
           "group's expert exchange): a GPU's share for the group's GPUs on other nodes leaves through its NIC while its "
           "share for its own node crosses the scale-up link at the same time, at the pace of the slower "
           "(links.alltoall_bw); all of it went through the NIC before",
           24.2, 24.2, 199.0, 199.0,
           note=("Made reading the links rule of the entry before for the traffic it left at one NIC. No row moved: every "
                 "record's all-to-all groups sit inside a node (verl's EP8 and Ulysses groups; NeMo RL's MoE recipes use "
                 "the allgather dispatcher, a ring). It changes what a plan with an expert or sequence-parallel group "
                 "over several nodes is priced at: EP16 over two 8-GPU nodes sends 8/15 of its bytes over the NIC, "
                 "1.9x the NIC's rate for the whole.")),
    Change("2026-11-27", "model",
           "Stage timers: a framework's step timer (NeMo RL total_step_time, verl step, OpenRLHF step_total, the "
           "e2e of the two-latency harnesses) is the loop's step, the simulator's step_time_s (from the previous step's "
           "end), not a step's end less its start, which in a one-step-off or async run counted the generation that "
           "ran beside the previous step a second time",
           24.2, 24.2, 199.0, 199.0,
           note=("Found reading NeMo RL's async_grpo_train (grpo.py at 9dbd9adc: total_step_time wraps the wait for "
                 "the batch, the passes and the refit). No published number moved: the comparison already used "
                 "step_time_s, and no async row publishes stages; a NeMo RL one-step-off row's total_step_time read "
                 "~190-290 s against its ~97 s step before. What moves is a user's check of an async run's log "
                 "(its step_s fit).")),
    Change("2026-11-27", "model",
           "Padded passes (pipeline/padding.py, --padded-roles): the named roles' forwards and updates run on rows of "
           "max_prompt + max_response tokens, as verl runs a model without use_remove_padding; the verl reader maps "
           "each model's switch (v0.7.0's defaults: the actor removes padding, the critic and the reward model do not)",
           24.2, 24.2, 199.0, 199.0,
           note=("Found reading verl's dp_critic and its generated configs for what the reader listed as 'not "
                 "modelled'. No published row moved: the verl records are GRPO runs without a critic or a reward model "
                 "whose scripts remove the actor's padding. What moves is a verl PPO job that keeps v0.7.0's default "
                 "critic: its values and update on padded rows (the shipped default trace with --max-prompt 1024 "
                 "and padded critic and reward model: 46 -> 138 s a step at the 8,192-token response cap).")),
    Change("2026-11-27", "model",
           "Megatron's expert tensor parallelism (--etp, TrainerLayout.etp): each routed expert split over etp ranks, "
           "unset Megatron-Core's default (the trainer's TP) where the model had it fixed at 1 under expert "
           "parallelism; the verl and NeMo RL readers and exports carry expert_tensor_parallel_size; the records state "
           "the 1 their sources set (NeMo RL's base config, verl's two MoE scripts)",
           24.2, 24.2, 199.0, 199.0,
           note=("Found listing what the verl reader ignored on its own fixtures (expert_tensor_parallel_size 'not "
                 "modelled'), and verl's default for it (null: Megatron-Core takes tensor_model_parallel_size). No "
                 "published number moved: every MoE record's source sets 1, as the model assumed. What moves is a "
                 "Megatron MoE job with TP > 1 that leaves it unset (verl's default): its experts are now split over TP "
                 "as well, less memory and compute a rank and fewer expert-data-parallel ranks.")),
    Change("2026-11-27", "record",
           "Padding as the 2024 benchmark's frameworks ran it: OpenRLHF at dbdd43b0 had no sample packing, so each "
           "micro-batch is padded to its longest (--padded-micro-batches, new; the OpenRLHF reader sets it where neither "
           "--packing_samples, ring attention nor the dynamic batch is on); DeepSpeed-Chat pads every prompt to "
           "max_prompt_seq_len (1,024) before generating, so its record's prompts are 1,024 tokens (a record "
           "prompt_sigma)",
           24.2, 24.2, 199.0, 199.0,
           note=("Found reading the OpenRLHF reader's ignored --packing_samples and the two frameworks' code "
                 "(OpenRLHF experience_maker.py at dbdd43b0: prompts left-padded and responses right-padded to their "
                 "micro-batch's longest; --packing_samples came in 2024-09, 4c902a2a; DeepSpeed-Chat's "
                 "DataCollatorRLHF pads prompts to max_token_len). Moved: OpenRLHF Ray 7B +14.4 -> +18.7% (training "
                 "stage -14.8 -> -8.5%), 13B +4.9 -> +7.0% (training -31.0 -> -27.7%), 70B -1.6 -> -0.4% (training "
                 "-20.9 -> -17.9%), DeepSpeed -23.6 -> -22.2% (training -21.7 -> -17.3%); DeepSpeed-Chat +25.8 -> "
                 "+36.3% (training -29.5 -> +11.4%: the update is now about right and the generation, +42% over the "
                 "published, is what is off). With a published mean response 22.1 -> 21.4%; without the "
                 "contradicted runs 23.6 -> 22.2%; the calibration check's held-out runs 25.8 -> 33.0% uncalibrated "
                 "(DeepSpeed-Chat crossed their median), 41.1 -> 46.5% calibrated. Nothing was tuned: the paddings are "
                 "the frameworks' own.")),
    Change("2026-11-27", "model",
           "Megatron's uneven pipeline split (--first-stage-layers, --last-stage-layers; TrainerLayout.stage_layers): "
           "the largest stage paces the pipeline and sets a rank's weights, where every stage held layers / pp; the NeMo "
           "RL and verl readers and exports carry num_layers_in_first/last_pipeline_stage, and the records state their "
           "recipes' (NeMo RL's DeepSeek-V3 3/2 at PP16 and 7/6 at PP8, Qwen3-235B 11/11 at PP8 and 23/23 at PP4; "
           "verl's DeepSeek-V3 last stage 6 at PP12)",
           24.2, 24.2, 199.0, 199.0,
           note=("Left as 'not modelled' in the DeepSeek-V3 GB200 record's notes and listed as ignored by both readers. "
                 "Moved: verl DeepSeek-V3 on 96 H20 -37.7 -> -35.1% (its last stage holds 6 layers against 5.1 evenly: "
                 "training 210 -> 248 s); NeMo RL's eight rows with an uneven split by at most 0.5 points (4 layers "
                 "against 3.8, 12 against 11.75). Nothing was tuned: the splits are the recipes'.")),
    Change("2026-11-27", "model",
           "A training loop runs its scoring passes after the previous step (--after-update, SimConfig.after_update): an "
           "async step's log-prob and reference forwards on the trainer's GPUs start once the previous step's update "
           "and weight sync are done, where they had shared the GPUs with that update; the framework readers set it for "
           "every pass (--after-update all), and so do the records; by default it holds the passes oppo's train worker "
           "runs itself (critic, logprob)",
           24.2, 24.2, 199.0, 199.0,
           note=("Found reading a NeMo RL one-step-off row's timeline (Qwen3-30B-A3B, 32 GB200): the next step's log-probs "
                 "started during the update, and the steps alternated 57 / 93 s. NeMo RL's async_grpo_train (grpo.py at "
                 "9dbd9adc) runs logprobs, training and the refit in turn; verl's and OpenRLHF's async trainers too "
                 "(OpenRLHF's TrainingActor: make_experience, then the update); oppo's real executor computes the "
                 "log-probs and values on its train worker as the first phase of the update. Moved (the one-step-off "
                 "rows only): Llama-3.1-8B 16 H100 +18.7 -> +13.7%, 8 GB200 -3.9 -> -8.9%; Qwen3-32B 32 GB200 -17.2 -> "
                 "-19.6%, 64 H100 -0.9 -> -0.7%; Qwen3-30B-A3B 32 GB200 -44.8 -> -47.2% (the update no longer shares its "
                 "GPUs, so it ends sooner). The calibration check's factor 1.23 -> 1.25 and its held-out runs 33.0% "
                 "uncalibrated either way, 46.5 -> 48.6% calibrated. Nothing was tuned: the order is the frameworks'.")),
    Change("2026-11-27", "model",
           "The training loop's passes on one pool run one after the other (a Scorer of SimConfig.after_update holds "
           "its pool's loop lock while it scores a step's whole sequences), where they had shared the GPUs side by side",
           24.2, 24.2, 199.0, 199.0,
           note=("Found after the entry above, in oppo-sim check's constructed verl log: timing_s/old_log_prob and "
                 "timing_s/ref each timed the two passes' common window, so each stage read the pair's time and their "
                 "sum twice it. verl's trainer calls the two in turn; NeMo RL's policy workers too. The step does not "
                 "move where the passes were compute-bound together; the per-timer figures do. Moved: verl Qwen3-30B-A3B "
                 "on 128 H20, step -20.1 -> -20.3%, its old_log_prob + ref stage 70.0 -> 35.0 s predicted against 49.6 "
                 "published (+41 -> -29%); no other row. The constructed check log (tests/fixtures/logs, made by the "
                 "simulator with known parameters) was written again under the rule.")),
    Change("2026-11-27", "model",
           "The host CPU (GPUSpec.host_op_scale, Hardware.host_scale): the host constants measured on x86 servers -- "
           "the seconds per eagerly issued op (vLLM's eager steps, Hugging Face generate, Megatron-Core's layers), the "
           "engine's per-step and a pass's or a sync's fixed overheads, the per-tensor work of a weight sync -- take "
           "longer on a Grace host by the measured ratio: GB200 (and GB300) x2.75, GH200 x2.46; x86 hosts x1; a value "
           "given (--host-op-us, a profile's measured one) is its host's own; a profile keeps the factor it was fitted with",
           24.2, 18.6, 199.0, 199.0,
           note=("Listed as unpriced in this page's MoE paragraph ('a slower host CPU (Grace)') and in "
                 "megatron_host.py. The ratio is one public measurement, not a fit: NVIDIA/TransformerEngine#2053 "
                 "(2025-08) timed the host side of one torch.nn.Linear forward (bf16, 8,192 x 2,048) at 37.08 us on "
                 "GB200 and 33.17 us on GH200 against 13.48 us on a DGX H100's Xeon 8480C. That it scales the "
                 "engine's per-step overhead (vLLM's Python scheduler) and the per-tensor sync work as well as the "
                 "op dispatch it measured is an assumption, decided before the table was run. Found while reading "
                 "why every GB200 row was predicted fast (mean error -30.7%, H100 -13.5%). Moved (GB200 rows only): "
                 "Llama-3.1-8B -20.6 -> +3.6% (generation 39 -> 59 s: 3 -> 8.3 ms a step over ~4,000 steps), "
                 "Qwen3-32B -5.7 -> +4.2%, Qwen3-30B-A3B -41.5 -> -12.0% (log-probs 29 -> 50 s, training 41 -> 63 s: "
                 "the MoE layers become host-bound), Qwen3-235B -40.4 -> -18.6%, DeepSeek-V3 -51.1 -> -30.2%; one step "
                 "off: Llama-3.1-8B -8.9 -> +7.1%, DeepSeek-V3 +1.2% (was -29.2), Qwen3-235B -43.2 -> -23.9%, "
                 "Qwen3-30B-A3B -47.2 -> -12.6%, Qwen3-32B -19.6 -> -17.9%. GB200 mean error -30.7 -> -9.9%. With a "
                 "published mean response 21.4 -> 14.6% (worst 51.1 -> 45.4%); without the contradicted runs 22.2 -> "
                 "18.2%; the calibration check's factor 1.25 -> 1.14, its held-out runs 33.0% uncalibrated either "
                 "way, 48.6 -> 34.8% calibrated. The GB200/H100 ratios moved the other way for the MoE recipes "
                 "(Qwen3-30B-A3B +13 -> -25%, Qwen3-235B -4 -> -30%, DeepSeek-V3 +12 -> -22%; Llama-3.1-8B +22 -> "
                 "-6%, Qwen3-32B -7 -> -15%): their H100 rows are still 34-45% fast, which the host does not explain.")),
    Change("2026-11-27", "model",
           "NeMo RL's colocated policy moves its optimizer state to the host and back every step with a blocking "
           ".to() per tensor into fresh pageable memory (move_optimizer, in offload_before_refit and "
           "prepare_for_training): SimConfig.optimizer_move / --optimizer-move pageable prices the Adam part of the "
           "sleep/wake state leg at the rates measured on an H200 the same day (1.33 GiB/s to the host, 6.34 GiB/s "
           "back; PAGEABLE_COPY), the rest of the state pinned as before; the NeMo RL reader and records set it "
           "where the policy is colocated",
           18.6, 17.9, 199.0, 199.0,
           note=("Listed as 'not modelled' in sleepwake.py since the moves stage was written; measured this session "
                 "(oppo-real profile --moves sleepwake, 0.5B's 7.4 GiB of fp32 state, three copies each way: "
                 "paper_figs/out/gpu_h200/gpu_moves*.csv). NeMo RL's megatron_policy_worker at v0.4 and v0.5 and its "
                 "DTensor workers move the optimizer state so; Megatron-Core's buffers free the gradients (no copy) and "
                 "copy the bf16 parameters into pinned memory, as priced. The rates are one x86 host's, applied to "
                 "every host: a Grace host's pageable copies (64 KB pages, memory read over NVLink-C2C) are not "
                 "measured and may well be faster -- after this change the GB200 on-policy rows read Llama-3.1-8B "
                 "+3.6 -> +14.7%, Qwen3-32B +4.2 -> +9.6%, DeepSeek-V3 -30.2 -> +13.2% (67 GB of optimizer state a GPU "
                 "each way), Qwen3-235B -18.6 -> -7.2%, Qwen3-30B-A3B -12.0 -> -3.8%. H100: Llama-3.1-8B v0.5 -2.9 -> "
                 "+2.3%, v0.4 -5.9 -> -0.9%; Qwen3-32B v0.5 -11.9 -> -9.1%, v0.4 -15.5 -> -12.9%; Qwen3-30B-A3B -33.9 "
                 "-> -29.2%; Qwen3-235B -42.6 -> -38.4%; DeepSeek-V3 -45.4 -> -25.1%. One-step-off rows unchanged "
                 "(nothing sleeps). GB200 mean error -9.9 -> -1.9%, H100 -13.5 -> -9.7%; the GB200/H100 ratios move "
                 "further from the published (Llama-3.1-8B -6 -> -11%, Qwen3-32B -15 -> -17%, Qwen3-30B-A3B -25 -> "
                 "-26%, Qwen3-235B -30 -> -34%, DeepSeek-V3 -22 -> -34%): the GB200 runs move more bytes a GPU over "
                 "half as many GPUs. With a published mean response 14.6 -> 13.1% (worst 45.4 -> 38.4%); without the "
                 "contradicted runs 18.2 -> 14.7%; the calibration check's factor 1.14 -> 1.04, its held-out runs "
                 "33.0% uncalibrated either way, 34.8 -> 32.5% calibrated. Nothing was tuned: the mechanism is NeMo "
                 "RL's code, the rates a measurement made before the table was run with them. Found afterwards, as a "
                 "check of the magnitude only (hardware not stated): NVIDIA-NeMo/RL#1404 (2025-10) timed one such "
                 "round trip of the optimizer state (logprob_inference_prep + training_prep, non-colocated) at 13 s a "
                 "step for Qwen3-30B and 10 s for Qwen3-235B; the simulator prices one at 9.7 s (Qwen3-30B-A3B, 32 "
                 "H100) and 19.4 s (Qwen3-235B, 128 H100); NVIDIA-NeMo/RL#2248 (2026-04) names the same per-tensor "
                 "pageable copies as 'quite expensive in co-located/syncRL cases'.")),
    Change("2026-11-27", "model",
           "LoRA (TrainerLayout.lora, --lora-rank / --lora-targets / --lora-sync, hw/models/lora.py): adapters on "
           "frozen weights -- gradients, Adam state and step and the gradient collectives of the adapters only, no "
           "frozen weight's gradient in a training pass, the weight sync merged or the adapters alone; verl's "
           "ref_in_actor (--reference-in-actor); read from verl, OpenRLHF and NeMo RL and written by plan --export",
           17.9, 17.9, 199.0, 199.0,
           note=("Found by running every GRPO/DAPO/PPO example of the three frameworks' newest snapshots through the "
                 "readers (verl b178a3c: 166 scripts, OpenRLHF 3c3be62: 18, NeMo RL 7ea279a: 187 recipes): verl's "
                 "LoRA tuning scripts (examples/tuning, 7B on 1 H100 ... 72B on 8) were refused by the memory check "
                 "with the full model's Adam state, and lora_rank was listed as 'not modelled'. No published run "
                 "uses LoRA: no row moved (the table's CSV is byte-identical).")),
    Change("2026-11-27", "model",
           "--full-logits charges what verl's actor holds without fused kernels -- bf16 logits for every token and a "
           "fp32 log-prob and log-sum-exp per token (flash-attn's cross-entropy, its gradient in place) -- and no "
           "longer a fp32 log-softmax over the response tokens; the verl reader maps model.use_fused_kernels (verl's "
           "default False) to --full-logits, and plan --export verl writes it",
           17.9, 17.9, 199.0, 199.0,
           note=("Found in the same sweep: verl's reader listed use_fused_kernels=False (15 scripts, and verl's default) "
                 "as 'not modelled', so verl jobs were sized with fused 512-token chunks. Mapped with the old charge, "
                 "the records of verl's own 7B runs on H20 (fully-async 32/64/128 GPUs, FSDP2 with sequence parallelism "
                 "4) were refused by 25 GiB; verl's logprobs_from_logits (flash-attn cross_entropy_loss with "
                 "inplace_backward, or a row-by-row log_softmax) keeps no fp32 copy of the logits. The records pin "
                 "their trainer settings and do not use --full-logits: no row moved.")),
    Change("2026-11-27", "model",
           "The output layer on the last pipeline stage: under Megatron with pp > 1 the busiest rank's FLOPs are its "
           "decoder layers' share plus the whole output layer on the last rank (TrainerLayout.stage_flops), in "
           "training and in forward passes, where the output layer's FLOPs were spread over the stages with the "
           "layers; and Megatron's account_for_embedding/loss_in_pipeline_split (--account-for-embedding-in-pipeline-"
           "split, --account-for-loss-in-pipeline-split: one decoder layer less on the first / last rank), read from "
           "verl's override_transformer_config and written by plan --export verl",
           17.9, 17.9, 199.0, 217.1,
           note=("Found with the trainer-only check against Megatron-Bridge's pre-training rows: the H100 GPT-OSS-120B "
                 "rows (PP4, the only pipelined GPT-OSS rows) read 1.27-1.31x the published throughput while B200 and "
                 "GB200 (PP1) were within 10%; the output layer, 201,088 x 2,880, is about 4.6 of a 9-layer stage's "
                 "decoder layers in FLOPs. After: 0.92-1.08x on H100, PP1 rows unchanged; Qwen3-235B on 256 GB200 "
                 "(PP8 x VP3, its 94 layers split with the embedding and loss counted) 0.69 -> 0.61x, DeepSeek-V3 "
                 "(an explicit pipeline layout, not read) 0.72 -> 0.68x. On the table: the NeMo RL rows with PP move "
                 "up 2.4-5.7 points (Llama-3.1-8B on 16 H100 +2.3 -> +4.9%, Qwen3-32B on 32 H100 -9.1 -> -6.0%, "
                 "its one-step-off row -0.7 -> +5.0%; Qwen3-235B and DeepSeek-V3 within 0.3), verl's Megatron 7B "
                 "(PP2) +199.0 -> +217.1% (a contradicted row), its DeepSeek-V3 (last stage 6 layers) -35.1 -> -33.0%. "
                 "GB200/H100 per GPU on NeMo RL's pairs: Llama-3.1-8B 1.82 -> 1.87x, Qwen3-32B 1.64 -> 1.69x "
                 "(published 2.04x and 1.97x). With a published mean response: median 13.1 -> 12.9%. Nothing tuned: "
                 "where Megatron-Core builds the output layer is its own.")),
    Change("2026-11-27", "comparison",
           "The contradiction check (published_runs_checks.implied_peak_pct) counts full recomputation where the "
           "record states it: the training stage's lower bound is 3 forwards and the decoder layers' recomputed forward "
           "(the output layer is not recomputed), where it was 3 forwards for every run",
           17.9, 17.9, 217.1, 217.1,
           note=("The check exists to say when a stage's published seconds cannot hold the assumed lengths' FLOPs; "
                 "a recomputed forward is executed work, and the records set recompute='full' only where the source's "
                 "script or recipe turns gradient checkpointing on (verl's 7B scripts set "
                 "enable_gradient_checkpointing=True). It moves the implied peak of every such row by a third: verl's "
                 "fully-async 7B rows on 32 and 64 H20 go 78.6 -> 102.9% and 79.5 -> 104.1% and are now marked as "
                 "contradicted (their assumed 2,500-token mean cannot be trained in the published update_actor time "
                 "at the GPUs' peak); the 128-GPU row reads 61.0%. No prediction moved; the summary without the "
                 "contradicted rows goes from 33 to 31 runs, median 14.7 -> 13.7%, worst 100.4 -> 38.1%: read that "
                 "as the check's change, not the model's.")),
    Change("2026-11-27", "record",
           "Megatron's even pipeline split must divide the layers (Megatron-Core asserts num_layers % (pp x vp) == 0; "
           "the simulator priced part layers a stage): the pre-training check's DeepSeek-V3 row (61 layers over PP4 x "
           "VP4) now carries the explicit layout its Megatron-Bridge recipe sets, as its ranks' layer counts (16, 16, "
           "16, 13: first_stage_layers 16, last_stage_layers 13), where it was priced as an even 15.25 a rank",
           17.9, 17.9, 217.1, 217.1,
           note=("Found when the new refusal stopped the check (the RL table's records all split whole: no prediction "
                 "there moved). DeepSeek-V3 on 256 GB200 0.68 -> 0.69x the published throughput; the layout is the "
                 "recipe's (recipes/deepseek/h100/deepseek_v3.py _get_deepseek_v3_pipeline_layout at 067f987d), not "
                 "chosen to fit.")),
)
"""The changes, oldest first."""
