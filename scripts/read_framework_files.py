"""Run every verl launch script, OpenRLHF command line and NeMo RL recipe under a directory through oppo-sim's
readers, one simulated step each: which read, which are refused and why.

    python scripts/read_framework_files.py --verl ~/src/verl --openrlhf ~/src/OpenRLHF --nemo-rl ~/src/RL
    python scripts/read_framework_files.py --verl my_jobs/ --gpu h100-sxm --out out/my_jobs.csv

Each file is run as ``oppo-sim run --from-<framework> FILE --steps 1 --policy baseline`` would run it (``--gpu``
where given; a file that does not name its GPU gets oppo-sim's default, as the command says). Scripts are the
``*.sh`` files (not under ``docker``, ``docs`` or ``tests``); NeMo RL recipes the ``*.yaml`` files whose name
holds ``grpo`` or ``dapo``. Prints a table of the counts, then every refusal with its one-line reason; writes every
file's row (framework, file, status, seconds, the simulated step's seconds, the reason) to ``--out`` as CSV.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from oppo_sim.cli import main as oppo_sim  # noqa: E402

SKIP = re.compile(r"(^|/)(docker|docs?|tests?)(/|$)")


def files_of(framework: str, root: Path) -> list[Path]:
    """The files under ``root`` a framework's reader takes (module notes), sorted."""
    if framework == "nemo-rl":
        found = [p for p in root.rglob("*.yaml") if re.search(r"grpo|dapo", p.name, re.I)]
    else:
        found = list(root.rglob("*.sh"))
    return sorted(p for p in found if not SKIP.search(p.relative_to(root).as_posix()))


def read_one(framework: str, path: Path, gpu: str | None) -> dict:
    """One file run for one step: status ``ok`` (with the step's seconds) or ``refused`` (with oppo-sim's reason)."""
    crash = ""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary.json"
        argv = ["run", f"--from-{framework}", str(path), "--steps", "1", "--policy", "baseline", "--json", str(out)]
        argv += ["--gpu", gpu] if gpu else []
        err = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                rc = oppo_sim(argv)
            except SystemExit as e:
                rc = e.code
            except Exception as e:  # noqa: BLE001 - a reader's bug: recorded, and the sweep goes on
                rc, crash = "crashed", f"{type(e).__name__}: {e}"
        seconds = time.perf_counter() - t
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        reason = lines[-1].removeprefix("oppo-sim: error: ").removeprefix("oppo-sim run: error: ") if lines else ""
        reason = crash if rc == "crashed" else reason
        step = json.loads(out.read_text()).get("step_time_s") if out.is_file() else None
    status = "ok" if rc in (0, None) else "crashed" if rc == "crashed" else "refused"
    return {"framework": framework, "file": str(path), "status": status,
            "seconds": round(seconds, 2), "step_time_s": step, "reason": "" if rc in (0, None) else reason}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for fw in ("verl", "openrlhf", "nemo-rl"):
        ap.add_argument(f"--{fw}", type=Path, default=None, metavar="DIR", help=f"a directory of {fw} files (default: none)")
    ap.add_argument("--gpu", default=None, help="the GPU every file runs on (default: oppo-sim's, where a file names none)")
    ap.add_argument("--out", type=Path, default=Path("out/framework_files.csv"), help="the CSV (default %(default)s)")
    a = ap.parse_args(argv)
    jobs = [(fw, p) for fw in ("verl", "openrlhf", "nemo-rl") if getattr(a, fw.replace("-", "_")) is not None
            for p in files_of(fw, getattr(a, fw.replace("-", "_")))]
    if not jobs:
        ap.error("give at least one of --verl, --openrlhf, --nemo-rl with a directory holding its files")
    from tqdm.auto import tqdm

    rows = [read_one(fw, p, a.gpu) for fw, p in tqdm(jobs, desc="files", unit="file")]
    df = pd.DataFrame(rows)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out, index=False)
    print(df.groupby(["framework", "status"]).size().unstack(fill_value=0).to_string(), "\n")
    refused = df[df.status != "ok"]
    for r in refused.itertuples():
        print(f"{r.framework:9s} {r.file} ({r.status})\n          {r.reason[:300]}")
    print(f"\n{len(df)} files, {len(refused)} refused or crashed; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
