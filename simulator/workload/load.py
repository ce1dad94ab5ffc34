"""load_trace: a file path, a bundled trace name or a synthetic spec string -> Workload."""
from __future__ import annotations

from pathlib import Path

from .checks import ReadOptions
from .files import read_trace_file
from .synthetic import SYNTHETIC_PREFIX, generate, parse_spec
from .workload import Workload


def load_trace(trace: str | Path, fmt: str | None = None, **opts) -> Workload:
    """Read a trace file (format sniffed unless `fmt`), a bundled name, or a 'synthetic:...' spec.

    `opts` are ReadOptions fields: strict, drop_failed, burstgpt_model, seed.
    """
    options = ReadOptions(**opts)
    if str(trace).startswith(SYNTHETIC_PREFIX):
        return generate(parse_spec(str(trace), default_seed=options.seed))
    return read_trace_file(trace, fmt, options)
