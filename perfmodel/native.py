"""The compiled core: which modules run as mypyc extension modules, and when their sources run.

setup.py compiles NATIVE (the modules an engine's turn and a request's way through the front end run in: the
simulator's engine, front end and step records, and perfmodel's StepTable that prices every step) with mypyc into
extension modules beside the sources and records each source's SHA-256 in BUILD_FILE. A compiled module is the same
code, typed: results are bit for bit those of the sources (tests/test_native.py), a replay needs 0.6-0.7x the
instructions (benchmarks/instructions_per_request.py; issue 36). This module lives in perfmodel, the package every
other imports: `perfmodel/__init__.py` calls `use_sources_if` once, before any of NATIVE is imported, so that the sources run
instead of the extension modules when
  * PSIM_NATIVE=0 is in the environment (debuggers, sys.settrace line counts, monkeypatching a method), or
  * a source changed since the build (an editable checkout: `make setup` rebuilds), with a warning, so an edit is
    never silently shadowed by an older compiled copy (all of them then: compiled modules call each other in C).
Without extension modules (no C compiler at install, PSIM_NATIVE=0 at install) nothing here acts.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the directory holding the perfmodel and simulator packages
NATIVE = tuple(f"simulator.{m}" for m in (
    "engine.batch", "engine.batchwait", "engine.core", "engine.headroom", "engine.kv", "engine.limits", "engine.loop",
    "engine.ratio", "engine.runner", "engine.scheduler", "engine.step", "engine.stretch", "cluster.arrivals",
    "cluster.frontend", "cluster.gate", "cluster.router", "results.records")) \
    + ("perfmodel.steptable", "perfmodel.calibration.point")  # (setup.py compiles <these>.py)
BUILD_FILE = ROOT / "perfmodel" / "native_build.json"  # {module: sha256 of its source when compiled}: setup.py


def source_path(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")  # (a module's full name: "perfmodel.steptable")


def source_hashes() -> dict:
    """{module: sha256 hex of its source} over NATIVE (what setup.py records at build time)."""
    return {m: hashlib.sha256(source_path(m).read_bytes()).hexdigest() for m in NATIVE}


def compiled_modules() -> list[str]:
    """NATIVE modules that have an extension module beside their source (built for this interpreter)."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    return [m for m in NATIVE if any(source_path(m).with_suffix(s).exists() for s in suffixes)]


def stale_modules(built: dict | None = None) -> list[str]:
    """Compiled modules whose source is not the one they were built from (all of them without a build record)."""
    if built is None:
        try:
            built = json.loads(BUILD_FILE.read_text())
        except (OSError, ValueError):
            built = {}
    now = source_hashes()
    return [m for m in compiled_modules() if built.get(m) != now[m]]


class _SourcesFirst:
    """A meta path finder that loads the named modules from their .py files."""

    def __init__(self, names: set):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


def _sources_first() -> _SourcesFirst | None:
    """The finder `use_sources_if` installed in this process, if it installed one."""
    return next((f for f in sys.meta_path if isinstance(f, _SourcesFirst)), None)


def runs_compiled() -> bool:
    """Whether this process runs (or will run) the engine core compiled: it is built, and `use_sources_if` (run at
    `import perfmodel`) did not send its imports to the sources."""
    return bool(compiled_modules()) and _sources_first() is None


def core_label() -> str:
    """What a benchmark's figures ran on."""
    return "compiled (mypyc: setup.py)" if runs_compiled() else "pure Python (PSIM_NATIVE=0 or not built)"


def use_sources_if() -> list[str]:
    """Run NATIVE's sources instead of their extension modules where the module docstring says; the modules
    that will run from source (empty: every compiled module runs compiled, or none is compiled)."""
    decided = _sources_first()  # (once a process: perfmodel/__init__.py)
    if decided is not None:
        return sorted(decided.names)
    compiled = compiled_modules()
    if not compiled:
        return []
    if os.environ.get("PSIM_NATIVE", "1") == "0":
        chosen = compiled
    else:
        stale = stale_modules()
        chosen = compiled if stale else []  # (all or none: compiled modules call each other directly, in C)
        if stale:
            warnings.warn(f"the compiled engine core is older than its sources ({', '.join(stale)}): running it "
                          f"from source (slower); `make setup` rebuilds it", RuntimeWarning, stacklevel=2)
    if chosen:
        sys.meta_path.insert(0, _SourcesFirst(set(chosen)))
    return chosen


def running_compiled() -> list[str]:
    """NATIVE modules imported so far that run compiled (their loader is an extension module's)."""
    out = []
    for m in NATIVE:
        mod = sys.modules.get(m)
        if mod is not None and isinstance(getattr(mod, "__loader__", None), importlib.machinery.ExtensionFileLoader):
            out.append(m)
    return out
