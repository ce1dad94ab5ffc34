"""Flying Serving in the simulator (issue #6 acceptance; SYSTEMS.md 5, TARGETS.md Flying row).

Llama-3.3-70B fp8 on 8 x H200 (datasheet roofline, prof=None): a DP unit is one GPU (70 GB of
weights fit), so the pool is 8 units and TP groups are tp=2, 4, 8 over aligned unit ranges.
"""
import functools
import numpy as np
import pytest

from metamorphic import spec, trace
from simulator import run as sim_run
from simulator.run import workload
from test_sim_util import assert_same_requests

run_summary = functools.partial(sim_run.run_summary, profile="none")  # datasheet roofline, as docs/policies.md
from simulator.workload.workload import make_workload

BURSTY = "onoff?n=300&low=0.5-1&high=4-6&off_s=30&on_s=15&input=4096&output=250&seed=1"  # as test_dyn_shift
PRIORITY = "poisson?rate=6&n=400&input=4096&output=250&priority=-1:0.05,0:0.95&seed=2"  # ~half DP's capacity


@pytest.fixture(scope="module")
def bursty():
    wl = workload(BURSTY)
    return {p: run_summary(wl, p, frames=True) for p in ("tp", "dp", "flying")}


def _burst(req):
    return (req["arrival_s"] % 45.0) >= 30.0  # onoff: 30 s low phase, then a 15 s burst


def test_bursty_ttft_dp_in_bursts_tp_at_low_load(bursty):
    med = {p: (r[1].loc[_burst(r[1]), "ttft_ms"].median(), r[1].loc[~_burst(r[1]), "ttft_ms"].median())
           for p, r in bursty.items()}
    assert med["flying"][0] <= 1.15 * med["dp"][0], med  # burst phases: within 15% of static DP's
    assert med["flying"][1] <= 1.15 * med["tp"][1], med  # low-load phases: within 15% of static TP's


def test_mode_timeline_and_switch_costs(bursty):
    s, _, steps = bursty["flying"]
    assert set(s["time_in_mode_s"]) == {"dp", "tp8"} and s["mode_switches"] > 0
    sw = steps[steps["switch_s"] > 0]
    assert len(sw) >= 2 and np.allclose(sw["switch_s"], 0.015) and (sw["steps"] == 0).all()  # 15 ms live
    assert s["switch_time_s"] == pytest.approx(0.015 * len(sw))


def test_priority_near_tp_latency_others_near_dp():
    wl = workload(PRIORITY)
    out = {p: run_summary(wl, p, frames=True) for p in ("tp", "dp", "flying")}
    pri = {p: r[1].loc[r[1]["priority"] < 0, "ttft_ms"].median() for p, r in out.items()}
    oth = {p: r[1].loc[r[1]["priority"] >= 0, "ttft_ms"].median() for p, r in out.items()}
    assert pri["flying"] <= 1.15 * pri["tp"], pri
    assert oth["flying"] <= 1.15 * oth["dp"], oth
    assert out["flying"][0]["total_token_throughput"] >= 0.95 * out["dp"][0]["total_token_throughput"]
    assert "tp4" in out["flying"][0]["time_in_mode_s"]  # priority groups: half the node by default


def test_long_context_served_by_a_group_rejected_by_dp():
    n = 30
    arr = np.sort(np.random.default_rng(0).uniform(0, 20, n))
    inp, outp = np.full(n, 2048), np.full(n, 128)
    # on H200 one DP unit holds 160,960 tokens, more than Llama-3.3's max_model_len (131,072), so no
    # servable request outgrows it there; on 8 x H20 (96 GB) a unit holds 37,360 and a TP-2 group twice that
    inp[5], outp[5] = 60_000, 100
    wl = make_workload({"arrival_s": arr, "input_tokens": inp, "output_tokens": outp})
    _, dp, _ = run_summary(wl, "dp", frames=True, hardware="h20")
    assert dp.loc[5, "status"] == "rejected" and "capacity" in dp.loc[5, "reject_reason"]  # with the reason
    s, fl, _ = run_summary(wl, "flying", policy_args={"low_load": 1}, frames=True, hardware="h20")  # long rule only
    assert fl.loc[5, "status"] == "completed" and s["completed"] == n
    assert "tp2" in s["time_in_mode_s"]  # the narrowest group that holds it


def test_without_triggers_flying_is_static_dp():
    wl = workload("poisson?rate=4&n=120&input=2048&output=128&seed=5")
    fl = run_summary(wl, "flying", policy_args={"low_load": 1, "priority_tp": -10})
    dp = run_summary(wl, "dp")
    assert fl["median_ttft_ms"] == pytest.approx(dp["median_ttft_ms"], rel=0.02)
    assert fl["median_tpot_ms"] == pytest.approx(dp["median_tpot_ms"], rel=0.02)


@pytest.mark.parametrize("switching", ["sequential", "soft", "hard"])
def test_switching_modes_complete_and_hard_is_fastest_for_priority(switching):
    wl = workload("poisson?rate=3&n=150&input=4096&output=250&priority=-1:0.1,0:0.9&seed=4")
    s, req, _ = run_summary(wl, "flying", policy_args={"low_load": 1, "switching": switching}, frames=True)
    assert s["completed"] == len(wl)
    ttft = req.loc[req["priority"] < 0, "ttft_ms"].median()
    if switching == "hard":
        assert ttft < 250  # static TP: 114 ms, DP 444 ms on this trace
    else:
        assert ttft > 250  # waits for the members to drain (soft: starts in DP, then recomputes)
    if switching == "soft":
        assert req.loc[req["priority"] < 0, "preemptions"].sum() > 0  # the recompute under TP


def test_cold_restart_cost_per_switch():
    wl = workload("poisson?rate=3&n=40&input=1024&output=32&priority=-1:0.1,0:0.9&seed=4")
    s, _, steps = run_summary(wl, "flying", policy_args={"restart": "cold"}, frames=True)
    sw = steps[steps["switch_s"] > 0]
    assert len(sw) >= 2 and np.allclose(sw["switch_s"], 146.0) and s["completed"] == len(wl)


def test_trtllm_serves_a_prompt_under_the_budget_whose_output_takes_it_past():
    """Regression (2026-12-03, a new user's bursty_onoff.csv run): unchunked, TRT-LLM bounds only the prompt by
    max_num_tokens (Engine.holds), but Flying's front door bounded prompt + output by it, so it rejected requests
    of 8,171-8,187 prompt tokens that every other policy serves, as 'longer than max_num_batched_tokens (8192)'."""
    wl = make_workload({"arrival_s": [0.0, 1.0, 2.0], "input_tokens": [8100, 8180, 500],
                        "output_tokens": [200, 100, 50]})
    for policy in ("dp", "flying"):
        s = run_summary(wl, policy, framework="trtllm")
        assert (s["completed"], s["rejected"]) == (3, 0), (policy, s.get("rejected_reasons"))


def test_trtllm_recomputes_a_moved_request_past_the_step_budget():
    """Regression (2026-12-03, benchmarks/differential_fuzz.py seeds 1000-1007): Flying moved a TRT-LLM request
    (8,137 prompt tokens, 791 generated) between its DP unit and a TP group; its recompute of 8,928 tokens outgrew
    the unchunked 8,192-token budget, nothing admitted it, and both the closed-form and the step-by-step run raised
    'nothing schedulable'. The fuzz's own trace, both paths: every request ends, and the two agree."""
    ci = 15  # (differential_fuzz.MIXES' index of ("flying", {"framework": "trtllm"}): it seeds the trace)
    rng = np.random.default_rng(1001 * 100 + ci)
    wl = trace(rng, int(rng.integers(5, 40)), 9000, False)
    a, b = (sim_run.run(wl, spec("flying", {"framework": "trtllm"}, {}, fast, False)) for fast in (True, False))
    assert a.summary["completed"] + a.summary["rejected"] == len(wl.requests)
    assert (a.result.requests.preemptions > 0).any()  # (a request was moved: the case this guards)
    assert_same_requests(a.result, b.result)


def test_sglang_units_under_kv_pressure_agree_on_both_paths():
    """Regression (2026-12-03, `benchmarks/differential_fuzz.py --hbm-gb 22 --requests 20-80` seed 5001): on SGLang
    units a decode stretch ran past the step whose decayed reservation admitted a queued prompt (engine/headroom.py),
    and Flying's hard switch sized a group by its units' free KV as of a stretch's start (Engine.free_blocks_now):
    request 17 was scheduled 1.6 s later in closed form. The fuzz's own trace and KV."""
    ci = 36  # (differential_fuzz.MIXES' index of ("flying", {"framework": "sglang"}): it seeds the trace)
    rng = np.random.default_rng(5001 * 100 + ci)
    wl = trace(rng, int(rng.integers(20, 80)), 9000, False)
    fields = {"framework": "sglang", "hbm_gb": 22.0}
    a, b = (sim_run.run(wl, spec("flying", fields, {}, fast, False)) for fast in (True, False))
    assert a.summary["completed"] + a.summary["rejected"] == len(wl.requests)
    assert_same_requests(a.result, b.result)
