"""Interruptible decode stretches: a k-step decode-only stretch is one simpy timeout, cut short when
a request routed to the engine interrupts it (the step in progress still finishes, as it would
step by step). Step boundaries are start + decode_stretch_s(j), compared in absolute time exactly as
simpy computes start + delay, so a fast-forwarded run and a step-by-step run see the same instants.
"""
from __future__ import annotations

import heapq

import simpy
from simpy.events import NORMAL

from perfmodel.steptable import decode_stretch_s, steps_within


def event_at(env, t: float, priority=NORMAL):
    """A triggered event processed at exactly time t (never before now). Environment.schedule
    takes a delay, and now + (t - now) can miss t by an ulp, e.g. issuing a request just before its
    arrival time; this pushes the same heap entry schedule() would, at t itself."""
    ev = simpy.Event(env)
    ev._ok, ev._value = True, None  # what Event.succeed() sets
    heapq.heappush(env._queue, (max(t, env.now), priority, next(env._eid), ev))
    return ev


def steps_until(now: float, start: float, c0, c1, k0, n, at_boundary: bool) -> int:
    """Steps of the stretch (start, c0, c1, k0, n) that end before the step in progress at `now`;
    a step ending exactly now ends the stretch when the interrupting request is seen at a boundary
    (an arrival), else the step after it still runs (a closed-loop issue at that instant)."""
    j = steps_within(c0, c1, k0, n, now - start)
    while j > 0 and start + decode_stretch_s(c0, c1, k0, n, j) > now:
        j -= 1
    while start + decode_stretch_s(c0, c1, k0, n, j + 1) <= now:
        j += 1
    on_boundary = j >= 1 and start + decode_stretch_s(c0, c1, k0, n, j) == now
    return j if on_boundary and at_boundary else j + 1


def sleep_stretch(engine, dur):
    """Sleep through `engine._stretch` = (start_s, c0, c1, k0, n, k) lasting `dur`; on an interrupt,
    end it after the step in progress (or at the step ending right now, if the interrupting request
    is seen at a boundary). Returns (steps run, duration). Clears engine._stretch: later arrivals
    of the same stretch just queue."""
    env = engine.env
    start, c0, c1, k0, n, k = engine._stretch
    done = env.timeout(dur)
    while True:
        try:
            yield done
            break
        except simpy.Interrupt as irq:
            if engine._stretch is None:  # a second request of the same instant: already cut
                continue
            engine._stretch = None
            cut = steps_until(env.now, start, c0, c1, k0, n, irq.cause)
            if cut < k:
                k = cut
                done = event_at(env, start + decode_stretch_s(c0, c1, k0, n, k))
    engine._stretch = None
    return k, env.now - start
