"""SpecStep: an aggregated engine's step times under speculative decoding (MTP / EAGLE draft chains).

A StepTable wrapped so that every decoding request's share of a step is costed per emitted token, as the
disaggregated decode pool costs it (perfmodel.specdec.per_token_affine: d draft passes + a verify pass over
n x (1 + d) rows, divided by the T(d, p) tokens a request emits a step). The engine still advances decoders one
token a step, so a step stands for one emitted token: its decode part is the per-token line, its prefill part
(prompt chunks) is unchanged:

    step_s(agg) = base.step_s(agg) + [c0' - c0 + (c1' - c1) x keys]   where the decoders are n = agg.decode_seqs,
    decode lines (c0, c1) of the plain table and (c0', c1') per emitted token.

An all-decode step is then exactly the per-token line the closed-form stretches use (decode_line), so the fast
path and the step-by-step run agree. Means (TTFT, TPOT, throughput) are those of whole steps; step counts are
T x too many. Costed with the group's equal load where attention-DP ranks step in lock step.
"""
from __future__ import annotations

from perfmodel.specdec import per_token_affine
from simulator.engine.runner import DecodeLine


class SpecStep:
    """A StepTable (`base`) under speculative decoding `sd` (perfmodel.specdec.SpecDecode); other attributes are
    the base table's."""

    __slots__ = ("base", "sd", "num_layers", "_lines")

    def __init__(self, base, sd, num_layers: int):
        self.base, self.sd, self.num_layers = base, sd, num_layers
        self._lines: dict = {}  # n -> (plain DecodeAffine, per-token DecodeAffine)

    def __getattr__(self, name):  # padded, dispatch, max_tokens, ... of the wrapped table
        return getattr(self.base, name)

    def _pair(self, n: int):
        got = self._lines.get(n)
        if got is None:
            got = self._lines[n] = (self.base.decode_affine(n), per_token_affine(self.base, n, self.sd, self.num_layers))
        return got

    def decode_affine(self, n: int, rank_tokens=None):
        return self._pair(n)[1]

    def decode_line(self, n: int, k0: float, steps: int) -> DecodeLine:
        line = self._pair(n)[1]
        return DecodeLine(line.c0_s, line.c1_s_per_key, steps)

    def step_s(self, agg, rank_tokens=None) -> float:
        t = self.base.step_s(agg, rank_tokens=rank_tokens)
        n = agg.decode_seqs
        if not n:
            return t
        plain, spec = self._pair(n)
        return t + (spec.c0_s - plain.c0_s) + (spec.c1_s_per_key - plain.c1_s_per_key) * agg.decode_kv_tokens
