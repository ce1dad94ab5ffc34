"""Write the analysis notebooks (outputs stripped) from the cell sources in nb_cells.py.

    .venv/bin/python notebooks/build_notebooks.py          # rewrite notebooks/*.ipynb
    .venv/bin/python notebooks/build_notebooks.py --check  # fail if a notebook is out of date
    .venv/bin/python notebooks/build_notebooks.py --run    # execute all (full size), figures into
                                                           # notebooks/figures, README's into docs/figures

The .ipynb files are generated so that reviews read plain Python; edit nb_cells.py, not them.
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from nb_cells import NOTEBOOKS, SETUP  # noqa: E402

# the figure of each notebook that README.md shows (copied to docs/figures by --run)
README_FIGURES = ("00_quickstart_cdf", "01_shift_frontier", "02_sidp_kv_capacity", "03_seesaw_ratio",
                  "04_flying_bursty", "05_calibration_error_by_op")
KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """A notebook of (kind, source) cells; 'md' cells are markdown, the rest code. The shared
    setup cell goes after the first (title) cell. Cell ids are stable so rebuilds diff cleanly."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNEL
    nb.metadata["language_info"] = {"name": "python"}
    seq = cells[:1] + [("code", SETUP)] + cells[1:]
    for i, (kind, src) in enumerate(seq):
        src = src.strip("\n")
        cell = nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
        cell["id"] = f"{name[:2]}-{i:02d}"
        nb.cells.append(cell)
    return nb


def run_all(figures: Path) -> None:
    """Execute every notebook (outputs not kept), then copy README_FIGURES to docs/figures."""
    import os
    import shutil

    import nbclient

    os.environ["NOTEBOOK_FIGURES"] = str(figures.resolve())
    for name in NOTEBOOKS:
        nb = nbformat.read(HERE / f"{name}.ipynb", as_version=4)
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=600,
                                resources={"metadata": {"path": str(HERE)}}).execute()
        print(f"ran {name}")
    docs = HERE.parent / "docs" / "figures"
    docs.mkdir(parents=True, exist_ok=True)
    for fig in README_FIGURES:
        if (figures / f"{fig}.png").is_file():
            shutil.copy(figures / f"{fig}.png", docs / f"{fig}.png")


def main(argv=None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    check = "--check" in argv
    stale = []
    for name, cells in NOTEBOOKS.items():
        path = HERE / f"{name}.ipynb"
        text = nbformat.writes(build(name, cells)) + "\n"
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if "--run" in argv:
        run_all(HERE / "figures")
    if stale:
        print(f"out of date (run notebooks/build_notebooks.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
