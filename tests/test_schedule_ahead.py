"""Schedule-ahead loops (perfmodel Framework.schedule_ahead; simulator.engine.loop.Engine): vLLM's async
scheduling, TRT-LLM's overlap scheduler and SGLang's overlap schedule pick step n+1 while step n runs, so
a request that reaches a busy engine waits for the step after next; an idle engine takes it at once."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from perfmodel.framework import framework_preset
from simulator.engine.config import EngineConfig
from simulator.run import RunSpec, run
from simulator.workload import make_workload


def _run(schedule_ahead: bool, arrivals, fast_forward: bool = False):
    # A decodes 200 tokens alone; B (5 tokens out) arrives at arrivals[1]
    wl = make_workload({"arrival_s": np.asarray(arrivals, float), "input_tokens": np.array([100, 50]),
                        "output_tokens": np.array([200, 5])}, source="test")
    # (no front-end tokenization: the arrival instants below are the engine's own)
    fw = dataclasses.replace(framework_preset("vllm"), schedule_ahead=schedule_ahead, tokenize_s_per_token=0.0)
    rs = RunSpec(policy="layout", layout="tp=1", model="llama-3.1-8b", hardware="h100", gpus=1, profile="none",
                 engine=EngineConfig(fast_forward=fast_forward))
    r = run(wl, rs, framework=fw)
    return r.requests.set_index("request_id"), r.steps


@pytest.mark.parametrize("fast_forward", [False, True])
def test_a_request_reaching_a_busy_engine_waits_one_more_step(fast_forward):
    arrival = 0.0105  # inside A's third decode step (steps of ~4.7 ms after a ~5 ms prefill)
    for ahead, boundary in ((False, 0), (True, 1)):
        req, steps = _run(ahead, [0.0, arrival], fast_forward)
        starts = np.sort(steps["start_s"].to_numpy())
        later = starts[starts > arrival]
        # B runs in the first step that starts after it came (the step in progress cannot take it), or,
        # scheduling ahead, in the one after: that one was picked when the step in progress began
        assert req.loc[1, "scheduled_s"] == pytest.approx(later[boundary], abs=1e-12), (ahead, later[:3])
        assert (req["status"] == "completed").all()
    (base, _), (ahead, _) = _run(False, [0.0, arrival]), _run(True, [0.0, arrival])
    assert ahead.loc[1, "ttft_ms"] > base.loc[1, "ttft_ms"]  # one decode step more
    assert ahead.loc[0, "ttft_ms"] == base.loc[0, "ttft_ms"]  # A reached an idle engine: no wait either way


def test_an_idle_engine_takes_a_request_at_once():
    for ahead in (False, True):  # B comes after A has finished: the engine is idle again
        req, _ = _run(ahead, [0.0, 5.0])
        assert req.loc[1, "scheduled_s"] == pytest.approx(5.0)


def test_which_frameworks_schedule_ahead_by_default():
    assert framework_preset("sglang").schedule_ahead and framework_preset("trtllm").schedule_ahead
    assert not framework_preset("vllm").schedule_ahead and not framework_preset("vllm", "0.12.0").schedule_ahead
    assert framework_preset("vllm", "0.18.0").schedule_ahead  # async scheduling is vLLM's default from 0.14.0
    # regression (2026-12-02): the default was taken to start at 0.18, so the 0.16.0 rows (Kimi-K2.5, MiniMax-M2.5
    # on H200) replayed a synchronous loop; 0.13.0 still defaults to off (config/scheduler.py:133)
    assert framework_preset("vllm", "0.14.0").schedule_ahead and framework_preset("vllm", "0.16.0").schedule_ahead
    assert not framework_preset("vllm", "0.13.0").schedule_ahead


def test_a_request_queued_during_an_uncut_stretch_is_seen_after_it():
    """Regression (2026-12-03, TRT-LLM dp at 300 req/s on 12 GB H100s, fast vs step by step): a request that joins
    a queue whose head is refused does not cut the decode stretch (Engine._blocks_tail), and the step after the
    stretch hid it as queued since the step last scheduled began, taken as the stretch's start, not its last
    step's. TRT-LLM's rule on 9,728 KV tokens: C (1,900 + 4,000) waits until B ends; D (100 + 10), queued at 0.5 s
    behind it, is admitted with C step by step, and was one step later in closed form."""
    from dataclasses import replace

    from simulator.engine.config import framework_engine
    from test_sim_util import assert_same_requests, workload
    wl = workload([0.0, 0.0, 0.1, 0.5], [100, 100, 1900, 100], [3000, 2000, 4000, 10])
    fast, slow = (run(wl, RunSpec(policy="tp", model="llama-3.1-8b", hardware="h100", gpus=1, framework="trtllm",
                                  hbm_gb=12.0, engine=replace(framework_engine("trtllm"), fast_forward=f)))
                  for f in (True, False))
    assert_same_requests(fast.result, slow.result)
    req = fast.result.requests.frame()
    assert req["scheduled_s"][3] == req["scheduled_s"][2] == req["finish_s"][1]  # C and D in B's place at once
