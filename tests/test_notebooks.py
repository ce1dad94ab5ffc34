"""notebooks/ (issue #9): every notebook runs cleanly with NOTEBOOK_QUICK=1 and its last cell's
assertions hold; the committed .ipynb files are the generator's output, with no outputs."""
import json
import sys
import tempfile
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def test_notebooks_are_generated_and_stripped():
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        import build_notebooks
    finally:
        sys.path.remove(str(NOTEBOOKS))
    assert NAMES == sorted(build_notebooks.NOTEBOOKS), "a notebook without a generator entry, or missing"
    assert build_notebooks.main(["--check"]) == 0
    for name in NAMES:
        cells = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())["cells"]
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in cells if c["cell_type"] == "code")


@pytest.mark.slow  # a Jupyter kernel per notebook: 3-9 s each, ~30 s together
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="notebook deps: pip install '.[dev]'")
    nbclient = pytest.importorskip("nbclient", reason="notebook deps: pip install '.[dev]'")
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        pytest.skip("no python3 kernelspec (pip install ipykernel installs one into the venv)")
    monkeypatch.setenv("NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("NOTEBOOK_FIGURES", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # the kernel's tempfile dir: what a notebook leaves there, it leaked. Short, beside the system's, not under
    # tmp_path: multiprocessing's forkserver binds a Unix socket under TMPDIR (pymp-XXXXXXXX/listener-XXXXXXXX), and
    # a socket path holds at most 107 bytes; under /tmp/pytest-of-root/pytest-101/popen-gw1/test_notebook_runs_06_...
    # notebook 06's kernels.serve run failed with "AF_UNIX path too long" once pytest's run counter reached 3 digits
    with tempfile.TemporaryDirectory(prefix="nb") as tmp:
        scratch = Path(tmp)
        monkeypatch.setenv("TMPDIR", str(scratch))
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        # the kernelspec's argv[0] "python" is replaced by this interpreter (jupyter_client), so the
        # notebook runs in the same environment as the tests
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=120,
                                resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        assert list(tmp_path.glob(f"{name}_*.png")) or name == "05_calibration"
        # regression: notebook 06 kept a tempfile.mkdtemp run directory per run (59 under /tmp by 2026-11-26)
        assert not list(scratch.glob(f"{name}_*")), f"{name} left its scratch files: {sorted(scratch.iterdir())}"
