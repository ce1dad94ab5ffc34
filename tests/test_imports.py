"""Issue 13: no import cycle anywhere in the project; every module imports on its own, first.

One subprocess (so this test process's own imports cannot hide a cycle) imports each module in
turn after dropping every project module from sys.modules; third-party modules (numpy, pandas,
torch) stay cached, so ~150 fresh imports take a few seconds instead of ~150 interpreter starts.
A cycle shows up as the ImportError "partially initialized module" for the module that is
imported first, the case `import simulator.policies_sidp` used to hit.

Skipped: `__main__` modules (they run their CLI and exit, by design) and notebooks/*.py (cell
sources held as strings; they import nothing of the project). benchmarks/*.py are included: they
are scripts guarded by `if __name__ == "__main__"`, and an API move that breaks them shows here.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "perfmodel", "microbench", "kernels")
SCRIPTS = ("benchmarks",)  # folders of scripts, imported as namespace modules (benchmarks.sim_speed)

# Runs in the subprocess: argv = (prefixes as JSON, module names as JSON); prints one JSON object.
_CHECKER = r"""
import importlib, json, sys, time, traceback
prefixes, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
failures, times = {}, {}
for name in names:
    for key in [k for k in sys.modules if k.split(".")[0] in prefixes]:
        del sys.modules[key]
    t0 = time.perf_counter()
    try:
        importlib.import_module(name)
    except BaseException as e:  # SystemExit included: importing must not run a program
        failures[name] = "".join(traceback.format_exception_only(type(e), e)).strip()
    times[name] = time.perf_counter() - t0
print(json.dumps({"failures": failures, "times": times}))
"""


def module_names(root: Path, packages=PACKAGES, scripts=SCRIPTS) -> list[str]:
    """Dotted names of every module under `packages` (subpackages included) and of `scripts/*.py`."""
    names = []
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join(parts))
    for folder in scripts:
        names += [f"{folder}.{f.stem}" for f in sorted((root / folder).glob("*.py"))]
    return names


def import_each_first(root: Path, packages=PACKAGES, scripts=SCRIPTS, procs: int = 2) -> tuple[dict, dict]:
    """Import every module of `root` first in a fresh project state; ({module: error}, {module: seconds}).
    The modules are dealt to `procs` checker subprocesses run side by side (each drops every project module
    before each import, so the split changes nothing a module sees; two halve the wall time on 2 cores)."""
    names = module_names(root, packages, scripts)
    prefixes = json.dumps(list(packages) + list(scripts))
    runs = [subprocess.Popen([sys.executable, "-c", _CHECKER, prefixes, json.dumps(names[i::procs])], cwd=root,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(procs)]
    failures, times = {}, {}
    for p in runs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, f"import checker crashed (rc {p.returncode}):\n{stderr[-3000:]}"
        out = json.loads(stdout.strip().splitlines()[-1])  # the last line: modules may print on import
        failures.update(out["failures"])
        times.update(out["times"])
    return failures, times


def test_every_module_imports_first_on_its_own():
    failures, times = import_each_first(REPO)
    assert len(times) > 100, f"only {len(times)} modules found: is the tree walk right?"
    assert not failures, "modules that fail when imported first:\n" + "\n".join(
        f"  {m}: {e.splitlines()[-1]}" for m, e in sorted(failures.items()))


def test_checker_catches_a_cycle(tmp_path):
    # cyc.a imports cyc.b, which takes a name from cyc.a before cyc.a has defined it.
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc.b import B\n\nA = 1\n")
    (pkg / "b.py").write_text("from cyc.a import A\n\nB = 2\n")
    (pkg / "c.py").write_text("X = 3\n")
    failures, times = import_each_first(tmp_path, packages=("cyc",), scripts=())
    assert set(times) == {"cyc", "cyc.a", "cyc.b", "cyc.c"}
    assert set(failures) == {"cyc.a", "cyc.b"}  # each fails when imported first
    assert "partially initialized module" in failures["cyc.a"]
