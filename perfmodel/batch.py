"""StepBatch: the aggregates of one engine step that its cost depends on (vectorised over steps).

A step's cost depends on its sequences only through these sums, so 100k steps are 100k-long
arrays and a decode stretch is affine in `decode_kv_tokens` (the simulator's closed form).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class StepBatch:
    """Aggregates of one (or, with arrays, many) engine steps. Token counts are per instance."""

    prefill_tokens: np.ndarray  # new tokens of sequences in prefill (chunks included)
    prefill_seqs: np.ndarray  # sequences with a prefill chunk in this step
    prefill_pairs: np.ndarray  # sum over prefill seqs of n*c + n(n+1)/2 (causal query-key pairs)
    prefill_kv_tokens: np.ndarray  # sum over prefill seqs of c + n (keys read)
    decode_seqs: np.ndarray  # sequences decoding one token each
    decode_kv_tokens: np.ndarray  # sum over decode seqs of c + 1 (keys read)

    @property
    def tokens(self) -> np.ndarray:
        return self.prefill_tokens + self.decode_seqs

    @property
    def seqs(self) -> np.ndarray:
        return self.prefill_seqs + self.decode_seqs


class StepAgg(NamedTuple):
    """One step's aggregates, StepBatch's fields as plain numbers (the simulator builds one a step: exact
    integers, so the floats are too); StepTable.step_s(agg) and step records read them by name."""

    prefill_tokens: int
    prefill_seqs: int
    prefill_pairs: float
    prefill_kv_tokens: float
    decode_seqs: int
    decode_kv_tokens: float

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs


class DecodeAffine(NamedTuple):
    """A decode-only step of n sequences reading K keys in all takes c0_s + c1_s_per_key x K seconds
    (StepTable.decode_affine; perfmodel.specdec.per_token_affine per emitted token)."""

    c0_s: float
    c1_s_per_key: float


def micro_batch(batch: StepBatch, m) -> StepBatch:
    """The largest of m pipeline micro-batches (it paces the pipeline): ceil(1/m) of the
    sequences and prefill tokens, the rest of the aggregates in proportion."""
    m = np.asarray(m, dtype=float)
    m_p = np.minimum(m, np.maximum(batch.prefill_seqs, 1.0))  # a sequence's chunk is not split
    pt, ps = np.ceil(batch.prefill_tokens / m_p), np.ceil(batch.prefill_seqs / m)
    dn = np.ceil(batch.decode_seqs / m)
    share_p = np.where(batch.prefill_tokens > 0, pt / np.maximum(batch.prefill_tokens, 1), 0.0)
    share_d = np.where(batch.decode_seqs > 0, dn / np.maximum(batch.decode_seqs, 1), 0.0)
    return StepBatch(pt, ps, batch.prefill_pairs * share_p, batch.prefill_kv_tokens * share_p,
                     dn, batch.decode_kv_tokens * share_d)


def _arr(x) -> np.ndarray:
    return np.asarray(x, dtype=float)


def make_batch(prefill_tokens=0, prefill_seqs=0, prefill_pairs=0, prefill_kv_tokens=0,
               decode_seqs=0, decode_kv_tokens=0) -> StepBatch:
    """StepBatch from aggregates (scalars or arrays broadcast together)."""
    vals = np.broadcast_arrays(*(_arr(v) for v in (prefill_tokens, prefill_seqs, prefill_pairs,
                                                   prefill_kv_tokens, decode_seqs, decode_kv_tokens)))
    return StepBatch(*(np.array(v, dtype=float) for v in vals))


def aggregates(new_tokens, context_lens) -> tuple:
    """(prefill_tokens, prefill_seqs, prefill_pairs, prefill_kv_tokens, decode_seqs, decode_kv_tokens)
    of one step from per-sequence arrays: `new_tokens[i]` scheduled after `context_lens[i]` cached
    tokens. A sequence with one new token after a non-empty context decodes; others prefill.
    Python scalars, in StepTable.time_s's argument order (the simulator's hot path)."""
    n = np.asarray(new_tokens, dtype=float)
    c = np.asarray(context_lens, dtype=float)
    dec = (n == 1) & (c > 0)
    pre = (n > 0) & ~dec
    npre, cpre = n[pre], c[pre]
    return (int(npre.sum()), int(pre.sum()), float((npre * cpre + npre * (npre + 1) / 2).sum()),
            float((cpre + npre).sum()), int(dec.sum()), float((c[dec] + 1).sum()))


def batch_from_seqs(new_tokens, context_lens) -> StepBatch:
    """One step from per-sequence arrays (see `aggregates`)."""
    return make_batch(*aggregates(new_tokens, context_lens))


def prefill_batch(prompt_tokens, seqs=1, cached_tokens=0) -> StepBatch:
    """`seqs` sequences each prefilling `prompt_tokens` new tokens after `cached_tokens`."""
    n, s, c = _arr(prompt_tokens), _arr(seqs), _arr(cached_tokens)
    return make_batch(prefill_tokens=n * s, prefill_seqs=s, prefill_pairs=s * (n * c + n * (n + 1) / 2),
                      prefill_kv_tokens=s * (c + n))


def decode_batch(seqs, context_tokens) -> StepBatch:
    """`seqs` sequences decoding one token each with `context_tokens` keys each (mean)."""
    s, c = _arr(seqs), _arr(context_tokens)
    return make_batch(decode_seqs=s, decode_kv_tokens=s * c)
