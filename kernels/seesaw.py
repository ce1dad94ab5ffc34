"""Seesaw: re-shard the same GPUs between a prefill layout (PP-heavy) and a decode layout (TP).

On a switch every GPU pushes the KV it holds (its stage's layers, its TP shard's KV heads) into
a host shared-memory store in HND layout (one contiguous (tokens, head_dim) run per head:
'd2h', 'seesaw_kv_out'), drops its weights, re-loads the new shard from the host copy of the
model ('h2d', 'seesaw_weights') and pulls the KV of its new layers and heads ('h2d',
'seesaw_kv_in'). Replicated KV heads (TP > h_kv) are pushed once, by their first holder.
"""
from __future__ import annotations

import copy
import math

import torch

from .comm import barrier, d2h, h2d
from .dist import device, make_group
from .kvcache import make_cache, run_step
from .pp import apply_pp, pipeline_step
from .tp import apply_tp, kv_heads_of


class KVStore:
    """Host KV store shared by the node's processes: (seqs, L, K|V, h_kv, max_len, hs), HND."""

    def __init__(self, path: str, spec, max_seqs: int = 16, max_len: int = 256, dtype=torch.float32):
        self.shape = (max_seqs, spec.num_layers, 2, spec.num_kv_heads, max_len, spec.head_dim)
        self.path = path
        self.data = torch.from_file(path, shared=True, size=math.prod(self.shape), dtype=dtype).view(self.shape)
        self.slots: dict = {}  # sid -> row, assigned in first-pushed order (the same on every rank)

    def slot(self, sid) -> int:
        if sid not in self.slots:
            if len(self.slots) == self.shape[0]:
                raise RuntimeError(f"KV store full: {self.shape[0]} sequences")
            self.slots[sid] = len(self.slots)
        return self.slots[sid]


def holdings(spec, layout, rank: int) -> tuple:
    """(layers, first KV head, KV heads, primary holder?) of `rank` under `layout` (TP x PP)."""
    c = layout.coords(rank)
    counts = layout.layers_per_stage(spec.num_layers)
    start = sum(counts[:c["pp"]])
    h0, hn = kv_heads_of(c["tp"], layout.tp, spec.num_kv_heads)
    primary = layout.tp <= spec.num_kv_heads or c["tp"] % (layout.tp // spec.num_kv_heads) == 0
    return list(range(start, start + counts[c["pp"]])), h0, hn, primary


def swap_out(cache, store: KVStore, spec, layout, rank: int) -> dict:
    """Push this GPU's KV of every cached sequence into the store; returns {sid: length}."""
    layers, h0, hn, primary = holdings(spec, layout, rank)
    for sid, length in sorted(cache.lengths.items()):
        s = store.slot(sid)
        for l in layers:
            k, v = cache.read(l, sid, length)  # (hn, T, hs) each
            if primary:
                d2h(k, store.data[s, l, 0, h0:h0 + hn, :length], "seesaw_kv_out")
                d2h(v, store.data[s, l, 1, h0:h0 + hn, :length], "seesaw_kv_out")
    return dict(cache.lengths)


def swap_in(cache, store: KVStore, spec, layout, rank: int, lengths: dict) -> None:
    """Pull this GPU's layers and KV heads of every sequence in `lengths` into `cache`."""
    layers, h0, hn, _ = holdings(spec, layout, rank)
    dev = device()
    for sid, length in sorted(lengths.items()):
        s = store.slot(sid)
        for l in layers:
            k = h2d(store.data[s, l, 0, h0:h0 + hn, :length], dev, "seesaw_kv_in")  # (hn, T, hs)
            v = h2d(store.data[s, l, 1, h0:h0 + hn, :length], dev, "seesaw_kv_in")
            cache.write(l, sid, 0, k.transpose(0, 1), v.transpose(0, 1))
        cache.lengths[sid] = length


def load_shard(host_model, layout):
    """The shard of `host_model` that this rank runs under `layout` (TP x PP), uploaded 'h2d'."""
    if layout.sp > 1 or layout.dp > 1 or layout.ep > 1:
        raise ValueError(f"Seesaw re-shards between TP x PP layouts, got {layout}")
    model = copy.deepcopy(host_model)
    pp = make_group(layout.groups("pp"))
    tp = make_group(layout.groups("tp"))
    if layout.pp > 1:
        apply_pp(model, layout, pp)
    apply_tp(model, layout, tp)
    dev, seen = device(), set()
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            p.data = h2d(p.data, dev, "seesaw_weights")
    return model, pp


def apply_seesaw(host_model, prefill_layout, decode_layout, store: KVStore, rank: int):
    """step(batch) -> (logits by sequence, phase): steps with a new sequence run under
    `prefill_layout`, pure decode steps under `decode_layout`; a phase change re-shards first."""
    st = {"phase": None, "model": None, "cache": None, "pp": None}
    layouts = {"prefill": prefill_layout, "decode": decode_layout}

    def reshard(phase):
        lengths = {}
        if st["cache"] is not None:
            lengths = swap_out(st["cache"], store, host_model.spec, layouts[st["phase"]], rank)
            st["model"] = st["cache"] = None  # free the old shard and KV before loading the new one
            barrier()
        st["model"], st["pp"] = load_shard(host_model, layouts[phase])
        st["cache"] = make_cache(st["model"])
        swap_in(st["cache"], store, host_model.spec, layouts[phase], rank, lengths)
        st["phase"] = phase
        barrier()  # nobody pushes the next switch's KV while a peer still reads this one

    def step(batch):
        known = st["cache"].lengths if st["cache"] is not None else {}
        phase = "prefill" if any(sid not in known for sid in batch.seq_ids) else "decode"
        if phase != st["phase"]:
            reshard(phase)
        if layouts[phase].pp > 1:
            return pipeline_step(st["model"], st["cache"], batch, st["pp"]), phase
        return run_step(st["model"], st["cache"], batch), phase
    return step
