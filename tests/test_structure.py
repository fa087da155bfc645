"""The package's shape, checked: layers import only downwards and never in a cycle, the real executor
uses no private helper of the simulator and does not need simpy, and every module and function stays
small enough to read (modules <= 400 lines, functions <= 60 lines)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("oppo_sim", "oppo_real")
SIM_LAYERS = ("core", "hw", "traces", "engine", "pipeline", "explore")  # lowest first
"""A module of ``oppo_sim/<layer>/`` imports only from its own layer and the layers before it."""


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = f
    return out


def imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module imported, names taken from it) for every oppo import in ``path``, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            out.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names if a.name.split(".")[0] in PACKAGES]
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def graph() -> dict[str, set[str]]:
    known = modules()
    g: dict[str, set[str]] = {m: set() for m in known}
    for m, f in known.items():
        for target, names in imports(f):
            for full in [f"{target}.{n}" for n in names] or [target]:
                dst = _resolve(full, known)
                if dst and dst != m and not known[dst].name == "__init__.py":
                    g[m].add(dst)
    return g


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_simulator_layers_import_downwards():
    for m, deps in graph().items():
        parts = m.split(".")
        if parts[0] != "oppo_sim" or len(parts) < 3 or parts[1] not in SIM_LAYERS:
            continue
        mine = SIM_LAYERS.index(parts[1])
        for d in deps:
            dp = d.split(".")
            assert dp[0] == "oppo_sim", f"{m} imports {d}: the simulator must not depend on the real executor"
            if len(dp) >= 3 and dp[1] in SIM_LAYERS:
                assert SIM_LAYERS.index(dp[1]) <= mine, f"{m} ({parts[1]}) imports {d} ({dp[1]}): a higher layer"


def test_real_executor_uses_no_private_simulator_name():
    for m, f in modules().items():
        if not m.startswith("oppo_real"):
            continue
        for target, names in imports(f):
            if target.startswith("oppo_sim"):
                private = [n for n in names if n.startswith("_")] + [p for p in target.split(".") if p.startswith("_")]
                assert not private, f"{m} imports private {private} from {target}"


def test_real_executor_does_not_need_simpy():
    code = ("import sys; import oppo_real.executor.runner, oppo_real.executor.real_driver, oppo_real.cli, "
            "oppo_real.checkpoints.save_restore, oppo_real.validation.mirror; "
            "assert 'simpy' not in sys.modules, 'simpy imported'")
    # the validation mirror runs the simulator (it needs simpy); the executor's own modules must not
    code = code.replace(", oppo_real.validation.mirror", "")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _sizes():
    for f in modules().values():
        lines = f.read_text().splitlines()
        yield f, len(lines), [
            (n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]


@pytest.mark.parametrize("limit", [400])
def test_no_module_over_400_lines(limit):
    big = [f"{f.relative_to(ROOT)} ({n})" for f, n, _ in _sizes() if n > limit]
    assert not big, "modules over 400 lines: " + ", ".join(big)


def test_no_function_over_60_lines():
    big = [f"{f.relative_to(ROOT)}:{name} ({n})" for f, _, fns in _sizes() for name, n in fns if n > 60]
    assert not big, "functions over 60 lines: " + ", ".join(big)


REAL_ROOT_MODULES = {"__init__.py", "cli.py", "config.py", "console.py"}
"""What sits at ``oppo_real/``'s root: the command line, the run's configuration and the console. Everything
else lives in a sub-package named for its job (executor, checkpoints, devices, profiling, validation, ...)."""

SHARED_BASENAMES = {
    "__init__.py": "every package has one",
    "cli.py": "each package's command line (oppo-sim, oppo-real)",
    "config.py": "each side's run configuration (oppo_sim/pipeline/config.py, oppo_real/config.py)",
    "protocol.py": "the simulator's own two protocols (core: actions/events; engine: the engine interface)",
}
"""Module basenames that may repeat across ``oppo_sim`` and ``oppo_real``, and why. Any other name is unique,
so a module is found (and a traceback read) by its name alone."""


def test_real_executor_root_holds_only_the_entry_modules():
    root = sorted(f.name for f in (ROOT / "oppo_real").glob("*.py"))
    assert set(root) == REAL_ROOT_MODULES, f"oppo_real/ root: {root}; put the others in a sub-package"


def test_module_basenames_do_not_collide():
    seen: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            seen.setdefault(f.name, []).append(str(f.relative_to(ROOT)))
    clash = {n: p for n, p in seen.items() if len(p) > 1 and n not in SHARED_BASENAMES}
    assert not clash, f"module basenames used twice (rename one, or allow it in SHARED_BASENAMES): {clash}"
