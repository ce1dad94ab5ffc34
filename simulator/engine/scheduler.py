"""vLLM v1 continuous-batching decisions as pure functions on the running batch's arrays.

No clock here: the engine asks `schedule` what runs next and applies the result when the step
ends. Running requests come first (decodes and unfinished prefill chunks, in running order),
then waiting requests fill the rest of the token budget (decode-first, vLLM v1); KV blocks are
allocated for every scheduled token; when they run out the last running request is preempted
(recompute: its KV is freed and it re-prefills prompt + generated tokens later).
"""
from __future__ import annotations

import numpy as np


def _row(i: int, doc: str) -> property:
    """Field i of every running request: a view of row i (assigning writes the row in place)."""
    return property(lambda self: self.a[i], lambda self, v: self.a.__setitem__(i, v), doc=doc)


class Batch:
    """The running batch: one (6, n) int64 array, a row per field and a column per running request
    (running order). Keeping, extending or advancing every request is then one numpy call, and
    for the batches seen in practice numpy's per-call cost, not n, is what a step costs."""

    __slots__ = ("a",)
    IDX, PROMPT, OUTPUT, COMPUTED, GENERATED, BLOCKS = range(6)
    idx = _row(0, "request positions in the workload")
    prompt = _row(1, "input tokens")
    output = _row(2, "output tokens to generate (0: prefill only)")
    computed = _row(3, "tokens whose KV is cached")
    generated = _row(4, "output tokens sampled so far")
    blocks = _row(5, "KV blocks held")

    def __init__(self, a: np.ndarray):
        self.a = a

    @classmethod
    def empty(cls) -> "Batch":
        return cls(np.zeros((6, 0), dtype=np.int64))

    def __len__(self) -> int:
        return self.a.shape[1]

    def __repr__(self) -> str:
        names = ("idx", "prompt", "output", "computed", "generated", "blocks")
        return "Batch(" + ", ".join(f"{k}={self.a[i].tolist()}" for i, k in enumerate(names)) + ")"

    def wants(self) -> np.ndarray:
        """Tokens each request needs computed before it can sample: 1 while decoding."""
        a = self.a
        return a[1] + a[4] - a[3]

    def keep(self, mask) -> "Batch":
        """The requests selected by `mask` (boolean, indices or slice)."""
        return Batch(self.a[:, mask])

    def extend(self, cols: np.ndarray) -> "Batch":
        """This batch followed by new requests: `cols` is (6, m) int64, one column per request."""
        return Batch(np.concatenate((self.a, cols), axis=1))


def grant_in_order(wants: np.ndarray, budget: int) -> np.ndarray:
    """Tokens granted to each running request, in order, until the budget is spent."""
    if len(wants) == 0:
        return wants
    before = np.cumsum(wants) - wants
    return np.clip(budget - before, 0, wants)


def blocks_for(tokens, block_size: int):
    """KV blocks that hold `tokens` tokens (ceil division)."""
    return -(-np.asarray(tokens, dtype=np.int64) // block_size)
