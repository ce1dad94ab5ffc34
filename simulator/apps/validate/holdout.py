"""`simulate validate --holdout KEY`: every FITTED constant (fits.py) refitted without one group, that group
predicted with the refit, for each group of KEY (model, backend, harness or system).

For a held-out group g and each constant: its fit rows outside g are replayed at every value of its grid (as its
script sweeps it, the other constants in force) and the value with the lowest median absolute error of its metric
is taken (the prior where no fit row is left outside g: the constant cannot be learnt without g). g's rows are then
replayed with those values together. In-sample is the ordinary replay (the constants in force, fitted on all rows).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import harness as H
from .fits import FITS
from .pool import pool_map
from .replay import Replayed, replay
from .rows import Case

KEYS = {"model": lambda c: c.model.split("/")[-1], "backend": lambda c: c.backend, "harness": H.source_of,
        "system": lambda c: c.hardware}


class Sweep(NamedTuple):
    """One replay of a constant's sweep: the constant, the row, the value tried."""

    fit: object  # fits.Fit
    case: Case
    value: float


def _one(item):
    case, fields = item
    try:
        return replay(case, **dict(fields))
    except ValueError:  # (the base replay skipped it too)
        return None


def _moved(f, value: float) -> bool:
    """Whether a refit value differs from the constant in force (read back in the field's unit: compare, not ==)."""
    return not math.isclose(value, f.fitted(), rel_tol=1e-9, abs_tol=1e-12)


def _err(results: list, metric: str) -> float:
    e = [abs(getattr(r, f"{metric}_rel_err")) for r in results if r is not None]
    return float(np.median(e)) if e else float("inf")


def holdout(done: list[Replayed], key: str, jobs: int = 1, progress=None) -> tuple[list[dict], dict]:
    """Per group of `key`: its rows, in-sample and held-out median |err| of TTFT and TPOT, and the refit values
    that differ from those in force; and the same over all rows (each predicted without its own group)."""
    group = KEYS[key]
    cases = [r.case for r in done]
    # the sweeps: each constant's fit rows at each grid value (the others in force)
    sweeps = [Sweep(f, c, v) for f in FITS for c in cases if f.fit_rows(c) for v in f.grid]
    swept = pool_map(_one, [(s.case, ((s.fit.field, s.value),)) for s in sweeps], jobs, progress)
    table: dict = {}  # (fit name, value) -> [(group, Replayed)]
    for s, r in zip(sweeps, swept):
        table.setdefault((s.fit.name, s.value), []).append((group(s.case), r))
    groups = sorted({group(c) for c in cases})
    refit: dict = {}  # group -> {fit name: value}
    for g in groups:
        vals = {}
        for f in FITS:
            errs = [(_err([r for gg, r in table.get((f.name, v), []) if gg != g], f.metric), i, v)
                    for i, v in enumerate(f.grid)]
            best = min(errs)
            vals[f.name] = f.prior if best[0] == float("inf") else best[2]
        refit[g] = vals
    # the held-out replays: the rows a changed constant acts on, with every changed value at once
    items, where = [], []
    for i, c in enumerate(cases):
        fields = tuple((f.field, refit[group(c)][f.name]) for f in FITS
                       if f.acts_on(c) and _moved(f, refit[group(c)][f.name]))
        if fields:
            items.append((c, fields))
            where.append(i)
    held = list(done)
    for i, r in zip(where, pool_map(_one, items, jobs, progress)):
        held[i] = r
    rows = []
    for g in groups + ["all"]:
        idx = [i for i, c in enumerate(cases) if g == "all" or group(c) == g]
        ins, out = [done[i] for i in idx], [held[i] for i in idx]
        changed = {} if g == "all" else {f.name.rsplit(".", 1)[1]: refit[g][f.name] for f in FITS
                                        if _moved(f, refit[g][f.name])}
        rows.append({"group": g, "rows": len(idx), "ttft_in": _err(ins, "ttft"), "ttft_held": _err(out, "ttft"),
                     "tpot_in": _err(ins, "tpot"), "tpot_held": _err(out, "tpot"), "refit": changed})
    return rows[:-1], rows[-1]


def table(key: str, rows: list[dict], total: dict) -> str:
    """The --holdout report: one line per held-out group, then all rows (each predicted without its group)."""
    head = (f"{'held out (' + key + ')':34} {'rows':>5}  {'TTFT in':>8} {'held':>7}  {'TPOT in':>8} {'held':>7}  "
            "refit without the group (fits.py)")
    lines = [head]
    for r in rows + [total]:
        refit = ", ".join(f"{k}={v:g}" for k, v in r["refit"].items()) or "-"
        lines.append(f"{r['group'][:34]:34} {r['rows']:5d}  {r['ttft_in']:8.1%} {r['ttft_held']:7.1%}  "
                     f"{r['tpot_in']:8.1%} {r['tpot_held']:7.1%}  {refit}")
    lines.append(f"held-out / in-sample median |err|: TTFT {total['ttft_held'] / total['ttft_in']:.2f}x, "
                 f"TPOT {total['tpot_held'] / total['tpot_in']:.2f}x")
    return "\n".join(lines)
