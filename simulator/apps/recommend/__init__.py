"""`simulate recommend`: the best parallelism (static layouts and dynamic policies) for a trace under
latency SLOs. `simulator.apps.recommend.core.recommend(wl, ...)` returns the summary dict;
`simulator.apps.recommend.cli.main(argv)` is the CLI (docs/recommend.md)."""
from __future__ import annotations

from simulator.apps.recommend.core import recommend as _recommend


def recommend(wl, **kw) -> dict:
    return _recommend(wl, **kw)
