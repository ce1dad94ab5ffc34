"""StepTable: the simulator's fast path to `step_cost`, tabulated once per layout.

A step's time is token_terms(T) + seq_terms(S) + attention(batch) + overhead (cost.py), and with
PP pp times that of a micro-batch of 1/m of the batch. The first two are tabulated over integer
T and S (one vectorised step_cost pass each); decode attention is affine in the keys read, so
it is two tables; prefill attention is evaluated directly, once per distinct chunk (cached), on
plain floats (~20 us with a calibrated profile: the scalar paths of ops and calibration, equal to
the vectorised ones bit for bit). A scalar step then costs a few microseconds instead of ~120, and
a decode stretch is affine in total context.
tests/test_steptable.py checks the table against step_cost on random batches.
"""
from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from .batch import DecodeAffine, StepAgg, StepBatch, make_batch
from .calibration.point import PrefillPoint
from .cost import (attention_s, dispatches_experts, routed_experts_s, scalar_prefill_attention, seq_terms, step_cost,
                   token_terms)
from .framework import DEFAULT_FRAMEWORK, Framework, graph_tokens
from .graphs import capture_sizes


class StepTable:
    """Step time of one instance layout for scalar batches; exact at the table's grid points."""

    def __init__(self, spec, layout, hw, prof=None, fw: Framework = DEFAULT_FRAMEWORK,
                 max_tokens: int = 16384, max_seqs: int = 1024):
        self.spec, self.layout, self.hw, self.prof, self.fw = spec, layout, hw, prof, fw
        self.pp = layout.pp
        self.max_tokens, self.max_seqs = max_tokens, max_seqs
        graphs = capture_sizes(fw, layout, hw.hbm_bytes)  # (this instance's: perfmodel.graphs)
        t = np.arange(max(max_tokens, max(graphs, default=0)) + 1, dtype=float)
        s = np.arange(max_seqs + 1, dtype=float)
        # attention-DP ranks dispatching to EP: the routed experts apart, costed at the EP group's mean load
        # (time_s's rank_tokens; the costed rank's own tokens unless a lock-step tick says otherwise)
        self.dispatch = dispatches_experts(layout) and spec.num_moe_layers > 0
        self._tok = sum(token_terms(spec, layout, hw, t, prof, fw, routed=not self.dispatch).values()).tolist()
        self._routed: dict = {}  # routed-expert seconds by mean padded tokens per rank
        # tokens a step is costed at (CUDA-graph padding, perfmodel.framework.graph_tokens): [mixed, decode-only]
        self._pad = [graph_tokens(t[:max_tokens + 1].astype(int), d, fw, graphs).tolist() for d in (False, True)]
        self._seq = sum(seq_terms(spec, layout, hw, s, prof, fw).values()).tolist()
        # decode attention = a[n] + b[n] * keys: the line through two points per n, both above any
        # sliding window (sliding layers read min(context, window) keys: exact for longer contexts)
        k0, k1 = 2.0 * max(spec.sliding_window, 1), 1e6
        a0 = attention_s(spec, layout, hw, make_batch(decode_seqs=s, decode_kv_tokens=k0 * s), prof)
        a1 = attention_s(spec, layout, hw, make_batch(decode_seqs=s, decode_kv_tokens=k1 * s), prof)
        b = np.where(s > 0, (a1 - a0) / np.maximum((k1 - k0) * s, 1), 0.0)
        a = a0 - b * k0 * s
        self._dec_a, self._dec_b = a.tolist(), b.tolist()
        # prefill attention of one sequence's first chunk of L tokens (no cached context), the most
        # common prefill step: one vectorised pass (the same numbers as one-by-one, tested)
        L = t[1:]
        fresh = attention_s(spec, layout, hw, make_batch(prefill_tokens=L, prefill_seqs=1.0,
                                                         prefill_pairs=L * (L + 1) / 2, prefill_kv_tokens=L), prof)
        self._fresh = [0.0] + np.broadcast_to(fresh, L.shape).tolist()
        self._prefill_cache: dict = {}  # prefill attention by (pt, ps, pairs, pkv)
        self._prefill_s: PrefillPoint | None = scalar_prefill_attention(spec, layout, prof)  # (a calibrated table's)

    def routed_s(self, rank_tokens: float) -> float:
        """Routed experts of a step when the EP group's ranks hold `rank_tokens` padded tokens on average."""
        t = self._routed.get(rank_tokens)
        if t is None:
            if len(self._routed) > 100_000:
                self._routed.clear()
            t = self._routed[rank_tokens] = float(routed_experts_s(self.spec, self.layout, self.hw, float(rank_tokens),
                                                                   self.prof, self.fw))
        return t

    def padded(self, pt: int, dn: int) -> int:
        """Tokens the step of `pt` prefill and `dn` decode tokens is costed at (CUDA-graph padding)."""
        return self._pad[pt == 0][pt + dn] if pt + dn <= self.max_tokens else pt + dn

    def _micro(self, pt: int, ps: int, pairs: float, pkv: float, dn: int, dkv: float, m: int,
               rank_tokens=None) -> float:
        """Seconds of the largest of m micro-batches through the busiest stage (batch.micro_batch)."""
        if m > 1:
            own = self._pad[pt == 0][pt + dn]
            mpt, mps, mdn = -(-pt // min(m, max(ps, 1))), -(-ps // m), -(-dn // m)  # a chunk is not split
            pairs, pkv = (pairs * mpt / pt, pkv * mpt / pt) if pt else (0.0, 0.0)
            dkv = dkv * mdn / dn if dn else 0.0
            pt, ps, dn = mpt, mps, mdn
            if rank_tokens is not None:  # the group's load in the same proportion as this rank's
                rank_tokens = rank_tokens * self._pad[pt == 0][pt + dn] / own
        padded = self._pad[pt == 0][pt + dn]
        t = self._tok[padded] + self._seq[ps + dn]
        if self.dispatch:
            t += self.routed_s(padded if rank_tokens is None else rank_tokens)
        if dn:
            t += self._dec_a[dn] + self._dec_b[dn] * dkv
        if pt:
            if ps == 1 and pkv == pt and pairs * 2 == pt * (pt + 1):  # one sequence's first chunk
                return t + self._fresh[pt]
            key = (pt, ps, pairs, pkv)  # exact: the same aggregates give the same time
            a = self._prefill_cache.get(key)
            if a is None:
                if len(self._prefill_cache) > 200_000:  # bound the memory of very long runs
                    self._prefill_cache.clear()
                pf = self._prefill_s
                if pf is not None:  # one calibrated table: its lookup alone (compiled: calibration/point.py)
                    a = self._prefill_cache[key] = pf.stage_s(float(pairs), float(pkv), float(ps))
                else:  # plain floats, not make_batch's 0-d arrays: the same numbers at a fraction of the cost
                    b = cast(Any, StepBatch)(float(pt), float(ps), float(pairs), float(pkv), 0.0, 0.0)
                    a = self._prefill_cache[key] = float(attention_s(self.spec, self.layout, self.hw, b, self.prof))
            t += a
        return t

    def _fits(self, pt: int, dn: int, ps: int) -> bool:
        return pt + dn <= self.max_tokens and ps + dn <= self.max_seqs

    def time_s(self, pt: int = 0, ps: int = 0, pairs: float = 0.0, pkv: float = 0.0, dn: int = 0, dkv: float = 0.0,
               rank_tokens=None) -> float:
        """Seconds of one step: `pt` prefill tokens over `ps` sequences (`pairs` causal pairs, `pkv`
        keys), `dn` decoding sequences reading `dkv` keys in total. `rank_tokens`: where this rank's
        routed experts serve an EP group of attention-DP ranks, their mean padded tokens this step
        (simulator.engine.lockstep; None: as many as this rank's, the closed form's equal load)."""
        if pt + dn == 0:
            return 0.0
        if not self._fits(pt, dn, ps):  # beyond the table: step_cost (padding: none that far)
            share = 1.0 if rank_tokens is None else rank_tokens / (pt + dn)
            return float(step_cost(self.spec, self.layout, self.hw, make_batch(pt, ps, pairs, pkv, dn, dkv),
                                   self.prof, self.fw, load_share=share).total_s)
        m = max(1, min(self.pp, ps + dn))
        return self.pp * self._micro(pt, ps, pairs, pkv, dn, dkv, m, rank_tokens) + self.fw.step_overhead_s \
            + self.hw.host_prefill_seq_s * ps + self.fw.seq_overhead_s * (ps + dn)

    def step_s(self, agg: StepAgg, rank_tokens=None) -> float:
        """Seconds of one step of aggregates `agg` (a perfmodel.batch.StepAgg), read by name."""
        return self.time_s(agg.prefill_tokens, agg.prefill_seqs, agg.prefill_pairs, agg.prefill_kv_tokens,
                           agg.decode_seqs, agg.decode_kv_tokens, rank_tokens)

    def decode_affine(self, dn: int, rank_tokens=None) -> DecodeAffine:
        """DecodeAffine(c0, c1): a decode-only step of `dn` sequences reading K keys takes c0 + c1 * K seconds
        (`rank_tokens`: as time_s's)."""
        if not self._fits(0, dn, 0):
            t0 = self.time_s(dn=dn, dkv=0.0, rank_tokens=rank_tokens)
            return DecodeAffine(t0, (self.time_s(dn=dn, dkv=1e6 * dn, rank_tokens=rank_tokens) - t0) / (1e6 * dn))
        m = max(1, min(self.pp, dn))
        t0 = self._micro(0, 0, 0, 0, dn, 0.0, m, rank_tokens)  # (evaluated once: c0 and c1 both need it)
        c0 = self.pp * t0 + self.fw.step_overhead_s + self.fw.seq_overhead_s * dn
        c1 = self.pp * (self._micro(0, 0, 0, 0, dn, 1.0 * dn, m, rank_tokens) - t0) / dn
        return DecodeAffine(c0, c1)


def decode_stretch_s(c0: float, c1: float, k0: float, n: int, steps: int) -> float:
    """Total seconds of `steps` decode steps of n sequences starting at K = k0 keys, each step
    adding n keys: sum_{j<steps} c0 + c1 * (k0 + j n) (closed form)."""
    return steps * c0 + c1 * (steps * k0 + n * steps * (steps - 1) / 2.0)


def steps_guess(c0: float, c1: float, k0: float, n: int, budget_s: float) -> int:
    """Whole decode steps within budget_s by the quadratic, right up to rounding (callers check it exactly)."""
    if budget_s <= 0:
        return 0
    # solve (c1 n / 2) k^2 + (c0 + c1 k0 - c1 n / 2) k - budget = 0 for k
    qa, qb = c1 * n / 2.0, c0 + c1 * k0 - c1 * n / 2.0
    if qa <= 0:
        return int(budget_s / qb) if qb > 0 else 0
    return int((-qb + math.sqrt(qb * qb + 4 * qa * budget_s)) / (2 * qa))


def steps_within(c0: float, c1: float, k0: float, n: int, budget_s: float) -> int:
    """Largest number of whole decode steps whose total time is <= budget_s (0 if none)."""
    if budget_s <= 0:
        return 0
    k = steps_guess(c0, c1, k0, n, budget_s)
    while k > 0 and decode_stretch_s(c0, c1, k0, n, k) > budget_s:
        k -= 1
    while decode_stretch_s(c0, c1, k0, n, k + 1) <= budget_s:
        k += 1
    return k
