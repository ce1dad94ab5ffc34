"""Shift Parallelism in the simulator (issue #6 acceptance; SYSTEMS.md 2, TARGETS.md Shift row).

Llama-3.3-70B fp8 on 8 x H200, 4,096 in / 250 out (the Shift paper's request shape).
"""
import functools
import pytest

from simulator import run as sim_run
from simulator.run import workload

run_summary = functools.partial(sim_run.run_summary, profile="none")  # datasheet roofline, as docs/policies.md

BURSTY = "onoff?n=300&low=0.5-1&high=4-6&off_s=30&on_s=15&input=4096&output=250&seed=1"
SATURATED = "batch?n=1200&input=4096&output=250"


@pytest.fixture(scope="module")
def bursty():
    wl = workload(BURSTY)
    return {p: run_summary(wl, p) for p in ("tp", "dp", "shift")}


@pytest.fixture(scope="module")
def saturated():
    wl = workload(SATURATED)
    return {p: run_summary(wl, p) for p in ("tp", "dp", "shift")}


def test_bursty_ttft_below_tp_and_dp_tpot_near_tp(bursty):
    s, tp, dp = bursty["shift"], bursty["tp"], bursty["dp"]
    assert s["median_ttft_ms"] < tp["median_ttft_ms"] and s["median_ttft_ms"] < dp["median_ttft_ms"]
    assert s["median_tpot_ms"] <= 1.15 * tp["median_tpot_ms"]  # issue #6: within 15% of TP's


def test_saturated_throughput_between_tp_and_dp(saturated):
    s, tp, dp = (saturated[p]["total_token_throughput"] for p in ("shift", "tp", "dp"))
    assert s >= 1.3 * tp  # issue #6: >= 1.3 x TP's
    assert s >= 0.75 * dp  # and within 25% of DP's


def test_mode_timeline_recorded(bursty):
    s = bursty["shift"]
    assert s["mode_switches"] > 0 and s["switch_time_s"] == 0.0  # Shift switches for free
    assert set(s["time_in_mode_s"]) == {"base", "shift"}


def test_threshold_extremes_reduce_to_static_layouts():
    """threshold >= the token budget never leaves the shift (TP) config; 0 never leaves the base."""
    wl = workload("onoff?n=60&low=1-1&high=4-4&off_s=10&on_s=5&input=2048&output=64&seed=2")
    always_tp = run_summary(wl, "shift", policy_args={"threshold": 10**9})
    assert set(always_tp["time_in_mode_s"]) == {"shift"}
    tp = run_summary(wl, "tp")
    assert always_tp["median_tpot_ms"] == pytest.approx(tp["median_tpot_ms"], rel=1e-9)
    always_base = run_summary(wl, "shift", policy_args={"threshold": 0})
    assert set(always_base["time_in_mode_s"]) == {"base"}


def test_threshold_sweep_script_runs(capsys):
    import benchmarks.shift_threshold_sweep as sweep

    rows = sweep.sweep(40)
    assert len(rows) == len(sweep.THRESHOLDS) and "threshold" in capsys.readouterr().out
