"""MkDocs hooks: pages and figures that live elsewhere in the repository join the site without copies.

``ARCHITECTURE.md`` becomes ``architecture.md`` and ``traces/README.md`` becomes ``traces.md``; every
figure in ``paper_figs/out`` is served as ``figures/NAME.png``. Links to them are then checked by
``mkdocs build --strict`` like any other.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
PAGES = {"architecture.md": ROOT / "ARCHITECTURE.md", "traces.md": ROOT / "traces" / "README.md"}


def on_files(files, config):
    for uri, path in PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    for png in sorted((ROOT / "paper_figs" / "out").glob("*.png")):
        files.append(File.generated(config, f"figures/{png.name}", abs_src_path=str(png)))
    return files
