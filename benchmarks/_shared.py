"""Where the benchmarks find ../shared (the real traces, never copied into the repo): $PSIM_SHARED, else
../shared beside the repository, as tests/conftest.py looks for it."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AZURE_CONV = "data/traces/azure2023/AzureLLMInferenceTrace_conv.csv"  # relative to ../shared


def shared_dir() -> Path | None:
    """$PSIM_SHARED, else ../shared beside the repository; None when absent."""
    for d in ([Path(os.environ["PSIM_SHARED"])] if os.environ.get("PSIM_SHARED") else []) + [REPO.parent / "shared"]:
        if (d / "data").is_dir():
            return d
    return None


def azure_conv_trace() -> Path:
    """The Azure 2023 conversation trace's path (it may not exist: callers say "skipped")."""
    return (shared_dir() or REPO.parent / "shared") / AZURE_CONV
