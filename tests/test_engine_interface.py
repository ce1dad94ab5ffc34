"""Issue 34: one engine interface (simulator/engine/interface.py) and one engine core (engine/core.py).

Every engine that a run of any policy builds is an EngineCore and satisfies the Protocol of its kind;
the idle wait, the sleep (one step or a closed-form stretch), the step row and the completion are the
core's methods, not re-implemented by a kind (checked on the source: no engine kind outside core.py
creates the idle event, a Stretch's sleep, a StepRow or writes a finish time itself)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_sim_util import run, workload

from simulator.engine.core import EngineCore
from simulator.engine.interface import EngineLike, KVReceiver, LendableEngine, ServingEngine
from simulator.engine.loop import Engine
from simulator.policies import POLICIES
from simulator.policies.disagg.decode import DecodeEngine
from simulator.policies.seesaw.engine import SeesawEngine

ROOT = Path(__file__).resolve().parents[1]
KINDS = {Engine: LendableEngine, DecodeEngine: KVReceiver, SeesawEngine: ServingEngine}


class Collect:
    def __init__(self):
        self.engines = []

    def attach(self, e) -> None:
        self.engines.append(e)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_engine_of_every_policy_is_a_core_with_its_kinds_interface(policy):
    extra = {"model_name": "qwen3-30b-a3b"} if policy == "ep" else {}
    if policy == "layout":
        extra["layout"] = "tp=2"
    got = Collect()
    res = run(workload([0.0, 0.01, 0.5], [300, 40, 900], [5, 0, 30]), policy=policy, gpus=4, check=got, **extra)
    assert got.engines, policy
    for e in got.engines:
        assert isinstance(e, EngineCore) and isinstance(e, EngineLike), type(e)
        want = KINDS[type(e)]
        assert isinstance(e, want), f"{type(e).__name__} lacks {want.__name__}'s methods"
    f = res.requests.frame()
    assert (f["status"] == "completed").sum() == 3


def test_the_protocol_check_can_fail():
    class Half:  # an engine-like object without submit
        index = outstanding_tokens = outstanding_requests = 0
        waiting = ()
        capacity_tokens = 0

        def fits(self, pos): return True
        def add_finish_hook(self, fn): pass
        def report_queue(self, q): pass
        def record(self, **kw): pass
    assert isinstance(Half(), EngineLike) and not isinstance(Half(), ServingEngine)


# what only the core may do: the sleeper's event, a stretch's timeout, a step row, a request's finish time
CORE_ONLY = {"sleep_stretch": "a stretch's sleep", "step_row": "a step row", "StepRow": "a step row"}
ENGINE_KINDS = ["simulator/engine/loop.py", "simulator/engine/lockstep.py", "simulator/policies/disagg/decode.py",
                "simulator/policies/seesaw/engine.py", "simulator/policies/disagg/coordinator.py",
                "simulator/policies/flying/coordinator.py", "simulator/policies/sidp/orchestrator.py"]


def core_copies(source: str) -> list[str]:
    """What a module does that only the engine core should: call the stretch sleeper or build a step row
    itself, create a bare simpy event to idle on, or write a request's finish time."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            base = f.value if isinstance(f, ast.Attribute) else None
            if name in CORE_ONLY and not (isinstance(base, ast.Name) and base.id == "self"):
                bad.append(f"line {node.lineno}: {CORE_ONLY[name]}")
            if name in ("add", "append") and (isinstance(base, ast.Attribute) and base.attr == "steps"
                                               or isinstance(base, ast.Name) and base.id == "steps"):
                bad.append(f"line {node.lineno}: a step row")
            if name == "event" and isinstance(base, ast.Name) and base.id == "env":
                bad.append(f"line {node.lineno}: an idle event")
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and t.value.attr == "finish_s":
                    bad.append(f"line {node.lineno}: a finish time")
    return bad


@pytest.mark.parametrize("path", ENGINE_KINDS)
def test_no_engine_kind_copies_the_core(path):
    assert core_copies((ROOT / path).read_text()) == []


def test_the_copy_check_finds_planted_copies():
    planted = ("def loop(env, steps, r, st, pos):\n"
               "    ev = env.event()\n"
               "    yield from sleep_stretch(env, st, 1.0)\n"
               "    steps.append(step_row(start_s=0))\n"
               "    self.steps.add(start_s=0)\n"
               "    r.finish_s[pos] = env.now\n")
    assert sorted(b.split(": ", 1)[1] for b in core_copies(planted)) == [
        "a finish time", "a step row", "a step row", "a step row", "a stretch's sleep", "an idle event"]
