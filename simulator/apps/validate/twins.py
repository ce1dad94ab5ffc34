"""Twin rows: two measurements with identical columns from two recipes that ran at one concurrency.

InferenceX ran two recipes at some concurrencies of the DeepSeek disagg search spaces (TRT-LLM: a plain and
an MTP recipe; SGLang 0.5.8: max-tp and max-dep; recipes.py), and the dataset kept both results under the
same columns: which measurement came from which recipe was lost upstream (the source file's
`silicon_data_source` holds one timestamp for both). The replay predicts every recipe of such a
concurrency (independently of the measurements), then gives the labels back by rank: of a concurrency's
two distinct measurements, the one with the lower TPOT is the recipe predicted to decode faster. That is a
permutation of the model's own predictions: a wrong cost model still shows as error (its predicted TPOTs
are compared with the measured ones), it cannot hide behind the choice. A concurrency with one distinct
measurement (the other recipe's result not in the file) replays the first recipe (plain / max-tp), never
the closer one. Rows duplicated across ingest dates (same measured values) share their measurement's label.
Labels are given among the rows replayed together: a `--match` subset holding one twin only replays it as
the first recipe.
"""
from __future__ import annotations

import dataclasses

from .harness import dsr1_choices
from .replay import Replayed, replay
from .rows import Case


def replay_choices(case: Case, framework: str | None = None) -> Replayed:
    """The row replayed as its first recipe, with every recipe of its concurrency as `alternatives` where
    more than one ran there (each replayed in full)."""
    n = len(dsr1_choices(case))
    if n <= 1:
        return replay(case, framework=framework)
    alts = tuple(replay(case, framework=framework, choice=i) for i in range(n))
    return dataclasses.replace(alts[0], alternatives=alts)


def _key(c: Case) -> tuple:
    return c.backend, c.version, c.model, c.hardware, c.policy, c.isl, c.osl, c.concurrency


def _measured(c: Case) -> tuple:
    """(TPOT, TTFT) rounded to 1e-6 ms: copies of one run differ in the last float digits across ingests
    (31382.714534003906 vs ...902 ms)."""
    return round(c.tpot_ms, 6), round(c.ttft_ms, 6)


def assign(results: list) -> tuple[list, int]:
    """`results` (Replayed or Skip, in order) with each twin row's recipe chosen by rank; and how many rows
    took a recipe other than their first. Rows without alternatives pass through unchanged."""
    groups: dict = {}
    for r in results:
        if isinstance(r, Replayed) and r.alternatives:
            groups.setdefault(_key(r.case), []).append(r)
    label: dict = {}  # (key, measured) -> index into the alternatives
    for key, rows in groups.items():
        measured = sorted({_measured(r.case) for r in rows})
        alts = rows[0].alternatives
        if len(measured) != len(alts):  # a lone measurement (or more than the recipes): the first recipe
            continue
        by_speed = sorted(range(len(alts)), key=lambda i: (alts[i].tpot_ms, i))
        for m, i in zip(measured, by_speed):
            label[(key, m)] = i
    out, moved = [], 0
    for r in results:
        if not (isinstance(r, Replayed) and r.alternatives):
            out.append(r)
            continue
        i = label.get((_key(r.case), _measured(r.case)), 0)
        out.append(dataclasses.replace(r.alternatives[i], alternatives=r.alternatives))  # (a replay of this row)
        moved += i != 0
    return out, moved
