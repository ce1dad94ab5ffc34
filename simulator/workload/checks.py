"""Shared validation for readers: header columns, numeric fields, time order; errors name the line."""
from __future__ import annotations

import csv
import difflib
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import TraceError, TraceWarning
from .workload import Workload, make_workload

CHUNK_ROWS = 1_000_000  # ~40 MB of parsed columns per chunk: bounded memory on huge traces


@dataclass(frozen=True)
class ReadOptions:
    """Reader switches from the CLI / load_trace keywords."""

    strict: bool = False  # reject backwards timestamps instead of sorting with a warning
    drop_failed: bool = False  # BurstGPT: exclude failed rows (0 response tokens)
    burstgpt_model: str | None = None  # BurstGPT: keep only this Model ("ChatGPT" or "GPT-4")
    seed: int = 0  # synthetic specs without their own seed=


MAX_LINE_BYTES = 1 << 20  # a trace line longer than 1 MiB is not a trace line (a binary or sparse file)


def check_text(path: Path) -> None:
    """TraceError, before any parsing, for a file that is not line text: NUL bytes (a binary or sparse
    file: `truncate -s 2G` read whole took 41 s and 4.3 GB) or a first line over MAX_LINE_BYTES."""
    with open(path, "rb") as f:
        head = f.read(MAX_LINE_BYTES + 1)
    try:  # (a cut multi-byte character at the end of the window is not an error)
        head[:MAX_LINE_BYTES - 4].decode("utf-8")
    except UnicodeDecodeError as e:
        if b"\n" not in head[:e.start]:  # in the first line; later lines are the readers' to report
            raise TraceError(path, f"not UTF-8 text (byte {e.start + 1} of the line)", line=1) from None
    nul = head.find(b"\x00")
    if nul >= 0:
        raise TraceError(path, f"binary data (a NUL byte at byte {nul + 1}): not a text trace", line=1)
    if len(head) > MAX_LINE_BYTES and b"\n" not in head:
        raise TraceError(path, f"first line longer than {MAX_LINE_BYTES >> 20} MiB: not a trace", line=1)


def header_columns(path: Path) -> list[str]:
    """Column names of a CSV's first line; TraceError for an empty or non-text file."""
    check_text(path)
    with open(path, "rb") as f:
        raw = f.readline(MAX_LINE_BYTES)
    try:
        first = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    if not first.strip():
        raise TraceError(path, "empty file (no header line)", line=1)
    return next(csv.reader([first]))


def not_utf8(path: Path) -> TraceError:
    """The error for a file that is not UTF-8, at the first line that fails to decode."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return TraceError(path, f"not UTF-8 text (byte {e.start + 1} of the line)",
                                  line=lineno)
    return TraceError(path, "not UTF-8 text")


def require_columns(path: Path, names: list[str], required: tuple[str, ...], fmt: str) -> None:
    """Raise naming the first missing column, a close spelling found, and the expected set."""
    missing = [c for c in required if c not in names]
    if not missing:
        return
    near = difflib.get_close_matches(missing[0], names, n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise TraceError(path, f"missing column {missing[0]!r}{hint}; {fmt} format expects columns "
                     f"{', '.join(required)}; header has {', '.join(map(repr, names))}",
                     line=1, field=missing[0])


def csv_chunks(path: Path, usecols: list[str], **kw):
    """Yield (DataFrame chunk, line numbers of its rows); line 1 is the header.

    Line numbers assume no blank lines (pandas skips them); extra trailing fields are ignored.
    """
    first_line = 2
    try:
        reader = pd.read_csv(path, usecols=usecols, chunksize=CHUNK_ROWS, encoding="utf-8-sig",
                             engine="c", **kw)
        for chunk in reader:
            yield chunk, np.arange(first_line, first_line + len(chunk))
            first_line += len(chunk)
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except ValueError as e:  # pandas' ParserError carries the line ("Expected 6 fields in line 7")
        raise TraceError(path, f"malformed CSV: {e}") from None


MAX_COUNT = 2 ** 53  # whole numbers a float64 holds exactly; a token count past it is a broken row


def _shown(v):
    """A value as the file has it, for a message: numpy scalars as plain Python (1, not np.int64(1))."""
    return v.item() if isinstance(v, np.generic) else v


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def numbers(values: pd.Series, path, field: str, lines) -> np.ndarray:
    """Float64 array of a column; TraceError at the first non-number, empty/NaN or infinite value."""
    if values.dtype == bool or not pd.api.types.is_numeric_dtype(values.dtype):
        num = pd.to_numeric(values.map(_scalar_or_none), errors="coerce")
        bad = (num.isna() & values.notna()).to_numpy()
        if bad.any():
            i = _first(bad)
            raise TraceError(path, f"not a number: {_shown(values.iat[i])!r}", line=int(lines[i]), field=field)
        values = num
    a = values.to_numpy(dtype=np.float64, na_value=np.nan)
    finite = np.isfinite(a)
    if not finite.all():
        i = _first(~finite)
        what = "missing value (empty or NaN)" if np.isnan(a[i]) else f"not finite: {a[i]}"
        raise TraceError(path, what, line=int(lines[i]), field=field)
    return a


def _scalar_or_none(v):
    """Strings and numbers pass to to_numeric; lists/dicts (from JSON) become unparseable text."""
    return v if v is None or isinstance(v, (str, int, float)) and not isinstance(v, bool) else repr(v)


def counts(values: pd.Series, path, field: str, lines, minimum: int | None = 0) -> np.ndarray:
    """Int64 array of a whole-number column (token counts, priorities) checked against `minimum`."""
    if pd.api.types.is_integer_dtype(values.dtype) and not values.hasnans:
        a = values.to_numpy(dtype=np.int64)
    else:
        f = numbers(values, path, field, lines)
        frac = f != np.floor(f)
        if frac.any():
            i = _first(frac)
            raise TraceError(path, f"not a whole number: {f[i]}", line=int(lines[i]), field=field)
        big = np.abs(f) > MAX_COUNT
        if big.any():  # (past int64 the cast wraps: 1e20 read as negative)
            i = _first(big)
            raise TraceError(path, f"too large: {f[i]:g} (at most {MAX_COUNT:.0e})", line=int(lines[i]), field=field)
        a = f.astype(np.int64)
    if minimum is not None:
        low = a < minimum
        if low.any():
            i = _first(low)
            what = "negative" if a[i] < 0 else f"must be >= {minimum}"
            raise TraceError(path, f"{what}: {a[i]}", line=int(lines[i]), field=field)
    return a


def finish(path, cols: dict, lines: np.ndarray, time_field: str, opts: ReadOptions,
           notes: list[str], **meta) -> Workload:
    """Check time order (sort with a warning, or reject under --strict) and build the Workload."""
    t = np.asarray(cols["arrival_s"], dtype=np.float64)
    if len(t) == 0:
        raise TraceError(path, "no requests in file (header only, or every row filtered out)")
    back = np.flatnonzero(t[1:] < t[:-1])
    if back.size:
        i = int(back[0]) + 1
        msg = f"timestamp goes backwards ({t[i]:g} after {t[i - 1]:g})"
        if opts.strict:
            raise TraceError(path, msg + "; --strict rejects unsorted traces",
                             line=int(lines[i]), field=time_field)
        note = (f"{back.size} timestamp(s) go backwards, first at line {int(lines[i])}: "
                "sorted by time (--strict rejects)")
        warnings.warn(f"{path}: {note}", TraceWarning, stacklevel=3)
        notes.append(note)
    return make_workload(cols, str(path), notes=tuple(notes), **meta)


def duplicate_ids(path, ids: pd.Series, lines: np.ndarray, field: str = "request_id") -> None:
    """Raise at the second occurrence of any request id, naming where the first one was."""
    dup = ids.duplicated().to_numpy()
    if dup.any():
        i = _first(dup)
        first = _first((ids == ids.iat[i]).to_numpy())
        raise TraceError(path, f"duplicate request_id {_shown(ids.iat[i])!r} (first at line "
                         f"{int(lines[first])})", line=int(lines[i]), field=field)
