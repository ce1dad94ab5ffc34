"""Open and closed loop. Open: every request is issued at its trace arrival. Closed
(`--max-concurrency N`): at most N in flight, the next issued in trace order as soon as one
completes and never before its own arrival; requests all at t=0 with N = 16 are vLLM's
fixed-concurrency benchmark (16 in flight until the queue runs dry)."""
import numpy as np
import pytest
from test_sim_util import batch, hardware, model, run, workload

from perfmodel.deploy import deployment
from perfmodel.estimate import tpot_s, ttft_s
from perfmodel.framework import DEFAULT_FRAMEWORK, vllm_default_limits


def _in_flight(f, times=False):
    """Requests in flight after each issue/completion (a completion counted before an issue at the
    same instant); with times=True also the event times."""
    t = np.r_[f["issued_s"].to_numpy(), f["finish_s"].to_numpy()]
    d = np.r_[np.ones(len(f)), -np.ones(len(f))]
    order = np.lexsort((d, t))  # by time, then -1 (finish) before +1 (issue)
    return (t[order], np.cumsum(d[order])) if times else np.cumsum(d[order])


def _random(n, seed, gap_s):
    rng = np.random.default_rng(seed)
    return workload(np.cumsum(rng.exponential(gap_s, n)), rng.integers(10, 2000, n), rng.integers(1, 300, n))


def test_open_loop_issues_at_arrival():
    f = run(_random(100, 0, 0.02), policy="dp", gpus=2).requests.frame()
    assert (f["issued_s"] == f["arrival_s"]).all()
    assert _in_flight(f).max() > 8  # unbounded: the load decides


@pytest.mark.parametrize("limit, gap_s", [(1, 0.0), (4, 0.0), (16, 0.0), (4, 0.05), (16, 0.01)])
def test_closed_loop_contract(limit, gap_s):
    w = _random(120, 1, gap_s) if gap_s else workload(np.zeros(120), *_random(120, 1, 0.0).requests[
        ["input_tokens", "output_tokens"]].to_numpy().T)
    f = run(w, policy="dp", gpus=2, max_concurrency=limit).requests.frame()
    assert (f["status"] == "completed").all()
    assert _in_flight(f).max() <= limit
    issued, arrival = f["issued_s"].to_numpy(), f["arrival_s"].to_numpy()
    assert (issued >= arrival).all()  # never before its own arrival
    assert (np.diff(issued) >= 0).all()  # trace order
    # as soon as one completes: a request issued after its arrival was waiting for a slot, which the
    # completion it was waiting for freed at exactly that instant
    finish = np.sort(f["finish_s"].to_numpy())
    late = issued > arrival
    assert np.isin(issued[late], finish).all()
    if gap_s == 0.0:
        assert (issued[:limit] == 0).all()
        np.testing.assert_array_equal(issued[limit:], finish[:len(f) - limit])  # i-th completion issues i-th next


def test_all_at_zero_with_max_concurrency_16_is_a_fixed_concurrency_benchmark():
    """16 in flight from t = 0 until the last request is issued, then the tail drains."""
    f = run(batch(200, 800, 100), policy="tp", gpus=1, max_concurrency=16).requests.frame()
    t, flight = _in_flight(f, times=True)
    assert flight.max() == 16
    last = np.r_[t[1:] != t[:-1], True]  # the count once every event of an instant is applied
    busy = flight[last & (t < f["issued_s"].max())]  # before the queue runs dry
    assert (busy == 16).all()  # slots are refilled at the very instant they free
    # with equal requests the benchmark settles into waves of 16: TTFT and TPOT are then repeatable
    done = f.sort_values("issued_s").iloc[16:-16]
    assert done["tpot_ms"].std() / done["tpot_ms"].mean() < 0.05


def test_max_concurrency_1_is_one_request_at_a_time():
    """Sequential requests: each is alone, so TTFT and TPOT equal the perf model's single-request
    estimate, and the next is issued at the previous one's finish."""
    spec, hw = model(), hardware()
    ins, outs = [700, 3000, 150, 9000], [50, 10, 200, 30]
    # with the front end's tokenization on (the default framework's): TTFT = tokenization + prefill in both
    f = run(workload(np.zeros(4), ins, outs), max_concurrency=1, tokenize_s_per_token=DEFAULT_FRAMEWORK.tokenize_s_per_token,
            tokenize_batch_wait_s=DEFAULT_FRAMEWORK.tokenize_batch_wait_s).requests.frame()
    np.testing.assert_array_equal(f["issued_s"].iloc[1:].to_numpy(), f["finish_s"].iloc[:-1].to_numpy())
    dep = deployment("tp", spec, hw, 1)
    assert DEFAULT_FRAMEWORK.tokenize_s_per_token > 0
    for (_, r), i, o in zip(f.iterrows(), ins, outs):
        assert r["ttft_ms"] == pytest.approx(1e3 * ttft_s(dep, spec, hw, i, vllm_default_limits(hw)), rel=1e-9)
        assert r["tpot_ms"] == pytest.approx(1e3 * tpot_s(dep, spec, hw, i, o), rel=1e-6)


@pytest.mark.parametrize("limit", [0, 3])
def test_requests_are_issued_at_their_exact_arrival_time(limit):
    """Regression: the arrival process slept (arrival - now) from its last wake-up, and simpy's
    now + (arrival - now) can land an ulp early: at 0.033121 s, 0.22 - now lands on
    0.21999999999999997, so a request was issued (and served) before it arrived."""
    arrival = [0.0, 0.0, 0.0, 0.02, 0.22, 0.22]
    for ff in (True, False):
        f = run(workload(arrival, [1] * 6, [0, 7, 7, 2, 0, 0]), max_concurrency=limit,
                engine=dict(block_size=1, enable_chunked_prefill=False, fast_forward=ff)).requests.frame()
        assert (f["issued_s"] >= f["arrival_s"]).all()
        assert f["issued_s"].iloc[4] == 0.22
    f = run(workload([0.0, 0.033121, 0.22], [10] * 3, [5] * 3)).requests.frame()
    assert f["issued_s"].tolist() == [0.0, 0.033121, 0.22]


def test_closed_loop_rejections_do_not_take_a_slot():
    w = workload(np.zeros(6), [100, 9000, 100, 9000, 100, 100], [10] * 6)
    f = run(w, util=0.14, max_concurrency=2).requests.frame()  # 4.7k tokens of KV
    assert f["status"].tolist() == ["completed", "rejected", "completed", "rejected", "completed", "completed"]
    issued, finish = f["issued_s"].to_numpy(), f["finish_s"].to_numpy()
    assert (issued[:3] == 0).all()  # the first rejection did not take a slot
    assert issued[3] == np.nanmin(finish) and issued[4] == issued[3]  # the second neither
