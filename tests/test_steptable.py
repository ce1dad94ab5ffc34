"""The simulator's StepTable equals step_cost (the one cost model) on random batches."""
import numpy as np
import pytest

from perfmodel.batch import make_batch
from perfmodel.cost import routed_experts_s, step_cost
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from perfmodel.steptable import StepTable, decode_stretch_s, steps_within


@pytest.mark.parametrize("model, layout", [
    ("llama-3.3-70b", ParallelLayout(tp=8)), ("llama-3.3-70b", ParallelLayout(sp=8)),
    ("llama-3.1-70b", ParallelLayout(tp=2, pp=4)), ("mixtral-8x7b", ParallelLayout(tp=2, ep=2)),
    ("gpt-oss-120b", ParallelLayout(tp=4, sp=2)), ("qwen3-235b-a22b", ParallelLayout(dp=2, tp=4, ep=8)),
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


PROFILED = [  # (hardware, model, weights, layout): calibrated (both fitted on their own GPU's tables) and datasheet
    ("h200", "llama-3.3-70b", "fp8", ParallelLayout(tp=8)),
    ("h200", "llama-3.3-70b", "fp8", ParallelLayout(tp=2, pp=4)),
    ("h100", "llama-3.1-8b", "bf16", ParallelLayout(tp=1)),
    ("h200", "llama-3.1-8b", "fp8", ParallelLayout(sp=2)),
    ("h100", "mixtral-8x7b", "bf16", ParallelLayout(tp=2, ep=2)),
    ("h200", "gpt-oss-120b", "bf16", ParallelLayout(tp=4, sp=2)),
]


@pytest.mark.parametrize("calibrated", [True, False], ids=["calibrated", "datasheet"])
@pytest.mark.parametrize("hw_name, model, weights, layout", PROFILED)
def test_table_matches_step_cost_with_profile(hw_name, model, weights, layout, calibrated):
    """Random steps (prefill chunks after cached context, beside decodes) under the hardware's
    calibrated profile and the datasheet: the table differs from step_cost only in summation order
    (and pp's micro-batch shares, pairs * m / pt vs pairs * (m / pt)), so 1e-12 relative."""
    from perfmodel.calibration.profile import default_profile

    spec, hw = load_model(model, weights=weights), load_hardware(hw_name)
    prof = default_profile(hw) if calibrated else None
    assert (prof is not None) == calibrated
    tab = StepTable(spec, layout, hw, prof, max_tokens=9216, max_seqs=256)
    rng = np.random.default_rng(13)
    steps = []
    for _ in range(300):
        dn = int(rng.integers(0, 200)) * int(rng.random() < 0.8)
        pt = int(rng.integers(1, 8192)) * int(rng.random() < 0.7)
        ps = int(rng.integers(1, 4)) if pt else 0
        c = float(rng.integers(0, 20000)) * int(rng.random() < 0.5)
        pairs, pkv = (pt * (c + (pt + 1) / 2), c + pt) if pt else (0.0, 0.0)
        dn = dn or int(pt == 0)  # no empty steps: time_s calls them 0 s, step_cost charges EP's all-to-all
        steps.append((pt, ps, pairs, pkv, dn, float(dn * rng.integers(256, 8000))))
    want = step_cost(spec, layout, hw, make_batch(*np.array(steps).T), prof).total_s
    got = [tab.time_s(*s) for s in steps]
    assert got == [tab.time_s(*s) for s in steps]  # the prefill cache returns what it stored
    assert np.allclose(got, want, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("hw_name, model, weights, layout", PROFILED)
def test_one_step_attention_equals_vectorised_bit_for_bit(hw_name, model, weights, layout):
    """StepTable evaluates prefill attention one step at a time on plain floats (the scalar paths of
    calibration.grid/attention and ops); every bit equals the vectorised evaluation of step_cost."""
    from perfmodel.batch import StepBatch
    from perfmodel.calibration.profile import default_profile
    from perfmodel.cost import attention_s

    spec, hw = load_model(model, weights=weights), load_hardware(hw_name)
    rng = np.random.default_rng(29)
    n = 400
    pt, ps, c = rng.integers(1, 9000, n), rng.integers(1, 5, n), rng.integers(0, 30000, n) * (rng.random(n) < 0.5)
    pairs = pt * (c + (pt + 1) / 2) * rng.choice([1.0, 0.37], n)
    pkv = (c + pt) * 1.0
    for prof in (default_profile(hw), None):
        vec = attention_s(spec, layout, hw, make_batch(pt, ps, pairs, pkv), prof)
        one = np.array([float(attention_s(spec, layout, hw, StepBatch(*map(float, s), 0.0, 0.0), prof))
                        for s in zip(pt, ps, pairs, pkv)])
        assert vec.tobytes() == one.tobytes()


def test_scalar_grid_equals_interp_bit_for_bit():
    """calibration.grid: the prepared one-point interpolator, the unprepared one and the array path
    agree bit for bit, clamped coordinates and one-node axes included."""
    from perfmodel.calibration import grid

    rng = np.random.default_rng(3)
    for shape in [(9, 16, 8), (1, 5, 3), (4,), (2, 1)]:
        axes = tuple(np.sort(rng.choice(np.arange(-40, 40) * 0.5, size=n, replace=False)) for n in shape)
        vals = rng.normal(size=shape)
        prepared = grid.ScalarGrid(axes, vals)
        pts = [tuple(rng.uniform(-25, 25, len(shape))) for _ in range(200)]  # some beyond the axes: clamped
        pts += [tuple(a[int(rng.integers(len(a)))] for a in axes) for _ in range(50)]  # on nodes
        one = np.array([prepared(p) for p in pts])
        assert one.tobytes() == np.array([float(grid.interp(axes, vals, p)) for p in pts]).tobytes()
        if len(shape) > 1:  # (one axis: the array path is np.interp, another formula)
            vec = grid.interp(axes, vals, tuple(np.array(c) for c in zip(*pts)))
            assert one.tobytes() == np.asarray(vec, dtype=float).tobytes()


def test_routed_experts_of_attention_dp_ranks_follow_the_groups_load():
    """Attention DP + EP (`dp=2,tp=4,ep=8`): a rank's routed experts serve the EP group's tokens, so a step
    costed at the group's mean load differs from the equal-load one by the routed-expert term alone;
    EP inside one instance (`tp=8,ep=8`, every token replicated) and dense models ignore the load."""
    spec, hw = load_model("qwen3-235b-a22b", weights="fp8"), load_hardware("h200")
    lay = ParallelLayout(dp=2, tp=4, ep=8)
    tab = StepTable(spec, lay, hw, max_tokens=2048, max_seqs=256)
    assert tab.dispatch
    own, dkv = 64, 64 * 3000.0
    full = tab.time_s(dn=own, dkv=dkv)
    assert tab.time_s(dn=own, dkv=dkv, rank_tokens=own) == full  # the default is the rank's own load
    half = tab.time_s(dn=own, dkv=dkv, rank_tokens=own / 2)  # the other rank idle
    routed = lambda n: float(routed_experts_s(spec, lay, hw, n))  # noqa: E731
    assert 0 < routed(own / 2) < routed(own)
    assert half == pytest.approx(full - routed(own) + routed(own / 2), rel=1e-12)
    assert tab.time_s(dn=own, dkv=dkv, rank_tokens=2 * own) > full  # a busier group costs more
    # the closed form's step_cost says the same through load_share (perfmodel estimate's lone request: 1 / dp)
    b = make_batch(decode_seqs=own, decode_kv_tokens=dkv)
    assert float(step_cost(spec, lay, hw, b, load_share=0.5).total_s) == pytest.approx(half, rel=1e-9)
    assert float(step_cost(spec, lay, hw, b, load_share=1.0).total_s) == pytest.approx(full, rel=1e-9)
    for other in (ParallelLayout(tp=8, ep=8), ParallelLayout(tp=8)):
        t = StepTable(spec, other, hw, max_tokens=2048, max_seqs=256)
        assert not t.dispatch and t.time_s(dn=own, dkv=dkv, rank_tokens=1) == t.time_s(dn=own, dkv=dkv)
