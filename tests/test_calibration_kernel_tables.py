"""`perfmodel calibrate --measurements DIR` fitting the `moe` and `mla_decode` sections from kernel tables measured
on the node (microbench's moe / mla suites, perfmodel/calibration/kernel_tables.py, measured.py): synthetic tables
written by microbench's writer from known formulas (fused MoE = floor + ratio x perfmodel's dense formula; MLA
decode = fixed + latent bytes / bandwidth) come back out of the fitted profile within a few percent, the provenance
names the files with their sha256, the device check covers them, and without them calibrate does what it did."""
import dataclasses
import json

import numpy as np
import pytest

from microbench import writer
from perfmodel import cost
from perfmodel.calibration import kernel_tables as kt
from perfmodel.calibration import moe
from perfmodel.calibration.cli import main
from perfmodel.calibration.moe_sources import MODEL_DTYPE
from perfmodel.calibration.profile import from_dict, load_profile
from perfmodel.hardware import load_hardware
from perfmodel.measurements import append_rows
from perfmodel.modelspec import load_model

H100 = "NVIDIA H100 80GB HBM3"
HW = load_hardware("h100_sxm")
# the synthetic kernels: (floor ms, ratio to perfmodel's dense fused-MoE formula) per format; MLA decode: fixed ms
# + latent bytes at LATENT_GBS
MOE_KERNEL = {"bfloat16": (0.015, 1.6), "fp8_block": (0.022, 1.3)}
MLA_FIXED_MS, LATENT_GBS = 0.012, 2000.0
SHAPES = {"qwen3-30b-a3b": (2048, 768, 128, 8), "qwen3-235b-a22b": (4096, 1536, 128, 8)}
TOKENS = (1, 2, 4, 8, 16, 64, 256, 1024, 4096)
SPLITS = ((1, 1), (2, 1), (4, 1), (1, 2), (1, 4), (1, 8))
ROUTINGS = ("power_law_1.2", "power_law_1.01")


def _gemm_csv(path):
    """A GEMM grid in microbench's schema (bf16 and fp8): 70% of the H100 datasheet's compute, 80% of its HBM."""
    rows = []
    for dtype, tflops, elem in (("bf16", 989.0, 2), ("fp8", 1979.0, 1)):
        for m in (1, 8, 64, 512, 4096, 16384):
            for n in (256, 1024, 4096, 16384):
                for k in (256, 1024, 4096, 16384):
                    t = max(2 * m * n * k / (0.7 * tflops * 1e12), (m * k + n * k) * elem / (0.8 * 3350e9))
                    rows.append(dict(op="gemm", dtype=dtype, m=m, n=n, k=k, device=H100,
                                     median_us=f"{t * 1e6 + 4:.4f}"))
    append_rows(path, rows)


def _moe_rows(out, prof):
    """moe_perf rows of the synthetic kernel: latency = floor + ratio x perfmodel's formula (the profile's GEMMs)."""
    for name, (h, i, e, k) in SHAPES.items():
        for dt, (floor, ratio) in MOE_KERNEL.items():
            for tp, ep in SPLITS:
                f, _ = moe.formula_s(h, i, e, k, MODEL_DTYPE[dt], tp, ep, np.asarray(TOKENS, dtype=float), HW, prof)
                for r in ROUTINGS:
                    for n, t in zip(TOKENS, f):
                        writer.write_table_row(out, kt.MOE, dict(
                            framework="vllm", version="0.99.0", device=H100, op_name="moe", kernel_source="fake",
                            moe_dtype=dt, num_tokens=n, hidden_size=h, inter_size=i, topk=k, num_experts=e,
                            moe_tp_size=tp, moe_ep_size=ep, distribution=r, latency=floor + ratio * t * 1e3))
    writer.write_table_row(out, kt.MOE, dict(framework="vllm", version="0.99.0", device=H100, moe_dtype="bfloat16",
                                             num_tokens=1, error="OOM: out of memory"))  # skipped, counted


def _mla_ms(batch, kv_len):
    return MLA_FIXED_MS + batch * kv_len * 576 * 2 / (LATENT_GBS * 1e9) * 1e3


def _mla_rows(out):
    for h in (16, 32, 64, 128):
        for b in (1, 4, 16, 64, 256):
            for kv in (256, 1024, 4096, 16384):
                writer.write_table_row(out, kt.MLA, dict(
                    framework="flash_mla", version="1.0.0", device=H100, op_name="mla_generation", kernel_source="fake",
                    mla_dtype="bfloat16", kv_cache_dtype="bfloat16", num_heads=h, batch_size=b, isl=1,
                    tp_size=128 // h, step=kv - 1, latency=_mla_ms(b, kv)))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A measurement folder of the node without kernel tables, its profile, then the same folder with them and
    the profile fitted again: (folder, profile dict without tables, profile dict with them)."""
    d = tmp_path_factory.mktemp("node")
    _gemm_csv(d / "node.csv")
    assert main(["calibrate", "--measurements", str(d), "--base", "h100_sxm", "--out", str(d / "before.json")]) == 0
    before = json.loads((d / "before.json").read_text())
    prof = from_dict({k: v for k, v in before.items() if k != "moe"})  # the formula's own GEMM tables
    _moe_rows(d / "node.csv", prof)
    _mla_rows(d / "node.csv")
    assert main(["calibrate", "--measurements", str(d), "--base", "h100_sxm", "--out", str(d / "after.json")]) == 0
    return d, before, json.loads((d / "after.json").read_text())


def test_without_tables_calibrate_is_unchanged(node):
    _, before, after = node
    extra = before["provenance"]["extra_sections"]
    assert extra["moe"].startswith("copied unchanged") and extra["mla_decode"].startswith("copied unchanged")
    assert [s["file"] for s in before["provenance"]["sources"]] == ["node.csv"]
    for key in ("gemm", "roofline"):  # the kernel tables move nothing else
        assert before[key] == after[key]


def test_provenance_names_the_files(node):
    d, _, after = node
    prov = after["provenance"]
    srcs = {s["file"]: s for s in prov["sources"]}
    moe_file, mla_file = "moe_perf_vllm_0.99.0.csv", "generation_mla_perf_flash-mla_1.0.0.csv"
    assert set(srcs) == {"node.csv", moe_file, mla_file}
    assert srcs[moe_file]["format"] == "microbench moe_perf" and len(srcs[moe_file]["sha256"]) == 64
    assert srcs[moe_file]["rows_used"] == len(SHAPES) * len(MOE_KERNEL) * len(SPLITS) * len(ROUTINGS) * len(TOKENS)
    assert srcs[mla_file]["devices"] == [H100] and prov["device_check"]["devices"] == {H100: "h100_sxm"}
    assert prov["extra_sections"]["moe"] == f"fitted on microbench kernel tables {moe_file} (vllm 0.99.0)"
    assert prov["extra_sections"]["mla_decode"] == f"fitted on microbench kernel tables {mla_file} (flash_mla 1.0.0)"
    assert prov["rows_skipped"] == {f"{moe_file}: rows with an error or no time (microbench marks failed cases)": 1}
    assert moe_file in after["moe"]["source"]["data"] and mla_file in after["mla_decode"]["source"]["data"]
    assert after["moe"]["frameworks"]["vllm"]["bfloat16@power_law_1.2"]["file"] == moe_file
    assert set(after["mla_decode"]["tables"]) == {"bf16"}  # the KV dtypes measured


def test_moe_factor_reproduces_the_kernel(node):
    d, before, _ = node
    prof = load_profile(d / "after.json")
    base = from_dict({k: v for k, v in before.items() if k != "moe"})
    for name, (h, i, e, k) in SHAPES.items():
        for dt, (floor, ratio) in MOE_KERNEL.items():
            wd = MODEL_DTYPE[dt]
            for tp, ep in SPLITS:
                mode, split = ("ep", ep) if ep > 1 else ("tp", tp)
                f, m_e = moe.formula_s(h, i, e, k, wd, tp, ep, np.asarray(TOKENS, dtype=float), HW, base)
                assert prof.moe_factor("vllm", wd, mode, split, m_e) == pytest.approx(ratio, rel=2e-3)
                assert prof.moe_floor_s("vllm", wd, mode) * 1e3 == pytest.approx(floor, rel=2e-3)
                # what perfmodel.cost charges a model of this shape (its own routing skew and shape table included)
                one = dataclasses.replace(load_model(name), num_layers=1, num_moe_layers=1, weight_dtype=wd)
                t = cost.routed_experts_s(one, moe.layout_of(tp, ep), HW, np.asarray(TOKENS, dtype=float), prof)
                assert np.allclose(t, floor * 1e-3 + ratio * f, rtol=0.03), (name, dt, tp, ep)


def test_mla_decode_time_reproduces_the_kernel(node):
    d, _, _ = node
    prof = load_profile(d / "after.json")
    for h in (16, 128):
        for b in (1, 16, 256):
            kv = np.array([512.0, 2048.0, 8192.0])  # between the measured lengths
            t = prof.mla_decode_time_s(np.full(3, float(b)), b * kv, h, "bf16")
            assert np.allclose(t * 1e3, _mla_ms(b, kv), rtol=0.03), (h, b)
    assert prof.mla_decode_time_s(1.0, 1024.0, 16, "fp8") is None  # not measured: perfmodel.mla's roofline


def test_named_files_and_device_check(node, tmp_path, capsys):
    d, _, _ = node
    out = tmp_path / "p.json"
    # the tables named next to the measurement file: the same fit
    assert main(["calibrate", "--measurements", str(d / "node.csv"), str(d / "moe_perf_vllm_0.99.0.csv"),
                 "--base", "h100_sxm", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["moe"] == json.loads((d / "after.json").read_text())["moe"]
    assert main(["calibrate", "--measurements", str(d / "moe_perf_vllm_0.99.0.csv"), "--base", "h100_sxm",
                 "--out", str(out)]) == 2
    assert "names kernel tables only" in capsys.readouterr().err
    other = tmp_path / "h200"
    other.mkdir()
    (other / "node.csv").write_text((d / "node.csv").read_text())
    text = (d / "moe_perf_vllm_0.99.0.csv").read_text().replace(H100, "NVIDIA H200")
    (other / "moe_perf_vllm_0.99.0.csv").write_text(text)
    assert main(["calibrate", "--measurements", str(other), "--base", "h100_sxm", "--out", str(out)]) == 2
    assert "moe_perf_vllm_0.99.0.csv was measured on 'NVIDIA H200'" in capsys.readouterr().err
