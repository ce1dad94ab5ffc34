"""Fit perfmodel.framework.VLLM_SYNC_STEP_OVERHEAD_S (host time per step of vLLM's synchronous loop) and print the fit.

Fitted on the TPOT of the H100 vLLM 0.12.0 aiperf rows (Qwen3-32B, 93 rows: the only synchronous-loop vLLM rows;
their TTFT is printed beside). Nothing else runs vLLM's synchronous loop, so there is no held-out group: the
async rows (0 ms, vLLM >= 0.18 and --async-scheduling) are the check that the same loop model holds without it.
Usage: python benchmarks/fit_step_overhead.py [--measurements CSV] [--jobs N] [--ms 1 1.5 2 2.5 3]  (~3 min)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._shared import fit_args  # noqa: E402
from perfmodel.framework import VLLM_SYNC_STEP_OVERHEAD_S  # noqa: E402
from simulator.apps.validate import harness as H  # noqa: E402
from simulator.apps.validate.pool import pool_map  # noqa: E402
from simulator.apps.validate.replay import replay  # noqa: E402
from simulator.apps.validate.rows import cases, read_measurements  # noqa: E402


def _one(item):
    ms, case = item
    return replay(case, step_overhead_ms=ms)


def main() -> None:
    a = fit_args(__doc__, "ms", [1.0, 1.5, 2.0, 2.5, 3.0], "milliseconds")
    found, _ = cases(read_measurements(a.measurements))
    rows = [c for c in found if c.policy == "layout" and c.backend == "vllm" and H.source_of(c) == "aic"]
    out = pool_map(_one, [(ms, c) for ms in a.ms for c in rows], a.jobs)
    print(f"{len(rows)} vLLM synchronous-loop rows (aiperf, vLLM 0.12.0)")
    for k, ms in enumerate(a.ms):
        done = out[k * len(rows):(k + 1) * len(rows)]
        tpot = np.array([r.tpot_rel_err for r in done])
        ttft = np.array([r.ttft_rel_err for r in done])
        print(f"{ms:5.2f} ms: TPOT median |err| {np.median(np.abs(tpot)):.1%} (bias {np.median(tpot):+.1%}); "
              f"TTFT {np.median(np.abs(ttft)):.1%} (bias {np.median(ttft):+.1%})")
    print(f"perfmodel.framework.VLLM_SYNC_STEP_OVERHEAD_S = {VLLM_SYNC_STEP_OVERHEAD_S * 1e3:g} ms")


if __name__ == "__main__":
    main()
