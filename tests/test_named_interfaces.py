"""Issue 34: no positional tuple or `*values` crosses a file boundary in simulator/.

Checked on the source (ast), with planted violations: (1) no call spreads values positionally
(`f(*xs)`) except into a variadic library function (asyncio.gather, itertools.product) or the package's
lazy attribute forwarder; (2) no call to a function of another module is unpacked into three or more
names (`a, b, c = other.f()`): such results are NamedTuples read by name (StepAgg, StepPlan, DecodeLine,
DecodeAffine, StretchEnd, Left, Hit, Pools, Admitted, CompareItem, RunFrames); (3) no loop unpacks three or
more names per item of what another file handed over. Pairs are allowed: (fig, ax) and (rows, skipped)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIADIC = {"gather", "product"}  # asyncio.gather(*aws), itertools.product(*iterables)
BUILTIN = {"partition", "rpartition", "get", "split", "rsplit"}  # str and dict methods: not an interface
FORWARDER = "simulator/__init__.py"  # getattr(module, name)(*args, **kwargs): the lazy re-export


LOOP_OK = {"zip", "enumerate", "items", "product", "range", "sorted", "reversed"}  # pairing a few values up


def _loop_source(it, module_names: set) -> str | None:
    """What a loop of three-plus names unpacks, if it may come from another file: an attribute (`s.admitted`),
    a name not bound at module level (a parameter, another module's result), or another module's call."""
    if isinstance(it, (ast.Tuple, ast.List, ast.GeneratorExp, ast.ListComp, ast.Set)):
        return None  # built right here
    if isinstance(it, ast.Name):
        return None if it.id in module_names else it.id
    if isinstance(it, ast.Call):
        f = it.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        return None if name in LOOP_OK or name in module_names else ast.unparse(f)
    return ast.unparse(it)


def violations(source: str) -> list[str]:
    tree = ast.parse(source)
    local = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    module_names = local | {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.For))  # module-level data
                            for tg in (n.targets if isinstance(n, ast.Assign) else [n.target])
                            for t in ast.walk(tg) if isinstance(t, ast.Name)}
    bad = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.For, ast.comprehension)) and isinstance(n.target, ast.Tuple) \
                and len(n.target.elts) >= 3:
            src = _loop_source(n.iter, module_names)
            if src is not None:
                bad.append(f"line {n.iter.lineno}: {len(n.target.elts)} values unpacked per item of {src}")
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
               "    x, y = other.pair()\n"
               "    for pos, prompt, out in s.admitted:\n"
               "        pass\n")
    assert sorted(violations(planted)) == ["line 3: *values into table.time_s", "line 4: 4 values unpacked from other.pools",
                                           "line 6: 3 values unpacked per item of s.admitted"]
