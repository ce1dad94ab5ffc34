"""The files a run writes with --out: requests.parquet, steps.parquet, timeseries.csv, summary.json.

Every file is written under a temporary name in its own directory and renamed into place
(`atomic_write`), so an interrupted run leaves no partial file under a final name; summary.json is
written last, so its presence means the run's files are complete. `check_writable_dir` /
`check_writable_file` let a command refuse an output path before any work starts.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa  # (pandas' parquet engine; pandas has loaded pyarrow already, its parquet module adds ~8 ms)
import pyarrow.parquet as pq

from .metrics import time_series


class OutputPathError(ValueError):
    """An output path that cannot be written: the message names the flag, the path and why."""


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe(folder: Path, path: Path, what: str) -> None:
    """Make `folder` (and the folders above it that are missing) and a file in it, then remove what was
    made: os.access says yes to root on /proc and on read-only mounts, so only a real write tells."""
    made = []
    try:
        for d in reversed([folder, *folder.parents]):
            if not d.exists():
                d.mkdir()
                made.append(d)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".probe.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise OutputPathError(f"{what} {path}: cannot write there ({e.strerror or e})") from None
    finally:
        for d in reversed(made):
            with contextlib.suppress(OSError):
                d.rmdir()


def _check_creatable(path: Path, what: str) -> None:
    """`path` does not exist: its nearest existing ancestor must be a writable directory."""
    anc = _nearest_existing(path.parent if str(path.parent) else Path("."))
    if not anc.is_dir():
        raise OutputPathError(f"{what} {path}: {anc} is not a directory")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {path}: cannot create it, {anc} is not writable (permission denied)")


def check_writable_dir(path, what: str = "--out") -> Path:
    """Raise OutputPathError unless `path` is a writable directory or can be created as one."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise OutputPathError(f"{what} {path}: exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise OutputPathError(f"{what} {path}: directory is not writable (permission denied)")
    else:
        _check_creatable(path, what)
    _probe(path, path, what)
    return path


def check_writable_file(path, what: str = "--plot") -> Path:
    """Raise OutputPathError unless `path` is a writable file or can be created as one."""
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{what} {path}: is a directory, expected a file name")
    if path.exists():
        if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
            raise OutputPathError(f"{what} {path}: not writable (permission denied)")
    else:
        _check_creatable(path, what)
    _probe(path.parent if str(path.parent) else Path("."), path, what)  # (the result is renamed in beside it)
    return path


RUN_FILES = ("requests.parquet", "steps.parquet", "timeseries.csv", "summary.json")  # what write_run writes
MANIFEST = ".simulate-files"  # under --out: every file the last run wrote there, one relative path a line


def earlier_run(out) -> list[Path]:
    """The files an earlier run wrote under `out`: its manifest's list, else (a folder written before
    manifests) the names write_run writes, in `out` and in --compare's folders one level down."""
    out = Path(out)
    if not out.is_dir():
        return []
    listed = (out / MANIFEST).read_text().splitlines() if (out / MANIFEST).is_file() else []
    found = [out / name for name in listed if name and not Path(name).is_absolute() and ".." not in Path(name).parts]
    dirs = [out] + [d for d in out.iterdir() if d.is_dir() and (d / "summary.json").is_file()]
    found += [d / name for d in dirs for name in RUN_FILES]
    return list(dict.fromkeys(f for f in found if f.is_file()))


def check_fresh_out(out, overwrite: bool, what: str = "--out") -> None:
    """Refuse (OutputPathError) an --out folder that holds an earlier run, unless `overwrite`: a run's
    folder is its record, and new files beside old ones (a stale timeline.png) would pass for one run."""
    old = earlier_run(out)
    if old and not overwrite:
        raise OutputPathError(f"{what} {out}: holds an earlier run ({old[0].relative_to(out)}, {len(old)} file(s)); "
                              "pass --overwrite to replace that run's files, or choose a new folder")


def clear_earlier_run(out) -> None:
    """Delete the files an earlier run wrote under `out` (earlier_run: never a file the tool did not
    write), and the --compare folders that this leaves empty."""
    out = Path(out)
    old = earlier_run(out)
    for f in old:
        f.unlink()
    with contextlib.suppress(FileNotFoundError):
        (out / MANIFEST).unlink()
    for d in sorted({f.parent for f in old} - {out}, key=lambda d: -len(d.parts)):
        with contextlib.suppress(OSError):  # (not empty: it holds files of the user's own)
            d.rmdir()


def record_run_files(out, paths) -> None:
    """Write the manifest of the files this run wrote under `out` (what --overwrite will replace)."""
    out = Path(out)
    rel = sorted(str(Path(p).resolve().relative_to(out.resolve())) for p in paths
                 if Path(p).resolve().is_relative_to(out.resolve()))
    with atomic_path(out / MANIFEST) as tmp:
        tmp.write_text("".join(f"{r}\n" for r in rel))


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary name beside `path` (same suffix, so writers that read it still work); on
    success it is renamed to `path`, on any error or interrupt it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def to_parquet(df, path, chunk_rows: int = 262_144, dictionary_floats: bool = True) -> None:
    """df.to_parquet(path, index=False) with the same engine (pyarrow), converted to Arrow a chunk of rows at a
    time: converting a 2.1M-row steps frame at once held a second copy of it (~110 MB more at the peak of a
    1M-request run at half load; issue 36's 1 GB bound). Read back, the same frame (tests/test_run_memory.py).
    `dictionary_floats=False`: float columns are written plain, without parquet's dictionary encoding (the
    requests' times are nearly all distinct: encoding them took 3 of the 4 tenths of a second a 300k-request
    file took to write, for a file 8% larger than plain; 2026-12-03, pyarrow's write_table on this machine)."""
    first = pa.Table.from_pandas(df.iloc[:chunk_rows], preserve_index=False)
    dictionary = True if dictionary_floats else [f.name for f in first.schema if not pa.types.is_floating(f.type)]
    with pq.ParquetWriter(path, first.schema, use_dictionary=dictionary) as w:
        w.write_table(first)
        for i in range(chunk_rows, len(df), chunk_rows):
            w.write_table(pa.Table.from_pandas(df.iloc[i:i + chunk_rows], schema=first.schema, preserve_index=False))


def _write_parquet(path: Path, df, dictionary_floats: bool) -> None:
    with atomic_path(path) as tmp:
        to_parquet(df, tmp, dictionary_floats=dictionary_floats)


def write_run(out_dir, summary: dict, requests, steps, window_s: float = 10.0) -> list[Path]:
    """One run's result files in `out_dir` (created if needed), each written atomically, summary last;
    the paths written (RUN_FILES)."""
    if not (window_s > 0 and window_s < float("inf")):
        raise ValueError(f"window_s={window_s} must be a number of seconds > 0")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):  # a rerun into the same folder: no stale "complete" mark
        (out_dir / "summary.json").unlink()
    # the two parquet files at once, steps' in a thread: pyarrow converts and encodes without the GIL, and each
    # thread reads its own frame only (1M requests at half load: 0.4 + 0.9 s one after the other; issue 36)
    with ThreadPoolExecutor(max_workers=1) as pool:
        steps_written = pool.submit(_write_parquet, out_dir / "steps.parquet", steps, True)
        _write_parquet(out_dir / "requests.parquet", requests, False)  # (its times: distinct floats)
        steps_written.result()  # (the thread's error, if any, raised here)
    with atomic_path(out_dir / "timeseries.csv") as tmp:
        time_series(requests, steps, window_s).to_csv(tmp)
    with atomic_path(out_dir / "summary.json") as tmp:
        tmp.write_text(json.dumps(summary, indent=2) + "\n")
    return [out_dir / name for name in RUN_FILES]
