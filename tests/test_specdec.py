"""Speculative decoding (perfmodel.specdec) and the disagg decode pool's `decode_mtp`."""
import numpy as np
import pytest

from perfmodel.calibration.profile import load_profile
from perfmodel.framework import framework_preset
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from perfmodel.specdec import SpecDecode, per_token_affine
from perfmodel.steptable import StepTable
from simulator import run
from simulator.run import RunSpec
from simulator.workload.workload import make_workload


def test_tokens_per_step_by_hand():
    assert SpecDecode(1, 0.5).tokens_per_step == pytest.approx(1.5)
    assert SpecDecode(3, 1.0).tokens_per_step == pytest.approx(4.0)
    assert SpecDecode(2, 0.0).tokens_per_step == pytest.approx(1.0)
    assert SpecDecode(2, 0.6).tokens_per_step == pytest.approx(1 + 0.6 + 0.36)
    for bad in ((0, 0.5), (2, 1.5), (2, -0.1)):
        with pytest.raises(ValueError):
            SpecDecode(*bad)


@pytest.fixture(scope="module")
def table():
    spec = load_model("llama-3.1-8b", weights="bf16", kv="bf16")
    tab = StepTable(spec, ParallelLayout(tp=1), load_hardware("h100"), load_profile("h100_sxm"),
                    framework_preset("vllm", ""), max_tokens=8192, max_seqs=256)
    return spec, tab


def test_per_token_cost_brackets(table):
    """Nothing accepted: a token costs a whole draft + verify step, more than a plain step. Everything
    accepted at batch 1 (weight-bound): verifying 4 tokens costs about one plain step, so a token costs
    well under half a plain step, yet never below a quarter (4 tokens per step at most)."""
    spec, tab = table
    c0, c1 = tab.decode_affine(1)
    none0, none1 = per_token_affine(tab, 1, SpecDecode(3, 0.0), spec.num_layers)
    assert none0 > c0 and none1 == pytest.approx(c1 * (1 + 3 / spec.num_layers))
    all0, all1 = per_token_affine(tab, 1, SpecDecode(3, 1.0), spec.num_layers)
    assert c0 / 4 < all0 < c0 / 2 and all1 == pytest.approx(c1 * (1 + 3 / spec.num_layers) / 4)


def _tpot(extra):
    wl = make_workload({"arrival_s": np.zeros(4), "input_tokens": np.full(4, 512), "output_tokens": np.full(4, 128)},
                       source="specdec")
    r = run(wl, RunSpec(policy="disagg", gpus=2, model="llama-3.1-8b", hardware="h100", weights="bf16",
                        profile="none", policy_args=(("prefill", "1x(tp=1)"), ("decode", "1x(tp=1)")) + extra))
    assert (r.requests["status"] == "completed").all()
    return r.requests["tpot_ms"].mean()


def test_decode_pool_runs_faster_only_when_drafts_are_accepted():
    plain = _tpot(())
    assert _tpot((("decode_mtp", "3"), ("mtp_acceptance", "1.0"))) < plain / 2
    assert _tpot((("decode_mtp", "3"), ("mtp_acceptance", "0.0"))) > plain
    with pytest.raises(ValueError, match="needs decode_mtp"):
        _tpot((("mtp_acceptance", "0.5"),))
    with pytest.raises(ValueError, match="acceptance"):
        _tpot((("decode_mtp", "2"), ("mtp_acceptance", "1.5")))
