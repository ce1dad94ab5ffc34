"""Timing done right: warm-up, CUDA events on GPU (perf_counter behind barriers on CPU), many
repeats reported as median / p10 / p90, rotating input sets so a pass never runs from cache,
optional CUDA-graph capture (.library/device/METHOD.md)."""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

MAX_SETS = 512  # rotating input sets per case, at most
DEFAULT_LLC_BYTES = 32 << 20


def stats_us(samples_s) -> dict:
    """median / p10 / p90 of per-op times in microseconds (the row's time columns)."""
    x = np.asarray(samples_s, dtype=float) * 1e6
    return {"median_us": float(np.median(x)), "p10_us": float(np.percentile(x, 10)),
            "p90_us": float(np.percentile(x, 90))}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cache_bytes(device: torch.device) -> int:
    """Last-level cache the inputs must not sit in: the GPU's L2, or the CPU's largest cache."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20))
    best = 0
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        txt = f.read_text().strip().upper()
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:], 1)
        try:
            best = max(best, int(txt.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return best or DEFAULT_LLC_BYTES


def _fill_random(numel: int, dtype, device, gen: torch.Generator) -> torch.Tensor:
    """Random normal data (never zeros: they hide unwritten outputs and run faster); uint8: uniform random
    bytes (packed 4-bit e2m1 codes for nvfp4 GEMMs: every byte is two valid values)."""
    if dtype == torch.uint8:
        return torch.randint(0, 256, (numel,), dtype=torch.uint8, device=device, generator=gen)
    if dtype.is_floating_point and dtype.itemsize >= 2:
        return torch.randn(numel, dtype=dtype, device=device, generator=gen)
    out = torch.empty(numel, dtype=dtype, device=device)  # fp8: draw in fp32, cast in chunks
    step = 1 << 24
    for i in range(0, numel, step):
        n = min(step, numel - i)
        out[i:i + n] = torch.randn(n, device=device, generator=gen).to(dtype)
    return out


def random_pool(pool: dict, device, dtype, numel: int, cache: int = 0, seed: int = 0) -> torch.Tensor:
    """A flat buffer of >= numel random elements per (device, dtype), kept in `pool` and reused
    across cases (grown when a case needs more; at least 2x the cache)."""
    key = (str(device), dtype)
    buf = pool.get(key)
    if buf is None or buf.numel() < numel:
        pool.pop(key, None)  # free the old pool first (GPU memory)
        gen = torch.Generator(device=device).manual_seed(seed)
        elem = torch.empty(0, dtype=dtype).element_size()
        buf = pool[key] = _fill_random(max(numel, (2 * cache) // elem), dtype, device, gen)
    return buf


def input_sets(pool: dict, device, dtype, shapes, cache: int, max_bytes: int, seed: int = 0) -> list:
    """Rotating input sets: each a list of random tensors of `shapes`, carved as views from the
    pool (random_pool); enough sets that one pass over them touches twice the last-level cache
    (capped by MAX_SETS and `max_bytes`)."""
    per_set = sum(math.prod(s) for s in shapes)
    elem = torch.empty(0, dtype=dtype).element_size()
    n_sets = max(1, min(MAX_SETS, math.ceil(2 * cache / max(per_set * elem, 1)),
                        max_bytes // max(per_set * elem, 1)))
    buf = random_pool(pool, device, dtype, per_set * n_sets, cache, seed)
    sets, off = [], 0
    for _ in range(n_sets):
        views = []
        for s in shapes:
            n = math.prod(s)
            views.append(buf[off:off + n].view(*s))
            off += n
        sets.append(views)
    return sets


def _graphed(fn, inner: int, start: int):
    """Capture `inner` calls fn(start), fn(start+1), ... into one CUDA graph; returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for j in range(3):
            fn(start + j)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for j in range(inner):
            fn(start + j)
    return graph.replay


def time_op(fn, device, *, warmup: int, repeats: int, min_sample_s: float, barrier=None, agree=None,
            graph: bool = False, max_inner: int = 1000, budget_s: float = 0.0, max_repeats: int = 0):
    """Per-op seconds of the timed samples of fn(i) (i = running input-set index) and `inner`, the
    ops per sample. After `warmup` calls one timed call sets inner (a sample lasts >= min_sample_s)
    and the sample count (`repeats`, raised to fill `budget_s`, at most `max_repeats`); `agree` makes
    both the same on every rank. Each sample starts after `barrier` (collectives) and is timed with
    CUDA events on GPU, perf_counter on CPU; sample = elapsed / inner."""
    cuda = device.type == "cuda"
    i = 0
    for _ in range(warmup):
        fn(i)
        i += 1
    sync(device)
    t0 = time.perf_counter()
    fn(i)
    i += 1
    sync(device)
    one = max(time.perf_counter() - t0, 1e-7)
    inner = int(min(max_inner, max(1, math.ceil(min_sample_s / one))))
    if budget_s > 0:
        repeats = max(repeats, min(max_repeats or repeats, int(budget_s / (inner * one))))
    if agree is not None:
        inner, repeats = agree([inner, repeats])
    body = None
    if graph:
        if not cuda:
            raise RuntimeError("CUDA-graph timing needs a CUDA device")
        body = _graphed(fn, inner, i)
    samples = []
    ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
    for _ in range(repeats):
        if barrier is not None:
            sync(device)
            barrier()
        if cuda:
            ev[0].record()
        else:
            t0 = time.perf_counter()
        if body is not None:
            body()
        else:
            for j in range(inner):
                fn(i + j)
            i += inner
        if cuda:
            ev[1].record()
            ev[1].synchronize()
            dt = ev[0].elapsed_time(ev[1]) * 1e-3
        else:
            dt = time.perf_counter() - t0
        samples.append(dt / inner)
    return samples, inner


def settle(measure, attempts: int, max_spread: float):
    """Call measure() -> (samples, inner) until p90 <= max_spread * p10 (an undisturbed run; another
    process taking the core spreads the samples), at most `attempts` times; keep the attempt with the
    smallest median (the least disturbed one). Deterministic in the samples, so ranks that share
    them (collectives) take the same decisions."""
    best = None
    for _ in range(max(1, attempts)):
        samples, inner = measure()
        if best is None or np.median(samples) < np.median(best[0]):
            best = (samples, inner)
        if np.percentile(samples, 90) <= max_spread * np.percentile(samples, 10):
            break
    return best


def time_single(fn, device, sweep: dict, args, graph: bool = False):
    """Time a single-device op with the sweep's (or --warmup / --repeats) settings, retrying
    disturbed runs; returns (samples, inner)."""
    return settle(lambda: time_op(fn, device, warmup=args.warmup or sweep["warmup"],
                                  repeats=args.repeats or sweep["repeats"], min_sample_s=sweep["min_sample_s"],
                                  graph=graph), sweep["attempts"], sweep["max_spread"])


def row_times(samples, inner: int) -> dict:
    """median / p10 / p90 (us) and iterations (timed op executions) of a row."""
    return {**stats_us(samples), "iterations": len(samples) * inner}


def idle(barrier, agree) -> None:
    """What a rank outside the timed group does: the same agree and barrier calls, nothing else."""
    _, repeats = agree([1, 0])
    for _ in range(repeats):
        barrier()


def rel_err(out: torch.Tensor, ref: torch.Tensor, chunk: int = 1 << 24) -> float:
    """||out - ref|| / ||ref||, accumulated in float64 over chunks of float32 (no full-size double
    temporaries for GB-sized messages); NaN never passes a check (it compares false)."""
    out, ref = out.reshape(-1), ref.reshape(-1).to(out.device)
    num = den = 0.0
    for i in range(0, out.numel(), chunk):
        a, b = out[i:i + chunk].float(), ref[i:i + chunk].float()
        num += float(torch.sum((a - b).double() ** 2))
        den += float(torch.sum(b.double() ** 2))
    return (num / max(den, 1e-300)) ** 0.5


def check(err: float, tol: float, what: str) -> None:
    """Raise when a correctness check fails (the case becomes an error row)."""
    if not err <= tol:  # written so that NaN fails
        raise AssertionError(f"correctness check failed: {what} relative error {err:.2e} > {tol:.0e}")
