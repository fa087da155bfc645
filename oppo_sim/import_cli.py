"""``oppo-sim import``: a verl rollout dump or a run's per-step log -> a trace file.

``oppo-sim import DUMP_DIR --out t.csv.gz [--tokenizer DIR | --chars-per-token X]`` reads verl's
``trainer.rollout_data_dir`` (:mod:`oppo_sim.traces.importers`); ``oppo-sim import metrics.csv --out
t.csv.gz [--prompts-per-step N] [--max-response L] [--seed S] [--run NAME]`` turns a run's log -- a
wandb/TensorBoard export, verl's or NeMo RL's console output, a folder of TensorBoard scalar CSVs
(:mod:`oppo_sim.traces.runlog`) -- into a per-step synthetic trace (:mod:`oppo_sim.traces.metrics_import`).
The source's kind is told by ``--format`` or guessed (a ``.jsonl`` or a directory of them: a verl dump;
any other file, or a directory of CSVs: a log). The trace is
written with a ``source`` column, its assumptions beside it (``<out>.assumptions.txt``) and printed;
``oppo-sim run --trace OUT`` replays it step by step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from oppo_sim.cliargs import nonneg_int, positive

FORMATS = ("auto", "verl", "metrics")
_VERL_ONLY = ("tokenizer", "chars_per_token")
_METRICS_ONLY = ("prompts_per_step", "max_response", "run")


def add_import_parser(sub) -> None:
    from oppo_sim.traces.importers import DEFAULT_CHARS_PER_TOKEN, WRITE_ENDINGS
    from oppo_sim.traces.metrics_import import DEFAULT_PROMPTS_PER_STEP

    p = sub.add_parser("import", help="a verl rollout dump or a run's log (console, wandb/TensorBoard CSV) -> a trace file")
    p.add_argument("source", help="verl dump: trainer.rollout_data_dir (or one {step}.jsonl); metrics: a run's log -- "
                                  "a CSV export, a console log, a folder of TensorBoard scalar CSVs (required)")
    p.add_argument("--out", required=True, help=f"trace file to write, ending in {', '.join(WRITE_ENDINGS)} (required)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="what SOURCE is (default %(default)s: a .jsonl or a directory of them is a verl dump, any other "
                        "file or a directory of CSVs a run's metrics log)")
    v = p.add_argument_group("verl rollout dump")
    v.add_argument("--tokenizer", default=None, metavar="DIR",
                   help="local Hugging Face tokenizer directory for exact token counts (default: none, estimate)")
    v.add_argument("--chars-per-token", type=positive(float), default=None, metavar="X",
                   help=f"estimate tokens as characters / X without a tokenizer (default {DEFAULT_CHARS_PER_TOKEN:g})")
    m = p.add_argument_group("a run's metrics log")
    m.add_argument("--prompts-per-step", type=positive(), default=None, metavar="N",
                   help=f"rows per step, the batch's responses (default {DEFAULT_PROMPTS_PER_STEP})")
    m.add_argument("--max-response", type=positive(), default=None, metavar="L",
                   help="the response cap clipped rows sit at (default: the largest response_length/max logged)")
    m.add_argument("--run", default=None, metavar="NAME",
                   help="the run of a wandb export with several ('NAME - metric' columns) (default: the only one)")
    m.add_argument("--seed", type=nonneg_int, default=0, help="seed of the synthetic lengths (default %(default)s)")
    p.set_defaults(func=cmd_import)


def _kind(a: argparse.Namespace) -> str:
    if a.format != "auto":
        return a.format
    src = Path(a.source)
    if src.is_dir():
        has_csv = any(src.glob("*.csv")) or any(src.glob("*.csv.gz"))
        return "metrics" if has_csv and not any(src.glob("*.jsonl")) else "verl"
    return "verl" if src.name.endswith(".jsonl") or not src.exists() else "metrics"


def cmd_import(a: argparse.Namespace) -> int:
    from oppo_sim.core.errors import ConfigError
    from oppo_sim.traces.importers import read_verl_dump, token_counter, write_trace
    from oppo_sim.traces.metrics_import import metrics_to_trace

    kind = _kind(a)
    other = _METRICS_ONLY if kind == "verl" else _VERL_ONLY
    given = [k for k in other if getattr(a, k) is not None]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ConfigError(f"{flags}: not used when importing a {kind} source ({a.source})")
    if kind == "verl":
        imported = read_verl_dump(a.source, token_counter(a.tokenizer, a.chars_per_token))
    else:
        imported = metrics_to_trace(a.source, a.prompts_per_step, a.max_response, a.seed, a.run)
    out, side = write_trace(imported, a.out)
    t = imported.trace
    d = t.describe()
    steps = len(set(t.step.tolist())) if t.step is not None else 0
    print(f"trace {out}: {len(t)} rows, {steps} steps; response mean {d['resp_mean']:.1f}, p50 {d['resp_p50']:.0f}, "
          f"max {d['resp_max']:.0f}; prompt mean {d['prompt_mean']:.1f}")
    print(f"source: {imported.source}")
    for note in imported.notes:
        print(f"- {note}")
    print(f"assumptions written to {side}; replay with: oppo-sim run --trace {out}")
    return 0
