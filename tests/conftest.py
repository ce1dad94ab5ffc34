"""Shared test helpers: where ../shared lies (real data), skipping cleanly when it is absent."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path | None:
    """$PSIM_SHARED, else ../shared beside the repo; None when absent."""
    cand = [Path(os.environ["PSIM_SHARED"])] if os.environ.get("PSIM_SHARED") else []
    cand.append(REPO.parent / "shared")
    for c in cand:
        if (c / "data").is_dir():
            return c
    return None


@pytest.fixture
def shared():
    """Path of ../shared, or skip: these tests read real published data that is not in the repo."""
    d = shared_dir()
    if d is None:
        pytest.skip("../shared/data is absent (real traces and H100 tables live there, not in the repo)")
    return d
