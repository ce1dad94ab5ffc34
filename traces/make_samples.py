"""Regenerate the bundled sample traces (synthetic, seeded; no public data copied).

    python traces/make_samples.py [OUT_DIR]    # default: this folder
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.workload import generators as g
from simulator.workload import make_workload, write_csv

SEED = 20240601


def _lognormal_tokens(rng, n: int, median: float, sigma: float, hi: int) -> np.ndarray:
    """Heavy-tailed token counts (LLM prompts/answers are roughly log-normal), in [1, hi]."""
    return np.clip(np.rint(rng.lognormal(np.log(median), sigma, n)), 1, hi).astype(np.int64)


def bursty_onoff(path: Path) -> None:
    """5 minutes of 40 s low phases (2-5 req/s) and 20 s bursts (10-30 req/s), canonical CSV."""
    rng = np.random.default_rng(SEED)
    t = g.onoff_arrivals_s(100_000, (2.0, 5.0), (10.0, 30.0), off_s=40.0, on_s=20.0, rng=rng)
    t = np.round(t[t < 300.0], 3)  # ms resolution keeps the file small; rounding keeps the order
    n = len(t)
    cols = {"arrival_s": t - t[0],
            "input_tokens": _lognormal_tokens(rng, n, 800, 0.9, 8192),
            "output_tokens": _lognormal_tokens(rng, n, 200, 0.8, 2048),
            "priority": g.priority_mix(n, {0: 0.8, 1: 0.2}, rng)}
    write_csv(make_workload(cols, str(path)), path)


def burstgpt(path: Path) -> None:
    """1500 BurstGPT-format rows: bursty integer timestamps, two models, ~4% failed (0 tokens)."""
    rng = np.random.default_rng(SEED + 1)
    n = 1500
    t = 3 + np.floor(g.gamma_arrivals_s(n, rate_rps=1.25, burstiness=0.2, rng=rng)).astype(np.int64)
    req = _lognormal_tokens(rng, n, 350, 1.0, 8000)
    resp = _lognormal_tokens(rng, n, 230, 0.9, 2000)
    failed = rng.random(n) < 0.04  # BurstGPT logs a failed request with 0 request/response tokens
    req[failed] = resp[failed] = 0
    pd.DataFrame({
        "Timestamp": t,
        "Model": np.where(rng.random(n) < 0.8, "ChatGPT", "GPT-4"),
        "Request tokens": req, "Response tokens": resp, "Total tokens": req + resp,
        "Log Type": np.where(rng.random(n) < 0.95, "Conversation log", "API log"),
    }).to_csv(path, index=False)


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    bursty_onoff(out_dir / "bursty_onoff.csv")
    burstgpt(out_dir / "burstgpt.csv")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
