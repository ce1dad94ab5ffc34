"""Shift Parallelism: a base (SP x TP) model and a shift (TP = SP*TP) model over the same GPUs
sharing one KV cache; each step runs the base model when its tokens exceed a threshold.

KV invariance: base GPU (s, t) serves head block t*SP + s; the shift model's TP rank order is
layout.shift_tp_order() (SP_TP), so every GPU keeps exactly the KV heads it already caches.
Separate-models strategy: the shift model costs an extra 1/SP of the base weights per GPU.
"""
from __future__ import annotations

import copy

from perfmodel.knobs import SHIFT_THRESHOLD_TOKENS
from perfmodel.layout import ParallelLayout

from .dist import make_group
from .kvcache import run_step
from .tp import apply_tp
from .tpsp import apply_tpsp


def shift_layout(layout) -> ParallelLayout:
    return ParallelLayout(tp=layout.sp * layout.tp, dp=layout.dp)


def apply_shift(model, layout, order=None) -> tuple:
    """(base, shift) models built from `model` (left intact). `order`: the shift TP order as
    indices into an instance's ranks, default SP_TP; anything else breaks the KV invariance."""
    if layout.pp != 1:
        raise ValueError(f"Shift runs without PP, got pp={layout.pp}")
    tp = make_group(layout.groups("tp"))
    sp = make_group(layout.groups("sp"))
    base = apply_tpsp(copy.deepcopy(model), layout, tp, sp)
    order = list(order if order is not None else layout.shift_tp_order())
    inst = make_group(layout.groups("instance"), order=lambda ranks: [ranks[i] for i in order])
    shift = apply_tp(copy.deepcopy(model), shift_layout(layout), inst)
    heads = {(l.attn.core.n_heads, l.attn.core.n_kv_heads) for m in (base, shift) for l in m.layers}
    if len(heads) != 1:
        raise ValueError(f"base and shift models see different (heads, kv heads) per GPU: {heads}")
    return base, shift


def shift_step(base, shift, cache, batch, threshold: int = SHIFT_THRESHOLD_TOKENS) -> tuple:
    """Run `batch` on the base model if it has more than `threshold` tokens, else on the shift
    model; both read and write the same cache. Returns (logits by sequence, 'base' or 'shift')."""
    mode = "base" if batch.num_tokens > threshold else "shift"
    return run_step(base if mode == "base" else shift, cache, batch), mode
