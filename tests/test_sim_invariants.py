"""Invariants of every run (issue #5, points 5-6 and Tests): determinism, conservation (requests in =
completed + rejected; tokens generated = output tokens of the completed), KV never above capacity,
time monotone, fast-forward == step by step - on fixed cases and on random small traces and
layouts (hypothesis)."""
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sim_util import KVCheck, assert_monotone, assert_same_requests, run, workload

from simulator.cluster.router import ROUTERS
from simulator.results.metrics import ConservationError, check_conservation, summarize
from simulator.workload import load_trace

LAYOUTS = [("tp", 1), ("tp", 2), ("dp", 2), ("pp", 2), ("sp", 2), ("shift", 2)]


def test_same_input_same_output():
    """Deterministic: the same (seeded) trace and config give identical records, bit for bit."""
    w = load_trace("synthetic:gamma?rate=40&burstiness=0.5&n=150&input=10-3000&output=0-300", seed=7)
    a, b = (run(w, policy="dp", gpus=2, util=0.16) for _ in range(2))
    pd.testing.assert_frame_equal(a.requests.frame(), b.requests.frame(), check_exact=True)
    pd.testing.assert_frame_equal(a.steps.frame(), b.steps.frame(), check_exact=True)
    other = load_trace("synthetic:gamma?rate=40&burstiness=0.5&n=150&input=10-3000&output=0-300", seed=8)
    assert not run(other, policy="dp", gpus=2).requests.frame()["finish_s"].equals(a.requests.frame()["finish_s"])


def test_conservation_holds_and_violations_raise():
    res = run(workload([0.0, 0.0, 0.5], [100, 90000, 300], [10, 10, 0]), util=0.16)
    f = res.requests.frame()
    summ = summarize(f, res.steps.frame(), res.engines)
    assert summ["completed"] + summ["rejected"] == summ["num_requests"] == 3
    assert summ["total_output_tokens"] == f.loc[f["status"] == "completed", "output_tokens"].sum() == 10
    lost = f.copy()
    lost.loc[0, "status"] = "unfinished"
    with pytest.raises(ConservationError, match="neither completed nor rejected"):
        check_conservation(lost)
    short = f.copy()
    short.loc[0, "generated_tokens"] = 9
    with pytest.raises(ConservationError, match="generated 9 tokens"):
        check_conservation(short)


def _check_run(w, policy, gpus, **kw):
    """Run fast-forward and step by step with KV checks; assert every invariant; return the ff run."""
    eng = kw.pop("engine")
    ff = run(w, policy=policy, gpus=gpus, engine={**eng, "fast_forward": True}, check=KVCheck(), **kw)
    step = run(w, policy=policy, gpus=gpus, engine={**eng, "fast_forward": False}, check=KVCheck(), **kw)
    f = ff.requests.frame()
    check_conservation(f)
    assert set(f["status"]) <= {"completed", "rejected"}
    assert (f.loc[f["status"] == "rejected", "reject_reason"] != "").all()
    assert (f.loc[f["status"] == "completed", "generated_tokens"] == f.loc[f["status"] == "completed", "output_tokens"]).all()
    cap = {e["index"]: e["kv_capacity_tokens"] for e in ff.engines}
    s = ff.steps.frame()
    assert (s["kv_used_tokens"].to_numpy() <= s["engine"].map(cap).to_numpy()).all()
    assert_monotone(ff)
    assert_monotone(step)
    assert_same_requests(ff, step)
    summarize(f, s, ff.engines)
    return ff


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 24))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.0005, 0.003, 0.02, 0.2]), min_size=n, max_size=n))
    inp = draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n))
    out = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    prio = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    policy, gpus = draw(st.sampled_from(LAYOUTS))
    util = draw(st.sampled_from([None, 0.2] if policy == "shift" else [None, 0.14, 0.16]))
    engine = dict(max_num_batched_tokens=draw(st.sampled_from([None, 64, 512])),
                  max_num_seqs=draw(st.sampled_from([None, 1, 4, 64])),
                  block_size=draw(st.sampled_from([1, 16, 64])),
                  enable_chunked_prefill=draw(st.booleans()),
                  priority_scheduling=draw(st.booleans()))
    kw = dict(router=draw(st.sampled_from(ROUTERS)), max_concurrency=draw(st.sampled_from([0, 0, 1, 3, 8])))
    return workload(np.cumsum(gaps), inp, out, priority=prio), policy, gpus, util, engine, kw


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_small_traces_and_layouts(case):
    w, policy, gpus, util, engine, kw = case
    _check_run(w, policy, gpus, util=util, engine=engine, **kw)


def test_a_mixed_case_with_every_feature():
    """One larger fixed case: rejections, preemptions, prefill-only requests, 1-token chunks."""
    rng = np.random.default_rng(11)
    n = 120
    w = workload(np.cumsum(rng.exponential(0.004, n)), rng.integers(1, 6000, n), rng.choice([0, 1, 30, 400], n),
                 priority=rng.integers(0, 3, n))
    ff = _check_run(w, "dp", 2, util=0.14, engine=dict(max_num_batched_tokens=257, priority_scheduling=True),
                    router="shortest-queue", max_concurrency=0)
    f = ff.requests.frame()
    assert (f["status"] == "rejected").any() and f["preemptions"].sum() > 0
