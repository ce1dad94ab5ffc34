"""Routing: which engine takes a request, among those whose KV can ever hold it.

State that routing reads (outstanding tokens or requests) changes only at arrivals and
completions, so fast-forward and step-by-step route identically. Ties go to the lowest index.
"""
from __future__ import annotations

import operator

ROUTERS = ("round-robin", "least-tokens", "shortest-queue")

_LOAD = {"least-tokens": operator.attrgetter("outstanding_tokens"),
         "shortest-queue": operator.attrgetter("outstanding_requests")}


class Router:
    """Picks an engine for each request; `pick` returns None when no engine can hold it."""

    def __init__(self, engines: list, name: str, fits=None):
        if name not in ROUTERS:
            raise ValueError(f"unknown router {name!r}: one of {', '.join(ROUTERS)}")
        self.engines, self.name = engines, name
        self.fits = fits  # pos -> bool for every engine alike (a policy's front door), else each engine's
        self.turn = 0  # round-robin position
        self._load = _LOAD.get(name)  # (least-tokens, shortest-queue: the engine attribute compared)

    def _fits(self, e, pos: int) -> bool:
        return e.fits(pos) if self.fits is None else self.fits(pos)

    def pick(self, pos: int):
        engines = self.engines
        if len(engines) == 1:
            return engines[0] if self._fits(engines[0], pos) else None
        if self.name == "round-robin":
            fit = [e for e in engines if self._fits(e, pos)]
            if not fit:
                return None
            e = fit[self.turn % len(fit)]
            self.turn += 1
            return e
        load = self._load
        e = min(engines, key=load)  # the least loaded of all, if it fits, is that of those that fit
        if e.fits(pos) if self.fits is None else self.fits(pos):  # (_fits, inlined: every request)
            return e
        fit = [x for x in engines if self._fits(x, pos)]
        return min(fit, key=load) if fit else None
