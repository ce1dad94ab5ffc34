"""Shared test helpers: where ../shared lies (real data), skipping cleanly when it is absent."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel import native

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path | None:
    """$PSIM_SHARED, else ../shared beside the repo; None when absent."""
    cand = [Path(os.environ["PSIM_SHARED"])] if os.environ.get("PSIM_SHARED") else []
    cand.append(REPO.parent / "shared")
    for c in cand:
        if (c / "data").is_dir():
            return c
    return None


def pytest_pyfunc_call(pyfuncitem):
    """A test marked `sources` (it patches engine functions, or traces the engine's Python lines) runs in a
    pytest of its own under PSIM_NATIVE=0 where the engine core runs compiled here (perfmodel/native.py):
    compiled modules call each other directly, in C, so a patch or sys.settrace would not see them."""
    if pyfuncitem.get_closest_marker("sources") is None or not native.runs_compiled():
        return None
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", pyfuncitem.nodeid],
                       cwd=REPO, env={**os.environ, "PSIM_NATIVE": "0"}, capture_output=True, text=True)
    assert r.returncode == 0, f"{pyfuncitem.nodeid} under PSIM_NATIVE=0:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
    return True


def pytest_xdist_auto_num_workers(config):
    """pytest runs with `-n auto` (pyproject's addopts): one worker per core this process may use, at most 4.
    Each worker imports torch and the kernels' tests start 2-4 ranks of their own, so more workers mostly add memory."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(4, cores))


@pytest.fixture
def shared():
    """Path of ../shared, or skip: these tests read real published data that is not in the repo."""
    d = shared_dir()
    if d is None:
        pytest.skip("../shared/data is absent (real traces and H100 tables live there, not in the repo)")
    return d


@pytest.fixture(scope="session")
def derived_h200(tmp_path_factory):
    """An H200 profile derived from the bundled H100 one (`calibrate --derive-from`): what the bundled H200
    profile was until it was fitted on H200's own tables; the transfer rule is still shipped and tested."""
    from perfmodel.calibration.calibrate import derive, dumps
    from perfmodel.calibration.profile import PROFILE_DIR, load_profile
    from perfmodel.hardware import load_hardware
    out = tmp_path_factory.mktemp("derived") / "h200_derived.json"
    d = derive(PROFILE_DIR / "h100_sxm.json", load_hardware("h100_sxm"), load_hardware("h200_sxm"),
               "h200_derived", out.parent)
    out.write_text(dumps(d) + "\n")
    return load_profile(out)
