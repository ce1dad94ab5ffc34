"""Disaggregated prefill/decode: a prefill TP instance (global ranks 0..P-1) runs every new prompt,
then ships that prompt's KV cache to a decode TP instance (ranks P..P+D-1), which decodes it.

Per step the batch splits by sequence: sequences seen for the first time (their whole prompt) go to
the prefill ranks, running ones to the decode ranks; both instances run in the same step (as
DistServe / vLLM's P/D connectors / Mooncake do on separate GPUs). The prompt's last-row logits
(the first generated token) come from the prefill ranks, every later token's from the decode ranks.

KV transfer (torch.distributed isend/irecv, counted as 'send_recv', where='kv_transfer', by the
sender): for every new sequence, every layer and every decode rank j, the KV heads j holds under
decode TP=D (tp.kv_heads_of(j, D, h_kv)) are sent by the *first* prefill rank that holds them
under prefill TP=P. One message per (sequence, layer, source run of heads, destination) of shape
(2: K|V, heads, T prompt tokens, head_dim). Examples with h_kv = 2:

    P=1 -> D=2: rank 0 sends head 0 to rank 1 and head 1 to rank 2 (the heads are split)
    P=2 -> D=1: rank 0 sends head 0, rank 1 sends head 1, both to rank 2 (the heads are merged)
    P=2 -> D=2: rank 0 -> rank 2 (head 0), rank 1 -> rank 3 (head 1)
    P=4 -> D=2: heads are replicated twice on prefill: ranks 0 (head 0) and 2 (head 1) send

Bytes: with D <= h_kv every KV head crosses once, so the sent total per sequence is the prompt's
KV bytes, num_layers x 2 x h_kv x head_dim x dtype bytes x T (ModelSpec.kv_bytes_per_token x T at
the kernels' dtype). With D > h_kv each decode replica of a head gets its own copy: x D / h_kv.
Only the T valid token rows of the sequence's pages are sent; a page-granular transport (whole
16-token blocks, vLLM's NIXL connector) would also ship the unused tail of the last block.
Chunked prefill is not modelled: a new sequence's first step is its whole prompt.
"""
from __future__ import annotations

import torch

from perfmodel.layout import LayoutError, ParallelLayout

from .comm import irecv, isend
from .dist import make_group
from .kvcache import make_cache, run_step
from .tp import apply_tp, kv_heads_of


def layouts(spec, world_size: int, prefill_tp: int | None = None, decode_tp: int | None = None) -> tuple:
    """(prefill layout tp=P, decode layout tp=D) with P + D = world_size; default P = D = w/2."""
    p = prefill_tp or (world_size - decode_tp if decode_tp else world_size // 2)
    d = decode_tp or world_size - p
    if p < 1 or d < 1 or p + d != world_size:
        raise LayoutError(f"disagg needs prefill_tp + decode_tp = world size {world_size} (>= 1 each), "
                          f"got {p} + {d}")
    return ParallelLayout(tp=p).validate(spec), ParallelLayout(tp=d).validate(spec)


def first_holder(head: int, tp: int, num_kv_heads: int) -> int:
    """The lowest TP rank holding KV `head` under TP=tp (heads split, or replicated tp/h_kv times)."""
    return head // (num_kv_heads // tp) if tp <= num_kv_heads else head * (tp // num_kv_heads)


def transfer_plan(num_kv_heads: int, p: int, d: int) -> list[tuple]:
    """[(src prefill TP rank, dst decode TP rank, first head, heads)]: runs of consecutive KV heads
    that one prefill rank sends to one decode rank, in a fixed order (both sides iterate it)."""
    plan = []
    for j in range(d):
        h0, hn = kv_heads_of(j, d, num_kv_heads)
        for h in range(h0, h0 + hn):
            src = first_holder(h, p, num_kv_heads)
            if plan and plan[-1][:2] == (src, j) and plan[-1][2] + plan[-1][3] == h:
                plan[-1] = (src, j, plan[-1][2], plan[-1][3] + 1)
            else:
                plan.append((src, j, h, 1))
    return plan


def apply_disagg(model, rank: int, world_size: int, prefill_tp: int | None = None, decode_tp: int | None = None):
    """step(batch) -> (logits by sequence, mode, perf-model parts, facts) on this rank; `model` is
    the built single-device model, sharded here for this rank's side."""
    spec = model.spec
    lp, ld = layouts(spec, world_size, prefill_tp, decode_tp)
    p, d = lp.tp, ld.tp
    group = make_group([list(range(p)), list(range(p, world_size))])  # both groups, on every rank
    prefill = rank < p
    lay = lp if prefill else ld
    if lay.tp > 1:
        apply_tp(model, lay, group)
    cache = make_cache(model)
    me = group.index  # TP rank inside this side's instance
    my_h0, _ = kv_heads_of(me, lay.tp, spec.num_kv_heads)  # first KV head held here
    plan = transfer_plan(spec.num_kv_heads, p, d)
    hs, layers = spec.head_dim, range(spec.num_layers)
    seen: set = set()
    dtype, dev = next(model.parameters()).dtype, next(model.parameters()).device

    def send(sid, length, tag0):  # prefill side: this rank's runs of the plan
        reqs, tag = [], tag0
        for l in layers:
            k, v = cache.read(l, sid, length)  # (heads held, T, hs) each: gathered copies of the pages
            for src, dst, h0, hn in plan:
                if src == me:
                    a = h0 - my_h0
                    msg = k.new_empty(2, hn, length, hs)  # (K|V, heads, T, hs): 2*hn*T*hs*b bytes
                    msg[0], msg[1] = k[a:a + hn], v[a:a + hn]
                    reqs.append(isend(msg, p + dst, "kv_transfer", tag))
                tag += 1
        return reqs, tag

    def recv(sid, length, tag0):  # decode side: assemble this rank's heads, write them to its pages
        tag, got = tag0, []
        for _ in layers:  # post every receive first (the sender's isends are all in flight)
            parts = []
            for src, dst, h0, hn in plan:
                if dst == me:
                    buf = torch.empty(2, hn, length, hs, dtype=dtype, device=dev)
                    parts.append((buf, irecv(buf, src, tag)))
                tag += 1
            got.append(parts)
        for l, parts in zip(layers, got):
            for _, req in parts:
                req.wait()
            kv = torch.cat([buf for buf, _ in parts], 1)  # (2, heads held here, T, hs)
            cache.write(l, sid, 0, kv[0].transpose(0, 1), kv[1].transpose(0, 1))  # (T, heads, hs)
        cache.lengths[sid] = length
        return tag

    def step(b):
        new = [s for s in b.seq_ids if s not in seen]
        seen.update(new)
        sub = b.subset(new) if prefill else b.subset([s for s in b.seq_ids if s not in new])
        out = run_step(model, cache, sub) if sub.seq_ids else {}
        kv = dict(zip(new, b.subset(new).lens))  # sid -> prompt tokens T
        tag, reqs = 0, []
        for sid in new:  # the same order (and tags) on both sides
            if prefill:
                r, tag = send(sid, kv[sid], tag)
                reqs += r
            else:
                tag = recv(sid, kv[sid], tag)
        for r in reqs:
            r.wait()
        if prefill:
            for sid in new:
                cache.release(sid)  # the prompt's KV now lives on the decode instance
        mode = "+".join(m for m, on in (("prefill", new), ("decode", len(new) < len(b.seq_ids))) if on)
        parts = [(lay, sub.num_tokens, len(sub.seq_ids), 1)] if sub.seq_ids else []
        return out, mode, parts, {"kv_seqs": kv, "side": "prefill" if prefill else "decode"}
    return step
