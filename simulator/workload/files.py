"""Trace files: the bundled sample traces, a name or path resolved to a file, and a file read into a
Workload (format sniffed unless given). Below both load.py (which also takes synthetic specs) and
synthetic.py (whose `lengths=` resamples a trace file)."""
from __future__ import annotations

from pathlib import Path

from .checks import ReadOptions, check_text
from .errors import TraceError
from .readers import READERS, sniff_format
from .workload import Workload


def bundled_traces_dir() -> Path:
    """The bundled sample traces: the copy a built wheel ships inside the package (simulator/traces/,
    see setup.py), else the repository's top-level traces/ (a checkout or an editable install)."""
    pkg = Path(__file__).resolve().parents[1]  # the installed simulator package (this is simulator/workload/)
    return pkg / "traces" if (pkg / "traces").is_dir() else pkg.parent / "traces"


def bundled_traces() -> list[str]:
    """File names of the bundled sample traces."""
    d = bundled_traces_dir()
    return sorted(p.name for p in d.glob("*") if p.suffix in (".csv", ".jsonl")) if d.is_dir() else []


def resolve_trace_path(trace: str | Path) -> Path:
    """An existing file as given, else a bundled traces/<name> (".csv" may be left off)."""
    p = Path(trace).expanduser()
    if p.is_file():
        return p
    if p.exists():
        raise TraceError(trace, "not a regular file")
    if len(p.parts) == 1:
        for cand in (bundled_traces_dir() / p.name, bundled_traces_dir() / f"{p.name}.csv"):
            if cand.is_file():
                return cand
    names = ", ".join(bundled_traces()) or "none"
    raise TraceError(trace, f"no such file, and no bundled trace of that name (bundled: {names}; "
                     f"or a spec like synthetic:poisson?rate=10&n=1000)")


def read_trace_file(trace: str | Path, fmt: str | None, options: ReadOptions) -> Workload:
    """A trace file or bundled name read into a Workload (format sniffed unless `fmt`)."""
    path = resolve_trace_path(trace)
    try:
        check_text(path)  # a binary or sparse file: one line now, not a parser's traceback after minutes
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    if fmt is None:
        fmt = sniff_format(path)
    elif fmt not in READERS:
        raise TraceError(path, f"unknown trace format {fmt!r}; known: {', '.join(READERS)}",
                         field="--trace-format")
    try:
        return READERS[fmt](path, options)
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
