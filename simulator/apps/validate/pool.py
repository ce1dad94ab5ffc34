"""Replays in worker processes, in order: what `simulate validate`, its --holdout sweeps and the fit scripts share."""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from simulator.apps.sweep.executors import ignore_sigint


def pool_map(fn, items: list, jobs: int, progress=None) -> list:
    """[fn(item) for item in items], in worker processes when jobs > 1 (workers leave Ctrl-C to the parent);
    `progress(1)` after each. `fn` must be a module-level function (it is pickled)."""
    if jobs <= 1 or len(items) < 2:
        out = []
        for it in items:
            out.append(fn(it))
            if progress:
                progress(1)
        return out
    with ProcessPoolExecutor(jobs, initializer=ignore_sigint) as ex:
        out = []
        for r in ex.map(fn, items, chunksize=4):
            out.append(r)
            if progress:
                progress(1)
        return out
