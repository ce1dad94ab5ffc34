"""Transformations: time window, rate scaling, sampling and context clipping."""
import numpy as np
import pytest

from simulator.workload import (TraceError, clip_context, make_workload, parse_sample, parse_window,
                                rate_scale, sample, time_window)


def workload(times, inp=None, out=None):
    n = len(times)
    return make_workload({"arrival_s": np.array(times, dtype=float),
                          "input_tokens": np.array(inp or [10] * n),
                          "output_tokens": np.array(out or [5] * n)}, "t.csv")


def test_time_window_half_open_and_rebased():
    w = workload([0, 100, 3600, 3700, 7199.5, 7200, 9000])
    out = time_window(w, **parse_window("3600:7200"))
    assert out.requests["arrival_s"].tolist() == [0.0, 100.0, 3599.5]
    assert out.requests["request_id"].tolist() == [2, 3, 4]  # ids follow their requests
    assert "kept 3 of 7" in out.notes[-1]
    assert time_window(w, **parse_window(":150")).requests["request_id"].tolist() == [0, 1]
    assert len(time_window(w, **parse_window("7200:"))) == 2


def test_time_window_errors():
    w = workload([0, 10])
    with pytest.raises(TraceError, match="selects no requests"):
        time_window(w, 20, 30)
    with pytest.raises(TraceError, match="end must be after start"):
        time_window(w, 30, 20)
    with pytest.raises(TraceError, match="START:END"):
        parse_window("10-20")


def test_rate_scale_compresses_inter_arrivals():
    w = workload([0, 1, 3, 7])
    fast = rate_scale(w, 2)
    assert fast.requests["arrival_s"].tolist() == [0, 0.5, 1.5, 3.5]
    assert fast.summary()["mean_rate_rps"] == pytest.approx(2 * w.summary()["mean_rate_rps"])
    assert fast.summary()["interarrival_cv"] == pytest.approx(w.summary()["interarrival_cv"])
    assert rate_scale(w, 0.5).requests["arrival_s"].iat[-1] == 14
    with pytest.raises(TraceError, match="positive"):
        rate_scale(w, -1)


def test_sample_count_fraction_seeded():
    w = workload(list(range(1000)))
    a = sample(w, **parse_sample("100"), seed=1)
    b = sample(w, n=100, seed=1)
    assert len(a) == 100 and a.requests["request_id"].tolist() == b.requests["request_id"].tolist()
    assert a.requests["request_id"].is_monotonic_increasing  # time order kept
    assert sample(w, n=100, seed=2).requests["request_id"].tolist() != a.requests["request_id"].tolist()
    assert len(sample(w, **parse_sample("0.25"))) == 250
    with pytest.raises(TraceError, match="cannot sample 2000"):
        sample(w, n=2000)
    with pytest.raises(TraceError, match="--sample"):
        parse_sample("1.5")


def test_clip_context_counts_and_fits():
    w = workload([0, 1, 2, 3, 4], inp=[100, 4000, 5000, 4096, 10], out=[50, 200, 0, 7, 4090])
    c = clip_context(w, 4096)
    df = c.requests
    assert (df["input_tokens"] + df["output_tokens"] <= 4096).all()
    assert df["input_tokens"].tolist() == [100, 4000, 4096, 4095, 10]
    assert df["output_tokens"].tolist() == [50, 96, 0, 1, 4086]  # output kept >= 1 if it had any
    assert c.clipped == 4 and c.summary()["clipped_requests"] == 4
    assert "4 request(s) clipped" in c.notes[-1]
    assert clip_context(w, 10**6).clipped == 0
    with pytest.raises(TraceError, match="max context"):
        clip_context(w, 1)


def test_transforms_do_not_mutate_input():
    w = workload([0, 1, 2])
    before = w.requests.copy()
    rate_scale(w, 3), time_window(w, 1, 2), sample(w, n=1), clip_context(w, 12)
    assert w.requests.equals(before)
