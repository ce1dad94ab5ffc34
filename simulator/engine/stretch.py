"""Decode stretches that can be cut short: a k-step decode-only stretch is one simpy timeout; a request
routed to the engine cuts it (the step in progress still finishes, as it would step by step). Step
boundaries are start + decode_stretch_s(j), compared in absolute time exactly as simpy computes
now + delay, so a fast-forwarded run and a step-by-step run see the same instants.

A cut is decided where it happens (`cut_stretch`, at the instant the request is routed) and moves the
sleeping process onto a timeout at the cut's boundary: the process's resume callback passes from the
stretch's timeout to the new one (SimPy's public `Process.target` and `Event.callbacks`). The stretch's
own timeout still fires later, calling nothing. (Until 2026-12-02 a cut was `Process.interrupt`: an
Interruption event, an exception thrown into the engine's generator and caught there, per arrival that
cut a stretch, 0.64 per request at half the saturated load; the cut and its instants are the same.)
"""
from __future__ import annotations

import math
from typing import NamedTuple

from perfmodel.steptable import decode_stretch_s, steps_guess


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
    each taking c0 + c1 * keys seconds; `live` while a cut (cut_stretch) may still end it sooner."""

    __slots__ = ("start_s", "c0", "c1", "k0", "n", "steps", "live", "ran", "end_s")

    def __init__(self, start_s: float, c0: float, c1: float, k0: float, n: int, steps: int):
        self.start_s, self.c0, self.c1, self.k0, self.n, self.steps = start_s, c0, c1, k0, n, steps
        self.live = True
        self.ran = steps
        self.end_s: float | None = None  # cut short: the steps it runs and its last boundary

    def duration_s(self, steps: int | None = None) -> float:
        return decode_stretch_s(self.c0, self.c1, self.k0, self.n, self.steps if steps is None else steps)

    def wait_s(self, now: float) -> float:
        """After the stretch's timeout fired at `now`: 0, or the delay still toward the boundary a cut moved its
        end to (the cut's delay stopped short of it: delay_toward), for a wait once more."""
        end = self.end_s
        return delay_toward(now, end) if end is not None and now < end else 0.0


def steps_until(now: float, start: float, c0, c1, k0, n, at_boundary: bool) -> tuple:
    """(steps, their end) of the stretch (start, c0, c1, k0, n) that end before the step in progress at `now`,
    that step included: start + decode_stretch_s(steps) is the cut's boundary. A step ending exactly now ends
    the stretch when the interrupting request is seen at a boundary (an arrival), else the step after it still
    runs (a closed-loop issue at that instant). The quadratic (steptable.steps_guess) guesses; the boundaries
    are then compared in absolute time, as simpy computes them, so the answer is the exact one whatever the guess
    (start + decode_stretch_s grows with the steps: each adds c0 + c1 x keys, far above an ulp)."""
    j = steps_guess(c0, c1, k0, n, now - start)
    end = start + decode_stretch_s(c0, c1, k0, n, j)
    while j > 0 and end > now:
        j -= 1
        end = start + decode_stretch_s(c0, c1, k0, n, j)
    after = start + decode_stretch_s(c0, c1, k0, n, j + 1)
    while after <= now:
        j, end = j + 1, after
        after = start + decode_stretch_s(c0, c1, k0, n, j + 1)
    if j >= 1 and end == now and at_boundary:  # (a step ends exactly now)
        return j, end
    return j + 1, after


class StretchEnd(NamedTuple):
    """How a slept stretch ended: the steps it ran and the seconds they took."""

    steps: int
    duration_s: float


def sleep_stretch(env, st: Stretch, dur: float):
    """Sleep through the stretch `st` lasting `dur`, or to the boundary `cut_stretch` moved its end to.
    Returns a StretchEnd (steps run, duration)."""
    yield env.timeout(dur)  # (cut_stretch may move this wait onto an earlier timeout)
    more = st.wait_s(env.now)
    while more > 0.0:
        yield env.timeout(more)
        more = st.wait_s(env.now)
    st.live = False
    return tuple.__new__(StretchEnd, (st.ran, env.now - st.start_s))  # (scheduler.Schedule's note)


def cut_stretch(env, proc, st: Stretch, at_boundary: bool) -> None:
    """End the live stretch `st`, which `proc` sleeps through (sleep_stretch), after the step in progress, or
    at the step ending right now when the request that cuts it is seen at a boundary (`at_boundary`). A
    second cut of the same stretch (two requests at one instant) finds it no longer live and changes
    nothing."""
    if not st.live:
        return
    st.live = False
    now = env.now
    cut, end = steps_until(now, st.start_s, st.c0, st.c1, st.k0, st.n, at_boundary)
    if cut < st.steps:
        st.ran, st.end_s = cut, end
        sooner, sleeping = env.timeout(delay_toward(now, end)), proc.target
        sooner.callbacks, sleeping.callbacks = sleeping.callbacks, []  # (the process's resume moves over)
