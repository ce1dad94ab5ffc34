"""Multilinear interpolation on a rectilinear grid (log coordinates), and the two ways we fill one:
exactly from gridded measurements (holes filled harmonically) or by smoothed least squares from
scattered ones. Pure numpy; `interp` is the hot path (a few ms for 100k points), `ScalarGrid` (point.py) the
simulator's (one point at a time, ~1 us compiled)."""
from __future__ import annotations

import itertools

import numpy as np

from .point import ScalarGrid  # (the one-point path, compiled: perfmodel/native.py)


def locate(axis: np.ndarray, x) -> tuple[np.ndarray, np.ndarray]:
    """Cell index i and weight w in [0, 1] of x on a sorted axis, clamped to the axis ends."""
    x = np.clip(np.asarray(x, dtype=float), axis[0], axis[-1])
    if len(axis) == 1:
        return np.zeros(x.shape, dtype=np.intp), np.zeros(x.shape)
    i = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2)
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


def _interp_scalar(axes: tuple, values: np.ndarray, coords: tuple) -> float:
    """interp() at one point, in plain floats (the simulator asks one step at a time: ~10x faster than numpy on
    0-d arrays). Same clamping and corner weights as the array path (point.py: compiled)."""
    return ScalarGrid(axes, values)(coords)


def interp(axes: tuple, values: np.ndarray, coords: tuple) -> np.ndarray:
    """Multilinear interpolation of `values` (shape = axis lengths) at `coords` (one array per axis,
    broadcast together); coordinates outside an axis are clamped to its end."""
    if all(np.ndim(c) == 0 for c in coords):
        return np.float64(_interp_scalar(axes, values, coords))
    if len(axes) == 1 and len(axes[0]) > 1:
        return np.interp(np.asarray(coords[0], dtype=float), axes[0], values)
    loc = [locate(a, c) for a, c in zip(axes, coords)]
    out = 0.0
    for corner in itertools.product((0, 1), repeat=len(axes)):
        idx, w = [], 1.0
        for (i, f), b, a in zip(loc, corner, axes):
            idx.append(np.minimum(i + b, len(a) - 1))
            w = w * (f if b else 1.0 - f)
        out = out + w * values[tuple(idx)]
    return out


def design(axes: tuple, coords: tuple) -> np.ndarray:
    """Dense basis matrix Phi (points x grid cells): interp(axes, g, coords) == Phi @ g.ravel()."""
    shape = tuple(len(a) for a in axes)
    coords = np.broadcast_arrays(*(np.asarray(c, dtype=float) for c in coords))
    n = coords[0].size
    phi = np.zeros((n, int(np.prod(shape))))
    loc = [locate(a, c.ravel()) for a, c in zip(axes, coords)]
    rows = np.arange(n)
    for corner in itertools.product((0, 1), repeat=len(axes)):
        idx, w = [], np.ones(n)
        for (i, f), b, a in zip(loc, corner, axes):
            idx.append(np.minimum(i + b, len(a) - 1))
            w = w * (f if b else 1.0 - f)
        np.add.at(phi, (rows, np.ravel_multi_index(idx, shape)), w)
    return phi


def second_differences(shape: tuple) -> np.ndarray:
    """Rows of second differences along every axis of a grid of `shape` (a smoothness penalty)."""
    size = int(np.prod(shape))
    ids = np.arange(size).reshape(shape)
    rows = []
    for ax, n in enumerate(shape):
        if n < 3:
            continue
        lo = np.take(ids, range(0, n - 2), axis=ax).ravel()
        mid = np.take(ids, range(1, n - 1), axis=ax).ravel()
        hi = np.take(ids, range(2, n), axis=ax).ravel()
        d = np.zeros((lo.size, size))
        r = np.arange(lo.size)
        d[r, lo], d[r, mid], d[r, hi] = 1.0, -2.0, 1.0
        rows.append(d)
    return np.vstack(rows) if rows else np.zeros((0, size))


def lsq(x: np.ndarray, y: np.ndarray, weight: np.ndarray, penalty: np.ndarray, smooth: float) -> np.ndarray:
    """argmin_p sum (weight * (x p - y))^2 + smooth * |penalty p|^2, by the normal equations
    (a tiny ridge keeps cells without data defined: they follow the smoothness penalty)."""
    xw = x * weight[:, None]
    a = xw.T @ xw + smooth * (penalty.T @ penalty)
    a[np.diag_indices_from(a)] += 1e-9 * max(np.trace(a) / len(a), 1e-30)
    return np.linalg.solve(a, xw.T @ (y * weight))


def fill_holes(values: np.ndarray, iterations: int = 500) -> np.ndarray:
    """Replace NaN cells by the harmonic (Laplace) interpolation of their neighbours, so a grid
    measured with a few shapes missing stays usable; measured cells are never changed."""
    v = np.array(values, dtype=float)
    hole = np.isnan(v)
    if not hole.any():
        return v
    if hole.all():
        raise ValueError("grid has no measured cell")
    v[hole] = np.nanmean(v)
    for _ in range(iterations):
        acc, cnt = np.zeros_like(v), np.zeros_like(v)
        for ax in range(v.ndim):
            if v.shape[ax] < 2:
                continue
            fwd = [slice(None)] * v.ndim
            bwd = [slice(None)] * v.ndim
            fwd[ax], bwd[ax] = slice(1, None), slice(None, -1)
            acc[tuple(bwd)] += v[tuple(fwd)]
            cnt[tuple(bwd)] += 1
            acc[tuple(fwd)] += v[tuple(bwd)]
            cnt[tuple(fwd)] += 1
        new = acc / np.maximum(cnt, 1)
        if np.max(np.abs(new[hole] - v[hole])) < 1e-9:
            break
        v[hole] = new[hole]
    return v


def nonneg_lsq(x: np.ndarray, y: np.ndarray, weight: np.ndarray, penalty: np.ndarray, smooth: float,
               nonneg: np.ndarray, iterations: int = 2000) -> np.ndarray:
    """`lsq` with the parameters flagged in `nonneg` kept >= 0: a fitted time must never fall as
    work grows. Lawson-Hanson active set on the normal equations, warm-started by dropping the
    parameters that the unconstrained solution makes negative."""
    xw = x * weight[:, None]
    q = xw.T @ xw + smooth * (penalty.T @ penalty)
    q[np.diag_indices_from(q)] += 1e-9 * max(np.trace(q) / len(q), 1e-30)
    c = xw.T @ (y * weight)
    n = len(c)

    def solve(mask):
        s = np.zeros(n)
        if mask.any():
            s[mask] = np.linalg.solve(q[np.ix_(mask, mask)], c[mask])
        return s

    free = np.ones(n, dtype=bool)
    p = solve(free)
    while (nonneg & free & (p < 0)).any():  # warm start: a feasible point
        free &= ~(nonneg & (p < 0))
        p = solve(free)
    tol = 1e-10 * max(float(np.abs(c).max()), 1e-30)
    for _ in range(iterations):
        grad = c - q @ p  # minus the objective's gradient
        cand = nonneg & ~free & (grad > tol)
        if not cand.any():
            break
        free[np.argmax(np.where(cand, grad, -np.inf))] = True
        while True:
            s = solve(free)
            bad = nonneg & free & (s <= 0)
            if not bad.any():
                p = s
                break
            # step from p toward s until the first constrained parameter reaches zero
            alpha = min(1.0, float(np.min(p[bad] / np.maximum(p[bad] - s[bad], 1e-300))))
            p = p + alpha * (s - p)
            free &= ~(nonneg & (p <= tol))
            p[nonneg & ~free] = 0.0
    return p
