"""Load time and peak memory of a 5-million-row BurstGPT file (target: < 30 s, < 2 GB).

    python benchmarks/trace_load_speed.py [--rows 5000000] [--layout 6col|session] [--keep DIR]

The file is generated in a temp dir (same columns as BurstGPT_1.csv, ~225 MB); the load runs in a
fresh child process so its peak RSS counts only reading, not generating.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

LIMIT_S, LIMIT_RSS_MB = 30.0, 2048.0
CHUNK_ROWS = 1_000_000


def make_burstgpt(path: Path, rows: int, layout: str, seed: int = 0) -> None:
    """Write a synthetic BurstGPT CSV in 1M-row chunks (bounded memory while generating)."""
    rng = np.random.default_rng(seed)
    start_s = 0.0
    for first in range(0, rows, CHUNK_ROWS):
        n = min(CHUNK_ROWS, rows - first)
        t = start_s + np.cumsum(rng.exponential(2.0, n))  # ~2 s mean gap: 5M rows ~ 116 days
        start_s = float(t[-1])
        req = rng.integers(1, 4000, n)
        resp = np.where(rng.random(n) < 0.05, 0, rng.integers(1, 1500, n))  # ~5% failed
        cols = {"Timestamp": np.floor(t).astype(np.int64)}
        if layout == "session":  # later releases: float timestamps, Session ID and Elapsed time
            cols = {"Timestamp": np.round(t, 3), "Session ID": rng.integers(0, 10**6, n),
                    "Elapsed time": np.round(rng.exponential(5.0, n), 3)}
        cols.update({"Model": np.where(rng.random(n) < 0.8, "ChatGPT", "GPT-4"),
                     "Request tokens": req, "Response tokens": resp, "Total tokens": req + resp,
                     "Log Type": np.where(rng.random(n) < 0.9, "Conversation log", "API log")})
        pd.DataFrame(cols).to_csv(path, mode="a" if first else "w", header=not first, index=False)


def measure(path: str) -> None:
    """Child process: load the file, print JSON with wall seconds and peak RSS."""
    from simulator.workload import load_trace

    t0 = time.perf_counter()
    w = load_trace(path)
    load_s = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"load_s": load_s, "peak_rss_mb": peak_mb, "requests": len(w)}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=5_000_000)
    p.add_argument("--layout", choices=("6col", "session"), default="6col")
    p.add_argument("--keep", metavar="DIR", help="write the file here and keep it")
    p.add_argument("--measure", metavar="FILE", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        measure(args.measure)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.keep or tmp) / f"burstgpt_{args.rows}_{args.layout}.csv"
        t0 = time.perf_counter()
        make_burstgpt(path, args.rows, args.layout)
        print(f"generated {args.rows:,} rows ({path.stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t0:.1f} s")
        child = subprocess.run([sys.executable, __file__, "--measure", str(path)],
                               capture_output=True, text=True, cwd=Path(__file__).parents[1])
        if child.returncode:
            print(child.stderr, file=sys.stderr)
            return 1
        r = json.loads(child.stdout)
    ok = r["load_s"] < LIMIT_S and r["peak_rss_mb"] < LIMIT_RSS_MB
    print(f"load_trace: {r['requests']:,} requests in {r['load_s']:.2f} s, "
          f"peak RSS {r['peak_rss_mb']:.0f} MB (limits {LIMIT_S:.0f} s, {LIMIT_RSS_MB:.0f} MB): "
          f"{'OK' if ok else 'TOO SLOW / TOO BIG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
