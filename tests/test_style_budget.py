"""STYLE.md item 12: the size budget, checked in CI. A file over 400 lines fails."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("perfmodel", "simulator", "kernels", "microbench", "benchmarks", "tests")
MAX_LINES = 400


def test_no_python_file_over_budget():
    big = []
    for pkg in PACKAGES:
        for f in (REPO / pkg).rglob("*.py"):
            n = sum(1 for _ in f.open())
            if n > MAX_LINES:
                big.append(f"{f.relative_to(REPO)} ({n} lines)")
    assert not big, f"files over {MAX_LINES} lines (split them along their ideas): {', '.join(big)}"
