"""Rows out: incremental CSV in the measurement schema (perfmodel.measurements), resume keys, the
in-flight marker that turns a case which killed the run into an error row, and the env JSON."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from perfmodel.calibration import kernel_tables as kt
from perfmodel.measurements import COLUMNS, append_rows, empty_row

# The columns that identify a case: a row with the same values is the same measurement. `nodes` is one:
# the same 8 ranks on one node (1 x 8) and on two (torchrun 2 x 4) are different measurements.
KEY_COLUMNS = ("op", "dtype", "m", "n", "k", "batch", "seq_len", "kv_len", "num_heads", "num_kv_heads",
               "head_dim", "size_bytes", "group_size", "backend", "cuda_graph", "pinned", "nodes")


def _norm(v) -> str:
    """'1024', '1024.0' and 1024 are one key value."""
    s = "" if v is None else str(v).strip()
    try:
        f = float(s)
        return str(int(f)) if f.is_integer() else s
    except ValueError:
        return s


def row_key(row: dict) -> tuple:
    return tuple(_norm(row.get(c, "")) for c in KEY_COLUMNS)


def is_done(row: dict, skip: set, table: str | None = None) -> bool:
    """Whether `row`'s case is in `skip` (done_keys): its own key, or the key with `nodes` blank (a row of
    a file written before the column existed, whose header has no `nodes`: resumed as before); a kernel-table
    row (`table`: moe / mla suites) by table_key."""
    if table:
        return table_key(table, row) in skip
    return row_key(row) in skip or row_key(dict(row, nodes="")) in skip


def table_key(table: str, row: dict) -> tuple:
    """The identity of a kernel-table row (kernel_tables.KEY_COLUMNS), prefixed by its table."""
    return (table, *(_norm(row.get(c, "")) for c in kt.KEY_COLUMNS[table]))


def table_path(out, table: str, row: dict) -> Path:
    """Where a kernel-table row goes: <folder of --out>/<table>_<framework>_<version>.csv."""
    return Path(out).with_name(kt.file_name(table, str(row["framework"]), str(row["version"])))


def write_table_row(out, table: str, row: dict, fresh: bool = False) -> Path:
    """Append one row to its kernel-table file (header first when new; `fresh`: start the file afresh);
    unknown columns raise ValueError. Returns the file."""
    bad = sorted(set(row) - set(kt.COLUMNS[table]))
    if bad:
        raise ValueError(f"unknown {table} column(s): {', '.join(bad)}")
    path = table_path(out, table, row)
    if fresh:
        path.unlink(missing_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(kt.COLUMNS[table]))
        if new:
            w.writeheader()
        w.writerow({c: _cell(row.get(c, "")) for c in kt.COLUMNS[table]})
    return path


def table_done_keys(out) -> set:
    """Keys of the kernel-table rows beside `out` measured without error (what --resume skips)."""
    keys = set()
    for table in kt.COLUMNS:
        for f in sorted(Path(out).parent.glob(f"{table}_*.csv")):
            with f.open(newline="") as fh:
                keys |= {table_key(table, r) for r in csv.DictReader(fh)
                         if not r.get("error", "").strip() and r.get("latency", "").strip()}
    return keys


def done_keys(path) -> set:
    """Keys of the rows already measured without error in `path` (what --resume skips); failed rows
    are measured again."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return set()
    with path.open(newline="") as f:
        rd = csv.DictReader(f)
        missing = [c for c in ("op", "median_us", "error") if c not in (rd.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: not a measurement CSV (missing column {missing[0]!r}); "
                             f"cannot resume into it")
        return {row_key(r) for r in rd if not r.get("error", "").strip() and r.get("median_us", "").strip()}


def env_path(path) -> Path:
    """cpu.csv -> cpu.env.json (the environment record beside the CSV)."""
    path = Path(path)
    return path.with_name(path.stem + ".env.json")


def pending_path(path) -> Path:
    path = Path(path)
    return path.with_name(path.stem + ".pending.json")


def mark_pending(path, row: dict, table: str | None = None) -> None:
    """Note the case about to run, so that a run killed by it (NCCL timeout, crash) is recorded; a kernel-table
    row (`table`) with its table's columns and the table's name under "_table"."""
    cols = kt.COLUMNS[table] if table else COLUMNS
    rec = {c: str(row.get(c, "")) for c in cols if row.get(c, "") != ""}
    pending_path(path).write_text(json.dumps({**rec, "_table": table} if table else rec))


def clear_pending(path) -> None:
    pending_path(path).unlink(missing_ok=True)


def take_pending(path) -> dict | None:
    """The case a previous run died in (and forget it), or None."""
    p = pending_path(path)
    if not p.exists():
        return None
    try:
        row = json.loads(p.read_text())
    except json.JSONDecodeError:
        row = None
    p.unlink(missing_ok=True)
    return row


def write_rows(path, rows: list[dict]) -> None:
    """Append rows (header first when the file is new); unknown columns raise ValueError."""
    append_rows(path, [empty_row(**{k: _cell(v) for k, v in r.items()}) for r in rows])


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else str(v)


def write_env(path, record: dict, resume: bool) -> None:
    """Write the environment JSON: {'runs': [record, ...]} (a resumed run appends its record)."""
    p = env_path(path)
    runs = []
    if resume and p.exists():
        try:
            runs = json.loads(p.read_text()).get("runs", [])
        except (json.JSONDecodeError, AttributeError):
            runs = []
    runs.append(record)
    from perfmodel.cliutil import atomic_write_text

    atomic_write_text(p, json.dumps({"runs": runs}, indent=1, default=str))  # old record or new, never half


class CaseError(RuntimeError):
    """A case's failure already worded for its error row (e.g. gathered from another rank)."""


def error_text(e: BaseException) -> str:
    """One line: the exception type and the first line of its message (OOM, timeout, unsupported)."""
    if isinstance(e, CaseError):
        return str(e)[:300]
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    low = msg.lower()
    oom = isinstance(e, MemoryError) or "out of memory" in low or "can't allocate memory" in low
    kind = "OOM" if oom else type(e).__name__
    return f"{kind}: {msg}"[:300]
