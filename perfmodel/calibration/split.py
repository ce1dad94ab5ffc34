"""The fixed fit / held-out split: every other distinct value of each op's main size axis is held out.

  gemm:        per dtype, sorted distinct n (k if n has < 3 values, else m): odd positions held out
  prefill:     sorted distinct new tokens per sequence (seq_len / isl): odd positions held out
  decode:      sorted distinct keys per sequence (kv_len): odd positions held out
  collective:  per (op, group), sorted distinct size_bytes: odd positions held out
  copy:        per kind, sorted distinct size_bytes: odd positions held out
An axis with fewer than 3 distinct values holds nothing out. Fits see only the rest, so a profile
fitted with split "fit" is validated on rows it never saw (docs/calibration.md).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

RULE = ("every other distinct value (odd positions in sorted order) held out: gemm n per dtype "
        "(k, then m, when n has < 3 values); prefill seq_len; decode kv_len; collectives and copies "
        "size_bytes per (op, group) / kind")


def _odd(values: pd.Series) -> pd.Series:
    """True where `values` sits at an odd position among its sorted distinct values (>= 3 of them)."""
    uniq = np.unique(values.to_numpy(dtype=float))
    if len(uniq) < 3:
        return pd.Series(False, index=values.index)
    pos = np.searchsorted(uniq, values.to_numpy(dtype=float))
    return pd.Series(pos % 2 == 1, index=values.index)


def _grouped(df: pd.DataFrame, keys: list, axis_of) -> pd.Series:
    out = pd.Series(False, index=df.index)
    if not len(df):
        return out
    for _, g in df.groupby(keys) if keys else [(None, df)]:
        out.loc[g.index] = _odd(g[axis_of(g)])
    return out


def _gemm_axis(g: pd.DataFrame) -> str:
    for ax in ("n", "k", "m"):
        if g[ax].nunique() >= 3:
            return ax
    return "n"


def heldout(kind: str, df: pd.DataFrame) -> pd.Series:
    """Boolean mask of the held-out rows of a tidy frame of `kind` (readers.FRAMES)."""
    if kind == "gemm":
        return _grouped(df, ["dtype"], _gemm_axis)
    if kind == "prefill":
        return _grouped(df, [], lambda g: "seq_len")
    if kind == "decode":
        return _grouped(df, [], lambda g: "kv_len")
    if kind == "collective":
        return _grouped(df, ["op", "group"], lambda g: "size_bytes")
    if kind == "copy":
        return _grouped(df, ["kind"], lambda g: "size_bytes")
    raise ValueError(f"unknown measurement kind {kind!r}")
