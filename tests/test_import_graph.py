"""Issue 34: the project's module import graph has no cycle, deferred imports included.

tests/test_imports.py imports each module first and so catches a cycle only when it bites at
import time; a cycle hidden by an import inside a function never does, yet it still ties two
layers together (the runtime cost model calling into the fitting code, say). So this test reads
the source with ast and builds the graph of *every* import, at any depth: module level, inside
if/try, inside functions. Then it asserts the graph is acyclic and that the few imports left
inside functions (optional or heavy third-party packages that a CLI must not pay for at start)
say why on their line or the line above.

Edges: `import a.b.c` -> a.b.c; `from a.b import c` -> a.b.c when c is a submodule, else a.b
(a package means its __init__). Importing a.b.c also runs the __init__ of a and a.b first, so
those are edges too, except packages that contain the importer (they are already initialised
when the importer runs, so the edge would only restate the package tree).
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("perfmodel", "simulator", "kernels", "microbench")
FUNCTION_LEVEL = ("perfmodel", "simulator")  # the two packages the budget below covers
MAX_FUNCTION_LEVEL_IMPORTS = 15


def _modules(root: Path, packages) -> dict[str, Path]:
    """{dotted name: file} for every module under `packages`; a package is named by its __init__."""
    found = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = f
    return found


def _ancestors(name: str) -> list[str]:
    """'a.b.c' -> ['a', 'a.b']."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


class _Imports(ast.NodeVisitor):
    """Collects (node, inside_function) for every Import/ImportFrom of one file."""

    def __init__(self):
        self.found: list[tuple[ast.stmt, bool]] = []
        self._depth = 0

    def _function(self, node):
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node):
        self.found.append((node, self._depth > 0))

    visit_ImportFrom = visit_Import


def _targets(node, importer: str, is_package: bool, modules) -> list[str]:
    """Project modules one import statement names directly (before adding ancestor packages)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    base = node.module or ""
    if node.level:  # relative: strip `level` trailing parts from the importer's package
        pkg = importer.split(".") if is_package else importer.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        if sub in modules:
            out.append(sub)
        elif base in modules:
            out.append(base)
    return out


def build_graph(root: Path, packages=PACKAGES):
    """(edges {module: {module: first line}}, function-level imports [(module, file, line)])."""
    modules = _modules(root, packages)
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    deferred = []
    for name, path in modules.items():
        visitor = _Imports()
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        own = set(_ancestors(name)) | {name}
        for node, in_function in visitor.found:
            if in_function:
                deferred.append((name, path, node.lineno))
            for target in _targets(node, name, path.name == "__init__.py", modules):
                implied = [a for a in _ancestors(target) if a in modules and a not in own]
                for t in [target] + implied:
                    if t != name:
                        edges[name].setdefault(t, node.lineno)
    return edges, deferred


def find_cycle(edges) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None; iterative DFS in sorted order (stable report)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for start in sorted(edges):
        if state.get(start):
            continue
        path, stack = [start], [iter(sorted(edges[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(edges.get(nxt, ()))))
    return None


def _describe(cycle, edges) -> str:
    return " -> ".join(f"{a} (line {edges[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def _commented(path: Path, line: int) -> bool:
    """A '#' comment on the import's line or the line above it says why the import is deferred."""
    lines = path.read_text().splitlines()
    return "#" in lines[line - 1] or (line >= 2 and lines[line - 2].strip().startswith("#"))


def test_import_graph_has_no_cycle():
    edges, _ = build_graph(REPO)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + _describe(cycle, edges)


def test_few_function_level_imports_each_commented():
    _, deferred = build_graph(REPO)
    mine = [(m, p, n) for m, p, n in deferred if m.split(".")[0] in FUNCTION_LEVEL]
    listing = "\n".join(f"  {p.relative_to(REPO)}:{n}" for _, p, n in mine)
    assert len(mine) <= MAX_FUNCTION_LEVEL_IMPORTS, (
        f"{len(mine)} imports inside functions (at most {MAX_FUNCTION_LEVEL_IMPORTS}):\n{listing}")
    bare = [f"{p.relative_to(REPO)}:{n}" for _, p, n in mine if not _commented(p, n)]
    assert not bare, "imports inside functions without a comment saying why: " + ", ".join(bare)


def _plant(tmp_path: Path, a_body: str, b_body: str) -> Path:
    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text(a_body)
    (pkg / "sub" / "b.py").write_text(b_body)
    return tmp_path


def test_checker_finds_planted_cycles(tmp_path):
    """A module-level cycle, one hidden in a function, and ones through relative imports all fail."""
    cases = [
        ("import planted.sub.b\n", "from planted import a\n"),
        ("from planted.sub import b\n", "def f():\n    import planted.a\n"),
        ("from .sub.b import x\n", "def f():\n    if True:\n        from ..a import y\n"),
        ("from .sub import b\n", "from .. import a\n"),
    ]
    for i, (a_body, b_body) in enumerate(cases):
        root = _plant(tmp_path / str(i), a_body, b_body)
        edges, _ = build_graph(root, packages=("planted",))
        cycle = find_cycle(edges)
        assert cycle is not None and {"planted.a", "planted.sub.b"} <= set(cycle), (i, edges)


def test_checker_sees_package_init_reexports(tmp_path):
    """A package __init__ re-exporting from a module that imports the package is a cycle too."""
    root = _plant(tmp_path, "x = 1\n", "from planted import a\n")
    (root / "planted" / "sub" / "__init__.py").write_text("from .b import *\n")
    (root / "planted" / "a.py").write_text("from planted.sub import thing\n")
    edges, _ = build_graph(root, packages=("planted",))
    assert find_cycle(edges) is not None
    (root / "planted" / "a.py").write_text("x = 1\n")
    edges, _ = build_graph(root, packages=("planted",))
    assert find_cycle(edges) is None
