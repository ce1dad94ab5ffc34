"""Collective and copy fits: measured time over message size, interpolated in log-log space per
(op, group size, nodes spanned) or copy kind. Between measured sizes this follows NCCL's protocol switches
(LL / LL128 / Simple) that one alpha-beta line cannot; below the smallest size the time stays at
the latency floor (alpha), above the largest it grows at the last measured bus bandwidth (beta).
Chosen over a fitted 2-parameter alpha-beta by held-out error (docs/calibration.md).

A curve over one node is keyed by its group ("8"); one whose ranks span several nodes by
"group@nodes" ("16@2": 16 ranks, 8 on each of 2 nodes). Multi-node curves are a separate table
(Profile.spanning), used only for exactly that (group, nodes) placement: never interpolated
across groups or node counts, since the share of the bytes crossing the NICs changes with both."""
from __future__ import annotations

import numpy as np

from ..ops import busbw_factor


def _sig(x, digits: int = 4) -> list:
    x = np.asarray(x, dtype=float)
    mag = np.floor(np.log10(np.where(x == 0, 1.0, np.abs(x))))
    scale = 10.0 ** (digits - 1 - mag)
    return (np.round(x * scale) / scale).tolist()


def fit_curve(size_bytes: np.ndarray, t_us: np.ndarray) -> dict:
    """Median time per distinct size (repeats pooled): the nodes of the log-log interpolation."""
    sizes, inv = np.unique(np.asarray(size_bytes, dtype=float), return_inverse=True)
    med = np.array([np.median(t_us[inv == i]) for i in range(len(sizes))])
    return {"size_bytes": [int(s) if s.is_integer() else s for s in sizes.tolist()], "time_us": _sig(med)}


def with_nodes(df, gpus_per_node: int):
    """`df` (a collective frame) with unknown `nodes` (NaN, or no column: aiconfigurator tables, files
    written before the column) filled by node-major placement on whole nodes: ceil(group / gpus_per_node)."""
    df = df.copy()
    placed = np.ceil(df.group.to_numpy(dtype=float) / gpus_per_node)
    known = df["nodes"].to_numpy(dtype=float) if "nodes" in df.columns else np.full(len(df), np.nan)
    df["nodes"] = np.where(np.isnan(known), placed, known)
    return df


def curve_key(group: int, nodes: int) -> str:
    """Profile key of a curve: "8" inside one node (the format before multi-node rows), "16@2" else."""
    return str(int(group)) if int(nodes) <= 1 else f"{int(group)}@{int(nodes)}"


def parse_key(key: str) -> tuple[int, int]:
    """(group, nodes) of a curve key: "8" -> (8, 1), "16@2" -> (16, 2)."""
    group, _, nodes = str(key).partition("@")
    return int(group), int(nodes or 1)


def fit_collectives(df) -> dict:
    """{op: {key: curve}} per (op, group, nodes) (key: curve_key; rows of unknown nodes count as one
    node here: calibrate fills them first, with_nodes) with, per curve, alpha_us (smallest-size time)
    and busbw_gbs (nccl-tests bus bandwidth at the largest size) for readers; the curve alone is used
    for times."""
    out: dict = {}
    nodes = df["nodes"].fillna(1.0) if "nodes" in df.columns else 1.0
    for (op, group, n), g in df.assign(nodes=nodes).groupby(["op", "group", "nodes"]):
        c = fit_curve(g.size_bytes.to_numpy(), g.t_us.to_numpy())
        s, t = c["size_bytes"][-1], c["time_us"][-1]
        c["alpha_us"] = c["time_us"][0]
        c["busbw_gbs"] = _sig(s / (t * 1e-6) * float(busbw_factor(op, group)) / 1e9)
        out.setdefault(op, {})[curve_key(group, n)] = c
    return out


def fit_copies(df) -> dict:
    """{kind: curve} for h2d, d2h, d2d, p2p copies (bytes moved)."""
    return {kind: fit_curve(g.size_bytes.to_numpy(), g.t_us.to_numpy()) for kind, g in df.groupby("kind")}


class Curve:
    """Parsed log-log curve: time(size) in seconds."""

    __slots__ = ("ls", "lt", "s_last", "t_last")

    def __init__(self, d: dict):
        s = np.asarray(d["size_bytes"], dtype=float)
        t = np.asarray(d["time_us"], dtype=float) * 1e-6
        self.ls, self.lt = np.log(s), np.log(t)
        self.s_last, self.t_last = s[-1], t[-1]

    def time_s(self, size) -> np.ndarray:
        size = np.asarray(size, dtype=float)
        inside = np.exp(np.interp(np.log(np.maximum(size, 1e-30)), self.ls, self.lt))
        return np.where(size > self.s_last, self.t_last * size / self.s_last, inside)


def group_time_s(curves: dict, size, group: int):
    """Time over `group` ranks inside one node: the measured group's curve, log-interpolated between
    the two nearest measured groups; None outside the measured range. `curves` holds single-node
    curves only ({group: Curve}; multi-node ones live in Profile.spanning and are never blended in)."""
    groups = sorted(curves)
    if group in curves:
        return curves[group].time_s(size)
    if not groups or group < groups[0] or group > groups[-1]:
        return None
    hi = next(g for g in groups if g > group)
    lo = groups[groups.index(hi) - 1]
    w = (np.log(group) - np.log(lo)) / (np.log(hi) - np.log(lo))
    return np.exp((1 - w) * np.log(curves[lo].time_s(size)) + w * np.log(curves[hi].time_s(size)))


def curves_of(d: dict, multi: bool) -> dict:
    """The `collectives` section's curves: single-node ones {op: {group: Curve}} (keys "8"), or with
    `multi` the multi-node ones {op: {(group, nodes): Curve}} (keys "16@2"); ops without any left out."""
    out: dict = {}
    for op, curves in d.get("collectives", {}).items():
        for key, c in curves.items():
            group, nodes = parse_key(key)
            if (nodes > 1) == multi:
                out.setdefault(op, {})[(group, nodes) if multi else group] = Curve(c)
    return out
