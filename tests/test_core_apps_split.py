"""Issue 34: simulator/ is the core (workload, cluster, engine, policies, results, run.py and what it
needs) apart from the applications in simulator/apps/ (the `simulate` CLI, recommend, sweep, validate,
replay, comparison). The applications import the core; the core never imports an application.

The graph is tests/test_import_graph.py's (every import at any depth, relative ones resolved, a
package's __init__ included), plus string constants naming a module under simulator.apps (an
`importlib.import_module("simulator.apps...")` or a lazy-import table such as simulator/__init__.py's
would hide the dependency from the import statements).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from test_import_graph import REPO, _modules, build_graph

APPS = "simulator.apps"
CORE = ("simulator.workload", "simulator.cluster", "simulator.engine", "simulator.policies",
        "simulator.results", "simulator.run", "simulator.run_record", "simulator.rerun")
APPLICATIONS = ("cli", "cli_items", "recommend", "sweep", "validate", "replay.cli", "comparison")


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def core_to_apps(root: Path, top: str = "simulator", apps: str = APPS) -> list[str]:
    """'importer -> target (line n)' for every module under `top` outside `apps` that imports `apps`."""
    edges, _ = build_graph(root, packages=(top,))
    found = [f"{m} -> {t} (line {n})" for m, ts in sorted(edges.items()) if not _in(m, apps)
             for t, n in sorted(ts.items()) if _in(t, apps)]
    named = re.compile(rf"{re.escape(apps)}(\.[A-Za-z_][\w.]*)?")
    for m, path in _modules(root, (top,)).items():
        if _in(m, apps):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and named.fullmatch(node.value):
                found.append(f"{m} -> {node.value} (line {node.lineno}, a string)")
    return found


def test_core_never_imports_apps():
    bad = core_to_apps(REPO)
    assert not bad, "the simulator core imports simulator.apps:\n  " + "\n  ".join(bad)


def test_the_split_is_in_place():
    """The applications live under simulator/apps/, the core beside it; none is left at the top."""
    modules = _modules(REPO, ("simulator",))
    for app in APPLICATIONS:
        assert f"{APPS}.{app}" in modules, app
        assert f"simulator.{app}" not in modules, f"simulator.{app} should be under {APPS}"
    for core in CORE:
        assert core in modules, core
    edges, _ = build_graph(REPO, packages=("simulator",))
    assert any(_in(t, "simulator.run") for t in edges[f"{APPS}.cli"])  # the CLI runs through the core


def _plant(root: Path, files: dict[str, str]) -> Path:
    base = {"simulator/__init__.py": "", "simulator/run.py": "x = 1\n", "simulator/engine/__init__.py": "",
            "simulator/engine/loop.py": "from simulator import run\n", "simulator/apps/__init__.py": "",
            "simulator/apps/cli.py": "from simulator.run import x\nfrom ..engine import loop\n"}
    for rel, text in {**base, **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_checker_finds_planted_violations(tmp_path):
    assert core_to_apps(_plant(tmp_path / "clean", {})) == []  # apps -> core is the allowed direction
    cases = {
        "module level": {"simulator/run.py": "from simulator.apps import cli\n"},
        "in a function": {"simulator/engine/loop.py": "def f():\n    import simulator.apps.cli\n"},
        "relative": {"simulator/engine/loop.py": "from ..apps.cli import x\n"},
        "package init": {"simulator/__init__.py": "from . import apps\n"},
        "importlib string": {"simulator/run.py": "import importlib\nm = importlib.import_module('simulator.apps.cli')\n"},
        "lazy table": {"simulator/__init__.py": "_API = {'main': ('simulator.apps.cli', 'main')}\n"},
    }
    for i, (why, files) in enumerate(cases.items()):
        found = core_to_apps(_plant(tmp_path / str(i), files))
        assert found and all("simulator.apps" in f for f in found), (why, found)
