"""One point of a fitted grid, and the calibrated prefill-attention time of one step: plain floats, compiled.

The simulator asks a profile's prefill table once per step with prompts whose aggregates it has not priced before
(perfmodel.steptable), ~230k times in an overloaded million-request run (issue 36). Interpreted, the lookup cost
~8.2 us (0.75 us compiled, 2026-12-03); this module is in perfmodel/native.py NATIVE, so mypyc compiles it: the
same operations on C doubles (setup.py turns off contraction into fused multiply-adds), with numpy's own log2 and
exp, so every number equals the array path's (grid.interp, attention.prefill_features / prefill_roofline_s) bit for bit
(tests/test_prefill_fast_path.py, tests/test_steptable.py). Interpreted it gives the same numbers.
"""
from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

_np: Any = np  # (numpy untyped here, as setup.py builds against no installed package)


def strides(shape: tuple) -> tuple[int, ...]:
    """Flat-index step of each axis of a C-ordered grid of `shape`."""
    return tuple(int(_np.prod(shape[i + 1:])) for i in range(len(shape)))


def corners(axis: list[float], c: float, step: int) -> tuple[int, int, float, float]:
    """The cell of one axis (a list of floats) holding c, clamped to the axis ends: (lower node's flat offset,
    upper node's, lower weight, upper weight); a one-node axis: the node, weights 1 and 0. bisect_right as the
    bisect module's (the same halving), on C doubles."""
    n = len(axis)
    if n == 1:
        return 0, 0, 1.0, 0.0
    lo, hi = axis[0], axis[n - 1]
    c = lo if c < lo else hi if c > hi else c
    a, b = 0, n
    while a < b:  # (bisect.bisect_right(axis, c))
        mid = (a + b) // 2
        if c < axis[mid]:
            b = mid
        else:
            a = mid + 1
    i = min(max(a - 1, 0), n - 2)
    f = (c - axis[i]) / (axis[i + 1] - axis[i])
    return i * step, (i + 1) * step, 1.0 - f, f


def _inner(out: float, flat: list[float], uv: float, k: int, c: tuple[int, int, float, float]) -> float:
    """blend3's two corners along the last axis for one corner (weight uv, flat offset k) of the first two."""
    w = uv * c[2]
    if w:
        out += w * flat[k + c[0]]
    w = uv * c[3]
    if w:
        out += w * flat[k + c[1]]
    return out


def blend3(flat: list[float], a: tuple[int, int, float, float], b: tuple[int, int, float, float],
           c: tuple[int, int, float, float]) -> float:
    """blend of a 3-axis grid unrolled: the same corners in the same order (first axis outermost), each weight
    ((w0 x w1) x w2) and the sum in that order, so equal bit for bit."""
    out = _inner(0.0, flat, a[2] * b[2], a[0] + b[0], c)
    out = _inner(out, flat, a[2] * b[3], a[0] + b[1], c)
    out = _inner(out, flat, a[3] * b[2], a[1] + b[0], c)
    return _inner(out, flat, a[3] * b[3], a[1] + b[1], c)


def blend(cs: list, flat: list[float]) -> float:
    """Sum of corner weight x value over the 2^d corners of `cs` (per axis: corners()), zero weights skipped, in
    a fixed order (the first axis outermost, each axis's lower corner first)."""
    out = 0.0
    for corner in itertools.product(*[((x[0], x[2]), (x[1], x[3])) for x in cs]):
        w, k = 1.0, 0
        for off, wk in corner:
            w *= wk
            k += off
        if w:
            out += w * flat[k]
    return out


class ScalarGrid:
    """grid.interp at one point for a grid asked many times (a fitted table): the axes and values as
    Python lists once, so a point costs a few microseconds (under one compiled); equal to it bit for bit."""

    def __init__(self, axes: tuple, values: Any) -> None:
        self.axes: list[list[float]] = [_np.asarray(a, dtype=float).tolist() for a in axes]
        self.flat: list[float] = _np.asarray(values, dtype=float).ravel().tolist()
        self.steps: list[int] = list(strides(_np.shape(values)))

    def point3(self, x0: float, x1: float, x2: float) -> float:
        """The value at (x0, x1, x2) of a 3-axis grid."""
        ax, st = self.axes, self.steps
        return blend3(self.flat, corners(ax[0], x0, st[0]), corners(ax[1], x1, st[1]), corners(ax[2], x2, st[2]))

    def __call__(self, coords: tuple) -> float:
        if len(self.axes) == 3:
            return self.point3(float(coords[0]), float(coords[1]), float(coords[2]))
        return blend([corners(a, float(c), st) for a, c, st in zip(self.axes, coords, self.steps)], self.flat)


def _maximum(a: float, b: float) -> float:
    """np.maximum of two floats (NaN propagates as in numpy)."""
    return a if a >= b else b if a < b else a + b


class PrefillPoint:
    """attention.PrefillTable.time_s at one point of Python floats, for fixed heads, KV heads, head_dim, KV bytes
    per key, head and element, and datasheet roofline (peak bf16 FLOP/s, HBM bytes/s), times `layers`:
    prefill_features and prefill_roofline_s written for floats (the same operations in the same order), the grid
    point compiled, log2(seqs x heads) kept per seqs (a few distinct values)."""

    def __init__(self, table: ScalarGrid, heads: float, kv_heads: float, head_dim: float, kv_bytes: float,
                 peak_flops: float, hbm_bytes_s: float, layers: float = 1.0) -> None:
        self.table = table
        self.heads, self.kv_heads, self.head_dim, self.kv_bytes = heads, kv_heads, head_dim, kv_bytes
        self.flops_per_pair = 4.0 * heads * head_dim  # (prefill_roofline_s's 4 heads head_dim, that order)
        self.peak_flops, self.hbm_bytes_s, self.layers = peak_flops, hbm_bytes_s, layers
        self.log2_gqa: float = _np.log2(_maximum(heads / kv_heads, 1.0))
        self.log2_par: dict[float, float] = {}

    def time_s(self, pairs: float, kv_tokens: float, seqs: float) -> float:
        """Seconds of one layer's prefill attention."""
        # (math.sqrt where prefill_features has np.sqrt: both correctly rounded)
        s = (math.sqrt(8.0 * pairs / _maximum(seqs, 1e-30) + 1.0) - 1.0) / 2.0
        x1 = self.log2_par.get(seqs)
        if x1 is None:
            x1 = self.log2_par[seqs] = _np.log2(_maximum(seqs * self.heads, 1e-30))
        x0: float = _np.log2(_maximum(s, 1e-30))
        eff: float = _np.exp(self.table.point3(x0, x1, self.log2_gqa))
        roof = _maximum(self.flops_per_pair * pairs / self.peak_flops,
                        kv_tokens * self.kv_bytes * self.kv_heads * self.head_dim / self.hbm_bytes_s)
        return roof / eff

    def stage_s(self, pairs: float, kv_tokens: float, seqs: float) -> float:
        """Seconds of the busiest stage's `layers` layers (0 without sequences)."""
        return self.layers * self.time_s(pairs, kv_tokens, seqs) if seqs > 0 else 0.0

    def __call__(self, pairs: float, kv_tokens: float, seqs: float) -> float:
        return self.stage_s(pairs, kv_tokens, seqs)
