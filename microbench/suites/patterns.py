"""The strategies' composite communication patterns, timed like collectives (suites/collectives.py):

  ulysses_all_to_all  Ulysses' all-to-all with the model's heads: [n/g, heads, d] -> [n, heads/g, d],
                      layout copies included (DeepSpeed Ulysses' layer); size = the send buffer
  sidp_weight_fetch   SiDP WaS: every rank fetches the next layer's FFN weights (3*d*f) from its owner,
                      staggered (rank r reads from r+1) into one of 2 cache slots; size = one layer
  cas_activation      SiDP CaS: ranks 1..g-1 ship m x d activations to the owner (rank 0) and get
                      m x d back (the owner's fused GEMM is the gemm suite's); size = one rank's m x d
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .. import timing
from ..shapes import sidp_layer_bytes, ulysses_heads

OPS = ("ulysses_all_to_all", "sidp_weight_fetch", "cas_activation")
DTYPE, ELEM = torch.bfloat16, 2


def cases(ctx, g: int) -> list[dict]:
    spec, sw = ctx.spec, ctx.sweep
    out = []
    h, hkv = ulysses_heads(spec, g)
    if h:
        for t in sw["ulysses_tokens"]:
            n_loc = -(-t // g)  # Ulysses pads tokens to a multiple of g
            out.append(dict(op="ulysses_all_to_all", dtype="bf16", seq_len=n_loc * g, num_heads=h,
                            num_kv_heads=hkv, head_dim=spec.head_dim,
                            size_bytes=n_loc * (h + 2 * hkv) * spec.head_dim * ELEM))
    out.append(dict(op="sidp_weight_fetch", dtype="bf16", n=spec.dense_ffn_width, k=spec.hidden_size,
                    size_bytes=sidp_layer_bytes(spec, ELEM)))
    for m in sw["cas_tokens"]:
        out.append(dict(op="cas_activation", dtype="bf16", m=m, k=spec.hidden_size,
                        size_bytes=m * spec.hidden_size * ELEM))
    return out


def _values(shape, r: int, device) -> torch.Tensor:
    """Small-integer check data, distinct per rank and position (exact in bf16)."""
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n, device=device) % 13 + 17 * (r % 8)) % 128).to(DTYPE).view(*shape)


def _p2p(ops):
    for w in dist.batch_isend_irecv(ops):
        w.wait()


def build(ctx, case, group):
    """Allocate, check once on known data, return fn(i) (ranks 0..g-1 only)."""
    op, g, r, dev = case["op"], case["group_size"], ctx.rank, ctx.device
    if op == "ulysses_all_to_all":
        heads, d = case["num_heads"] + 2 * case["num_kv_heads"], case["head_dim"]
        n_loc, hg = case["seq_len"] // g, heads // g
        x = _values((n_loc, heads, d), r, dev)  # (n/g, heads, d): this rank's tokens, all heads
        recv = torch.empty(g, n_loc, hg, d, dtype=DTYPE, device=dev)

        def fn(i):
            send = x.view(n_loc, g, hg, d).transpose(0, 1).contiguous()  # (g, n/g, heads/g, d)
            dist.all_to_all_single(recv, send, group=group)
            return recv.view(g * n_loc, hg, d)  # (n, heads/g, d): all tokens, this rank's heads
        out = fn(0)
        expect = torch.cat([_values((n_loc, heads, d), s, dev)[:, r * hg:(r + 1) * hg] for s in range(g)])
        timing.check(timing.rel_err(out, expect), 0.0, f"ulysses all-to-all g={g}")
        x.normal_()
        return fn
    if op == "sidp_weight_fetch":
        n = case["size_bytes"] // ELEM
        owned = _values((n,), r, dev)  # the FFN layer this rank owns (gate, up, down flattened)
        slots = [torch.empty(n, dtype=DTYPE, device=dev) for _ in range(2)]
        src, dst = (r + 1) % g, (r - 1) % g  # staggered owners: no two readers share one owner

        def fn(i):
            _p2p([dist.P2POp(dist.isend, owned, dst, group), dist.P2POp(dist.irecv, slots[i % 2], src, group)])
        fn(0)
        timing.check(timing.rel_err(slots[0], _values((n,), src, dev)), 0.0, f"sidp weight fetch g={g}")
        owned.normal_()
        return fn
    if op == "cas_activation":
        m, d = case["m"], case["k"]
        x = _values((m, d), r, dev)
        back = torch.empty(m, d, dtype=DTYPE, device=dev)
        bufs = [torch.empty(m, d, dtype=DTYPE, device=dev) for _ in range(g)]

        def fn(i):
            if r == 0:  # owner: rows of every replica in, the (here: unchanged) rows back out
                _p2p([dist.P2POp(dist.irecv, bufs[s], s, group) for s in range(1, g)])
                _p2p([dist.P2POp(dist.isend, bufs[s], s, group) for s in range(1, g)])
            else:
                _p2p([dist.P2POp(dist.isend, x, 0, group)])
                _p2p([dist.P2POp(dist.irecv, back, 0, group)])
        fn(0)
        if r == 0:
            err = max(timing.rel_err(bufs[s], _values((m, d), s, dev)) for s in range(1, g))
        else:
            err = timing.rel_err(back, x)
        timing.check(err, 0.0, f"cas activation g={g} m={m}")
        x.normal_()
        return fn
    raise ValueError(f"unknown pattern {op!r}")


def predicted_us(ctx, case):
    """Perf-model terms of the patterns: all_to_all for Ulysses; one send_recv of the layer for the
    staggered SiDP fetch; two send_recv of (g-1) * size through the owner's link for CaS."""
    from perfmodel import ops

    op, size, g = case["op"], case["size_bytes"], case["group_size"]
    if op == "ulysses_all_to_all":
        t = ops.collective_time_s("all_to_all", size, g, ctx.hw, ctx.prof)
    elif op == "sidp_weight_fetch":
        t = ops.collective_time_s("send_recv", size, 2, ctx.hw, ctx.prof)
    else:
        t = 2 * ops.collective_time_s("send_recv", (g - 1) * size, 2, ctx.hw, ctx.prof)
    return float(t) * 1e6
