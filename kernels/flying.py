"""Flying Serving: every GPU is a DP engine with full weights; aligned contiguous groups of
engines bind into TP groups for selected requests and release them afterwards.

* Weights manager: a TP model is zero-copy views (column slices of wq/wk/wv/w1/w3, row slices of
  wo/w2, vocab rows) of the DP engine's own tensors: no new storage, no weight movement.
* KV adaptor: one block pool per GPU with fixed block bytes; a TP-k sequence stores 1/k of each
  token's KV heads per GPU, so its blocks hold k x the DP block's tokens. Both coexist.
* Communicator pool: the groups of every aligned contiguous range of sizes 2, 4, ... are built
  once at start (P-1 groups); a switch only selects a handle.
"""
from __future__ import annotations

import copy

from perfmodel.layout import ParallelLayout

from .dist import groups_created, make_group
from .dp import make_router
from .kvcache import make_cache, run_step
from .tp import apply_tp


def comm_pool(world_size: int) -> dict:
    """{(start, size): Group} for every aligned contiguous group this rank is in (all created)."""
    pool, size = {}, 2
    while size <= world_size:
        for start in range(0, world_size - size + 1, size):
            g = make_group([list(range(start, start + size))])
            if g.size > 1:
                pool[(start, size)] = g
        size *= 2
    return pool


def storages(model) -> set:
    return {p.untyped_storage().data_ptr() for p in model.parameters()}


def tp_view(model, group):
    """A TP-sharded model over `group` whose every weight is a view of `model`'s tensors."""
    skeleton = copy.deepcopy(model, memo={id(p): p for p in model.parameters()})
    view = apply_tp(skeleton, ParallelLayout(tp=group.size), group, views=True)
    new = storages(view) - storages(model)
    if new:
        raise AssertionError(f"Flying TP view allocated {len(new)} new weight storages")
    return view


def apply_flying(model, world_size: int, rank: int, placement: dict, num_blocks: int = 96):
    """step(batch) -> (logits by sequence, modes): requests in `placement` ({sid: (start, size)},
    the scheduler's choice) run in TP over that engine group, the rest on DP engines (router)."""
    pool = comm_pool(world_size)
    views = {key: tp_view(model, g) for key, g in pool.items()}  # built once, zero-copy
    cache = make_cache(model, num_blocks=num_blocks)  # the DP engine's pool, shared by both modes
    route = make_router(world_size)

    def step(batch):
        out, modes = {}, []
        tp_seqs = [s for s in batch.seq_ids if s in placement]
        for key in sorted({placement[s] for s in tp_seqs}):  # same order on every rank
            if key in views:
                out.update(run_step(views[key], cache, batch.subset([s for s in tp_seqs if placement[s] == key])))
                modes.append(f"tp{key[1]}@{key[0]}")
        mine = route(batch.subset([s for s in batch.seq_ids if s not in placement]))[rank]
        if mine.seq_ids:
            out.update(run_step(model, cache, mine))
            modes.append("dp")
        return out, modes
    step.cache, step.pool, step.views, step.groups_at_build = cache, pool, views, groups_created()
    return step
