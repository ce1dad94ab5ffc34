"""Attention fits, one table per head_dim (other head dims interpolate between tables).

Prefill: efficiency (datasheet roofline / time) on a grid over (log2 s, log2 seqs*heads, log2 GQA),
s = the fresh-prefill length with the same query-key pairs per sequence; smoothed least squares in
log space. seqs*heads is the kernel's parallelism, GQA = heads / kv_heads its KV sharing.
Decode: t = fixed(seqs*kv_heads, GQA) + kv_bytes / bw(seqs*kv_heads, GQA), both on a grid over
(log2 seqs*kv_heads, log2 GQA): affine in the keys read for a fixed batch, as the simulator's
closed form needs; fitted by least squares in relative error (iteratively reweighted towards the
median), with fixed >= 0 and bw <= the datasheet HBM bandwidth.
"""
from __future__ import annotations

import numpy as np

from . import grid
from .point import PrefillPoint, ScalarGrid

KV_BYTES = 4.0  # bytes per key per KV head per head_dim element: K and V in bf16
PREFILL_SMOOTH = 1e-3  # weight of the second-difference penalty (held-out choice, docs/calibration.md)
DECODE_SMOOTH = 1e-4
DECODE_IRLS = 5  # reweighting rounds towards least absolute relative error
# Absorbed-MLA decode (the profile's `mla_decode` section, fitted by calibration/mla_decode.py) reads one
# latent per key, entered in the decode table as one KV head of an equivalent head_dim; these live here,
# beside KV_BYTES, because the profile and perfmodel.mla need them at run time, not only the fit.
LATENT = 576  # DeepSeek-V3 / Kimi-K2 kv_lora_rank 512 + qk_rope_head_dim 64: the tables' one latent width
ELEM_BYTES = {"bf16": 2.0, "fp8": 1.0}


def equiv_head_dim(kv_dtype: str) -> float:
    """head_dim under which KV_BYTES x head_dim is one latent's bytes (bf16 288, fp8 144)."""
    return LATENT * ELEM_BYTES[kv_dtype] / KV_BYTES


def _axis(values: np.ndarray, step: float, distinct_max: int = 0) -> np.ndarray:
    """Grid nodes for a log2 feature: its distinct values when few (measured lengths), else a
    uniform grid of `step` covering them."""
    v = np.unique(np.round(values, 6))
    if distinct_max and len(v) <= distinct_max:
        return v
    return np.arange(np.floor(v[0] / step) * step, v[-1] + step, step)


def causal_pairs(batch, seq_len, kv_len):
    """Causal query-key pairs of `batch` sequences of seq_len new tokens after kv_len - seq_len cached."""
    c = kv_len - seq_len
    return batch * (seq_len * c + seq_len * (seq_len + 1) / 2)


def _maximum(a, b):
    """np.maximum(a, b), in plain Python for two floats (one step at a time: a numpy call on
    scalars costs ~1 us); NaN propagates as in numpy."""
    if isinstance(a, float) and isinstance(b, float):
        return a if a >= b else b if a < b else a + b
    return np.maximum(a, b)


def prefill_features(pairs, seqs, heads, kv_heads):
    """(log2 s, log2 seqs*heads, log2 GQA): s solves s(s+1)/2 = pairs per sequence."""
    s = (np.sqrt(8.0 * pairs / _maximum(seqs, 1e-30) + 1.0) - 1.0) / 2.0
    return (np.log2(_maximum(s, 1e-30)), np.log2(_maximum(seqs * heads, 1e-30)),
            np.log2(_maximum(heads / kv_heads, 1.0)))


def prefill_roofline_s(pairs, kv_tokens, heads, kv_heads, head_dim, roof):
    """max(4 heads head_dim pairs / bf16 peak, KV bytes read / HBM) with datasheet numbers."""
    return _maximum(4.0 * heads * head_dim * pairs / (roof["peak_tflops"]["bf16"] * 1e12),
                    kv_tokens * KV_BYTES * kv_heads * head_dim / (roof["hbm_gbs"] * 1e9))


def fit_prefill(df, roof: dict, smooth: float = PREFILL_SMOOTH) -> dict:
    """Per head_dim: efficiency grid over (s, seqs*heads, GQA) from prefill rows (tidy frame)."""
    out = {}
    for dh, g in df.groupby("head_dim"):
        pairs = causal_pairs(g.batch.to_numpy(), g.seq_len.to_numpy(), g.kv_len.to_numpy())
        kv = g.batch.to_numpy() * g.kv_len.to_numpy()
        h, kvh = g.heads.to_numpy(), g.kv_heads.to_numpy()
        feats = prefill_features(pairs, g.batch.to_numpy(), h, kvh)
        axes = (_axis(feats[0], 0.5, 24), _axis(feats[1], 1.0), _axis(feats[2], 1.0))
        y = np.log(g.t_us.to_numpy() * 1e-6 / prefill_roofline_s(pairs, kv, h, kvh, dh, roof))
        shape = tuple(len(a) for a in axes)
        p = grid.lsq(grid.design(axes, feats), y, np.ones(len(y)), grid.second_differences(shape), smooth)
        out[str(int(dh))] = {"seq": _round(2.0 ** axes[0]), "seqs_x_heads": _round(2.0 ** axes[1]),
                             "gqa": _round(2.0 ** axes[2]), "eff_pct": _round(100 * np.exp(-p.reshape(shape)), 3)}
    return out


def fit_decode(df, roof: dict, smooth: float = DECODE_SMOOTH, irls: int = DECODE_IRLS) -> dict:
    """Per head_dim: fixed time and KV bandwidth grids over (seqs*kv_heads, GQA) from decode rows."""
    out = {}
    b_floor = 1e3 / roof["hbm_gbs"]  # us per MB at the datasheet HBM bandwidth
    for dh, g in df.groupby("head_dim"):
        b, kvh, h = g.batch.to_numpy(), g.kv_heads.to_numpy(), g.heads.to_numpy()
        feats = (np.log2(b * kvh), np.log2(np.maximum(h / kvh, 1.0)))
        axes = (_axis(feats[0], 0.5), _axis(feats[1], 1.0))
        shape = tuple(len(a) for a in axes)
        phi = grid.design(axes, feats)
        mb = b * g.kv_len.to_numpy() * KV_BYTES * kvh * dh / 1e6  # KV megabytes read
        x = np.hstack([phi, phi * mb[:, None]])
        t = g.t_us.to_numpy()
        y = t - mb * b_floor
        d = grid.second_differences(shape)
        z = np.zeros_like(d)
        pen = np.vstack([np.hstack([d, z]), np.hstack([z, d])])
        w = 1.0 / t
        for _ in range(irls):  # reweight |r|^2 -> ~|r|^1.5: closer to the median than least squares
            p = grid.lsq(x, y, w, pen, smooth)
            w = 1.0 / t / np.sqrt(np.maximum(np.abs((x @ p - y) / t), 0.01))
        p = grid.nonneg_lsq(x, y, w, pen, smooth, np.ones(x.shape[1], dtype=bool))
        n = phi.shape[1]
        out[str(int(dh))] = {"seqs_x_kv_heads": _round(2.0 ** axes[0]), "gqa": _round(2.0 ** axes[1]),
                             "fixed_us": _round(p[:n].reshape(shape)),
                             "kv_gbs": _round(1e3 / (b_floor + p[n:].reshape(shape)))}
    return out


def _round(x, digits: int = 4):
    """Nested lists rounded to `digits` significant digits, integral values as ints (small JSON)."""
    x = np.asarray(x, dtype=float)
    mag = np.floor(np.log10(np.where(x == 0, 1.0, np.abs(x))))
    scale = 10.0 ** (digits - 1 - mag)
    r = np.round(x * scale) / scale
    return _intify(r.tolist())


def _intify(v):
    if isinstance(v, list):
        return [_intify(x) for x in v]
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else v


class PrefillTable:
    """Parsed prefill grid of one head_dim."""

    __slots__ = ("axes", "leff", "_point")

    def __init__(self, d: dict):
        self.axes = tuple(np.log2(np.asarray(d[a], dtype=float)) for a in ("seq", "seqs_x_heads", "gqa"))
        self.leff = np.log(np.asarray(d["eff_pct"], dtype=float) / 100.0)
        self._point = ScalarGrid(self.axes, self.leff)

    def point(self, heads, kv_heads, head_dim, roof, layers: float = 1.0) -> PrefillPoint:
        """time_s at one point of floats for these heads, head_dim and roofline, times `layers` (compiled: the
        simulator's per-step lookup, perfmodel.steptable)."""
        return PrefillPoint(self._point, float(heads), float(kv_heads), float(head_dim), KV_BYTES,
                            roof["peak_tflops"]["bf16"] * 1e12, roof["hbm_gbs"] * 1e9, float(layers))

    def time_s(self, pairs, kv_tokens, seqs, heads, kv_heads, head_dim, roof):
        if _scalars(pairs, kv_tokens, seqs, heads, kv_heads):  # one step: Python floats, same numbers
            t = self.point(heads, kv_heads, head_dim, roof).time_s(float(pairs), float(kv_tokens), float(seqs))
            return np.float64(t)
        feats = prefill_features(pairs, seqs, heads, kv_heads)
        eff = np.exp(grid.interp(self.axes, self.leff, feats))
        return prefill_roofline_s(pairs, kv_tokens, heads, kv_heads, head_dim, roof) / eff


class DecodeTable:
    """Parsed decode grids of one head_dim: fixed seconds and seconds per KV byte."""

    __slots__ = ("axes", "fixed_s", "s_per_byte")

    def __init__(self, d: dict):
        self.axes = tuple(np.log2(np.asarray(d[a], dtype=float)) for a in ("seqs_x_kv_heads", "gqa"))
        self.fixed_s = np.asarray(d["fixed_us"], dtype=float) * 1e-6
        self.s_per_byte = 1.0 / (np.asarray(d["kv_gbs"], dtype=float) * 1e9)

    def terms(self, seqs, heads, kv_heads):
        """(fixed seconds, seconds per KV byte): beyond the largest measured seqs*kv_heads the fixed
        part grows in proportion (more of the same work), the per-byte part stays."""
        x = np.log2(np.maximum(np.asarray(seqs, dtype=float) * kv_heads, 1e-30))
        g = np.log2(max(heads / kv_heads, 1.0))
        (j, wj) = grid.locate(self.axes[1], g)
        j2 = min(int(j) + 1, len(self.axes[1]) - 1)
        a = (1 - wj) * self.fixed_s[:, j] + wj * self.fixed_s[:, j2]
        b = (1 - wj) * self.s_per_byte[:, j] + wj * self.s_per_byte[:, j2]
        ax = self.axes[0]
        fixed = np.interp(x, ax, a) * 2.0 ** np.maximum(x - ax[-1], 0.0)
        return fixed, np.interp(x, ax, b)

    def time_s(self, seqs, kv_tokens, heads, kv_heads, head_dim, kv_scale: float = 1.0):
        fixed, per_byte = self.terms(seqs, heads, kv_heads)
        return fixed + kv_scale * per_byte * np.asarray(kv_tokens, dtype=float) * KV_BYTES * kv_heads * head_dim


def _scalars(*xs) -> bool:
    """All of xs are single numbers (Python or numpy scalars, 0-d arrays)."""
    for x in xs:
        if not (isinstance(x, (int, float)) or getattr(x, "ndim", 1) == 0):
            return False
    return True


def by_head_dim(tables: dict, head_dim: float, fn):
    """fn(table) at `head_dim`: the exact table, else linear between the two nearest, else the nearest."""
    if head_dim in tables:
        return fn(tables[head_dim])
    dims = sorted(tables)
    if head_dim <= dims[0] or head_dim >= dims[-1]:
        return fn(tables[dims[0] if head_dim <= dims[0] else dims[-1]])
    hi = next(d for d in dims if d > head_dim)
    lo = dims[dims.index(hi) - 1]
    w = (head_dim - lo) / (hi - lo)
    return (1 - w) * fn(tables[lo]) + w * fn(tables[hi])
