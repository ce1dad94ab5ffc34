"""Copy microbenchmark: host->device and device->host (pinned and pageable host memory),
device->device, and peer-to-peer to the next GPU, via Tensor.copy_; checked for equality, timed over
rotating buffers, reported in GB/s beside perfmodel's copy_time_s. On CPU 'device' memory is host
memory: h2d / d2h / d2d are host memcpys (pageable only) and there is no p2p."""
from __future__ import annotations

import math

import torch

from .. import timing
from ..shapes import geometric

RANKS = "zero"
TABLE = None  # rows go to the measurement CSV (--out), in perfmodel.measurements' columns
DTYPE, ELEM = torch.bfloat16, 2
MAX_SETS = 1 << 14  # small copies: many small views so that a pass still exceeds the cache


def _peer(device) -> int | None:
    """The GPU that p2p copies go to: the next one on this node (None with one GPU)."""
    if device.type != "cuda" or torch.cuda.device_count() < 2:
        return None
    return (device.index + 1) % torch.cuda.device_count()


def cases(ctx) -> list[dict]:
    lo, hi, factor = ctx.sweep["copy"]
    hi = min(hi, ctx.args.max_bytes or hi)
    cuda = ctx.device.type == "cuda"
    kinds = [("memcpy_h2d", 0), ("memcpy_d2h", 0), ("memcpy_d2d", 0)]
    if cuda:
        kinds = [("memcpy_h2d", 1), ("memcpy_h2d", 0), ("memcpy_d2h", 1), ("memcpy_d2h", 0), ("memcpy_d2d", 0)]
        if _peer(ctx.device) is not None:
            kinds.append(("memcpy_p2p", 0))
    graph = int(bool(ctx.args.cuda_graph and cuda))
    return [dict(op=op, dtype="bf16", size_bytes=size, pinned=pinned, group_size=1,
                 device_count=2 if op == "memcpy_p2p" else 1, backend=ctx.single_backend,
                 cuda_graph=graph if op in ("memcpy_d2d", "memcpy_p2p") or pinned else 0)
            for op, pinned in kinds for size in geometric(lo, max(lo, hi), factor)]


def buffers(ctx, case):
    """(sources, destinations): (sets, n) tensors whose rows rotate, enough rows that one pass
    exceeds twice the cache. Sources are random (the shared pool; copied into pinned memory for
    pinned h2d), destinations uninitialised (run() poisons them all)."""
    n = case["size_bytes"] // ELEM
    kind, pinned, dev, host = case["op"], bool(case["pinned"]), ctx.device, torch.device("cpu")
    sets = max(1, min(MAX_SETS, math.ceil(2 * ctx.cache / case["size_bytes"]),
                      ctx.max_bytes // (2 * case["size_bytes"])))
    src_dev = host if kind == "memcpy_h2d" else dev
    dst_dev = host if kind == "memcpy_d2h" else dev
    if kind == "memcpy_p2p":
        dst_dev = torch.device("cuda", _peer(dev))
    src = timing.random_pool(ctx.pool, src_dev, DTYPE, sets * n, ctx.cache, ctx.args.seed)[:sets * n].view(sets, n)
    if pinned and kind == "memcpy_h2d":
        src = src.pin_memory()
    dst = torch.empty(sets, n, dtype=DTYPE, device=dst_dev, pin_memory=pinned and kind == "memcpy_d2h")
    return src, dst


def predicted_us(ctx, case):
    if ctx.hw is None:
        return ""
    from perfmodel import ops

    return float(ops.copy_time_s(case["op"].removeprefix("memcpy_"), case["size_bytes"], ctx.hw, ctx.prof)) * 1e6


def run(ctx, case) -> dict:
    if case["pinned"] and not torch.cuda.is_available():
        raise RuntimeError("unsupported: pinned host memory needs CUDA")
    src, dst = buffers(ctx, case)
    dst.fill_(float("nan"))  # poison (the check sees any element the copy did not write) and fault
    # every destination page in now: first-touch page faults of fresh host memory cost more than
    # the copy itself (512 KiB: 215 us instead of 35 us on the CI VM)
    dst[0].copy_(src[0])
    timing.sync(ctx.device)
    timing.check(0.0 if torch.equal(dst[0].to(src.device), src[0]) else float("inf"), 0.0,
                 f"{case['op']} {case['size_bytes']} bytes")
    blocking = not case["pinned"] and case["op"] in ("memcpy_h2d", "memcpy_d2h")
    fn = lambda i: dst[i % len(dst)].copy_(src[i % len(src)], non_blocking=not blocking)  # noqa: E731
    samples, inner = timing.time_single(fn, ctx.device, ctx.sweep, ctx.args, graph=bool(case["cuda_graph"]))
    st = timing.row_times(samples, inner)
    moved = case["size_bytes"] * (2 if case["op"] == "memcpy_d2d" else 1)  # d2d reads and writes HBM
    return {**st, "achieved": moved / (st["median_us"] * 1e-6) / 1e9,
            "achieved_unit": "GB/s", "predicted_us": predicted_us(ctx, case)}
