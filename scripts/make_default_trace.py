#!/usr/bin/env python
"""Regenerate the shipped default trace ``oppo_sim/data/oppo-longtail-default.csv.gz`` deterministically.

The trace is self-generated (no public data in it): 4,000 RLHF-rollout-like requests from
:func:`oppo_sim.traces.synthetic.generate_longtail` (lognormal body + Pareto tail, p50 ~300, p99/p50 ~9,
cap 4096) with :func:`oppo_sim.traces.synthetic.apply_drift` so later training steps have somewhat longer
responses (x1.008 per step of 112 rows, ~x1.3 by the last step).

Usage::

    python scripts/make_default_trace.py            # rewrite the shipped file
    python scripts/make_default_trace.py --check    # exit 1 if the shipped file differs
    python scripts/make_default_trace.py --out x.csv.gz
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from oppo_sim.traces.synthetic import (  # noqa: E402
    DriftSpec,
    LongTailSpec,
    apply_drift,
    generate_longtail,
)
from oppo_sim.traces.trace import DEFAULT_TRACE, Trace  # noqa: E402

ROWS = 4000
SEED = 0
SPEC = LongTailSpec(
    prompt_median=200, prompt_sigma=0.6,
    body_median=255, body_sigma=0.55,
    tail_fraction=0.05, tail_scale=1000, tail_alpha=1.6,
    cap=4096, min_response=1,
)
DRIFT = DriftSpec(growth_per_step=0.008, batch=112, cap=4096)
SOURCE = f"synthetic:oppo_sim.traces.synthetic generate_longtail+apply_drift seed={SEED}"
OUTPUT = REPO / "oppo_sim" / "data" / f"{DEFAULT_TRACE}.csv.gz"


def build_default_trace() -> Trace:
    """The default trace, in memory."""
    return apply_drift(generate_longtail(SPEC, ROWS, seed=SEED, name=DEFAULT_TRACE), DRIFT)


def to_csv_gz(trace: Trace) -> bytes:
    """CSV (prompt_tokens,response_tokens,step,source), gzip with a fixed header: same bytes every run."""
    lines = ["prompt_tokens,response_tokens,step,source"]
    lines += [f"{p},{r},{s},{SOURCE}" for p, r, s in zip(trace.prompt_tokens, trace.response_tokens, trace.step)]
    return gzip.compress(("\n".join(lines) + "\n").encode("ascii"), compresslevel=9, mtime=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUTPUT, help=f"output file (default {OUTPUT})")
    parser.add_argument("--check", action="store_true", help="only compare with the existing file")
    args = parser.parse_args(argv)
    data = to_csv_gz(build_default_trace())
    if args.check:
        same = args.out.is_file() and gzip.decompress(args.out.read_bytes()) == gzip.decompress(data)
        print(f"{args.out}: {'up to date' if same else 'DIFFERS from the generator'}")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data):,} bytes, {ROWS} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
