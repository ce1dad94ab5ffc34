"""Issue 36: the running batch's incremental sums (written out in append, set and remove, a call less per
admission, token and completion) equal a recount from its columns after any sequence of changes; and the
per-second buckets of the summary's peak figures are the same whether summed densely or sorted."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from simulator.engine.batch import RunningBatch
from simulator.run_record import _bucket_sums

BS = 16


def recount(b: RunningBatch) -> tuple:
    """(keys cached, private blocks held, requests per phase) counted request by request."""
    computed = b.computed()
    phases = collections.Counter((c - b.clock) % BS for c in computed)
    return sum(computed), sum(b.blocks()), [phases.get(p, 0) for p in range(BS)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_sums_match_a_recount(seed):
    rng = np.random.default_rng(seed)
    b, nxt = RunningBatch(BS), 0
    for _ in range(400):
        op = rng.integers(0, 4)
        if op == 0 or not len(b):  # admit: a fresh prompt, a preempted one (generated > 0), or a cache hit
            prompt, out = int(rng.integers(1, 300)), int(rng.integers(1, 200))
            computed = int(rng.integers(0, prompt))
            own = int(rng.integers(0, computed // BS + 1))
            b.append(nxt, prompt, out, computed, int(rng.integers(0, 3)), own)
            nxt += 1
        elif op == 1:  # a chunk or a token: computed and generated move (or stay)
            i = int(rng.integers(0, len(b)))
            c, g = b.computed()[i], b.generated()[i]
            b.set(i, c + int(rng.integers(0, 40)), g + int(rng.integers(0, 2)))
        elif op == 2:  # k decode steps of every request
            b.decode(int(rng.integers(1, 40)))
        else:  # some requests leave (completions, a preemption)
            at = sorted({int(x) for x in rng.integers(0, len(b), size=int(rng.integers(1, 4)))})
            b.remove(at)
        keys, blocks, phases = recount(b)
        assert b.sum_computed == keys
        assert b.used_blocks == blocks
        assert b.phase == phases


def test_bucket_sums_dense_and_sorted_agree():
    """Dense (bincount over the range) where the buckets span a few times their number, sorted otherwise: the
    same buckets and the same sums, in input order (exact: the weights are counts)."""
    rng = np.random.default_rng(3)
    b = rng.integers(0, 500, 4000)
    w = rng.integers(-3, 4, 4000).astype(float)
    dense = _bucket_sums(b, w)
    ub, inv = np.unique(b, return_inverse=True)
    assert np.array_equal(dense[0], ub) and np.array_equal(dense[1], np.bincount(inv, weights=w))
    far = np.append(b, 10**15)  # a timestamp in the wrong unit: sorted, not a petabyte of buckets
    sparse = _bucket_sums(far, np.append(w, 1.0))
    assert np.array_equal(sparse[0][:-1], ub) and sparse[0][-1] == 10**15
    assert np.array_equal(sparse[1][:-1], dense[1]) and sparse[1][-1] == 1.0
    assert len(_bucket_sums(np.zeros(0, np.int64), np.zeros(0))[0]) == 0
