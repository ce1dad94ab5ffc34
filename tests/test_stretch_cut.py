"""A decode stretch cut short where the request is routed (engine/stretch.py: cut_stretch), not by an interrupt:
the sleeping process wakes at the cut's boundary with the steps run so far, the stretch's own timeout later
calls nothing, and a second cut at one instant changes nothing. Steps of 1 s each (c0 = 1, c1 = 0)."""
from __future__ import annotations

import simpy

from simulator.engine.stretch import Stretch, cut_stretch, sleep_stretch


def _run(cuts, steps=10):
    """Sleep a `steps`-step stretch from t = 0; cut it at each (time, at_boundary). The StretchEnd and the
    time the process woke."""
    env = simpy.Environment()
    st = Stretch(0.0, 1.0, 0.0, 0.0, 4, steps)
    out = {}

    def sleeper():
        out["end"] = yield from sleep_stretch(env, st, st.duration_s())
        out["woke_s"] = env.now

    proc = env.process(sleeper())

    def cutter(at_s, at_boundary):
        yield env.timeout(at_s)
        cut_stretch(env, proc, st, at_boundary)

    for at_s, at_boundary in cuts:
        env.process(cutter(at_s, at_boundary))
    env.run()
    return out["end"], out["woke_s"]


def test_uncut_stretch_runs_every_step():
    end, woke = _run([])
    assert (end.steps, end.duration_s, woke) == (10, 10.0, 10.0)


def test_cut_mid_step_ends_after_the_step_in_progress():
    end, woke = _run([(2.5, True)])
    assert (end.steps, end.duration_s, woke) == (3, 3.0, 3.0)


def test_cut_on_a_boundary_ends_there_for_an_arrival_and_one_step_later_otherwise():
    assert _run([(3.0, True)])[0].steps == 3  # an arrival is seen by the step ending now
    assert _run([(3.0, False)])[0].steps == 4  # a closed-loop issue at that instant is not


def test_second_cut_at_one_instant_and_a_later_one_change_nothing():
    end, woke = _run([(2.5, True), (2.5, False), (5.5, True)])
    assert (end.steps, woke) == (3, 3.0)


def test_cut_in_the_last_step_keeps_the_planned_end():
    end, woke = _run([(9.5, True)])
    assert (end.steps, woke) == (10, 10.0)


def test_steps_until_is_the_scan_of_the_boundaries_in_absolute_time():
    """steps_until (the quadratic's guess, then the boundaries compared as simpy computes them) gives what a scan
    of start + decode_stretch_s(j) gives: the first boundary after `now` (or at it, for an arrival), and that
    boundary itself, bit for bit; also where `now` sits exactly on a boundary far from 0 s."""
    import random

    from perfmodel.steptable import decode_stretch_s
    from simulator.engine.stretch import steps_until

    rng = random.Random(7)
    for _ in range(2000):
        start = rng.choice([0.0, 1e-3, 12.3456789, 86_400.123])
        c0, c1 = rng.uniform(1e-3, 0.05), rng.choice([0.0, rng.uniform(1e-9, 1e-7)])
        k0, n = rng.randint(0, 10**6), rng.randint(1, 512)
        ends = [start + decode_stretch_s(c0, c1, k0, n, j) for j in range(400)]
        now = rng.choice([rng.uniform(start, ends[-2]), ends[rng.randint(1, 390)]])  # inside, or on a boundary
        for at_boundary in (True, False):
            j = max(i for i, e in enumerate(ends) if e <= now)
            if not (j >= 1 and ends[j] == now and at_boundary):
                j += 1
            assert steps_until(now, start, c0, c1, k0, n, at_boundary) == (j, ends[j])
