"""Issuing the workload's requests: at their arrival times (open loop), or at most C in flight
(closed loop, a benchmark client with max_concurrency), in trace order.

Same-time rule (tests/test_sim_ordering.py pins it): a request arriving at the very time a step
ends is seen by that step boundary. An engine whose step ends at an instant with arrivals still
to deliver waits on `due()` until they are issued, whatever order SimPy drew the two events in.

Client turnaround (closed loop): a benchmark client frees its slot `turnaround_s` after the response
ends, not at once: the time its own loop takes to hand the slot to the next request (aiperf: the
worker pushes the finished record, returns the credit to the timing manager, which drops the next
credit to a worker, which fetches the prompt from the dataset manager before sending;
simulator/apps/validate/harness.py cites it). Not part of any request's TTFT: the next request is issued
when the slot is handed over.
"""
from __future__ import annotations

import math
from typing import Any

from simulator.engine.stretch import delay_toward


class Arrivals:
    """The issuing process of one run and the state engines and the cluster read from it."""

    def __init__(self, env, arrival_s, issue, max_concurrency: int = 0, turnaround_s: float = 0.0):
        # (Python floats: the same numbers as the float64 array, without numpy scalar arithmetic per request)
        self.env, self.arrival_s, self.issue = env, [float(t) for t in arrival_s], issue  # issue(pos, at_boundary)
        self.limit = max_concurrency
        self.turnaround_s = turnaround_s if max_concurrency else 0.0  # (open loop: no client slots)
        self.in_flight = 0
        self.next_s = math.inf  # arrival time the process waits for (inf: it waits for none)
        self._flushed: Any = None  # the event engines wait on while arrivals of this instant are due
        self._slot: Any = None  # closed loop: the event a completion frees a slot with
        self._pos = 0  # open loop: the next request to issue

    def start(self) -> None:
        """Start issuing (after the engines exist: they wait for work first). The open loop is a chain of
        bare timeouts whose callback issues what is due (no process: one generator resume less per
        arrival), from a timeout of 0 now (after the engines' starts: nothing else is due at 0 yet)."""
        if self.limit:
            self.env.process(self._closed())
            return
        self.env.timeout(0.0).callbacks.append(self._open)

    def due(self):
        """An event to wait for while requests arriving now are still to be issued, else None."""
        if self.next_s > self.env.now:
            return None
        if self._flushed is None:
            self._flushed = self.env.event()
        return self._flushed

    def finished(self, pos: int) -> None:
        """A request ended: its slot is free now, or after the client's turnaround (closed loop)."""
        if self.turnaround_s > 0:
            self.env.process(self._hand_over())
        else:
            self._free()

    def _hand_over(self):
        yield self.env.timeout(self.turnaround_s)
        self._free()

    def _free(self) -> None:
        self.in_flight -= 1
        if self._slot is not None and not self._slot.triggered:
            self._slot.succeed()

    def _wait_until(self, t: float):
        """Wait until exactly time t (one timeout, or two when no delay lands on t)."""
        self._flush(t)
        env = self.env
        while env.now < t:
            yield env.timeout(delay_toward(env.now, t))

    def _flush(self, next_s: float) -> None:
        """Every request due so far is issued; the process waits for `next_s` next."""
        self.next_s = next_s
        if self._flushed is not None:
            ev, self._flushed = self._flushed, None
            ev.succeed()

    def _open(self, _event) -> None:
        """Issue every request due now, then wait (one timeout, or two when no delay lands on the next
        arrival time exactly) for the next one: _wait_until's steps as a callback chain (the closed loop,
        a process, waits on its slots too and keeps the generator)."""
        arrivals, env, pos = self.arrival_s, self.env, self._pos
        now = env.now  # (the callback runs at one instant)
        while pos < len(arrivals):
            t = arrivals[pos]
            if t > now:
                self._pos = pos
                self._flush(t)
                env.timeout(delay_toward(now, t)).callbacks.append(self._open)
                return
            issued = self.issue(pos, True)  # (issue may end the request at once: finished() runs first)
            self.in_flight += issued
            pos += 1
        self._pos = pos
        self._flush(math.inf)

    def _closed(self):
        arrivals, env = self.arrival_s, self.env
        at_boundary = True  # resumed by the start or an arrival, not by a completion's slot
        for pos in range(len(arrivals)):
            while self.in_flight >= self.limit:
                self._flush(math.inf)
                self._slot = env.event()
                yield self._slot
                at_boundary = False
            self._slot = None
            if arrivals[pos] > env.now:
                yield from self._wait_until(arrivals[pos])
                at_boundary = True
            issued = self.issue(pos, at_boundary)  # (a front door may reject it inside: finished() ran)
            self.in_flight += issued
        self._flush(math.inf)
