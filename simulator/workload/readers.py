"""One small reader per trace format, the READERS registry and format sniffing."""
from __future__ import annotations

import difflib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from .canonical import CANONICAL_REQUIRED, read_canonical
from .checks import (ReadOptions, counts, csv_chunks, finish, header_columns, not_utf8, numbers,
                     require_columns)
from .errors import TraceError
from .workload import Workload

BURSTGPT_REQUIRED = ("Timestamp", "Model", "Request tokens", "Response tokens")
BURSTGPT_MODELS = ("ChatGPT", "GPT-4")
AZURE_REQUIRED = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
SHAREGPT_REQUIRED = ("num_prefill_tokens", "num_decode_tokens")
MOONCAKE_REQUIRED = ("timestamp", "input_length", "output_length")  # + optional hash_ids


def read_burstgpt(path: Path, opts: ReadOptions) -> Workload:
    """BurstGPT CSV (6-column or Session-ID layout, columns by name); failed = 0 response tokens."""
    names = header_columns(path)
    require_columns(path, names, BURSTGPT_REQUIRED, "burstgpt")
    model = _burstgpt_model(path, opts.burstgpt_model)
    has_session = "Session ID" in names
    usecols = list(BURSTGPT_REQUIRED) + (["Session ID"] if has_session else [])
    parts: dict[str, list] = {k: [] for k in ("arrival_s", "input_tokens", "output_tokens",
                                             "request_id", "session_id", "lines")}
    failed = zero_input = dropped = 0
    for chunk, lines in csv_chunks(path, usecols, dtype={"Model": "category", "Session ID": "str"}):
        t = numbers(chunk["Timestamp"], path, "Timestamp", lines)
        inp = counts(chunk["Request tokens"], path, "Request tokens", lines)
        out = counts(chunk["Response tokens"], path, "Response tokens", lines)
        keep = (chunk["Model"] == model).to_numpy() if model else np.ones(len(t), dtype=bool)
        is_failed = keep & (out == 0)
        failed += int(is_failed.sum())
        if opts.drop_failed:
            keep = keep & ~is_failed
            dropped += int(is_failed.sum())
        # A failure logged before tokenisation has 0 request tokens: keep it as a 1-token prompt.
        zero_input += int((keep & (inp == 0)).sum())
        for key, col in (("arrival_s", t), ("input_tokens", np.maximum(inp, 1)),
                         ("output_tokens", out), ("request_id", lines - 2), ("lines", lines)):
            parts[key].append(col[keep])
        if has_session:  # stays an Arrow-backed string array: 5M Python str objects cost ~1 GB
            parts["session_id"].append(chunk["Session ID"][keep])
    if not parts["lines"]:
        raise TraceError(path, "no requests in file (header only)", line=2)
    sessions = parts.pop("session_id")
    cols = {k: np.concatenate(v) for k, v in parts.items()}
    parts.clear()  # free the chunk copies before the Workload frame is built (peak memory)
    if sessions:
        cols["session_id"] = pd.concat(sessions, ignore_index=True).array
    notes = [f"{failed} failed request(s) (0 response tokens) "
             + ("dropped (--drop-failed)" if opts.drop_failed else "kept as prefill-only")]
    if zero_input:
        notes.append(f"{zero_input} row(s) with 0 request tokens read as 1-token prompts")
    if model:
        notes.append(f"only Model == {model}")
    lines = cols.pop("lines")
    return finish(path, cols, lines, "Timestamp", opts, notes, failed_dropped=dropped)


def _burstgpt_model(path: Path, name: str | None) -> str | None:
    if name is None:
        return None
    for m in BURSTGPT_MODELS:
        if m.lower() == name.lower():
            return m
    raise TraceError(path, f"unknown BurstGPT model {name!r}; choose {' or '.join(BURSTGPT_MODELS)}",
                     field="--burstgpt-model")


def read_azure(path: Path, opts: ReadOptions) -> Workload:
    """Azure LLM inference CSV, 2023 (naive, 7 fractional digits) or 2024 (+00:00) timestamps."""
    names = header_columns(path)
    require_columns(path, names, AZURE_REQUIRED, "azure")
    parts: dict[str, list] = {k: [] for k in ("ns", "input_tokens", "output_tokens", "lines")}
    for chunk, lines in csv_chunks(path, list(AZURE_REQUIRED), dtype={"TIMESTAMP": "str"}):
        raw = chunk["TIMESTAMP"]
        ts = pd.to_datetime(raw, format="ISO8601", utc=True, errors="coerce")
        bad = ts.isna().to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            what = "missing value" if pd.isna(raw.iat[i]) else f"not a timestamp: {raw.iat[i]!r}"
            raise TraceError(path, what, line=int(lines[i]), field="TIMESTAMP")
        parts["ns"].append(ts.dt.as_unit("ns").astype("int64").to_numpy())  # int ns: no rounding
        parts["input_tokens"].append(counts(chunk["ContextTokens"], path, "ContextTokens", lines, 1))
        parts["output_tokens"].append(counts(chunk["GeneratedTokens"], path, "GeneratedTokens", lines))
        parts["lines"].append(lines)
    cols = {k: np.concatenate(v) for k, v in parts.items()}
    ns = cols.pop("ns")
    cols["arrival_s"] = (ns - ns[0]) / 1e9 if len(ns) else ns.astype(np.float64)
    lines = cols.pop("lines")
    cols["request_id"] = lines - 2
    return finish(path, cols, lines, "TIMESTAMP", opts, [])


def read_sharegpt(path: Path, opts: ReadOptions) -> Workload:
    """ShareGPT length table (sarathi-serve stats CSV): no arrival times, so all requests at t=0."""
    names = header_columns(path)
    require_columns(path, names, SHAREGPT_REQUIRED, "sharegpt")
    inp, out, lines = [], [], []
    for chunk, ln in csv_chunks(path, list(SHAREGPT_REQUIRED)):
        inp.append(counts(chunk["num_prefill_tokens"], path, "num_prefill_tokens", ln, 1))
        out.append(counts(chunk["num_decode_tokens"], path, "num_decode_tokens", ln))
        lines.append(ln)
    lines_a = np.concatenate(lines)
    cols = {"arrival_s": np.zeros(len(lines_a)), "input_tokens": np.concatenate(inp),
            "output_tokens": np.concatenate(out), "request_id": lines_a - 2}
    notes = ["length table without arrival times: every request at t=0 (saturated batch); "
             "use synthetic:poisson?lengths=FILE for arrivals"]
    return finish(path, cols, lines_a, "arrival_s", opts, notes)


def read_mooncake(path: Path, opts: ReadOptions) -> Workload:
    """Mooncake JSON lines: ms timestamps (ties allowed), hash_ids kept as 512-token prefix blocks."""
    ts, inp, out, blocks, lines = [], [], [], [], []
    any_blocks = False
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise not_utf8(path) from None
            if not text.strip():
                continue
            rec = _json_record(path, text, lineno)
            ts.append(rec["timestamp"])
            inp.append(rec["input_length"])
            out.append(rec["output_length"])
            blocks.append(_hash_ids(path, rec.get("hash_ids"), lineno))
            any_blocks |= "hash_ids" in rec
            lines.append(lineno)
    if not lines:
        raise TraceError(path, "empty file (no JSON lines)", line=1)
    ln = np.asarray(lines)
    cols = {"arrival_s": numbers(pd.Series(ts), path, "timestamp", ln) / 1000.0,  # ms -> s
            "input_tokens": counts(pd.Series(inp), path, "input_length", ln, 1),
            "output_tokens": counts(pd.Series(out), path, "output_length", ln),
            "request_id": ln - 1}
    if any_blocks:
        cols["prefix_blocks"] = blocks
    return finish(path, cols, ln, "timestamp", opts, [])


def _json_record(path: Path, text: str, lineno: int) -> dict:
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(path, f"not valid JSON ({e.msg} at column {e.colno})", line=lineno) from None
    if not isinstance(rec, dict):
        raise TraceError(path, "expected a JSON object per line", line=lineno)
    for key in MOONCAKE_REQUIRED:
        if key not in rec:
            near = difflib.get_close_matches(key, list(rec), n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise TraceError(path, f"missing key{hint}; mooncake records have "
                             f"{', '.join(MOONCAKE_REQUIRED)}[, hash_ids]", line=lineno, field=key)
    return rec


def _hash_ids(path: Path, ids, lineno: int) -> tuple[int, ...]:
    if ids is None:
        return ()
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool)
                                            for h in ids):
        raise TraceError(path, "expected a list of integers", line=lineno, field="hash_ids")
    return tuple(ids)


READERS = {
    "burstgpt": read_burstgpt,
    "azure": read_azure,
    "mooncake": read_mooncake,
    "canonical": read_canonical,
    "sharegpt": read_sharegpt,
}
CSV_COLUMNS = {"burstgpt": BURSTGPT_REQUIRED, "azure": AZURE_REQUIRED,
               "canonical": CANONICAL_REQUIRED, "sharegpt": SHAREGPT_REQUIRED}


def sniff_format(path: Path) -> str:
    """Name the format from content: JSON lines, else the CSV header's best-matching column set."""
    if path.suffix.lower() in (".jsonl", ".json") or _first_char(path) == "{":
        return "mooncake"
    names = header_columns(path)
    lowered = {n.lower() for n in names}

    def score(fmt):  # exact matches count 2, close spellings 1 (so a typo still picks its format)
        return sum(2 if c in names else int(bool(difflib.get_close_matches(c.lower(), lowered,
                                                                           cutoff=0.75)))
                   for c in CSV_COLUMNS[fmt])
    best = max(CSV_COLUMNS, key=score)
    if score(best) >= 2:
        return best
    known = "; ".join(f"{k}: {', '.join(v)}" for k, v in CSV_COLUMNS.items())
    raise TraceError(path, f"unknown trace format: header {','.join(names)!r} matches none of "
                     f"({known}; mooncake: JSON lines); force one with --trace-format", line=1)


def _first_char(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(256).lstrip()[:1].decode("ascii", "replace")
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror}") from None
