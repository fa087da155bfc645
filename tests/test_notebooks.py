"""Execute every notebook top to bottom at small size (OPPO_NB_SMALL=1)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch, tmp_path):
    if path.name.startswith("02_") or path.name.startswith("03_"):
        pytest.importorskip("torch", reason="the real-run notebooks need the real-engine stack (scripts/install_real.sh)")
    monkeypatch.setenv("OPPO_NB_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    # every cell that draws shows its figure as a picture (not "<Figure size ...>"), as JupyterLab would
    plot_cells = [c for c in nb.cells if c.cell_type == "code" and re.search(r"\bplot(s\.\w+|_\w+)\(", c.source)]
    assert plot_cells
    for c in plot_cells:
        pngs = [o for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
        assert pngs, f"{path.name}: cell {c.source[:60]!r} shows no image/png"
