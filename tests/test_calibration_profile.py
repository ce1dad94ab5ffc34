"""The shipped profiles (perfmodel/profiles/*.json): loaded by default for h100_sxm / h200_sxm, small,
fast to evaluate, explained term by term; the H200 one fitted on H200's own tables, and the H100 -> H200
transfer (`calibrate --derive-from`, for a GPU without measurements) does what its provenance says."""
import json

import numpy as np
import pytest

from perfmodel import ops
from perfmodel.batch import decode_batch, make_batch, prefill_batch
from perfmodel.calibration.profile import PROFILE_DIR, default_profile, load_profile
from perfmodel.cost import TERMS, step_cost
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model


def test_default_profiles_for_hopper_only():
    h100, h200 = default_profile(load_hardware("h100")), default_profile(load_hardware("h200"))
    assert h100.name == "h100_sxm" and h200.name == "h200_sxm" and not h200.base and not h100.base
    assert default_profile(load_hardware("a100-80gb")) is None and default_profile(load_hardware("cpu")) is None
    assert load_profile("h100_sxm") is load_profile(PROFILE_DIR / "h100_sxm.json")  # parsed once, cached


@pytest.mark.parametrize("name", ["h100_sxm", "h200_sxm"])
def test_shipped_files_small_numbers_and_provenance(name):
    path = PROFILE_DIR / f"{name}.json"
    assert path.stat().st_size < 280_000  # repo-size guard (200 kB until the Marlin MoE family, 210 kB until two routing skews, 220 kB until the MoE floors and own-shape tables, 250 kB until the int4 Marlin table, 260 kB until the glm-5 shape)
    d = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{name}: non-finite number {c}"))
    prov = d["provenance"]
    assert "derived_from" not in d  # both fitted on their own GPU's measured tables
    assert {s["file"] for s in prov["sources"]} >= {"gemm_trtllm_1.3.0rc20.csv", "nccl.csv", "custom_allreduce.csv",
                                                     "context_attention_trtllm_1.3.0rc20.csv",
                                                     "generation_attention_trtllm_1.3.0rc20.csv"}
    assert {s["dir"] for s in prov["sources"]} == {f"../shared/data/calibration/{name}"}
    assert all(len(s["sha256"]) == 64 and s["rows_used"] > 0 for s in prov["sources"])
    assert prov["split"]["fit_on"] == "fit" and "created_utc" in prov
    for op in ("gemm bf16", "gemm fp8", "attention_prefill", "attention_decode", "all_reduce", "all_gather",
               "reduce_scatter", "all_to_all", "custom_all_reduce"):
        assert prov["fit_error"][op]["heldout_rows"] > 0, op
    if name == "h200_sxm":  # its moe and mla_decode sections: fitted on aiconfigurator-core's H200 tables
        assert prov["aiconfigurator"]["version"] == "0.12.0" and prov["aiconfigurator"]["system"] == "h200_sxm"
        assert all(prov["extra_sections"][k].startswith("fitted on aiconfigurator-core 0.12.0: ")
                   for k in ("moe", "mla_decode"))
        assert "--from-aiconfigurator h200_sxm" in prov["command"]


def test_decode_tables_never_fall_with_more_keys():
    for tables in load_profile("h100_sxm").data["attention_decode"].values():
        assert np.min(tables["fixed_us"]) >= 0 and 0 < np.min(tables["kv_gbs"]) <= 3350


def test_every_cost_term_is_explained():
    for name in ("h100_sxm", "h200_sxm"):
        prof = load_profile(name)
        for term in TERMS:
            text = prof.describe(term)
            assert isinstance(text, str) and text
        assert f"{name}.json" in prof.describe("gemm") and "interpolation" in prof.describe("all_reduce")
        assert "datasheet" in prof.describe("send_recv") and "datasheet" in prof.describe("elementwise")


def test_h200_transfer_scales_only_the_hbm_share(derived_h200):
    h100, h200 = load_profile("h100_sxm"), derived_h200
    assert h200.base == "h100_sxm"
    ratio = 3350 / 4800
    # decode with long contexts is KV-bandwidth bound: scales by ~the bandwidth ratio
    kv = 64 * 32768
    r = float(h200.attn_decode_time_s(64, kv, 8, 1, 128) / h100.attn_decode_time_s(64, kv, 8, 1, 128))
    assert ratio - 0.02 < r < ratio + 0.1
    # an 8192^3 GEMM is compute bound: (almost) unchanged; an m=1 GEMM reads weights: faster
    assert float(h200.gemm_time_s(8192, 8192, 8192, "bf16") / h100.gemm_time_s(8192, 8192, 8192, "bf16")) > 0.97
    assert float(h200.gemm_time_s(1, 8192, 8192, "bf16") / h100.gemm_time_s(1, 8192, 8192, "bf16")) < 0.85
    # collectives ride the same NVLink: identical
    assert float(h200.collective_time_s("all_reduce", 1e6, 8)) == float(h100.collective_time_s("all_reduce", 1e6, 8))


def test_sanity_points_of_the_calibration_readme():
    """README sanity points (H100): bf16 8192^3 ~783 TFLOP/s; small-message floors of NCCL and custom AR."""
    p = load_profile("h100_sxm")
    tflops = 2 * 8192**3 / float(p.gemm_time_s(8192, 8192, 8192, "bf16")) / 1e12
    assert tflops == pytest.approx(783, rel=0.05)
    assert float(p.collective_time_s("all_reduce", 1024, 8)) * 1e6 == pytest.approx(15.6, rel=0.1)
    assert 3e-6 < float(p.collective_time_s("custom_all_reduce", 2048, 8)) < 6e-6


def test_step_cost_with_profile_is_finite_and_vectorised():
    """100k steps in one call give finite, positive costs (the speed: benchmarks/perfmodel_speed.py)."""
    spec = load_model("llama-3.3-70b", weights="fp8")
    hw = load_hardware("h200")
    prof = default_profile(hw)
    rng = np.random.default_rng(0)
    n = 100_000
    dec, pre, ctx = rng.integers(0, 256, n), rng.integers(0, 8192, n) * (rng.random(n) < 0.3), rng.integers(1, 8192, n)
    batch = make_batch(prefill_tokens=pre, prefill_seqs=(pre > 0) * 1, prefill_pairs=pre * (pre + 1) / 2,
                       prefill_kv_tokens=pre, decode_seqs=dec, decode_kv_tokens=dec * ctx)
    for lay in (ParallelLayout(tp=8), ParallelLayout(sp=8), ParallelLayout(tp=2, pp=4)):
        step_cost(spec, lay, hw, make_batch(decode_seqs=[1, 2], decode_kv_tokens=[5, 9]), prof)
        total = step_cost(spec, lay, hw, batch, prof).total_s
        assert total.shape == (n,) and np.all(np.isfinite(total)) and np.all(total[batch.tokens > 0] > 0)
        # vectorised = row by row: a sample of the 100k steps costed one at a time gives the same numbers
        for i in rng.choice(n, 5, replace=False):
            one = make_batch(prefill_tokens=[pre[i]], prefill_seqs=[int(pre[i] > 0)], prefill_pairs=[pre[i] * (pre[i] + 1) / 2],
                             prefill_kv_tokens=[pre[i]], decode_seqs=[dec[i]], decode_kv_tokens=[dec[i] * ctx[i]])
            assert float(step_cost(spec, lay, hw, one, prof).total_s[0]) == pytest.approx(float(total[i]), rel=1e-9)
    for b in (prefill_batch(4096), decode_batch(8, 4000)):
        cal = step_cost(spec, ParallelLayout(tp=8), hw, b, prof).total_s
        ds = step_cost(spec, ParallelLayout(tp=8), hw, b, None).total_s
        assert 0.5 < float(cal / ds) < 2.5  # same order as the datasheet: calibration refines, never rescales


def test_ops_use_the_profile_and_fall_back_where_it_is_silent():
    hw = load_hardware("h100")
    prof = default_profile(hw)
    s = np.array([1e3, 1e6, 1e8])
    assert np.allclose(ops.collective_time_s("all_gather", s, 8, hw, prof), prof.collective_time_s("all_gather", s, 8))
    # send_recv and 16-rank groups are not measured: datasheet alpha-beta
    assert np.allclose(ops.collective_time_s("send_recv", s, 2, hw, prof), ops.collective_time_s("send_recv", s, 2, hw))
    assert np.allclose(ops.collective_time_s("all_gather", s, 16, hw, prof), ops.collective_time_s("all_gather", s, 16, hw))
    assert np.allclose(ops.copy_time_s("h2d", s, hw, prof), ops.copy_time_s("h2d", s, hw))
    m = np.array([0.0, 1.0, 300.0])
    t = ops.gemm_time_s(m, 4096, 4096, "fp8", hw, prof)
    assert t[0] == 0 and np.allclose(t[1:], prof.gemm_time_s(m[1:], 4096, 4096, "fp8"))


def test_profile_methods_vectorised():
    """Each profile method takes 100k-element arrays and answers element by element (the speed of these
    calls: benchmarks/perfmodel_speed.py)."""
    prof = load_profile("h200_sxm")
    rng = np.random.default_rng(1)
    n = 100_000
    m, seqs, kv = rng.uniform(1, 16384, n), rng.integers(1, 512, n).astype(float), rng.uniform(1, 1e6, n)
    nn = rng.choice([1024.0, 7168.0], n)
    calls = [lambda m, nn, seqs, kv: prof.gemm_time_s(m, 8192, 1280, "fp8"),
             lambda m, nn, seqs, kv: prof.gemm_time_s(m, nn, 8192, "bf16"),
             lambda m, nn, seqs, kv: prof.attn_prefill_time_s(m * (m + 1) / 2, m, np.ones_like(m), 8, 1, 128),
             lambda m, nn, seqs, kv: prof.attn_decode_time_s(seqs, seqs * kv / 100, 8, 1, 128),
             lambda m, nn, seqs, kv: prof.collective_time_s("all_reduce", m * 16384, 8)]
    for f in calls:
        t = np.asarray(f(m, nn, seqs, kv), dtype=float)
        assert t.shape == (n,) and np.all(np.isfinite(t)) and np.all(t > 0)
        for i in (0, 17, n - 1):
            one = float(np.asarray(f(m[i:i + 1], nn[i:i + 1], seqs[i:i + 1], kv[i:i + 1]), dtype=float).ravel()[0])
            assert one == pytest.approx(t[i], rel=1e-9)
