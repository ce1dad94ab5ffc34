"""The simulator's Python API, imported lazily (`import simulator` loads nothing else):

    from simulator import run, compare, RunSpec, load_trace, rerun
    r = run(load_trace("burstgpt.csv"), RunSpec(policy="shift"))  # Run(summary, requests, steps, result)
    df = compare("burstgpt.csv", ["tp", "dp", "shift"])             # DataFrame, one summary row per policy
    r2 = rerun("out/")                                               # the run of out/summary.json, again

`run` and `rerun` are the modules simulator.run / simulator.rerun, callable as their functions
(run(...) is run.run(...)), so `from simulator import run as m; m.run_summary(...)` keeps working.
"""
from __future__ import annotations

import importlib
import sys
import types

from perfmodel import native  # noqa: F401  (importing perfmodel decides, before any engine module is imported,
#                                   whether the compiled core runs compiled or from its sources: perfmodel/native.py)

_API = {  # name -> (module, attribute; None: the module itself, callable)
    "run": ("simulator.run", None), "rerun": ("simulator.rerun", None),
    "RunSpec": ("simulator.run", "RunSpec"), "Run": ("simulator.run", "Run"),
    "compare": ("simulator.run", "compare"), "run_summary": ("simulator.run", "run_summary"),
    "load_trace": ("simulator.workload", "load_trace"),
}
__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    module, attr = _API[name]
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)


def __dir__():
    return sorted(set(globals()) | set(_API))


def make_callable(module_name: str, function: str) -> None:
    """Let submodule `module_name` be called as its function `function` (its API name is the
    submodule's own: after `import simulator.run`, `simulator.run` is the module, not the function)."""
    class CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return getattr(self, function)(*args, **kwargs)

    sys.modules[module_name].__class__ = CallableModule
