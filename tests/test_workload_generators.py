"""Synthetic generators: rates and burstiness against theory, lengths, priorities, determinism."""
import numpy as np
import pandas as pd
import pytest

from simulator.workload import (SyntheticSpec, TraceError, generate, load_trace, parse_spec,
                                write_csv)
from simulator.workload import generators as g


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0])
def test_gamma_rate_and_cv_over_100k(burstiness):
    rate_rps = 12.0
    w = load_trace(f"synthetic:gamma?rate={rate_rps}&burstiness={burstiness}&n=100000&seed=7")
    s = w.summary()
    assert s["requests"] == 100_000
    assert s["mean_rate_rps"] == pytest.approx(rate_rps, rel=0.02)
    # a gamma(shape k) gap has CV 1/sqrt(k): vLLM's burstiness 1 = Poisson, < 1 burstier
    assert s["interarrival_cv"] == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)


def test_poisson_is_gamma_burstiness_one():
    s = load_trace("synthetic:poisson?rate=3&n=100000&seed=1").summary()
    assert s["mean_rate_rps"] == pytest.approx(3.0, rel=0.02)
    assert s["interarrival_cv"] == pytest.approx(1.0, rel=0.05)


def test_onoff_phases_have_their_rates():
    off_s, on_s = 40.0, 20.0
    t = g.onoff_arrivals_s(200_000, (2.0, 5.0), (10.0, 30.0), off_s, on_s,
                           np.random.default_rng(3))
    assert np.all(np.diff(t) >= 0)
    period = off_s + on_s
    full = int(t[-1] // period)  # whole periods only
    t = t[t < full * period]
    in_burst = (t % period) >= off_s
    low_rps = (~in_burst).sum() / (full * off_s)
    high_rps = in_burst.sum() / (full * on_s)
    assert low_rps == pytest.approx(3.5, rel=0.05)  # mean of uniform(2, 5)
    assert high_rps == pytest.approx(20.0, rel=0.05)  # mean of uniform(10, 30)
    per_phase = np.bincount((t // period).astype(int), weights=in_burst) / on_s
    assert per_phase.min() > 7 and per_phase.max() < 35  # each burst drew a rate in 10-30 req/s


def test_batch_all_at_zero():
    w = load_trace("synthetic:batch?n=64&input=100-200&output=7")
    assert len(w) == 64 and (w.requests["arrival_s"] == 0).all()
    assert w.requests["input_tokens"].between(100, 200).all()
    assert (w.requests["output_tokens"] == 7).all()
    assert np.isnan(w.summary()["mean_rate_rps"])


def test_duration_bound():
    w = load_trace("synthetic:poisson?rate=20&duration_s=300&seed=2")
    t = w.requests["arrival_s"].to_numpy()
    assert t[-1] < 300 and len(w) == pytest.approx(20 * 300, rel=0.1)
    w = load_trace("synthetic:onoff?duration_s=240&off_s=30&on_s=30&low=2&high=10")
    assert w.requests["arrival_s"].iat[-1] < 240 and len(w) == pytest.approx(6 * 240, rel=0.15)


def test_uniform_and_fixed_lengths():
    w = load_trace("synthetic:poisson?n=20000&input=128-2048&output=64&seed=5")
    x = w.requests["input_tokens"]
    assert x.min() >= 128 and x.max() <= 2048 and x.mean() == pytest.approx(1088, rel=0.02)
    assert x.min() < 140 and x.max() > 2030  # inclusive range reaches both ends
    assert (w.requests["output_tokens"] == 64).all()


def test_empirical_lengths_resample_pairs(tmp_path):
    table = tmp_path / "lengths.csv"
    table.write_text("num_prefill_tokens,num_decode_tokens\n10,1\n200,20\n3000,300\n")
    w = load_trace(f"synthetic:gamma?rate=5&burstiness=0.5&n=3000&lengths={table}&seed=4")
    pairs = set(zip(w.requests["input_tokens"], w.requests["output_tokens"]))
    assert pairs == {(10, 1), (200, 20), (3000, 300)}  # joint resampling keeps each pair
    share = (w.requests["input_tokens"] == 200).mean()
    assert share == pytest.approx(1 / 3, abs=0.03)


def test_priority_mix():
    w = load_trace("synthetic:poisson?n=20000&priority=0:0.7,1:0.2,5:0.1&seed=9")
    share = w.requests["priority"].value_counts(normalize=True)
    assert share[0] == pytest.approx(0.7, abs=0.015)
    assert share[1] == pytest.approx(0.2, abs=0.015)
    assert share[5] == pytest.approx(0.1, abs=0.015)


def test_same_seed_same_output_different_seed_differs(tmp_path):
    spec = "synthetic:onoff?n=2000&input=10-5000&priority=0:1,1:1"
    a, b = load_trace(spec, seed=11), load_trace(spec + "&seed=11")
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    assert write_csv(a, tmp_path / "a.csv").read_bytes() == write_csv(b, tmp_path / "b.csv").read_bytes()
    c = load_trace(spec, seed=12)
    assert not np.array_equal(a.requests["arrival_s"], c.requests["arrival_s"])


def test_arrivals_independent_of_length_choice():
    a = load_trace("synthetic:gamma?n=500&burstiness=0.3&input=10&seed=3")
    b = load_trace("synthetic:gamma?n=500&burstiness=0.3&input=10-9000&seed=3")
    np.testing.assert_array_equal(a.requests["arrival_s"], b.requests["arrival_s"])


def test_source_string_regenerates():
    w = load_trace("synthetic:gamma?rate=7.5&burstiness=0.25&n=300&output=1-9", seed=42)
    again = load_trace(w.source)
    pd.testing.assert_frame_equal(w.requests, again.requests, check_exact=True)
    assert "seed=42" in w.source


def test_spec_dataclass_validates():
    assert parse_spec("synthetic:gamma?rate=2&burstiness=0.5") == \
        SyntheticSpec(kind="gamma", rate_rps=2.0, burstiness=0.5)
    with pytest.raises(TraceError, match="burstiness"):
        SyntheticSpec(kind="gamma", burstiness=0.0)
    with pytest.raises(TraceError, match="duration_s"):
        SyntheticSpec(kind="batch", duration_s=5.0)
    assert len(generate(SyntheticSpec(kind="batch", n=3))) == 3
