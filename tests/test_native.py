"""The compiled engine core (setup.py, perfmodel/native.py; issue 36): it is built where a C compiler is, it is the
sources' code bit for bit, and an edited source is never shadowed by an older build."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel import native

REPO = Path(__file__).resolve().parents[1]
COMPILER = shutil.which("cc") or shutil.which("gcc")
BUILT = bool(native.compiled_modules()) and not native.stale_modules()
needs_build = pytest.mark.skipif(not BUILT, reason="the engine core is not compiled here (no C compiler at install, "
                                                   "PSIM_NATIVE=0, or sources edited since: `make setup`)")

FILES = r"""
import sys, simulator
from perfmodel import native
import simulator.run  # (imports the whole engine)
print(sorted(native.running_compiled()))
"""


def _python(code: str, pure: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PSIM_NATIVE"}
    if pure:
        env["PSIM_NATIVE"] = "0"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.skipif(COMPILER is None or os.environ.get("PSIM_NATIVE") == "0",
                    reason="no C compiler here, or PSIM_NATIVE=0: the package installs as pure Python")
def test_the_core_is_compiled_where_a_compiler_is():
    """`make setup` compiles every NATIVE module; a type error in one makes mypyc fail and the install fall back
    to pure Python silently, which this catches (run mypy --check-untyped-defs on them: setup.py's flags)."""
    assert native.compiled_modules() == list(native.NATIVE), \
        "the engine core was not compiled: setup.py's mypyc build failed (see `pip install -e .` output)"
    assert not native.stale_modules(), "sources changed since the build: `make setup` rebuilds"


@needs_build
def test_the_engine_runs_compiled_and_psim_native_0_runs_the_sources():
    assert _python(FILES, pure=False).strip() == str(sorted(native.NATIVE))
    assert _python(FILES, pure=True).strip() == "[]"


@needs_build
@pytest.mark.slow
def test_compiled_and_pure_give_the_same_frames_bit_for_bit():
    """benchmarks/bit_identity.py --quick (its 18 cases: every policy, three frameworks, a closed loop, prefix
    caching; fast-forwarded and step by step) prints the same hashes with the compiled core and with its sources.
    (The full script, both workloads, was the same too: 72 lines, 2026-12-03.)"""
    script = str(REPO / "benchmarks" / "bit_identity.py")
    code = f"import runpy, sys; sys.argv = ['bit_identity', '--quick']; runpy.run_path({script!r}, run_name='__main__')"
    compiled, pure = _python(code, pure=False), _python(code, pure=True)
    assert len(compiled.splitlines()) == 36 and "ERROR" not in compiled
    assert compiled == pure


def test_a_changed_source_counts_as_stale():
    """stale_modules compares the build record with the sources: a record of other hashes (or none) makes every
    compiled module stale, the current hashes none."""
    if not native.compiled_modules():
        assert native.stale_modules({}) == []  # nothing compiled: nothing to shadow
        return
    assert native.stale_modules(native.source_hashes()) == []
    other = {m: "0" * 64 for m in native.NATIVE}
    assert native.stale_modules(other) == native.compiled_modules()
    assert native.stale_modules({}) == native.compiled_modules()


def test_the_build_record_names_every_module():
    hashes = native.source_hashes()
    assert sorted(hashes) == sorted(native.NATIVE)
    assert all(len(h) == 64 for h in hashes.values())
    if native.BUILD_FILE.exists():
        assert sorted(json.loads(native.BUILD_FILE.read_text())) == sorted(native.NATIVE)


def test_make_setup_rebuilds_when_any_compiled_source_changes():
    """The Makefile's install stamp depends on NATIVE_SRC: every NATIVE module's source must match one of its
    patterns, or an edit there leaves `make setup` with nothing to do (a regression: calibration/point.py was
    missing when it joined NATIVE)."""
    import fnmatch
    import re

    text = (REPO / "Makefile").read_text().replace("\\\n", " ")
    patterns = re.search(r"NATIVE_SRC := \$\(wildcard ([^)]*)\)", text).group(1).split()
    sources = {m: native.source_path(m).relative_to(REPO).as_posix() for m in native.NATIVE}
    missing = [m for m, src in sources.items() if not any(fnmatch.fnmatch(src, p) for p in patterns)]
    assert missing == [], f"Makefile NATIVE_SRC misses {missing}"


def test_records_cross_processes_by_pickle():
    """The kernels' serving ranks send their records to the parent by pickle (kernels/dist.py): compiled, both record
    classes still pickle (RequestRecords is a plain class: a native one unpickled through its __init__)."""
    import pickle

    from perfmodel.batch import StepAgg
    from simulator.results.records import RequestRecords, StepRecords
    from simulator.workload import load_trace

    recs = RequestRecords(load_trace("synthetic:gamma?rate=5&n=6&input=32&output=4", seed=0))
    recs.finish_s[2] = 1.5
    steps = StepRecords()
    steps.add_row(0.5, 0.25, 1, steps.mode_code("tp"), 3, StepAgg(8, 1, 36.0, 8.0, 2, 20.0), 64.0, 1, 0.0)
    recs2, steps2 = pickle.loads(pickle.dumps((recs, steps)))
    assert recs2.frame().equals(recs.frame()) and steps2.frame().equals(steps.frame())


def test_the_build_type_checks_without_the_installed_packages():
    """setup.py's mypyc flags carry --no-site-packages (regression, 2026-12-03): without it, mypy inside the build
    typed the core against whatever packages the installing environment held (numpy's and pandas' stubs in a full
    venv), so `pip wheel .` / a rebuild in a full venv spent ~95 s per setup.py hook (5 min 36 s a wheel, 49 s
    with the flag) and the generated C depended on the environment. With it, every build sees what a fresh
    isolated build sees: numpy and pandas as Any."""
    import ast
    tree = ast.parse((REPO / "setup.py").read_text())
    flags = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "MYPY_FLAGS" for t in n.targets))
    assert "--no-site-packages" in flags, flags


FMA = r"""
import random
from perfmodel import steptable
rng = random.Random(7)
for _ in range(20000):  # decode_stretch_s of steptable's compiled module (C doubles) and the same sum in Python
    c0, c1, k0 = rng.uniform(1e-3, 5e-2), rng.uniform(1e-9, 1e-6), rng.uniform(0.0, 1e6)
    n, k = rng.randint(1, 512), rng.randint(1, 4096)
    print(steptable.decode_stretch_s(c0, c1, k0, n, k).hex())
"""


@needs_build
def test_compiled_floats_round_as_python_does():
    """A typed float expression is C arithmetic: `steps * c0 + c1 * x` in one fused multiply-add rounds once where
    Python rounds twice. GCC contracts by default and clang within an expression, and on aarch64 both emit fmadd,
    so setup.py compiles with -ffp-contract=off; this fails where a build fuses (on x86-64 without -mfma nothing
    can: it guards other machines)."""
    assert _python(FMA, pure=False) == _python(FMA, pure=True)
