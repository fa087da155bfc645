"""Predicted vs measured on this machine: the parity plot and the timelines of the same steps.

Runs the whole loop (`oppo-real validate`): profile the engines, fit the cost model, simulate and run
baseline / intra / inter / oppo for real three times each (interleaved), compare. Writes ``out/parity.png``,
``out/parity.csv`` (the validation table), ``out/parity_components.csv`` (the error per step component) and
``out/pred_vs_meas_timelines.png``. Needs the real-engine stack
(`make setup-real`); run it on an otherwise idle machine — the measured side is a wall clock.

    python paper_figs/parity.py            # 12 steps x 3 runs per policy, full profile grid (~12 min on 2 cores)
    python paper_figs/parity.py --quick    # 4 steps, quick profile, two policies
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "out"))
    a = ap.parse_args(argv)
    from oppo_real.cli import main as real_main

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        args = ["validate", "--out", tmp, "--steps", "4" if a.quick else "12", "--repeat", "1" if a.quick else "3"]
        if a.quick:
            args += ["--quick-profile", "--policies", "baseline,oppo", "--warmup", "1"]
        code = real_main(args)
        if code:
            return code
        shutil.copy(Path(tmp) / "parity.png", out / "parity.png")
        shutil.copy(Path(tmp) / "validation.csv", out / "parity.csv")
        shutil.copy(Path(tmp) / "components.csv", out / "parity_components.csv")
        shutil.copy(Path(tmp) / "timelines.png", out / "pred_vs_meas_timelines.png")
    print(f"wrote {out}/parity.png, parity.csv, parity_components.csv, pred_vs_meas_timelines.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
