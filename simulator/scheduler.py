"""vLLM v1 continuous-batching decisions as pure functions on the running batch's arrays.

No clock here: the engine asks `schedule` what runs next and applies the result when the step
ends. Running requests come first (decodes and unfinished prefill chunks, in running order),
then waiting requests fill the rest of the token budget (decode-first, vLLM v1); KV blocks are
allocated for every scheduled token; when they run out the last running request is preempted
(recompute: its KV is freed and it re-prefills prompt + generated tokens later).
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Batch:
    """The running batch: parallel arrays, one entry per running request (running order)."""

    idx: np.ndarray  # request positions in the workload
    prompt: np.ndarray  # input tokens
    output: np.ndarray  # output tokens to generate (0: prefill only)
    computed: np.ndarray  # tokens whose KV is cached
    generated: np.ndarray  # output tokens sampled so far
    blocks: np.ndarray  # KV blocks held

    @classmethod
    def empty(cls) -> "Batch":
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z, z, z)

    def __len__(self) -> int:
        return len(self.idx)

    def wants(self) -> np.ndarray:
        """Tokens each request needs computed before it can sample: 1 while decoding."""
        return self.prompt + self.generated - self.computed

    def keep(self, mask) -> "Batch":
        return Batch(*(getattr(self, f.name)[mask] for f in dataclasses.fields(self)))

    def extend(self, idx, prompt, output, computed, generated, blocks) -> "Batch":
        cat = lambda a, b: np.concatenate([a, np.asarray(b, dtype=np.int64)])  # noqa: E731
        return Batch(cat(self.idx, idx), cat(self.prompt, prompt), cat(self.output, output),
                     cat(self.computed, computed), cat(self.generated, generated), cat(self.blocks, blocks))


def grant_in_order(wants: np.ndarray, budget: int) -> np.ndarray:
    """Tokens granted to each running request, in order, until the budget is spent."""
    if len(wants) == 0:
        return wants
    before = np.cumsum(wants) - wants
    return np.clip(budget - before, 0, wants)


def blocks_for(tokens, block_size: int):
    """KV blocks that hold `tokens` tokens (ceil division)."""
    return -(-np.asarray(tokens, dtype=np.int64) // block_size)


def step_aggregates(computed: np.ndarray, granted: np.ndarray) -> tuple:
    """(pt, ps, pairs, pkv, dn, dkv) of a step: a request granted one token after a non-empty
    context decodes, any other granted request prefills a chunk (perfmodel.batch semantics)."""
    g = granted.astype(float)
    c = computed.astype(float)
    dec = (granted == 1) & (computed > 0)
    pre = (granted > 0) & ~dec
    gp, cp = g[pre], c[pre]
    return (int(gp.sum()), int(pre.sum()), float((gp * cp + gp * (gp + 1) / 2).sum()),
            float((cp + gp).sum()), int(dec.sum()), float((c[dec] + 1).sum()))
