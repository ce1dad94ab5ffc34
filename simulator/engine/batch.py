"""The running batch: request state of every running sequence, in named columns, with the sums a
step needs kept up to date as the batch changes (so a decode step costs O(1) numpy calls).

One (6, n) int64 array, a row per field and a column per running request (running order):
keeping, extending or advancing every request is then one numpy call, and for the batches seen in
practice numpy's per-call cost, not n, is what a step costs.
"""
from __future__ import annotations

import numpy as np

IDX, PROMPT, OUTPUT, COMPUTED, GENERATED, BLOCKS = range(6)
COLUMNS = ("idx", "prompt", "output", "computed", "generated", "blocks")


def blocks_for(tokens, block_size: int):
    """KV blocks that hold `tokens` tokens (ceil division)."""
    return -(-np.asarray(tokens, dtype=np.int64) // block_size)


class RunningBatch:
    """Running requests (columns) and their cached sums. `decoding`: every request is past its
    prefill and wants exactly one token (the scheduler's fast path); `sum_computed`: keys cached
    over the batch; `steps_to_done`: all-decode steps until the first completion (None: unknown)."""

    __slots__ = ("a", "sum_computed", "steps_to_done", "decoding")

    def __init__(self, a: np.ndarray | None = None):
        self.a = np.zeros((6, 0), dtype=np.int64) if a is None else a
        self.sum_computed = int(np.add.reduce(self.a[COMPUTED]))
        self.steps_to_done = None
        self.decoding = True

    def __len__(self) -> int:
        return self.a.shape[1]

    def __repr__(self) -> str:
        return "RunningBatch(" + ", ".join(f"{k}={self.a[i].tolist()}" for i, k in enumerate(COLUMNS)) + ")"

    # named views of the rows (assigning writes in place)
    idx = property(lambda self: self.a[IDX], doc="request positions in the workload")
    prompt = property(lambda self: self.a[PROMPT], doc="input tokens")
    output = property(lambda self: self.a[OUTPUT], doc="output tokens to generate (0: prefill only)")
    computed = property(lambda self: self.a[COMPUTED], doc="tokens whose KV is cached")
    generated = property(lambda self: self.a[GENERATED], doc="output tokens sampled so far")
    blocks = property(lambda self: self.a[BLOCKS], doc="KV blocks held")

    def wants(self) -> np.ndarray:
        """Tokens each request needs computed before it can sample: 1 while decoding."""
        a = self.a
        return a[PROMPT] + a[GENERATED] - a[COMPUTED]

    def first_completion(self) -> int:
        """All-decode steps until the first request completes: min(output - generated)."""
        if self.steps_to_done is None:
            a = self.a
            self.steps_to_done = int(np.minimum.reduce(a[OUTPUT] - a[GENERATED]))
        return self.steps_to_done

    # ---- changes (each keeps the cached sums exact) -------------------------------------------
    def pop_tail(self) -> tuple[int, int, int]:
        """Remove the last request (recompute preemption): (position, generated, blocks held)."""
        a = self.a
        pos, gen, blocks, comp = int(a[IDX, -1]), int(a[GENERATED, -1]), int(a[BLOCKS, -1]), int(a[COMPUTED, -1])
        self.a = a[:, :-1]
        self.sum_computed -= comp
        self.steps_to_done = None
        return pos, gen, blocks

    def append(self, cols: list) -> None:
        """Admit requests: `cols` = [(idx, prompt, output, computed=0, generated, blocks=0), ...]."""
        self.a = np.concatenate((self.a, np.array(cols, dtype=np.int64).T), axis=1)
        self.steps_to_done = None  # admitted requests have computed nothing yet: the sum stands
        self.decoding = False

    def remove(self, keep: np.ndarray) -> None:
        """Keep the requests selected by the boolean mask `keep`."""
        a = self.a
        gone = ~keep
        self.sum_computed -= int(np.add.reduce(a[COMPUTED, gone]))
        self.a = a[:, keep]
        self.steps_to_done = None

    def decode(self, k: int, block_size: int) -> np.ndarray:
        """Every request computed and sampled k tokens (a k-step decode stretch); returns the
        boolean mask of those now done."""
        a = self.a
        a[COMPUTED:GENERATED + 1] += k
        np.floor_divide(a[COMPUTED] + (block_size - 1), block_size, out=a[BLOCKS])
        self.sum_computed += k * a.shape[1]
        if self.steps_to_done is not None and k < self.steps_to_done:
            self.steps_to_done -= k
            return None  # no completion inside or at the end of this stretch
        self.steps_to_done = None
        return a[GENERATED] >= a[OUTPUT]

    def grow(self, granted: np.ndarray, block_size: int) -> None:
        """Running requests computed `granted` tokens each (any mix of prefill chunks and decodes)."""
        a = self.a
        a[COMPUTED] += granted
        np.floor_divide(a[COMPUTED] + (block_size - 1), block_size, out=a[BLOCKS])
        self.sum_computed += int(np.add.reduce(granted))
        self.steps_to_done = None

    def used_blocks(self) -> int:
        return int(np.add.reduce(self.a[BLOCKS]))
