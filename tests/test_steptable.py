"""The simulator's StepTable equals step_cost (the one cost model) on random batches."""
import numpy as np
import pytest

from perfmodel.batch import make_batch
from perfmodel.cost import step_cost
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from perfmodel.steptable import StepTable, decode_stretch_s, steps_within


@pytest.mark.parametrize("model, layout", [
    ("llama-3.3-70b", ParallelLayout(tp=8)), ("llama-3.3-70b", ParallelLayout(sp=8)),
    ("llama-3.1-70b", ParallelLayout(tp=2, pp=4)), ("mixtral-8x7b", ParallelLayout(tp=2, ep=2)),
    ("gpt-oss-120b", ParallelLayout(tp=4, sp=2)),
])
def test_table_matches_step_cost(model, layout):
    spec, hw = load_model(model, weights="fp8"), load_hardware("h200")
    tab = StepTable(spec, layout, hw, max_tokens=4096, max_seqs=256)
    rng = np.random.default_rng(1)
    for _ in range(200):
        dn = int(rng.integers(0, 200))
        pt = int(rng.integers(0, 3000)) * int(rng.random() < 0.5)
        ps = int(rng.integers(1, 4)) if pt else 0
        c = float(rng.integers(0, 4000))
        pairs, pkv = pt * (c + (pt + 1) / 2) if pt else 0.0, (c + pt) if pt else 0.0
        dkv = float(dn * rng.integers(256, 8000))  # above GPT-OSS's 128-token window (see StepTable)
        want = float(step_cost(spec, layout, hw, make_batch(pt, ps, pairs, pkv, dn, dkv)).total_s)
        assert tab.time_s(pt, ps, pairs, pkv, dn, dkv) == pytest.approx(want, rel=2e-3, abs=1e-9)


def test_decode_affine_and_closed_form_stretch():
    spec, hw = load_model("llama-3.3-70b", weights="fp8"), load_hardware("h200")
    tab = StepTable(spec, ParallelLayout(tp=8), hw, max_tokens=2048, max_seqs=128)
    n, k0 = 37, 37 * 1500.0
    c0, c1 = tab.decode_affine(n)
    stepwise = sum(tab.time_s(dn=n, dkv=k0 + j * n) for j in range(50))
    assert decode_stretch_s(c0, c1, k0, n, 50) == pytest.approx(stepwise, rel=1e-9)
    k = steps_within(c0, c1, k0, n, stepwise)
    assert k == 50 or decode_stretch_s(c0, c1, k0, n, 50) > stepwise
    assert steps_within(c0, c1, k0, n, 0.0) == 0


def test_per_sequence_aggregates_agree_between_table_and_step_cost():
    """The simulator's scalar aggregates and perfmodel's batch_from_seqs are one definition."""
    from perfmodel.batch import aggregates, batch_from_seqs

    spec, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    tab = StepTable(spec, ParallelLayout(tp=2), hw, max_tokens=4096, max_seqs=64)
    new, ctx = np.array([1, 1, 300, 1, 57]), np.array([900, 12, 0, 4000, 200])  # 3 decodes, 2 chunks
    agg = aggregates(new, ctx)
    assert agg[:2] == (357, 2) and agg[4] == 3 and agg[5] == 901 + 13 + 4001
    want = float(step_cost(spec, ParallelLayout(tp=2), hw, batch_from_seqs(new, ctx)).total_s)
    assert tab.time_s(*agg) == pytest.approx(want, rel=1e-9)
