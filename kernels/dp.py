"""Data parallelism: full replicas, each with its own KV cache; a router assigns requests."""
from __future__ import annotations

from .kvcache import TokenBatch


def make_router(num_replicas: int):
    """route(batch) -> one sub-batch per replica. A new request goes to the replica with the
    fewest tokens routed so far (least-loaded, ties to the lowest index) and stays there."""
    owner: dict = {}
    load = [0] * num_replicas

    def route(batch: TokenBatch) -> list[TokenBatch]:
        for sid, n in zip(batch.seq_ids, batch.lens):
            if sid not in owner:
                owner[sid] = min(range(num_replicas), key=lambda r: (load[r], r))
            load[owner[sid]] += n
        return [batch.subset([s for s in batch.seq_ids if owner[s] == r]) for r in range(num_replicas)]
    route.owner = owner
    return route


def apply_dp(model, layout, group=None):
    """A DP replica keeps the full model (no per-step communication); returns (model, router)."""
    return model, make_router(layout.dp)
