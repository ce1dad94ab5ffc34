"""Seeded arrival-time, length and priority generators (numpy arrays; synthetic.py assembles them)."""
from __future__ import annotations

import numpy as np


def _from_gaps(gaps_s: np.ndarray) -> np.ndarray:
    """First request at 0 s, then the cumulative gaps: n requests from n-1 gaps."""
    return np.concatenate(([0.0], np.cumsum(gaps_s)))


def poisson_arrivals_s(n: int, rate_rps: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson process: exponential inter-arrivals with mean 1/rate (CV = 1)."""
    return _from_gaps(rng.exponential(1.0 / rate_rps, max(n - 1, 0)))


def gamma_arrivals_s(n: int, rate_rps: float, burstiness: float,
                     rng: np.random.Generator) -> np.ndarray:
    """Gamma inter-arrivals as in vLLM's serving benchmark: shape = burstiness, mean 1/rate.

    burstiness 1 is Poisson; the inter-arrival CV is 1/sqrt(burstiness), so < 1 is burstier.
    """
    scale_s = 1.0 / (rate_rps * burstiness)  # vLLM: theta = 1 / (request_rate * burstiness)
    return _from_gaps(rng.gamma(shape=burstiness, scale=scale_s, size=max(n - 1, 0)))


def onoff_arrivals_s(n: int, low_rps: tuple[float, float], high_rps: tuple[float, float],
                     off_s: float, on_s: float, rng: np.random.Generator) -> np.ndarray:
    """Alternating low-rate (off_s long) and high-rate (on_s long) Poisson phases, low first.

    Each phase draws its rate uniformly from its (lo, hi) range, e.g. 2-5 vs 10-30 req/s as in
    the Shift and Flying Serving evaluations.
    """
    out, total, start_s, phase = [], 0, 0.0, 0
    while total < n:
        length_s = off_s if phase % 2 == 0 else on_s
        lo, hi = low_rps if phase % 2 == 0 else high_rps
        rate_rps = rng.uniform(lo, hi) if hi > lo else lo
        k = rng.poisson(rate_rps * length_s)
        out.append(np.sort(rng.uniform(start_s, start_s + length_s, k)))
        total, start_s, phase = total + k, start_s + length_s, phase + 1
    return np.concatenate(out)[:n] if out else np.zeros(0)


def batch_arrivals_s(n: int) -> np.ndarray:
    """All n requests at t=0: the saturated (offline batch) case."""
    return np.zeros(n)


def arrivals_until(duration_s: float, draw, rng: np.random.Generator, guess_n: int) -> np.ndarray:
    """Arrival times below duration_s from a generator draw(n, rng), growing n until it covers."""
    n = max(guess_n, 16)
    while True:
        t = draw(n, rng)
        if len(t) and t[-1] >= duration_s:
            return t[t < duration_s]
        n *= 2


def uniform_lengths(n: int, lo: int, hi: int, rng: np.random.Generator) -> np.ndarray:
    """Token counts uniform on [lo, hi] inclusive (lo == hi gives a fixed length)."""
    if lo == hi:
        return np.full(n, lo, dtype=np.int64)
    return rng.integers(lo, hi + 1, size=n, dtype=np.int64)


def empirical_lengths(n: int, input_tokens: np.ndarray, output_tokens: np.ndarray,
                      rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Resample (input, output) pairs jointly from a table, keeping their correlation."""
    idx = rng.integers(0, len(input_tokens), size=n)
    return np.asarray(input_tokens)[idx], np.asarray(output_tokens)[idx]


def priority_mix(n: int, weights: dict[int, float], rng: np.random.Generator) -> np.ndarray:
    """Priorities drawn with the given relative weights, e.g. {0: 0.8, 1: 0.2}."""
    keys = np.array(sorted(weights), dtype=np.int64)
    if len(keys) == 1:
        return np.full(n, keys[0], dtype=np.int64)
    p = np.array([weights[k] for k in keys], dtype=np.float64)
    return rng.choice(keys, size=n, p=p / p.sum())
