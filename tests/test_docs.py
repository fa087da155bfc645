"""The docs say what is true: every block marked runnable runs, the generated parts (CLI reference, result
tables) match the code and the committed outputs, the site builds with no broken link, and the names the
package says it exports exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "traces" / "README.md",
             ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = re.compile(r"<!-- runnable -->\n```(?P<lang>python|bash)\n(?P<code>.*?)```", re.S)


def runnable_blocks() -> list[tuple[str, str, str]]:
    out = []
    for path in DOC_FILES:
        text = path.read_text()
        for i, m in enumerate(RUNNABLE.finditer(text)):
            out.append((f"{path.relative_to(ROOT).as_posix()}#{i + 1}", m.group("lang"), m.group("code")))
    return out


BLOCKS = runnable_blocks()


def test_the_docs_have_runnable_blocks():
    where = {name.split("#")[0] for name, _, _ in BLOCKS}
    assert {"README.md", "docs/simulator.md", "traces/README.md"} <= where, where


@pytest.mark.parametrize("name,lang,code", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_runnable_block_runs(name, lang, code, tmp_path):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{name} failed ({lang}):\n{code}\n--- stderr ---\n{p.stderr[-3000:]}"


def test_generated_docs_are_up_to_date():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_docs.py"), "--check"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_stale_generated_block_is_caught():
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_docs import render_blocks

    page = "intro\n<!-- generated: t -->\nold\n<!-- /generated -->\nend\n"
    assert render_blocks(page, {"t": lambda: "new"}) == "intro\n<!-- generated: t -->\nnew\n<!-- /generated -->\nend\n"
    with pytest.raises(SystemExit, match="unknown generated block"):
        render_blocks(page, {})


def test_mkdocs_build_strict(tmp_path):
    import importlib.util

    assert importlib.util.find_spec("material"), "the site's theme is missing: pip install -e '.[test]' (mkdocs-material)"
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "site" / "cli" / "index.html").exists()
    assert (tmp_path / "site" / "figures" / "parity.png").exists()


def test_every_lazy_export_of_the_package_resolves():
    import oppo_sim

    for name in oppo_sim.__all__:
        assert getattr(oppo_sim, name) is not None, name
    assert oppo_sim.load_trace("oppo-longtail-default").describe()["rows"] > 0
