"""The project's canonical CSV: writer and reader, exact round trip."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from .checks import ReadOptions, counts, csv_chunks, duplicate_ids, finish, header_columns, numbers, \
    require_columns
from .errors import TraceError, TraceWarning
from .workload import Workload

CANONICAL_REQUIRED = ("arrival_s", "input_tokens", "output_tokens")
CANONICAL_OPTIONAL = ("priority", "request_id", "session_id", "prefix_blocks")
_INT = re.compile(r"-?(0|[1-9][0-9]{0,18})")  # ids whose int64 is written back as the same text


def write_csv(w: Workload, path: str | Path) -> Path:
    """Write the canonical CSV (floats at shortest repr precision, so reading back is exact)."""
    df = w.requests
    out = df[list(CANONICAL_REQUIRED) + ["priority", "request_id"]].copy()
    if "session_id" in df.columns:
        out["session_id"] = df["session_id"]
    if "prefix_blocks" in df.columns:  # space-separated block hashes, '' for none
        out["prefix_blocks"] = [" ".join(map(str, b)) for b in df["prefix_blocks"]]
    path = Path(path)
    out.to_csv(path, index=False)
    return path


def read_canonical(path: Path, opts: ReadOptions) -> Workload:
    """arrival_s,input_tokens,output_tokens[,priority][,request_id][,session_id][,prefix_blocks]."""
    names = header_columns(path)
    require_columns(path, names, CANONICAL_REQUIRED, "canonical")
    notes = []
    unknown = [c for c in names if c not in CANONICAL_REQUIRED + CANONICAL_OPTIONAL]
    if unknown:
        note = f"ignored unknown column(s) {', '.join(unknown)} (known: " \
               f"{', '.join(CANONICAL_REQUIRED + CANONICAL_OPTIONAL)})"
        warnings.warn(f"{path}: {note}", TraceWarning, stacklevel=3)
        notes.append(note)
    usecols = [c for c in names if c in CANONICAL_REQUIRED + CANONICAL_OPTIONAL]
    text_cols = {c: "str" for c in ("request_id", "session_id", "prefix_blocks")}
    parts: dict[str, list] = {c: [] for c in usecols + ["lines"]}
    # Only '' is missing: ids like 'NA' or 'null' stay text. pandas >= 3 parses floats exactly
    # by default (and deprecates the switch that pandas 2 needs); tests check the round trip.
    exact = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
    for chunk, lines in csv_chunks(path, usecols, dtype=text_cols, keep_default_na=False,
                                   na_values=[""], **exact):
        parts["lines"].append(lines)
        parts["arrival_s"].append(numbers(chunk["arrival_s"], path, "arrival_s", lines))
        parts["input_tokens"].append(counts(chunk["input_tokens"], path, "input_tokens", lines, 1))
        parts["output_tokens"].append(counts(chunk["output_tokens"], path, "output_tokens", lines))
        if "priority" in chunk:
            parts["priority"].append(counts(chunk["priority"], path, "priority", lines, None))
        for c in ("request_id", "session_id", "prefix_blocks"):
            if c in chunk:
                parts[c].append(chunk[c].to_numpy(dtype=object))
    if not parts["lines"]:
        raise TraceError(path, "no requests in file (header only)", line=2)
    cols = {c: np.concatenate(v) for c, v in parts.items()}
    lines = cols.pop("lines")
    if "request_id" in cols:
        cols["request_id"] = _ids(path, cols["request_id"], lines)
    if "session_id" in cols:
        cols["session_id"] = pd.array(cols["session_id"], dtype="str")
    if "prefix_blocks" in cols:
        cols["prefix_blocks"] = [_blocks(path, v, ln) for v, ln in zip(cols["prefix_blocks"], lines)]
    return finish(path, cols, lines, "arrival_s", opts, notes)


def _ids(path: Path, raw: np.ndarray, lines: np.ndarray):
    """int64 ids when every id is a plain integer, else text; empty or duplicate ids are errors."""
    s = pd.Series(raw, dtype="str")
    missing = s.isna().to_numpy()
    if missing.any():
        i = int(np.argmax(missing))
        raise TraceError(path, "missing value", line=int(lines[i]), field="request_id")
    if s.str.fullmatch(_INT.pattern).all():
        as_int = pd.to_numeric(s)
        if as_int.dtype == np.int64:  # else beyond int64: keep the text
            s = as_int
    duplicate_ids(path, s, lines)
    return s.to_numpy()


def _blocks(path: Path, value, line: int) -> tuple[int, ...]:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ()
    try:
        return tuple(int(b) for b in str(value).split())
    except ValueError:
        raise TraceError(path, f"expected space-separated integers, got {value!r}", line=int(line),
                         field="prefix_blocks") from None
