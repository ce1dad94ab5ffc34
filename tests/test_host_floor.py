"""The host floor of an overlapped loop (Framework.host_floor_s, host_floor_seq_s; issue 37): a step takes
max(its time, floor + floor_seq x its sequences), in the step-by-step run and in the closed-form decode stretches
alike (simulator.engine.runner.floored_line); TRT-LLM 1.0's preset carries the fitted floor, no other does."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from test_differential_policies import assert_same, both, trace, traces

from perfmodel.framework import (DEFAULT_FRAMEWORK, TRTLLM_HOST_FLOOR_S, TRTLLM_HOST_FLOOR_SEQ_S, framework_preset,
                                 with_deployment)
from simulator.apps.cli import main
from simulator.engine.config import framework_engine
from simulator.engine.runner import DecodeLine, floored_line
from simulator.run import RunSpec, run

FLOOR = {"host_floor_us": 3000.0, "host_floor_seq_us": 60.0}  # above an 8B model's decode kernels at TP4


def _step(c0, c1, k0, n, j):
    return c0 + c1 * (k0 + j * n)


@pytest.mark.parametrize("c0, c1, k0, n, steps, floor", [
    (1e-3, 1e-9, 0.0, 16, 500, 2e-3),  # crosses the floor inside the stretch
    (1e-3, 1e-9, 0.0, 16, 50, 5e-3),  # under the floor for the whole stretch
    (3e-3, 1e-9, 1e4, 16, 50, 2e-3),  # above it from the first step
    (1e-3, 0.0, 0.0, 8, 40, 2e-3),  # flat kernels
    (1e-3, 2e-9, 4.9e5, 64, 1000, 2e-3),  # the first step just below the floor
])
def test_floored_line_is_the_step_by_step_max(c0, c1, k0, n, steps, floor):
    line = floored_line(DecodeLine(c0, c1, steps), k0, n, floor)
    assert 1 <= line.steps <= steps
    for j in range(line.steps):  # each step of the returned line is max(kernels, floor) at its keys
        assert line.c0_s + line.c1_s_per_key * (k0 + j * n) == pytest.approx(max(_step(c0, c1, k0, n, j), floor),
                                                                               rel=1e-12)
    if line.steps < steps:  # cut where the kernels' line rises above the floor: the next line is the kernels'
        assert _step(c0, c1, k0, n, line.steps) > floor >= _step(c0, c1, k0, n, line.steps - 1)
        after = floored_line(DecodeLine(c0, c1, steps - line.steps), k0 + line.steps * n, n, floor)
        assert after == DecodeLine(c0, c1, steps - line.steps)


def test_no_floor_changes_nothing():
    """Every preset but TRT-LLM 1.0's has none, and a floor of 0 leaves a run bit for bit as it was."""
    for name, version in (("vllm", None), ("vllm", "0.18.0"), ("sglang", "0.5.9"), ("trtllm", None),
                          ("trtllm", "1.1.0rc2.post2")):
        fw = framework_preset(name, version)
        assert fw.host_floor_s == 0 and fw.host_floor_seq_s == 0, (name, version)
    w = trace(np.linspace(0, 2, 12), [300] * 12, [40] * 12)
    base = RunSpec(policy="tp", model="llama-3.1-8b", hardware="h100", gpus=4)
    a = run(w, base).requests
    b = run(w, RunSpec(policy="tp", model="llama-3.1-8b", hardware="h100", gpus=4, host_floor_us=0.0,
                       host_floor_seq_us=0.0)).requests
    assert a.equals(b)


def test_trtllm_1_0_preset_carries_the_fitted_floor():
    fw = framework_preset("trtllm", "1.0.0rc3")
    assert (fw.host_floor_s, fw.host_floor_seq_s) == (TRTLLM_HOST_FLOOR_S, TRTLLM_HOST_FLOOR_SEQ_S)
    assert TRTLLM_HOST_FLOOR_S > 0 and TRTLLM_HOST_FLOOR_SEQ_S > 0
    # a flag wins over the preset (the validation's refits set it so)
    assert with_deployment(fw, host_floor_us=0.0).host_floor_s == 0.0


def test_a_floor_above_the_kernels_sets_the_decode_step():
    """Decoding alone, up to 8 sequences of an 8B model at TP4 (kernels ~3.3-3.5 ms a step): with a 5 ms + 60 us a
    sequence floor every decode step, stretches included, takes the floor of its sequences; without it, less."""
    w = trace(np.zeros(8), [100] * 8, [200] * 8)
    kw = dict(policy="tp", model="llama-3.1-8b", hardware="h100", gpus=4, framework="trtllm")
    floored = run(w, RunSpec(**kw, host_floor_us=5000.0, host_floor_seq_us=60.0))
    plain = run(w, RunSpec(**kw, host_floor_us=0.0, host_floor_seq_us=0.0))
    for r, floor in ((floored, True), (plain, False)):
        s = r.steps
        dec = s[s["prefill_tokens"] == 0]
        per_step = (dec["duration_s"] / dec["steps"]).to_numpy()
        want = 5e-3 + 60e-6 * dec["decode_seqs"].to_numpy()
        assert len(dec) and (dec["steps"] > 1).any()  # (stretches among them)
        if floor:
            assert per_step == pytest.approx(want, rel=1e-12)
        else:
            assert (per_step < want).all()
    assert floored.requests["tpot_ms"].min() > plain.requests["tpot_ms"].max()


@pytest.mark.parametrize("policy, extra", [("tp", {}), ("dp", {"framework": "sglang"}), ("tp", {"framework": "trtllm"}),
                                           ("sidp", {}), ("flying", {}), ("disagg", {}), ("shift", {})],
                         ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.values())))
@settings(max_examples=4, deadline=None, derandomize=True, phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(w=traces())
def test_fast_path_equals_step_by_step_under_a_floor(policy, extra, w):
    assert_same(*both(w, policy, {**extra, **FLOOR}))


def test_lock_stepped_ranks_each_wait_for_their_floor():
    """DP ranks stepping in lock-step ticks (dp_lockstep all): a tick takes the slowest rank's max(kernels, floor),
    so with a floor above the kernels every decode tick is the busiest rank's floor."""
    w = trace(np.zeros(6), [100] * 6, [120] * 6)
    eng = dataclasses.replace(framework_engine("trtllm"), dp_lockstep="all")
    r = run(w, RunSpec(policy="dp", model="llama-3.1-8b", hardware="h100", gpus=2, framework="trtllm", engine=eng,
                       host_floor_us=20000.0, host_floor_seq_us=60.0))  # (20 ms: above TP1's decode kernels)
    s = r.steps
    dec = s[(s["prefill_tokens"] == 0) & (s["decode_seqs"] == 3)]  # both ranks decode 3 each
    assert len(dec) and (dec["duration_s"] / dec["steps"]).to_numpy() == pytest.approx(20e-3 + 3 * 60e-6, rel=1e-9)


SMALL = ["--trace", "synthetic:batch?n=4&input=100&output=10", "--model", "llama-3.1-8b", "--hardware", "h100",
         "--gpus", "4"]


def test_seesaw_refuses_a_floor_in_one_line(capsys):
    assert main([*SMALL, "--policy", "seesaw", "--host-floor-us", "2000"]) == 2
    err = capsys.readouterr().err
    assert "seesaw" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_negative_floor_is_one_line(capsys):
    assert main([*SMALL, "--policy", "tp", "--host-floor-seq-us", "-5"]) == 2
    err = capsys.readouterr().err
    assert "host_floor_seq_us" in err and "Traceback" not in err


def test_default_framework_has_no_floor():
    assert DEFAULT_FRAMEWORK.host_floor_s == 0 and DEFAULT_FRAMEWORK.host_floor_seq_s == 0
