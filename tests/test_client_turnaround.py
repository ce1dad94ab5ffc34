"""Closed-loop client turnaround (simulator/cluster/arrivals.py): a finished request's slot is handed to the
next request `client_turnaround_s` later, the next request's TTFT counts from that hand-over, both modes
agree, the knob is refused where it cannot apply, and the aiperf harness sets it (issue 14)."""
import numpy as np
import pytest
from test_sim_util import assert_same_requests, run, run_both, workload

from simulator.run import RunSpec
from simulator.apps.validate.harness import AIPERF_TURNAROUND_S, harness
from simulator.apps.validate.replay import run_spec
from simulator.apps.validate.rows import Case

Z = 0.0123


def test_next_request_is_issued_a_turnaround_after_the_slot_frees():
    # C=1: request k+1 is issued exactly Z after request k finishes (hand-worked: nothing else can hold it)
    w = workload(np.zeros(3), [100, 200, 300], [5, 6, 7])
    base = run(w, max_concurrency=1).requests.frame()
    f = run(w, max_concurrency=1, client_turnaround_s=Z).requests.frame()
    assert f["issued_s"].iloc[0] == 0.0
    for k in (1, 2):
        assert f["issued_s"].iloc[k] == pytest.approx(f["finish_s"].iloc[k - 1] + Z, abs=1e-12)
    # TTFT counts from the issue, so an idle engine gives every request the TTFT it has without the turnaround
    np.testing.assert_allclose(f["ttft_ms"], base["ttft_ms"], rtol=1e-9)
    # ... and the run takes 2 turnarounds longer
    assert f["finish_s"].iloc[2] == pytest.approx(base["finish_s"].iloc[2] + 2 * Z, rel=1e-9)


def test_turnaround_holds_only_the_finished_requests_slot():
    # C=2: while request 0's slot is held, request 1 keeps running and nothing new is issued
    w = workload(np.zeros(3), [100, 100, 100], [3, 40, 3])
    f = run(w, max_concurrency=2, client_turnaround_s=Z).requests.frame()
    assert f["issued_s"].iloc[1] == 0.0
    assert f["issued_s"].iloc[2] == pytest.approx(f["finish_s"].iloc[0] + Z, abs=1e-12)
    assert f["issued_s"].iloc[2] < f["finish_s"].iloc[1]


def test_turnaround_is_the_same_in_both_modes():
    w = workload(np.zeros(12), np.full(12, 700), np.full(12, 60))
    ff, step = run_both(w, max_concurrency=4, client_turnaround_s=Z)
    assert_same_requests(ff, step)


@pytest.mark.parametrize("kw,msg", [(dict(client_turnaround_ms=-1.0, max_concurrency=4), "must be a number >= 0"),
                                    (dict(client_turnaround_ms=5.0), "needs a closed loop")])
def test_bad_turnaround_is_one_clear_error(kw, msg):
    with pytest.raises(ValueError, match=msg):
        RunSpec(policy="tp", **kw)


def _case(backend: str, version: str) -> Case:
    return Case(row=0, id=f"q_{backend}_agg_2048x128_c8_tp1", backend=backend, version=version, model="Qwen/Qwen3-32B",
                hardware="h100", weights="fp8", layout="tp=1", gpus=1, isl=2048, osl=128, concurrency=8,
                batch_size=8, ttft_ms=500.0, tpot_ms=20.0)


def test_aiperf_rows_replay_the_fitted_turnaround_and_the_frameworks_defaults():
    """aiconfigurator's harness recorded no engine flags: a gap-analysis row (TRT-LLM 1.0.0rc3) and a row of
    another aiperf harness (1.3.0rc1) both replay TRT-LLM's own defaults, with the fitted aiperf turnaround
    (AIPERF_TURNAROUND_S, benchmarks/fit_client_turnaround.py: 0 ms since the defaults, 2026-11-28)."""
    for version in ("1.0.0rc3", "1.3.0rc1"):
        trt = _case("trtllm", version)
        h = harness(trt)
        assert h.client_turnaround_s == AIPERF_TURNAROUND_S
        assert run_spec(trt, h).client_turnaround_ms == pytest.approx(AIPERF_TURNAROUND_S * 1e3)
        assert (h.engine.max_num_seqs, h.engine.max_num_batched_tokens) == (2048, 8192)
        assert not h.engine.enable_chunked_prefill and h.memory_fraction is None
        assert "not recorded" in h.unknown



def test_a_rejection_frees_its_clients_slot_at_once_whoever_rejects_it():
    """Issue 34 (regression): the disagg front door's rejection (no prefill instance's KV holds the prompt)
    held the client's slot for the turnaround, as if the request had completed; every other rejection frees
    it at once (the client gets its error right away). Now the policy's front door returns the reason and
    the cluster rejects, the same way for every policy."""
    for policy in ("dp", "disagg"):
        res = run(workload([0.0, 0.0], [6000, 100], [10, 10]), policy=policy, gpus=2, util=0.14,
                  max_concurrency=1, client_turnaround_s=0.05)
        f = res.requests.frame()
        assert f["status"].tolist() == ["rejected", "completed"], policy
        assert f["issued_s"].tolist() == [0.0, 0.0], policy
