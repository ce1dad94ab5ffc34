"""Collectives microbenchmark (nccl-tests conventions): all_reduce, all_gather, reduce_scatter,
all_to_all, send_recv (ring), broadcast over ranks 0..g-1 for message sizes lo..hi, plus the
strategies' composite patterns (suites/patterns.py). Each case is checked on small-integer data
(exact in bf16) before timing on random data; rows report busbw GB/s beside perfmodel's
collective_time_s. Every rank runs every case (ranks outside the group only join the barriers)."""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from .. import env, timing
from ..shapes import geometric
from ..writer import CaseError, error_text
from . import patterns

RANKS = "all"
TABLE = None  # rows go to the measurement CSV (--out), in perfmodel.measurements' columns
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast")
DTYPE, ELEM = torch.bfloat16, 2
PERIOD = 7 * 64  # check data tile (a multiple of 7)
_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def cases(ctx) -> list[dict]:
    lo, hi, factor = ctx.sweep["msg"]
    hi = min(hi, ctx.args.max_bytes or hi)
    graph = int(bool(ctx.args.cuda_graph and ctx.device.type == "cuda"))
    out = []
    for g in ctx.groups:
        nodes = -(-g // ctx.local_world)  # ranks 0..g-1, node-major: ceil(g / ranks per node)
        for op in OPS:
            for size in geometric(lo, max(lo, hi), factor):
                elems = size // ELEM // g * g  # a multiple of g elements: every rank's chunk is equal
                out.append(dict(op=op, dtype="bf16", size_bytes=elems * ELEM, group_size=g, device_count=g,
                                backend=ctx.backend, cuda_graph=graph, nodes=nodes))
        out += [dict(c, group_size=g, device_count=g, backend=ctx.backend, cuda_graph=graph, nodes=nodes)
                for c in patterns.cases(ctx, g)]
    return out


def pattern(n: int, r: int, device, start: int = 0, scale: int = 1, add: int = 0) -> torch.Tensor:
    """Check data of rank r at indices start..start+n: scale * (i % 7) + (r % 4) + add, as bf16, tiled
    (no n-sized integer temporary). Sums over <= 32 ranks stay integers < 256: exact in bf16."""
    tile = ((torch.arange(PERIOD, device=device) + start) % 7 * scale + r % 4 + add).to(DTYPE)
    return tile.repeat(n // PERIOD + 1)[:n].contiguous()


def _ring(send, recv, dst: int, src: int, group):
    ops = [dist.P2POp(dist.isend, send, dst, group), dist.P2POp(dist.irecv, recv, src, group)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()


def build(ctx, case, group):
    """Allocate, run once on check data and compare with the expected result; returns fn(i)."""
    op, g, r, dev = case["op"], case["group_size"], ctx.rank, ctx.device
    if op in patterns.OPS:
        return patterns.build(ctx, case, group)
    n = case["size_bytes"] // ELEM
    c = n // g  # each rank's chunk
    ranks_sum = sum(s % 4 for s in range(g))  # sum over ranks of the per-rank offset
    inp = pattern(n, r, dev)
    if op == "all_reduce":
        buf = inp
        fn = lambda i: dist.all_reduce(buf, group=group)  # noqa: E731
        expect = lambda: pattern(n, 0, dev, scale=g, add=ranks_sum)  # noqa: E731
    elif op == "all_gather":  # size = the gathered output; each rank contributes size / g
        inp, buf = pattern(c, r, dev), torch.empty(n, dtype=DTYPE, device=dev)
        fn = lambda i: _gather(buf, inp, group=group)  # noqa: E731
        expect = lambda: torch.cat([pattern(c, s, dev) for s in range(g)])  # noqa: E731
    elif op == "reduce_scatter":  # size = the input; rank r keeps the sum of chunk r
        buf = torch.empty(c, dtype=DTYPE, device=dev)
        fn = lambda i: _scatter(buf, inp, group=group)  # noqa: E731
        expect = lambda: pattern(c, 0, dev, start=r * c, scale=g, add=ranks_sum)  # noqa: E731
    elif op == "all_to_all":  # size = the send buffer; chunk s goes to rank s
        buf = torch.empty(n, dtype=DTYPE, device=dev)
        fn = lambda i: dist.all_to_all_single(buf, inp, group=group)  # noqa: E731
        expect = lambda: torch.cat([pattern(c, s, dev, start=r * c) for s in range(g)])  # noqa: E731
    elif op == "send_recv":  # nccl-tests sendrecv: each rank sends to r+1 and receives from r-1
        buf = torch.empty(n, dtype=DTYPE, device=dev)
        fn = lambda i: _ring(inp, buf, (r + 1) % g, (r - 1) % g, group)  # noqa: E731
        expect = lambda: pattern(n, (r - 1) % g, dev)  # noqa: E731
    elif op == "broadcast":
        buf = inp
        fn = lambda i: dist.broadcast(buf, src=0, group=group)  # noqa: E731
        expect = lambda: pattern(n, 0, dev)  # noqa: E731
    else:
        raise ValueError(f"unknown collective {op!r}")
    fn(0)
    timing.check(timing.rel_err(buf, expect()), 1e-2 if g > 32 else 0.0, f"{op} g={g} {n} elements")
    inp.normal_()  # time on random data, never on the check pattern or zeros
    buf.normal_()
    return fn


def predicted_us(ctx, case):
    if ctx.hw is None:
        return ""
    from perfmodel import ops

    op, size, g = case["op"], case["size_bytes"], case["group_size"]
    if op in patterns.OPS:
        return patterns.predicted_us(ctx, case)
    if op not in ctx.hw.collectives and (ctx.prof is None or op not in getattr(ctx.prof, "collectives", {})):
        return ""  # broadcast: no perf-model term
    return float(ops.collective_time_s(op, size, g, ctx.hw, ctx.prof)) * 1e6


def achieved_gbs(op: str, size_bytes: float, g: int, t_s: float) -> float:
    """nccl-tests busbw (GB/s): algbw = size / time times busbw_factor; broadcast, send_recv and the
    SiDP / CaS patterns report algbw (factor 1)."""
    from perfmodel.ops import busbw_factor

    try:
        factor = float(busbw_factor(op, g))
    except ValueError:
        factor = 1.0
    return size_bytes / t_s * factor / 1e9


def _timed(ctx, case, fn, member: bool):
    """One timed run of a case on every rank: (per-sample time of the slowest rank, ops per sample)."""
    sw, args = ctx.sweep, ctx.args
    if member:
        samples, inner = timing.time_op(
            fn, ctx.device, warmup=args.warmup or sw["warmup"], repeats=args.repeats or sw["repeats"],
            min_sample_s=sw["coll_min_sample_s"], barrier=ctx.barrier, agree=ctx.agree_max,
            graph=bool(case["cuda_graph"]), budget_s=0 if args.repeats else sw["coll_budget_s"],
            max_repeats=sw["coll_max_repeats"])
    else:
        timing.idle(ctx.barrier, ctx.agree_max)
        samples, inner = [], 0
    got = ctx.gather((samples, inner))
    per_rank = [s for s, _ in got if s]
    # a collective ends when its slowest rank does: per sample, the slowest rank's time
    return np.max(np.asarray(per_rank), axis=0).tolist(), max(i for _, i in got)


def run(ctx, case) -> dict:
    g = case["group_size"]
    member, group = ctx.rank < g, ctx.groups[g]
    fn, msg = None, ""
    if member:
        try:
            fn = build(ctx, case, group)
        except Exception as e:  # noqa: BLE001 - OOM or unsupported on one rank: every rank learns it
            msg = error_text(e)
    msgs = [m for m in ctx.gather(msg) if m]
    if msgs:
        raise CaseError(msgs[0])
    rt = ctx.device.type == "cpu" and ctx.args.isolate

    def measure():
        if rt:  # real-time scheduling around the timed samples only (env.set_realtime)
            ctx.realtime = env.set_realtime(True)
        try:
            return _timed(ctx, case, fn, member)
        finally:
            if rt:
                env.set_realtime(False)
    slowest, inner = timing.settle(measure, ctx.sweep["attempts"], ctx.sweep["coll_max_spread"])
    st = timing.row_times(slowest, inner)
    return {**st, "achieved": achieved_gbs(case["op"], case["size_bytes"], g, st["median_us"] * 1e-6),
            "achieved_unit": "GB/s", "predicted_us": predicted_us(ctx, case)}
