"""Issue 34: per-request state has one owner. The request records' columns (simulator/results/records.py)
are written only by the engines (engine/core.py, engine/step.py, engine/loop.py and the engine kinds
of the disagg and Seesaw policies), and the issue time and a rejection's reason by the cluster's front
door (cluster/gate.py); a coordinator or orchestrator acts through an engine's methods. Checked on
the source (ast): any `x.<column>[...] = ...` (or +=) elsewhere in simulator/ fails, with a planted one."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from test_sim_util import workload

from simulator.results.records import RequestRecords

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"simulator/engine/core.py", "simulator/engine/step.py", "simulator/engine/loop.py",
           "simulator/policies/disagg/decode.py", "simulator/policies/seesaw/engine.py"}
OWNERS = {"issued_s": {"simulator/cluster/gate.py"}, "reject_reason": {"simulator/cluster/gate.py"}}


def columns() -> set[str]:
    recs = RequestRecords(workload([0.0], [10], [2]))
    return {k for k, v in vars(recs).items() if isinstance(v, (np.ndarray, list))}


def writes(source: str, cols: set[str]) -> list[tuple[int, str]]:
    """(line, column) of every subscripted write to an attribute named like a request column."""
    out = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Attribute) and sub.value.attr in cols:
                    out.append((node.lineno, sub.value.attr))
    return sorted(out)


def test_request_columns_are_written_by_their_owners_only():
    cols, bad = columns(), []
    for path in sorted((ROOT / "simulator").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, col in writes(path.read_text(), cols):
            if rel not in OWNERS.get(col, ENGINES):
                bad.append(f"{rel}:{line} writes {col}")
    assert bad == [], "\n".join(bad)


def test_the_owner_check_finds_a_planted_write():
    planted = "def prefilled(self, pos):\n    self.recs.kv_wait_s[pos] = 1.0\n    r.generated[pos] += 1\n"
    assert writes(planted, columns()) == [(2, "kv_wait_s"), (3, "generated")]
