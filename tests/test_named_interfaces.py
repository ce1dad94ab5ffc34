"""Issue 34: no positional tuple or `*values` crosses a file boundary in simulator/.

Checked on the source (ast), with planted violations: (1) no call spreads values positionally
(`f(*xs)`) except into a variadic library function (asyncio.gather, itertools.product) or the package's
lazy attribute forwarder; (2) no call to a function of another module is unpacked into three or more
names (`a, b, c = other.f()`): such results are NamedTuples read by name (StepAgg, StepPlan, DecodeLine,
DecodeAffine, StretchEnd, Left, Hit, Pools). Pairs are allowed: (fig, ax) and (rows, skipped) read plainly."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIADIC = {"gather", "product"}  # asyncio.gather(*aws), itertools.product(*iterables)
BUILTIN = {"partition", "rpartition", "get", "split", "rsplit"}  # str and dict methods: not an interface
FORWARDER = "simulator/__init__.py"  # getattr(module, name)(*args, **kwargs): the lazy re-export


def violations(source: str) -> list[str]:
    tree = ast.parse(source)
    local = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    bad = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and any(isinstance(a, ast.Starred) for a in n.args):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name not in VARIADIC:
                bad.append(f"line {n.lineno}: *values into {ast.unparse(f)}")
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple) and len(n.targets[0].elts) >= 3 \
                and isinstance(n.value, ast.Call):
            f = n.value.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name not in local and name not in BUILTIN:
                bad.append(f"line {n.lineno}: {len(n.targets[0].elts)} values unpacked from {ast.unparse(f)}")
    return bad


def test_simulator_passes_named_values_between_files():
    bad = []
    for path in sorted((ROOT / "simulator").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel != FORWARDER:
            bad += [f"{rel} {b}" for b in violations(path.read_text())]
    assert bad == [], "\n".join(bad)


def test_the_check_finds_planted_tuples():
    planted = ("from perfmodel.steptable import StepTable\n"
               "def f(table, agg):\n"
               "    t = table.time_s(*agg)\n"
               "    a, b, c, d = other.pools(1)\n"
               "    x, y = other.pair()\n")
    assert sorted(violations(planted)) == ["line 3: *values into table.time_s", "line 4: 4 values unpacked from other.pools"]
