"""GEMM fit: efficiency (datasheet roofline time / measured time) on the measured (m, n, k) grid,
interpolated trilinearly in (log m, log n, log k) and held constant outside it (so far outside the
grid time follows the roofline). Chosen over interpolating log time directly by held-out error
(docs/calibration.md: bf16 p90 11% vs 18%)."""
from __future__ import annotations

import numpy as np

from . import grid

# bytes per weight element; fp4 (NVFP4): half a byte + one fp8 scale per 16 elements = 9/16
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0, "fp4": 9 / 16}
# What a profile answers for a dtype it has no rows for: the CPU has fp32 GEMMs only, and perfmodel
# asks for "bf16" (a CPU profile measured only in fp32 still answers; microbench measures bf16 where the CPU has AVX512-BF16).
# fp8 and fp4 never fall back: an fp8 or bf16 table would make fp4 GEMMs 2-4x too slow, so without an fp4
# table perfmodel.ops uses its roofline at the fp4 peak instead.
DTYPE_FALLBACK = {"bf16": ("bf16", "fp16", "fp32"), "fp16": ("fp16", "bf16", "fp32"), "fp8": ("fp8",),
                  "fp32": ("fp32", "bf16", "fp16"), "fp4": ("fp4",)}


def roofline_s(m, n, k, dtype: str, roof: dict):
    """max(2mnk / peak, bytes / HBM): weights n*k in `dtype`, activations m*k in and m*n out
    (bf16, fp32 for fp32 GEMMs; counted as bf16 for fp8 / fp4 too), with the datasheet numbers in `roof`.
    A normalisation: fit and prediction divide by the same roofline, so its byte count cancels in-grid."""
    act = 4.0 if dtype == "fp32" else 2.0
    nbytes = n * k * WEIGHT_BYTES[dtype] + act * m * (k + n)
    return np.maximum(2.0 * m * n * k / (roof["peak_tflops"][dtype] * 1e12), nbytes / (roof["hbm_gbs"] * 1e9))


def gemm_bytes(m, n, k, dtype: str):
    """Bytes a GEMM moves at least once (the HBM-bound share that an H200 transfer rescales)."""
    act = 4.0 if dtype == "fp32" else 2.0
    return n * k * WEIGHT_BYTES[dtype] + act * m * (k + n)


def prune(axis: np.ndarray, values: np.ndarray, tol: float) -> np.ndarray:
    """Indices of the nodes along axis 0 to keep: an interior node goes when linear interpolation
    between the kept neighbours reproduces it (and all nodes dropped before) within `tol`."""
    keep = list(range(len(axis)))
    for i in range(1, len(axis) - 1):
        j = keep.index(i)
        lo, hi = keep[j - 1], keep[j + 1]
        if hi == i:
            continue
        span = range(lo + 1, hi)
        w = ((axis[list(span)] - axis[lo]) / (axis[hi] - axis[lo])).reshape(-1, *[1] * (values.ndim - 1))
        est = values[lo][None] * (1 - w) + values[hi][None] * w
        if np.percentile(np.abs(est - values[lo + 1:hi]), 90) < tol:
            keep.remove(i)
    return np.array(keep)


def fit_gemm(df, roof: dict, prune_tol: float = 0.04) -> dict:
    """Per dtype: efficiency on the grid of measured m, n, k (median of repeats; shapes missing from
    the grid filled harmonically). To keep the profile small, an m plane is dropped when
    interpolating its neighbours reproduces 90% of its cells within `prune_tol` (4%), and efficiencies
    keep 3 significant digits: on H100 this moves the held-out median by < 0.2%."""
    out = {}
    for dtype, g in df.groupby("dtype"):
        m, n, k = (g[c].to_numpy() for c in ("m", "n", "k"))
        eff = np.log(roofline_s(m, n, k, dtype, roof) / (g.t_us.to_numpy() * 1e-6))
        agg = g.assign(y=eff).groupby(["m", "n", "k"]).y.median()
        axes = [np.unique(agg.index.get_level_values(c).to_numpy(dtype=float)) for c in ("m", "n", "k")]
        vals = np.full([len(a) for a in axes], np.nan)
        idx = tuple(np.searchsorted(a, agg.index.get_level_values(c).to_numpy(dtype=float))
                    for a, c in zip(axes, ("m", "n", "k")))
        vals[idx] = agg.to_numpy()
        vals = grid.fill_holes(vals)
        keep = prune(np.log(axes[0]), vals, prune_tol)
        out[dtype] = {"m": _ints(axes[0][keep]), "n": _ints(axes[1]), "k": _ints(axes[2]),
                      "eff_pct": sig(100 * np.exp(vals[keep]), 3)}
    return out


def _ints(x) -> list:
    """Axis values as ints where integral (shorter JSON)."""
    return [int(v) if float(v).is_integer() else float(v) for v in np.asarray(x, dtype=float)]


def sig(x: np.ndarray, digits: int = 4):
    """Nested lists of `x` rounded to `digits` significant digits (small, readable JSON)."""
    x = np.asarray(x, dtype=float)
    mag = np.floor(np.log10(np.where(x == 0, 1.0, np.abs(x))))
    scale = 10.0 ** (digits - 1 - mag)
    return (np.round(x * scale) / scale).tolist()


class GemmTable:
    """One dtype's parsed grid: log axes and log efficiency, for fast evaluation."""

    __slots__ = ("lm", "ln", "lk", "leff", "_cols")

    def __init__(self, d: dict):
        self.lm, self.ln, self.lk = (np.log(np.asarray(d[a], dtype=float)) for a in ("m", "n", "k"))
        self.leff = np.log(np.asarray(d["eff_pct"], dtype=float) / 100.0)
        if self.leff.shape != (len(self.lm), len(self.ln), len(self.lk)):
            raise ValueError(f"gemm eff_pct shape {self.leff.shape} does not match its m, n, k axes")
        self._cols: dict = {}  # (n, k) -> log efficiency over the m axis (`_col`)

    def _col(self, n: float, k: float) -> np.ndarray:
        """Log efficiency along the m axis at weight shape (n, k), bilinear in (log n, log k). A model has a handful
        of weight shapes, asked for at every step table, estimate and SiDP step: kept per shape (the same array
        each time), since locating (n, k) cost more than the m interpolation (2026-12-02: recommend's pruning)."""
        col = self._cols.get((n, k))
        if col is None:
            (i, wi), (j, wj) = grid.locate(self.ln, np.log(n)), grid.locate(self.lk, np.log(k))
            i2, j2 = min(i + 1, len(self.ln) - 1), min(j + 1, len(self.lk) - 1)
            col = ((1 - wi) * ((1 - wj) * self.leff[:, i, j] + wj * self.leff[:, i, j2])
                   + wi * ((1 - wj) * self.leff[:, i2, j] + wj * self.leff[:, i2, j2]))
            if len(self._cols) < 4096:  # (bounded: shapes are few, but a sweep over n or k must not grow it)
                self._cols[(n, k)] = col
        return col

    def efficiency(self, m, n, k) -> np.ndarray:
        lm = np.log(np.maximum(m, 1e-30))
        if np.ndim(n) == 0 and np.ndim(k) == 0:  # common case: one weight shape, many token counts
            col = self._col(float(n), float(k))
            return np.exp(np.interp(lm, self.lm, col) if len(self.lm) > 1 else np.full(np.shape(lm), col[0]))
        return np.exp(grid.interp((self.lm, self.ln, self.lk), self.leff, (lm, np.log(n), np.log(k))))


def gemm_time_s(table: GemmTable, m, n, k, dtype: str, roof: dict) -> np.ndarray:
    """Seconds: the datasheet roofline divided by the fitted efficiency at (m, n, k)."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    return roofline_s(m, n, k, dtype, roof) / table.efficiency(m, n, k)
