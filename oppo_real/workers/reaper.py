"""Nothing outlives the run: a watchdog for the processes a driver starts (Ray's GCS, raylet, workers,
and the dashboard / runtime-env agents the raylet spawns).

``start_reaper()`` launches this module as a detached process (its own session, so a SIGKILL of the
driver does not take it down). While the driver lives, it snapshots the driver's descendants every
``interval`` seconds; once the driver is gone it terminates every process of the last snapshot that
still runs (matched by pid *and* start time, so a reused pid is never hit), then exits.
"""

from __future__ import annotations

import importlib.util

import os
import subprocess
import sys
import time


def _snapshot(driver, me: int) -> dict[int, float]:
    import psutil

    out = {}
    try:
        for p in driver.children(recursive=True):
            if p.pid != me:
                try:
                    out[p.pid] = p.create_time()
                except psutil.Error:
                    pass
    except psutil.Error:
        pass
    return out


def _kill(procs: dict[int, float], grace: float = 3.0) -> None:
    import psutil

    alive = []
    for pid, created in procs.items():
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 1e-3:
                p.terminate()
                alive.append(p)
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(alive, timeout=grace)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass


def watch(driver_pid: int, interval: float = 1.0) -> None:
    import psutil

    try:
        driver = psutil.Process(driver_pid)
    except psutil.Error:
        return
    me = os.getpid()
    last: dict[int, float] = {}
    while driver.is_running() and driver.status() != psutil.STATUS_ZOMBIE:
        last = _snapshot(driver, me) or last
        time.sleep(interval)
    _kill(last)


def start_reaper() -> subprocess.Popen | None:
    """Watch this process's descendants from a detached process; None if psutil is missing."""
    if importlib.util.find_spec("psutil") is None:  # pragma: no cover - Ray installs psutil
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "oppo_real.workers.reaper", str(os.getpid())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


if __name__ == "__main__":  # pragma: no cover - run by start_reaper
    watch(int(sys.argv[1]))
