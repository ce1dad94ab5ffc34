"""Attention microbenchmark: causal prefill and single-query decode with the model's GQA heads, through
torch's scaled_dot_product_attention (and flash-attn's flash_attn_func where installed, CUDA only),
checked against a float64 softmax(QK^T)V on one sequence, reported in TFLOP/s beside perfmodel's
attn_prefill_time_s / attn_decode_time_s."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import timing
from ..shapes import attention_shapes

RANKS = "zero"
TABLE = None  # rows go to the measurement CSV (--out), in perfmodel.measurements' columns
TOL = 2e-2  # bf16 inputs and output; fp32 softmax accumulation inside the kernels
CHECK_ROWS = 64  # query positions compared with the float64 reference


def _flash_attn():
    try:
        from flash_attn import flash_attn_func

        return flash_attn_func
    except ImportError:
        return None


def cases(ctx) -> list[dict]:
    sw = ctx.sweep
    shapes = attention_shapes(ctx.spec, ctx.args.tp or sw["tp"], sw["prefill"], sw["decode"])
    backends = [ctx.single_backend]
    if ctx.device.type == "cuda" and _flash_attn() is not None:
        backends.append("flash_attn")
    graph = int(bool(ctx.args.cuda_graph and ctx.device.type == "cuda"))
    fits = [c for c in shapes if 2 * (c["batch"] * c["head_dim"] * (c["num_heads"] * c["seq_len"]
                                                                     + 2 * c["num_kv_heads"] * c["kv_len"]))
            <= ctx.max_bytes]  # q, k, v in bf16 within the case budget (--max-case-gb)
    return [dict(c, dtype="bf16", group_size=1, device_count=1, backend=b, cuda_graph=graph)
            for b in backends for c in fits]


def pairs(case) -> float:
    """Query-key pairs of the batch (causal prefill: s(s+1)/2 per sequence; decode: kv_len)."""
    b, s, kv = case["batch"], case["seq_len"], case["kv_len"]
    return b * (s * (kv - s) + s * (s + 1) / 2)


def make_op(backend: str, causal: bool):
    """fn(q, k, v) with q (B, H, S, D), k/v (B, Hkv, L, D) -> (B, H, S, D)."""
    if backend == "flash_attn":
        fa = _flash_attn()  # wants (B, S, H, D): transposed views, no copy
        return lambda q, k, v: fa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                  causal=causal).transpose(1, 2)
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def check_index(h: int, hkv: int, s: int):
    """(query heads, query rows) the reference covers: the first and last KV group's heads (a wrong
    GQA mapping shows there), at most CHECK_ROWS query positions spread over the sequence."""
    g = h // hkv
    heads = sorted(set(range(g)) | set(range(h - g, h)))
    rows = torch.linspace(0, s - 1, min(s, CHECK_ROWS)).round().long().unique()
    return torch.tensor(heads), rows


def reference(q, k, v, causal: bool, heads, rows):
    """float64 attention of sequence 0 for `heads` x `rows` (K/V head = head // group), on the CPU."""
    g, seq = q.shape[1] // k.shape[1], q.shape[2]
    dev = q.device
    q = q[0][heads.to(dev)][:, rows.to(dev)].cpu().double()  # (h', r, D): select on device, then upcast
    k, v = (t[0][(heads // g).to(dev)].cpu().double() for t in (k, v))  # (h', L, D)
    sc = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (h', r, L)
    if causal:  # query i sits at position L - S + i and sees keys 0 .. L - S + i
        kv = k.shape[1]
        visible = torch.arange(kv)[None, :] <= (kv - seq) + rows[:, None]  # (r, L)
        sc = sc.masked_fill(~visible, float("-inf"))
    return torch.softmax(sc, -1) @ v


def predicted_us(ctx, case):
    if ctx.hw is None:
        return ""
    from perfmodel import ops

    b, h, hkv, d = case["batch"], case["num_heads"], case["num_kv_heads"], case["head_dim"]
    if case["op"] == "attention_prefill":
        t = ops.attn_prefill_time_s(pairs(case), b * case["kv_len"], b, h, hkv, d, "bf16", ctx.hw, ctx.prof)
    else:
        t = ops.attn_decode_time_s(b, b * case["kv_len"], h, hkv, d, "bf16", ctx.hw, ctx.prof)
    return float(t) * 1e6


def run(ctx, case) -> dict:
    b, s, kv = case["batch"], case["seq_len"], case["kv_len"]
    h, hkv, d = case["num_heads"], case["num_kv_heads"], case["head_dim"]
    causal = case["op"] == "attention_prefill"
    op = make_op(case["backend"], causal)
    shapes = [(b, h, s, d), (b, hkv, kv, d), (b, hkv, kv, d)]
    sets = timing.input_sets(ctx.pool, ctx.device, torch.bfloat16, shapes, ctx.cache, ctx.max_bytes,
                             seed=ctx.args.seed)
    q, k, v = sets[0]
    heads, rows = check_index(h, hkv, s)
    out = op(q, k, v)[0][heads.to(q.device)][:, rows.to(q.device)].cpu()
    timing.check(timing.rel_err(out, reference(q, k, v, causal, heads, rows)), TOL,
                 f"{case['op']} b={b} s={s} kv={kv} h={h}/{hkv} d={d}")
    del out
    fn = lambda i: op(*sets[i % len(sets)])  # noqa: E731
    samples, inner = timing.time_single(fn, ctx.device, ctx.sweep, ctx.args, graph=bool(case["cuda_graph"]))
    st = timing.row_times(samples, inner)
    flops = 4.0 * h * d * pairs(case)  # QK^T and PV: 2 * 2 * head_dim per query-key pair and head
    return {**st, "achieved": flops / (st["median_us"] * 1e-6) / 1e12,
            "achieved_unit": "TFLOP/s", "predicted_us": predicted_us(ctx, case)}
