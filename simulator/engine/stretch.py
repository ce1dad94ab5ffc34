"""Interruptible decode stretches: a k-step decode-only stretch is one simpy timeout, cut short when
a request routed to the engine interrupts it (the step in progress still finishes, as it would
step by step). Step boundaries are start + decode_stretch_s(j), compared in absolute time exactly as
simpy computes now + delay, so a fast-forwarded run and a step-by-step run see the same instants.
Only SimPy's public API: Environment.timeout, Process.interrupt, simpy.Interrupt.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import simpy

from perfmodel.steptable import decode_stretch_s, steps_within


def delay_toward(now: float, t: float) -> float:
    """A delay d with now + d == t exactly in floating point where one exists (simpy computes
    now + delay; t - now alone can miss t by an ulp, e.g. issuing a request just before its
    arrival time), else one that stops short of t: from there t - now is exact (Sterbenz), so a
    second wait lands on t. 0 if t <= now."""
    if t <= now:
        return 0.0
    d = t - now
    for _ in range(8):  # a few ulps either way
        got = now + d
        if got == t:
            return d
        d = math.nextafter(d, math.inf if got < t else -math.inf)
    d = t - now
    while now + d >= t:
        d = math.nextafter(d, -math.inf)
    return d


class Stretch:
    """A planned stretch of `steps` decode steps of n sequences from k0 keys, starting at start_s,
    each taking c0 + c1 * keys seconds; `live` while an interrupt may still cut it short."""

    __slots__ = ("start_s", "c0", "c1", "k0", "n", "steps", "live")

    def __init__(self, start_s: float, c0: float, c1: float, k0: float, n: int, steps: int):
        self.start_s, self.c0, self.c1, self.k0, self.n, self.steps = start_s, c0, c1, k0, n, steps
        self.live = True

    def duration_s(self, steps: int | None = None) -> float:
        return decode_stretch_s(self.c0, self.c1, self.k0, self.n, self.steps if steps is None else steps)


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


class StretchEnd(NamedTuple):
    """How a slept stretch ended: the steps it ran and the seconds they took."""

    steps: int
    duration_s: float


def sleep_stretch(env, st: Stretch, dur: float):
    """Sleep through the stretch `st` lasting `dur`; on an interrupt (its cause: whether the
    interrupting request is seen at a boundary), end it after the step in progress, or at the step
    ending right now. Returns a StretchEnd (steps run, duration). A second interrupt of the same stretch (two
    requests at one instant) finds it no longer live and changes nothing."""
    k, end = st.steps, None  # end: the cut stretch's last boundary, when cut
    done = env.timeout(dur)
    while True:
        try:
            yield done
            if end is None or env.now >= end:
                break
            done = env.timeout(delay_toward(env.now, end))  # stopped short of it: once more
        except simpy.Interrupt as irq:
            if not st.live:
                continue
            st.live = False
            now = env.now
            cut = steps_until(now, st.start_s, st.c0, st.c1, st.k0, st.n, irq.cause)
            if cut < k:
                k, end = cut, st.start_s + st.duration_s(cut)
                done = env.timeout(delay_toward(now, end))
    st.live = False
    return tuple.__new__(StretchEnd, (k, env.now - st.start_s))  # (scheduler.Schedule's note)
