"""Ships the bundled sample traces in built wheels, and compiles the simulator's engine core with mypyc;
everything else is declared in pyproject.toml.

The traces live at the repository's top level (traces/, next to the packages). A source checkout
or an editable install reads them there; a wheel carries a copy inside the simulator package
(simulator/traces/), where simulator.workload.files.bundled_traces_dir finds it once installed.

The compiled core (perfmodel/native.py NATIVE: the modules an engine's turn and a request's way through the front
end run in, and the StepTable pricing each step) is plain, type-annotated Python that mypyc (pinned in pyproject's
build requirements) compiles to C extension modules beside the sources, recording the sources' hashes
(perfmodel/native_build.json) so that an edited source is never shadowed by an older build (perfmodel/native.py).
Same results bit for bit, 0.6-0.7x the instructions (issue 36; tests/test_native.py). Without a C compiler,
without mypyc (a build without isolation), or with PSIM_NATIVE=0 in the environment, the package installs and runs
as pure Python; a failed compile says so and falls back the same way.
"""
import importlib.util
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TRACES = ("*.csv", "*.jsonl", "README.md")
# --no-site-packages: the build types the core against no installed package (numpy, pandas: Any), as a fresh
# isolated build does; a full venv's numpy/pandas stubs made each setup.py hook take ~95 s and the C depend on it
MYPY_FLAGS = ("--no-site-packages", "--ignore-missing-imports", "--follow-imports=silent", "--check-untyped-defs")


def _native():
    """perfmodel/native.py, loaded by path (importing the packages needs their dependencies)."""
    spec = importlib.util.spec_from_file_location("_psim_native", ROOT / "perfmodel" / "native.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class BuildPyWithTraces(build_py):
    """build_py that also copies traces/{*.csv,*.jsonl,README.md} to <build>/simulator/traces/."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # editable: read from the checkout's traces/
            return
        dest = Path(self.build_lib) / "simulator" / "traces"
        self.mkpath(str(dest))
        for pattern in TRACES:
            for src in sorted((ROOT / "traces").glob(pattern)):
                self.copy_file(str(src), str(dest / src.name))


class OptionalBuildExt(build_ext):
    """build_ext that records the compiled sources' hashes, and whose failure leaves a pure-Python install."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # (no compiler, missing headers: CCompilerError, DistutilsPlatformError, ...)
            print(f"setup.py: the compiled engine core was not built ({e}); installing pure Python", file=sys.stderr)
            return
        if self.extensions:
            native = _native()
            dest = native.BUILD_FILE.parent if self.inplace else Path(self.build_lib) / "perfmodel"
            dest.mkdir(parents=True, exist_ok=True)
            (dest / native.BUILD_FILE.name).write_text(json.dumps(native.source_hashes(), indent=1) + "\n")


def native_extensions() -> list:
    """mypyc's extension modules for perfmodel/native.py NATIVE, or [] (pure Python: module docstring)."""
    if os.environ.get("PSIM_NATIVE", "1") == "0":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("setup.py: mypyc not importable; installing pure Python", file=sys.stderr)
        return []
    paths = [f"{m.replace('.', '/')}.py" for m in _native().NATIVE]
    try:
        exts = mypycify([*MYPY_FLAGS, *paths], opt_level="3", group_name="psim_native")
    except (Exception, SystemExit) as e:  # (mypyc exits on a type error)
        print(f"setup.py: mypyc could not compile the engine core ({e}); installing pure Python", file=sys.stderr)
        return []
    if sys.platform != "win32":  # (GCC and clang; MSVC's default /fp:precise does not contract)
        for ext in exts:  # typed floats are C doubles: `a + b * c` must round twice, as Python does, not once in an
            # FMA (GCC contracts by default, clang within an expression; on aarch64 both emit fmadd, e.g.
            # perfmodel.steptable.decode_stretch_s), or a compiled run would differ from the sources' and from x86's
            ext.extra_compile_args = [*ext.extra_compile_args, "-ffp-contract=off"]
    return exts


setup(cmdclass={"build_py": BuildPyWithTraces, "build_ext": OptionalBuildExt}, ext_modules=native_extensions())
