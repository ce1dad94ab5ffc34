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


E2E_H100 = "data/e2e/silicon_h100_sxm.csv"  # relative to ../shared: the measured H100 serving runs


def e2e_h100_csv() -> Path:
    """The measured H100 serving runs' path (it may not exist: the fit scripts' --measurements says where)."""
    return (shared_dir() or REPO.parent / "shared") / E2E_H100


def fit_args(doc: str, sweep: str, values: list, unit: str):
    """The fit scripts' command line: --measurements, --jobs and the swept constant's values (--<sweep>)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--measurements", default=str(e2e_h100_csv()))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(f"--{sweep}", type=float, nargs="+", default=values, help=f"values to try ({unit})")
    return ap.parse_args()


def _replay_at(item):
    name, value, replay_fn, case = item
    from simulator.apps.validate import harness
    setattr(harness, name, value)  # (in each worker process: the harness reads it per row)
    return replay_fn(case)


def replay_sweep(rows: list, name: str, values: list, jobs: int, replay_fn=None) -> list:
    """The fit scripts' sweep: for each value of the constant `name` of simulator.apps.validate.harness, the rows
    replayed with it (replay_fn, default simulator.apps.validate.replay.replay), one list per value in row order."""
    from concurrent.futures import ProcessPoolExecutor

    if replay_fn is None:
        from simulator.apps.validate.replay import replay as replay_fn
    items = [(name, v, replay_fn, c) for v in values for c in rows]
    with ProcessPoolExecutor(jobs) as ex:
        out = list(ex.map(_replay_at, items, chunksize=4))
    return [out[k * len(rows):(k + 1) * len(rows)] for k in range(len(values))]
