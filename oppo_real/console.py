"""A quiet, informative console for the ``oppo-real`` commands.

A command prints its configuration, one line per step and its results; the engines' own chatter (vLLM's
and transformers' logs and warnings, Ray's banners, C++ messages) goes to ``<out>/engines.log``:
while a :class:`Console` is open, file descriptors 1 and 2 — which the engines and every process they
start (Ray's raylet and workers) write to — point at that file, and the command writes to a copy of
the terminal taken before. ``verbose=True`` leaves everything on the terminal.

    with Console(out_dir, verbose) as con:
        con.print("oppo-real: ...")
        bar = con.progress(total=steps, unit="step")
        ... bar.line("step 0 ...") ...
        bar.close()
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

LOG_NAME = "engines.log"


class Console:
    """See the module docstring. ``log`` is the engines' log file (None when verbose)."""

    def __init__(self, out_dir: str | Path | None, verbose: bool = False, log_name: str = LOG_NAME) -> None:
        self.verbose = verbose or out_dir is None
        self.log: Path | None = None if self.verbose else Path(out_dir) / log_name
        self.stream = sys.stdout
        self._saved: tuple[int, int] | None = None
        self._own: io.TextIOBase | None = None

    def __enter__(self) -> "Console":
        if self.log is None:
            return self
        self.log.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            real_stdout = sys.stdout.fileno() == 1
        except (AttributeError, OSError, io.UnsupportedOperation):  # captured (pytest, notebooks): keep that object
            real_stdout = False
        self._saved = os.dup(1), os.dup(2)
        if real_stdout:
            self._own = os.fdopen(os.dup(self._saved[0]), "w", buffering=1)
            self.stream = self._own
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        os.close(self._saved[0])
        os.close(self._saved[1])
        self._saved = None
        if self._own is not None:
            self._own.close()
            self._own = None
        self.stream = sys.stdout

    def print(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def progress(self, total: int, unit: str = "step", desc: str = "") -> "Progress":
        return Progress(self, total, unit, desc)

    def where_logs(self) -> str:
        return f"engine logs: {self.log}" if self.log is not None else ""


class Progress:
    """One line per step (kept), and a tqdm bar under them on a terminal; plain lines elsewhere."""

    def __init__(self, con: Console, total: int, unit: str, desc: str) -> None:
        self.con = con
        self.bar = None
        tty = bool(getattr(con.stream, "isatty", lambda: False)())
        if tty:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit=unit, desc=desc or None, file=con.stream, leave=False,
                                dynamic_ncols=True, disable=False)
            except ImportError:  # pragma: no cover - tqdm ships with transformers
                self.bar = None

    def line(self, text: str, advance: int = 1) -> None:
        if self.bar is None:
            self.con.print(text)
            return
        self.bar.write(text, file=self.con.stream)
        self.bar.update(advance)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def quiet_env(verbose: bool = False) -> None:
    """Library settings for a readable console: no library progress bars; vLLM logs at WARNING unless
    ``verbose`` (set before the libraries are imported; values already in the environment win)."""
    env = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "RAY_DEDUP_LOGS": "1"}
    if not verbose:
        env.update({"VLLM_LOGGING_LEVEL": "WARNING", "PYTHONWARNINGS": "ignore", "TQDM_DISABLE": "1"})
    for k, v in env.items():
        os.environ.setdefault(k, v)
