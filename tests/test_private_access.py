"""Issue 13: no code reads or writes another object's underscore attributes, and no SimPy private state.

An AST check over the project's packages. Flagged:
1. `X._name` (one or two leading underscores, not a dunder) where X is not `self`, `cls` or
   `super()` (all three are the object's own class speaking); reads, writes and deletes alike, and
   `getattr/setattr/hasattr/delattr(X, "_name")`. The receiver's type is not known to an AST, so
   another instance of the same class (`other._x` in `__eq__`) is flagged too: expose a property.
2. `from m import _name`: a module's private helper used from another module (make it public).
3. SimPy private state even through `self`: in a class deriving from a SimPy class, `self._x`
   where `_x` is an underscore attribute SimPy's own source sets on self (`_ok`, `_value`,
   `_queue`, `_eid`, `_now`, ...; read from the installed simpy, so the list follows its version).
   Outside such classes, `ev._ok` / `env._queue` are already caught by rule 1.

The allow-list holds third-party names that are private by spelling only; each entry says why.
"""
from __future__ import annotations

import ast
from pathlib import Path

import simpy

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("simulator", "perfmodel", "microbench", "kernels", "benchmarks")

# Any receiver: namedtuple's documented public API is spelled with a leading underscore so it
# cannot clash with field names (docs.python.org/3/library/collections.html#collections.namedtuple).
ALLOWED_NAMES = {"_replace", "_asdict", "_fields", "_make"}
# (receiver as written, attribute): private by name, but the only way to do the thing.
ALLOWED = {
    ("os", "_exit"): "documented stdlib: leave a forked/spawned worker without running atexit handlers",
    ("torch", "_scaled_mm"): "PyTorch's only fp8 GEMM entry point (no public API in torch 2.x); "
                             "microbench times it beside the perf model's fp8 prediction",
}
OWN = {"self", "cls"}
ACCESSORS = {"getattr", "setattr", "hasattr", "delattr"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _simpy_private_names() -> frozenset[str]:
    """Every `self._x` SimPy's own source uses: its private state and helpers."""
    names = set()
    for f in Path(simpy.__file__).parent.rglob("*.py"):
        for n in ast.walk(ast.parse(f.read_text())):
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                    and _is_private(n.attr)):
                names.add(n.attr)
    return frozenset(names)


SIMPY_PRIVATE = _simpy_private_names()


def _receiver_is_own(node: ast.expr) -> bool:
    """`self`, `cls` or `super()`: the object's own class speaking."""
    if isinstance(node, ast.Name):
        return node.id in OWN
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _allowed(receiver: ast.expr, attr: str) -> bool:
    return attr in ALLOWED_NAMES or (ast.unparse(receiver), attr) in ALLOWED


def _simpy_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to the simpy package or its modules, names imported from simpy)."""
    modules, names = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] == "simpy":
                    modules.add(a.asname or a.name.split(".")[0])
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and (n.module or "").split(".")[0] == "simpy":
            names |= {a.asname or a.name for a in n.names}
    return modules, names


def _derives_from_simpy(cls: ast.ClassDef, modules: set[str], names: set[str]) -> bool:
    for base in cls.bases:
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and (root.id in modules or (root is base and root.id in names)):
            return True
    return False


def violations_in_source(src: str, filename: str = "<src>") -> list[str]:
    """'file:line: what' for every private access in `src`."""
    tree = ast.parse(src, filename)
    out = []

    def flag(node, what):
        out.append(f"{filename}:{node.lineno}: {what}")

    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and _is_private(n.attr):
            if not _receiver_is_own(n.value) and not _allowed(n.value, n.attr):
                kind = "SimPy private state" if n.attr in SIMPY_PRIVATE else "another object's private attribute"
                flag(n, f"{ast.unparse(n)} ({kind})")
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ACCESSORS
              and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)
              and _is_private(n.args[1].value)):
            if not _receiver_is_own(n.args[0]) and not _allowed(n.args[0], n.args[1].value):
                flag(n, f"{ast.unparse(n)} (another object's private attribute, by name)")
        elif isinstance(n, ast.ImportFrom):
            for a in n.names:
                if _is_private(a.name):
                    flag(n, f"from {'.' * n.level}{n.module or ''} import {a.name} (another module's private name)")
    modules, names = _simpy_aliases(tree)
    for cls in (c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)):
        if _derives_from_simpy(cls, modules, names):
            for n in ast.walk(cls):
                if (isinstance(n, ast.Attribute) and n.attr in SIMPY_PRIVATE and isinstance(n.value, ast.Name)
                        and n.value.id in OWN):
                    flag(n, f"{ast.unparse(n)} in {cls.name}, a SimPy subclass (SimPy private state)")
    return sorted(set(out), key=lambda s: (s.split(":")[0], int(s.split(":")[1]), s))


def project_violations(root: Path = REPO, packages=PACKAGES) -> list[str]:
    out = []
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            out += violations_in_source(f.read_text(), str(f.relative_to(root)))
    return out


def test_no_private_access_in_the_project():
    found = project_violations()
    assert not found, f"{len(found)} private accesses (make the name public or add a method):\n" + "\n".join(found)


def test_checker_catches_planted_violations():
    src = '''
import simpy
from simpy import Event
from .engine import _helper

class Mine:
    def __init__(self, other):
        self._x = 1                      # own state: fine
        other._stretch = None            # another object's: flagged
        print(super()._x)                # the object's own class: fine

def stretch(env, ev, t):
    ev._ok, ev._value = True, None       # SimPy private state
    env._queue.append(t)
    if hasattr(env, "_eid"):
        setattr(ev, "_defused", True)
    os._exit(0)                          # allowed: documented stdlib
    row._replace(a=1)                    # allowed: namedtuple API
    return torch._scaled_mm, x.__class__  # allowed; dunder is not private

class Fast(simpy.Environment):
    def step(self):
        self._now = 3                    # SimPy private state through self

class Ev(Event):
    def go(self):
        return self._value, self._mine   # only SimPy's own names are flagged
'''
    found = violations_in_source(src, "m.py")
    assert found == [
        "m.py:4: from .engine import _helper (another module's private name)",
        "m.py:9: other._stretch (another object's private attribute)",
        "m.py:13: ev._ok (SimPy private state)",
        "m.py:13: ev._value (SimPy private state)",
        "m.py:14: env._queue (SimPy private state)",
        "m.py:15: hasattr(env, '_eid') (another object's private attribute, by name)",
        "m.py:16: setattr(ev, '_defused', True) (another object's private attribute, by name)",
        "m.py:23: self._now in Fast, a SimPy subclass (SimPy private state)",
        "m.py:27: self._value in Ev, a SimPy subclass (SimPy private state)",
    ], "\n".join(found)
