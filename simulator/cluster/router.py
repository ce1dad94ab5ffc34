"""Routing: which engine takes a request, among those whose KV can ever hold it.

State that routing reads (outstanding tokens or requests) changes only at arrivals and
completions, so fast-forward and step-by-step route identically. Ties go to the lowest index.
"""
from __future__ import annotations

from typing import Any

from simulator.engine.core import EngineCore

ROUTERS = ("round-robin", "least-tokens", "shortest-queue")


def least_loaded(engines: list, by_tokens: bool, cores: bool) -> Any:
    """min(engines, key=outstanding tokens or requests): the first of the least loaded (ties: the lowest index).
    `cores`: every engine is an EngineCore, whose int fields a compiled loop reads directly (min with an attrgetter
    key cost ~10k instructions a request over 8 engines: issue 36); else (kernels/serve's engines) by name."""
    if cores:
        return _least_core(engines, by_tokens)
    name = "outstanding_tokens" if by_tokens else "outstanding_requests"
    best = engines[0]
    low = getattr(best, name)
    for i in range(1, len(engines)):
        x = getattr(engines[i], name)
        if x < low:
            best, low = engines[i], x
    return best


def _least_core(engines: list[EngineCore], by_tokens: bool) -> EngineCore:
    best = engines[0]
    low = best.outstanding_tokens if by_tokens else best.outstanding_requests
    for i in range(1, len(engines)):
        e = engines[i]
        x = e.outstanding_tokens if by_tokens else e.outstanding_requests
        if x < low:
            best, low = e, x
    return best


class Router:
    """Picks an engine for each request; `pick` returns None when no engine can hold it."""

    def __init__(self, engines: list, name: str, fits=None):
        if name not in ROUTERS:
            raise ValueError(f"unknown router {name!r}: one of {', '.join(ROUTERS)}")
        self.engines, self.name = engines, name
        self.fits = fits  # pos -> bool for every engine alike (a policy's front door), else each engine's
        self.turn = 0  # round-robin position
        self._by_tokens = name == "least-tokens"  # (else shortest-queue: outstanding requests compared)
        self._cores = all(isinstance(e, EngineCore) for e in engines)  # (the simulator's; kernels/serve has its own)

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
        least = least_loaded(engines, self._by_tokens, self._cores)  # the least loaded of all, if it fits, is that of
        if least.fits(pos) if self.fits is None else self.fits(pos):  # those that fit (_fits, inlined: every request)
            return least
        fit = [x for x in engines if self._fits(x, pos)]
        return least_loaded(fit, self._by_tokens, self._cores) if fit else None
