"""Speculative decoding in an aggregated engine (`simulate --mtp D`, RunSpec.mtp): decode steps cost per emitted
token as the disaggregated decode pool's do (perfmodel.specdec), prompt chunks as before; the fast path equals
the step-by-step run; only static policies take it."""
import numpy as np
import pytest
from test_differential_policies import assert_same, both, trace

from perfmodel.specdec import SpecDecode, per_token_affine
from perfmodel.steptable import StepTable
from perfmodel.batch import StepAgg
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from simulator.engine.specstep import SpecStep
from simulator.run import RunSpec, run

KW = dict(model="deepseek-r1", hardware="h200", gpus=8, framework="trtllm")


def test_fast_path_equals_step_by_step_with_mtp():
    rng = np.random.default_rng(3)
    a = np.sort(rng.uniform(0, 3, 10))
    w = trace(a - a[0], rng.integers(100, 3000, 10), rng.choice([1, 40, 300], 10))
    assert_same(*both(w, "layout", {**KW, "layout": "tp=8,ep=8", "mtp": 3}))
    assert_same(*both(w, "layout", {**KW, "layout": "dp=8,tp=1,ep=8", "mtp": 1}))  # lock-stepped DP ranks


def test_a_decode_step_is_the_per_token_line_and_a_prompt_chunk_is_unchanged():
    spec, hw = load_model("deepseek-r1", weights="fp8"), load_hardware("h200")
    base = StepTable(spec, ParallelLayout(tp=8, ep=8), hw, None, max_tokens=4096, max_seqs=64)
    sd = SpecDecode(3, 0.65)
    st = SpecStep(base, sd, spec.num_layers)
    line = per_token_affine(base, 16, sd, spec.num_layers)
    dec = StepAgg(0, 0, 0.0, 0.0, 16, 16 * 2000.0)
    assert st.step_s(dec) == pytest.approx(line.c0_s + line.c1_s_per_key * 16 * 2000.0, rel=1e-12)
    pre = StepAgg(512, 1, 512 * 513 / 2, 512.0, 0, 0.0)
    assert st.step_s(pre) == base.step_s(pre)
    # T = 1 + .65 + .65^2 + .65^3 = 2.35 tokens a step: a decode token costs well under a plain step
    assert st.step_s(dec) < 0.75 * base.step_s(dec)


def test_mtp_makes_decoding_faster_and_is_refused_where_it_does_not_apply():
    w = trace([0.0] * 4, [1024] * 4, [300] * 4)
    plain = run(w, RunSpec(policy="layout", layout="tp=8,ep=8", **KW))
    mtp = run(w, RunSpec(policy="layout", layout="tp=8,ep=8", mtp=3, **KW))
    assert mtp.summary["median_tpot_ms"] < 0.75 * plain.summary["median_tpot_ms"]
    assert mtp.summary["completed"] == 4
    with pytest.raises(ValueError, match="decode_mtp"):
        run(w, RunSpec(policy="disagg", mtp=3, **KW))
    with pytest.raises(ValueError, match="mtp_acceptance needs mtp"):
        RunSpec(policy="layout", mtp_acceptance=0.7, **KW)
    with pytest.raises(ValueError, match="acceptance must be in"):
        RunSpec(policy="layout", mtp=2, mtp_acceptance=1.5, **KW)
