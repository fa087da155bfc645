"""Write the exploration notebooks from code cells kept here (so diffs stay readable).

    python scripts/make_notebooks.py      # rewrites notebooks/01_explore_policies.ipynb

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
        "import os\n"
        "import pandas as pd\n"
        "from oppo_sim.config import SimConfig\n"
        "from oppo_sim.simulate import simulate\n"
        "from oppo_sim.trace import load_trace, available_traces, DEFAULT_TRACE\n"
        "from oppo_sim.sweep import SweepGrid, run_sweep\n"
        "from oppo_sim import plots\n"
        "SMALL = os.environ.get('OPPO_NB_SMALL') == '1'\n"
        "STEPS = 4 if SMALL else 40\n"
        "pd.set_option('display.width', 160)\n"
        "available_traces()"
    ),
    new_markdown_cell(
        "## Load a trace\nThe public Azure conversation trace if the search path finds it (`OPPO_TRACES`, "
        "`./traces`, `../shared/traces`), else the trace the project ships."
    ),
    new_code_cell(
        "try:\n"
        "    trace = load_trace('azure2023_conv')\n"
        "except Exception as e:  # not on this machine: fall back to the shipped default\n"
        "    print('azure2023_conv not found:', e)\n"
        "    trace = load_trace(DEFAULT_TRACE)\n"
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


def write(name: str, cells) -> Path:
    nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path = ROOT / "notebooks" / name
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, path)
    return path


if __name__ == "__main__":
    print(write("01_explore_policies.ipynb", EXPLORE))
