"""The canonical Workload: one validated table of requests, the simulator's only input."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import TraceError

REQUIRED = ("request_id", "arrival_s", "input_tokens", "output_tokens", "priority")
OPTIONAL = ("session_id", "prefix_blocks")  # session id (str); prefix_blocks: tuple of block hashes
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests sorted by arrival_s (first at 0 s) plus where they came from and what was changed.

    `requests` columns: request_id (int64 or str, unique), arrival_s (float64), input_tokens
    (int64 > 0), output_tokens (int64 >= 0; 0 = prefill-only), priority (int64, lower is
    served first as in vLLM), optional session_id (str) and prefix_blocks (tuple of ints).
    Treat the frame as read-only: transforms return new Workloads.
    """

    requests: pd.DataFrame
    source: str = "<memory>"
    failed_dropped: int = 0  # rows the source marks as failed, excluded at load (--drop-failed)
    clipped: int = 0  # requests shortened to fit a max context (transforms.clip_context)
    notes: tuple[str, ...] = ()  # what was fixed up while reading, for the summary

    def __post_init__(self):
        check_frame(self.requests, self.source)

    def __len__(self) -> int:
        return len(self.requests)

    def replace(self, **changes) -> "Workload":
        """A copy with some fields changed (the frame is re-validated)."""
        return dataclasses.replace(self, **changes)

    def summary(self) -> dict:
        """Duration, count, mean rate, inter-arrival CV and length percentiles, as a flat dict."""
        return summarize(self)


def make_workload(columns: dict, source: str = "<memory>", **meta) -> Workload:
    """Build a Workload from column arrays: fills defaults, stable-sorts by time, rebases to 0 s.

    The arrays are taken over without a copy (a 5M-row trace is not duplicated): do not
    modify them afterwards.
    """
    n = len(columns["arrival_s"])
    df = pd.DataFrame({
        "request_id": _ids(columns.get("request_id"), n),
        "arrival_s": np.asarray(columns["arrival_s"], dtype=np.float64),
        "input_tokens": np.asarray(columns["input_tokens"], dtype=np.int64),
        "output_tokens": np.asarray(columns["output_tokens"], dtype=np.int64),
        "priority": np.asarray(columns.get("priority", np.zeros(n)), dtype=np.int64),
    }, copy=False)
    if columns.get("session_id") is not None:
        df["session_id"] = pd.array(columns["session_id"], dtype="str")
    if columns.get("prefix_blocks") is not None:
        df["prefix_blocks"] = pd.Series([tuple(b) for b in columns["prefix_blocks"]], dtype=object)
    if not df["arrival_s"].is_monotonic_increasing:
        df = df.sort_values("arrival_s", kind="stable")  # equal times keep file order
    return Workload(rebase(df), source=str(source), **meta)


def _ids(ids, n: int):
    """Request ids as int64 (default 0..n-1) or, if any is not an integer, as text."""
    if ids is None:
        return np.arange(n, dtype=np.int64)
    s = pd.Series(ids).infer_objects()
    return s.astype(np.int64) if pd.api.types.is_integer_dtype(s.dtype) else s.astype("str")


def rebase(df: pd.DataFrame) -> pd.DataFrame:
    """Shift arrival_s so the first request arrives at 0 s (exact when it already does)."""
    df = df.reset_index(drop=True)
    if len(df) and df["arrival_s"].iat[0] != 0.0:
        df = df.assign(arrival_s=df["arrival_s"] - df["arrival_s"].iat[0])
    return df


def check_frame(df: pd.DataFrame, source: str) -> None:
    """Raise TraceError unless `df` satisfies the Workload contract (cheap, vectorised)."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TraceError(source, f"missing column(s) {missing}; a Workload has {list(REQUIRED)}")
    for col in ("input_tokens", "output_tokens", "priority"):
        if df[col].dtype != np.int64:
            raise TraceError(source, f"dtype {df[col].dtype}, expected int64", field=col)
    t = df["arrival_s"].to_numpy()
    if t.dtype != np.float64 or not np.isfinite(t).all():
        raise TraceError(source, "arrival_s must be finite float64 seconds", field="arrival_s")
    if len(t) and (t[0] != 0.0 or (np.diff(t) < 0).any()):
        raise TraceError(source, "arrival_s must be sorted ascending from 0 s", field="arrival_s")
    _check_positive(df, source, "input_tokens", minimum=1)
    _check_positive(df, source, "output_tokens", minimum=0)
    ids = df["request_id"]
    if ids.isna().any():
        raise TraceError(source, "missing request_id", field="request_id")
    dup = ids.duplicated()
    if dup.any():
        raise TraceError(source, f"duplicate request_id {ids[dup].iloc[0]!r}", field="request_id")


def _check_positive(df: pd.DataFrame, source: str, col: str, minimum: int) -> None:
    bad = df[col].to_numpy() < minimum
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceError(source, f"request {df['request_id'].iat[i]!r} has {df[col].iat[i]}, "
                         f"must be >= {minimum}", field=col)


def summarize(w: Workload) -> dict:
    """Summary statistics; mean rate is 1 / mean inter-arrival, CV = std / mean of inter-arrivals."""
    df = w.requests
    n = len(df)
    t = df["arrival_s"].to_numpy()
    gaps_s = np.diff(t)
    duration_s = float(t[-1]) if n else 0.0
    mean_gap_s = float(gaps_s.mean()) if len(gaps_s) else float("nan")
    out = {
        "source": w.source,
        "requests": n,
        "duration_s": duration_s,
        "mean_rate_rps": 1.0 / mean_gap_s if mean_gap_s > 0 else float("nan"),
        # population std (ddof=0): a Poisson process gives 1, bursty traffic > 1
        "interarrival_cv": float(gaps_s.std() / mean_gap_s) if mean_gap_s > 0 else float("nan"),
    }
    for col in ("input_tokens", "output_tokens"):
        x = df[col].to_numpy()
        out[f"{col}_mean"] = float(x.mean()) if n else float("nan")
        for p in PERCENTILES:
            out[f"{col}_p{p}"] = float(np.percentile(x, p)) if n else float("nan")
        out[f"{col}_max"] = int(x.max()) if n else 0
    out["total_input_tokens"] = int(df["input_tokens"].sum())
    out["total_output_tokens"] = int(df["output_tokens"].sum())
    out["prefill_only_requests"] = int((df["output_tokens"] == 0).sum())
    out["dropped_failed_requests"] = w.failed_dropped
    out["clipped_requests"] = w.clipped
    prio = df["priority"].value_counts().sort_index()
    out["priorities"] = {int(k): int(v) for k, v in prio.items()}
    if "session_id" in df.columns:
        out["sessions"] = int(df["session_id"].nunique())
    if "prefix_blocks" in df.columns:
        out["prefix_blocks_unique"] = len({b for blocks in df["prefix_blocks"] for b in blocks})
    return out

