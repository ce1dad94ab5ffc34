"""Same-time ordering, pinned (STYLE 7; simulator/cluster/arrivals.py names this file): an arrival at exactly
a step boundary is seen by that boundary, in both modes and inside a fast-forwarded stretch; one a
hair later waits for the next boundary; same-time arrivals keep trace order; a closed-loop request
issued by a completion is not seen by a step that ends at that same instant on another engine."""
import numpy as np
import pytest
from test_sim_util import assert_same_requests, run, run_both, workload

from perfmodel.steptable import decode_stretch_s

LONG = ([0.0], [500], [400])  # one request decoding for ~2 s


def _with(arrival_s, base=LONG):
    """The base workload plus one 100-token request arriving at `arrival_s`."""
    t, i, o = base
    return workload(list(t) + [arrival_s], list(i) + [100], list(o) + [3])


class StretchLog:
    """A step hook recording every decode stretch (start_s, c0, c1, k0, n, planned steps)."""

    def __init__(self):
        self.log = []

    def attach(self, engine) -> None:
        engine.step_hooks.append(self)

    def __call__(self, engine, schedule, steps, st) -> None:
        if st is not None:
            self.log.append((st.start_s, st.c0, st.c1, st.k0, st.n, st.steps))


def test_arrival_at_a_step_boundary_is_seen_by_it_step_by_step():
    base = run(workload(*LONG), engine=dict(fast_forward=False)).steps.frame()
    for j in (1, 5, 50):
        t = base["start_s"].iloc[j] + base["duration_s"].iloc[j]  # end of step j, as simpy computes it
        f = run(_with(t), engine=dict(fast_forward=False)).requests.frame()
        assert f["scheduled_s"].iloc[1] == t  # admitted by the step starting at that very boundary
        later = run(_with(np.nextafter(t, np.inf)), engine=dict(fast_forward=False)).requests.frame()
        assert later["scheduled_s"].iloc[1] == pytest.approx(t + base["duration_s"].iloc[j + 1], rel=1e-12)


def test_arrival_at_a_boundary_inside_a_stretch_is_seen_by_it():
    """Fast-forward: the boundary after step j of a stretch is start + closed-form sum of j steps."""
    log = StretchLog()
    run(workload(*LONG), check=log)
    start, c0, c1, k0, n, k = log.log[0]
    assert k > 100
    for j in (1, 7, k // 2, k - 1):
        t = start + decode_stretch_s(c0, c1, k0, n, j)
        f = run(_with(t)).requests.frame()
        assert f["scheduled_s"].iloc[1] == t
        later = run(_with(np.nextafter(t, np.inf))).requests.frame()
        assert later["scheduled_s"].iloc[1] == start + decode_stretch_s(c0, c1, k0, n, j + 1)


def test_arrival_at_a_completion_is_seen_by_that_boundary():
    """The step that completes a request ends at its finish time; an arrival then is admitted there."""
    short = ([0.0, 0.0], [500, 300], [400, 40])
    for ff in (True, False):
        t = run(workload(*short), engine=dict(fast_forward=ff)).requests.frame()["finish_s"].iloc[1]
        f = run(_with(t, short), engine=dict(fast_forward=ff)).requests.frame()
        assert f["scheduled_s"].iloc[2] == t


def test_same_time_arrivals_keep_trace_order():
    w = workload(np.zeros(6), [300, 20, 500, 40, 100, 7], np.full(6, 2))
    for ff in (True, False):
        f = run(w, engine=dict(max_num_seqs=1, fast_forward=ff)).requests.frame()
        assert f["scheduled_s"].is_monotonic_increasing and f["scheduled_s"].is_unique


def test_closed_loop_issue_is_not_seen_by_a_peer_step_ending_then():
    """Two DP engines in lockstep; request 4 is issued when request 1 completes on engine 1 and
    goes to engine 0, which has a step ending at that same instant: that step's end was processed
    before the completion, so request 4 is admitted one step later - in both modes."""
    w = workload(np.zeros(5), np.full(5, 333), [300, 7, 300, 300, 20])
    ff, step = run_both(w, policy="dp", gpus=2, router="round-robin", max_concurrency=4)
    assert_same_requests(ff, step)
    for res in (ff, step):
        f = res.requests.frame()
        assert f["engine"].tolist() == [0, 1, 0, 1, 0]
        assert f["issued_s"].iloc[4] == f["finish_s"].iloc[1]
        s = res.steps.frame()
        s0 = s[s["engine"] == 0]
        ends = (s0["start_s"] + s0["duration_s"]).to_numpy()
        if res is step:
            assert np.any(ends == f["issued_s"].iloc[4])  # engine 0 has a step ending right then
        assert f["scheduled_s"].iloc[4] > f["issued_s"].iloc[4]
