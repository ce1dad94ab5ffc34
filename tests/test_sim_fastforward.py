"""Closed-form decode stretches (issue #5, point 5): `--no-fast-forward` (step by step) gives the
same per-request results, and far fewer engine iterations are simulated with fast-forward.

Integer fields must be equal; times to 1e-9 relative (a stretch's closed-form sum and the
step-by-step running sum differ only in rounding)."""
import numpy as np
import pytest
from test_sim_util import assert_same_requests, batch, run_both, workload


def _random(n, seed, gap_s, max_in=3000, max_out=400):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(gap_s, n)) if gap_s else np.zeros(n)
    return workload(t, rng.integers(1, max_in, n), rng.integers(0, max_out, n))


@pytest.mark.parametrize("cfg", [
    dict(policy="tp", gpus=1),
    dict(policy="dp", gpus=2, router="round-robin"),
    dict(policy="dp", gpus=2, router="shortest-queue", max_concurrency=16),
    dict(policy="tp", gpus=1, engine=dict(max_num_batched_tokens=256, max_num_seqs=32, block_size=32)),
    dict(policy="shift", gpus=2),
    dict(policy="pp", gpus=2),
], ids=["tp1", "dp2-rr", "dp2-closed", "small-budget", "shift", "pp2"])
def test_same_results_open_and_closed_loop(cfg):
    ff, step = run_both(_random(150, 0, 0.03), **cfg)
    assert_same_requests(ff, step)
    assert (ff.requests.frame()["status"] == "completed").all()
    assert ff.steps.frame()["steps"].sum() == len(step.steps)  # the same engine steps, grouped
    assert len(ff.steps) < len(step.steps)


@pytest.mark.parametrize("block_size", [1, 16, 64])
def test_same_results_under_kv_pressure(block_size):
    """Preemptions (recompute) and KV-bounded stretches: 4.7k tokens of KV for ~100k of demand."""
    ff, step = run_both(_random(60, 1, 0.01, max_in=2000, max_out=600), util=0.14,
                        engine=dict(block_size=block_size))
    assert_same_requests(ff, step)
    f = ff.requests.frame()
    assert f["preemptions"].sum() > 0 and (f["status"] == "completed").all()


def test_same_results_when_lockstep_engines_meet_at_a_boundary():
    """Regression: two DP engines in lockstep (equal prompts, all at t=0, closed loop); a request
    issued when engine 1 completes goes to engine 0, whose stretch has a step ending at that very
    instant. Step by step that step end was processed before the completion issued the request, so
    it runs one more step first; fast-forward used to cut the stretch there (up to 24% off)."""
    for p in (100, 333, 1000):
        w = workload(np.zeros(5), np.full(5, p), [300, 7, 300, 300, 20])
        ff, step = run_both(w, policy="dp", gpus=2, router="round-robin", max_concurrency=4)
        assert_same_requests(ff, step)


@pytest.mark.parametrize("gpus, conc", [(2, 16), (4, 16), (2, 5)])
def test_same_results_fixed_concurrency_dp(gpus, conc):
    ff, step = run_both(batch(120, 500, 50), policy="dp", gpus=gpus, router="round-robin", max_concurrency=conc)
    assert_same_requests(ff, step)


def test_same_results_with_prefill_only_and_one_token_requests():
    rng = np.random.default_rng(5)
    n = 80
    out = rng.choice([0, 1, 2, 50], n)
    ff, step = run_both(workload(np.cumsum(rng.exponential(0.01, n)), rng.integers(1, 600, n), out),
                        engine=dict(max_num_batched_tokens=128))
    assert_same_requests(ff, step)
    f = ff.requests.frame()
    assert (f["generated_tokens"] == f["output_tokens"]).all()


def test_stretches_are_cut_by_arrivals_not_skipped():
    """A long decode with arrivals every 50 ms: each arrival is admitted at the first step boundary
    after it in both modes (fast-forward cuts the stretch, it does not run past the arrival)."""
    n = 20
    w = workload(np.r_[0.0, 0.05 * np.arange(1, n)], np.full(n, 200), np.r_[2000, np.full(n - 1, 5)])
    ff, step = run_both(w)
    assert_same_requests(ff, step)
    f, steps = ff.requests.frame(), step.steps.frame()
    ends = (steps["start_s"] + steps["duration_s"]).to_numpy()
    for arr, sched in zip(f["arrival_s"].iloc[1:], f["scheduled_s"].iloc[1:]):
        first_end = ends[np.searchsorted(ends, arr)]  # first step boundary at or after the arrival
        assert sched == pytest.approx(first_end, rel=1e-9)
