"""The files a run writes with --out: requests.parquet, steps.parquet, timeseries.csv, summary.json."""
from __future__ import annotations

import json
from pathlib import Path

from .metrics import time_series


def write_run(out_dir, summary: dict, requests, steps, window_s: float = 10.0) -> None:
    """One run's result files in `out_dir` (created if needed)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    requests.to_parquet(out_dir / "requests.parquet", index=False)
    steps.to_parquet(out_dir / "steps.parquet", index=False)
    time_series(requests, steps, window_s).to_csv(out_dir / "timeseries.csv")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
