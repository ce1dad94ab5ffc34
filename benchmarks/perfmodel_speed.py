"""Step-cost evaluations per second: 100k random engine steps through perfmodel.step_cost.

Prints evaluations/s per layout (and with the calibrated profile when one is installed), then the
calibrated profile's own table look-ups on 100k-element arrays (GEMM, attention, all-reduce).
Issue #2 asks for >= 100,000 evaluations/s on the 2-core CI machine (these bounds lived in
tests/test_calibration_profile.py as wall-clock asserts until issue 38: < 1 s per 100k steps, ~0.1 s
measured; < 0.5 s for the five look-ups, ~0.03 s measured).
"""
from __future__ import annotations

import time

import numpy as np

from perfmodel.batch import make_batch
from perfmodel.calibration.profile import resolve_profile
from perfmodel.cost import step_cost
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model

N = 100_000


def random_batches(n: int, seed: int = 0):
    """n mixed steps: up to 256 decodes with contexts up to 8k, and prefill chunks up to 8k tokens."""
    rng = np.random.default_rng(seed)
    dec = rng.integers(0, 256, n)
    pre = rng.integers(0, 8192, n) * (rng.random(n) < 0.3)
    ctx = rng.integers(1, 8192, n)
    return make_batch(prefill_tokens=pre, prefill_seqs=(pre > 0) * 1, prefill_pairs=pre * (pre + 1) / 2,
                      prefill_kv_tokens=pre, decode_seqs=dec, decode_kv_tokens=dec * ctx)


def main() -> None:
    spec = load_model("llama-3.3-70b", weights="fp8")
    hw = load_hardware("h200")
    batch = random_batches(N)
    profiles = [("datasheet", None)]
    prof = resolve_profile(hw, None)
    if prof is not None:
        profiles.append((getattr(prof, "name", "calibrated"), prof))
    for pname, p in profiles:
        for lay in (ParallelLayout(tp=8), ParallelLayout(sp=8), ParallelLayout(sp=4, tp=2),
                    ParallelLayout(tp=2, pp=4)):
            step_cost(spec, lay, hw, random_batches(100), p)  # warm-up
            t0 = time.perf_counter()
            total = step_cost(spec, lay, hw, batch, p).total_s
            dt = time.perf_counter() - t0
            assert total.shape == (N,) and np.all(np.isfinite(total))
            print(f"{pname:12s} {str(lay):12s} {N:,} evaluations in {dt:.3f} s = {N / dt:,.0f} evaluations/s")
    if prof is not None:
        rng = np.random.default_rng(1)
        m, seqs, kv = rng.uniform(1, 16384, N), rng.integers(1, 512, N).astype(float), rng.uniform(1, 1e6, N)
        t0 = time.perf_counter()
        prof.gemm_time_s(m, 8192, 1280, "fp8")
        prof.gemm_time_s(m, rng.choice([1024.0, 7168.0], N), 8192, "bf16")
        prof.attn_prefill_time_s(m * (m + 1) / 2, m, np.ones(N), 8, 1, 128)
        prof.attn_decode_time_s(seqs, seqs * kv / 100, 8, 1, 128)
        prof.collective_time_s("all_reduce", m * 16384, 8)
        dt = time.perf_counter() - t0
        print(f"profile look-ups: 5 calls on {N:,}-element arrays in {dt:.3f} s (bound 0.5 s)")


if __name__ == "__main__":
    main()
