"""Fit perfmodel.framework.TRTLLM_HOST_FLOOR_S and TRTLLM_HOST_FLOOR_SEQ_S (the host floor of TRT-LLM 1.0's overlapped
loop: a step takes at least a + b x its sequences) and print the fit.

Fitted jointly on the TPOT of the aggregated TRT-LLM 1.0 rows (the H100 aiperf rows, TRT-LLM 1.0.0rc3: Llama-3.1-8B,
Qwen3-32B, Qwen3-235B; their TTFT is printed beside), every (a, b) of the grid, each row replayed as `simulate
validate` replays it with `--host-floor-us a --host-floor-seq-us b`. The fit is the pair with the lowest median
|TPOT error|; per model the same figures show which rows the floor moves (a model whose kernels outlast it is
flat). `simulate validate --holdout` refits each constant on the rows outside a held-out group (fits.py).
Usage: python benchmarks/fit_host_floor.py [--measurements CSV] [--jobs N] [--a-us ...] [--b-us ...]  (~6 min)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import e2e_h100_csv  # noqa: E402
from perfmodel.framework import TRTLLM_HOST_FLOOR_S, TRTLLM_HOST_FLOOR_SEQ_S  # noqa: E402
from simulator.apps.validate.fits import trtllm_host_floor  # noqa: E402
from simulator.apps.validate.pool import pool_map  # noqa: E402
from simulator.apps.validate.replay import replay  # noqa: E402
from simulator.apps.validate.rows import cases, read_measurements  # noqa: E402


def _one(item):
    a, b, case = item
    return replay(case, host_floor_us=a, host_floor_seq_us=b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", default=str(e2e_h100_csv()))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--a-us", type=float, nargs="+", default=[0, 1000, 2000, 3000, 4000], help="per-step floor (us)")
    ap.add_argument("--b-us", type=float, nargs="+", default=[0, 40, 60, 80, 100], help="per-sequence floor (us)")
    a = ap.parse_args()
    found, _ = cases(read_measurements(a.measurements))
    rows = [c for c in found if trtllm_host_floor(c)]
    grid = [(x, y) for x in a.a_us for y in a.b_us]
    out = pool_map(_one, [(x, y, c) for x, y in grid for c in rows], a.jobs)
    models = sorted({c.model.split("/")[-1] for c in rows})
    print(f"{len(rows)} aggregated TRT-LLM 1.0 rows; TPOT median |err| (bias) all, then by model: {', '.join(models)}")
    best = None
    for k, (x, y) in enumerate(grid):
        done = out[k * len(rows):(k + 1) * len(rows)]
        tpot = np.array([r.tpot_rel_err for r in done])
        ttft = np.array([r.ttft_rel_err for r in done])
        per = [np.median(np.abs([r.tpot_rel_err for r, c in zip(done, rows) if c.model.split("/")[-1] == m]))
               for m in models]
        err = float(np.median(np.abs(tpot)))
        best = min(best or (err, x, y), (err, x, y))
        print(f"a {x:6.0f} us, b {y:5.0f} us: TPOT {err:.1%} (bias {np.median(tpot):+.1%}) "
              f"[{', '.join(f'{v:.1%}' for v in per)}]; TTFT {np.median(np.abs(ttft)):.1%}")
    print(f"fit: a = {best[1]:g} us, b = {best[2]:g} us (TPOT {best[0]:.1%}); in force: TRTLLM_HOST_FLOOR_S = "
          f"{TRTLLM_HOST_FLOOR_S * 1e6:g} us, TRTLLM_HOST_FLOOR_SEQ_S = {TRTLLM_HOST_FLOOR_SEQ_S * 1e6:g} us")


if __name__ == "__main__":
    main()
