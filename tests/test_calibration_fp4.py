"""fp4 (NVFP4 W4A4) GEMMs in the calibration: read from microbench's `nvfp4` rows (and the other aliases), fitted
into the profile's own fp4 table, answered only from it (never from an fp8 / bf16 table), validated beside the
datasheet; the roofline, caveats and the MoE section's weight-format lookup that go with it. Synthetic rows only."""
import json

import numpy as np
import pytest

from perfmodel.calibration import cli, gemm, moe_sources, moe_table
from perfmodel.calibration.calibrate import roofline_of
from perfmodel.calibration.coverage import caveats
from perfmodel.calibration.profile import from_dict, load_profile
from perfmodel.calibration.readers import read_measurements_any
from perfmodel.hardware import load_hardware
from perfmodel.measurements import append_rows
from perfmodel.notes import RELEVANT

PEAK_TFLOPS = {"bf16": 1500.0, "nvfp4": 6000.0}  # made-up achieved rates of a Blackwell-like GPU
HBM_GBS = 7000.0


def gemm_us(dtype, m, n, k):
    """5 us + max(FLOPs / rate, bytes / HBM); nvfp4 weights 9/16 byte (e2m1 + an fp8 scale per 16)."""
    wbytes = {"bf16": 2.0, "nvfp4": 9 / 16}[dtype]
    nbytes = n * k * wbytes + 2.0 * m * (k + n)
    return 5.0 + 1e6 * max(2.0 * m * n * k / (PEAK_TFLOPS[dtype] * 1e12), nbytes / (HBM_GBS * 1e9))


@pytest.fixture
def b200_csv(tmp_path):
    """A microbench-schema CSV as a B200 would write it: bf16 and nvfp4 GEMMs, and one failed nvfp4 case."""
    rows = [dict(op="gemm", dtype=dt, m=m, n=n, k=k, group_size=1, backend="cuda", device="NVIDIA B200",
                 median_us=gemm_us(dt, m, n, k))
            for dt in PEAK_TFLOPS for m in (1, 16, 256, 4096) for n in (1024, 2048, 4096, 8192, 16384)
            for k in (1024, 4096, 16384)]
    rows.append(dict(op="gemm", dtype="nvfp4", m=65536, n=65536, k=65536, device="NVIDIA B200",
                     error="OOM: CUDA out of memory"))
    path = tmp_path / "b200.csv"
    append_rows(path, rows)
    return path


def test_readers_map_every_fp4_alias(tmp_path):
    path = tmp_path / "aliases.csv"
    append_rows(path, [dict(op="gemm", dtype=dt, m=1, n=32, k=64, median_us=3.0)
                       for dt in ("nvfp4", "fp4", "float4_e2m1fn_x2", "NVFP4")])
    assert set(read_measurements_any(path).frame("gemm").dtype) == {"fp4"}


def test_fp4_never_falls_back_to_another_table():
    assert gemm.DTYPE_FALLBACK["fp4"] == ("fp4",) and gemm.WEIGHT_BYTES["fp4"] == 9 / 16
    h200 = load_profile("h200_sxm")  # bf16 and fp8 tables only
    assert h200.gemm_time_s(np.array([64.0]), 4096, 4096, "fp4") is None
    assert h200.gemm_time_s(np.array([64.0]), 4096, 4096, "fp8") is not None


def test_calibrate_and_validate_nvfp4_rows(b200_csv, tmp_path, capsys):
    out = tmp_path / "b200_own.json"
    assert cli.main(["calibrate", "--measurements", str(b200_csv), "--base", "b200", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert set(d["gemm"]) == {"bf16", "fp4"}
    assert d["roofline"]["peak_tflops"]["fp4"] == load_hardware("b200").fp4_tflops
    assert d["provenance"]["fit_error"]["gemm fp4"]["heldout_median_abs_rel_err"] < 0.05
    assert any("error" in k for k in d["provenance"]["rows_skipped"])  # the failed case, counted
    prof = from_dict(d, str(out))
    m = np.array([1.0, 16.0, 256.0, 4096.0])
    want = np.array([gemm_us("nvfp4", x, 8192, 4096) for x in m]) * 1e-6  # n = 8192 is held out
    assert np.allclose(prof.gemm_time_s(m, 8192, 4096, "fp4"), want, rtol=0.06)
    assert "gemm fp4" not in prof.caveats
    capsys.readouterr()
    assert cli.main(["validate", "--measurements", str(b200_csv), "--profile", str(out), "--format", "json"]) == 0
    rows = {(r["dtype"], r["subset"]): r for r in json.loads(capsys.readouterr().out)}
    fp4 = rows[("fp4", "all")]
    assert fp4["compared"] == "held-out" and fp4["rows"] > 0 and fp4["median_abs_rel_err"] < 0.05
    assert np.isfinite(fp4["datasheet_median_abs_rel_err"])  # perfmodel.ops costs the rows as nvfp4 weights


def test_roofline_keeps_hopper_profiles_and_normalises_fp4():
    """H100 / H200 rooflines stay as the bundled profiles have them; fp4 comes from the preset's fp4 peak,
    or 2x fp8 (a normalisation only) where fp4 rows are fitted on a preset without one."""
    h200 = load_hardware("h200_sxm")
    assert roofline_of(h200) == load_profile("h200_sxm").data["roofline"]
    assert roofline_of(load_hardware("b200"))["peak_tflops"]["fp4"] == load_hardware("b200").fp4_tflops
    r = roofline_of(h200, fp4_rows=True)
    assert r["peak_tflops"]["fp4"] == 2 * h200.fp8_tflops and "normalisation only" in r["source"]


def test_fp4_table_without_its_peak_is_refused():
    d = json.loads(json.dumps(load_profile("h200_sxm").data))
    d["gemm"]["fp4"] = d["gemm"]["fp8"]
    with pytest.raises(ValueError, match="malformed profile .*fp4"):
        from_dict(d, "bad.json")


def test_caveat_for_fp4_cores_without_fp4_rows():
    d = {"gemm": {"bf16": {}, "fp8": {}}, "roofline": {"peak_tflops": {"bf16": 2250, "fp8": 4500, "fp4": 9000}}}
    assert "gemm fp4" in caveats(d)
    d["roofline"]["peak_tflops"].pop("fp4")  # Hopper: no fp4 tensor cores, nothing to say
    assert "gemm fp4" not in caveats(d)
    assert RELEVANT["gemm fp4"](None, "nvfp4", 1) and not RELEVANT["gemm fp4"](None, "fp8", 1)


def test_moe_weight_dtype_map_and_lookup():
    """Hopper keys give the map the bundled profiles have; 4-bit keys add nvfp4 and order mxfp4's tables (W4A16
    first on every GPU, as perfmodel.ops runs mxfp4: vLLM's default); each framework takes the first it has."""
    hopper = {"bfloat16", "fp8_block", "w4a16_mxfp4", "w4a16_mxfp4_marlin", "w4a16_int4"}
    assert moe_sources.weight_dtype_map(hopper) == moe_sources.WEIGHT_DTYPE_MAP
    assert moe_sources.weight_dtype_map(hopper) == load_profile("h200_sxm").data["moe"]["weight_dtype_map"]
    fitted = {"w4a16_mxfp4", "w4a8_mxfp4_mxfp8", "nvfp4"}
    assert moe_sources.weight_dtype_map(fitted)["mxfp4"] == ["w4a16_mxfp4", "w4a8_mxfp4_mxfp8"]
    wmap = moe_sources.weight_dtype_map(fitted, fp4_cores=True)
    assert wmap["mxfp4"] == ["w4a16_mxfp4", "w4a8_mxfp4_mxfp8"] and wmap["nvfp4"] == "nvfp4"
    vllm, trtllm = {"tables": {"ep": {"id": 1}}}, {"tables": {"ep": {"id": 2}}}
    section = {"weight_dtype_map": wmap, "default_routing": "r",
               "frameworks": {"vllm": {"w4a16_mxfp4@r": vllm}, "trtllm": {"w4a8_mxfp4_mxfp8@r": trtllm}}}
    assert moe_table.lookup(section, "vllm", "mxfp4", "ep") == {"id": 1}
    assert moe_table.lookup(section, "trtllm", "mxfp4", "ep") == {"id": 2}
    assert moe_table.lookup(section, "vllm", "nvfp4", "ep") is None


def test_newest_moe_sources_keep_keys_and_filters(tmp_path):
    for fw, v in (("vllm", "0.30.0"), ("vllm", "0.9.0"), ("trtllm", "1.4.0rc1")):
        (tmp_path / fw / v).mkdir(parents=True)
        (tmp_path / fw / v / "moe_perf.parquet").write_bytes(b"")
    srcs = moe_sources.newest_sources(tmp_path)
    assert set(srcs) == {"vllm", "trtllm"} and set(srcs["vllm"]) == set(moe_sources.SOURCES["vllm"])
    assert srcs["vllm"]["w4a16_mxfp4"] == ("vllm", "0.30.0", "oaitriton")
    assert srcs["vllm"]["w4a16_mxfp4_marlin"][3:] == moe_sources.SOURCES["vllm"]["w4a16_mxfp4_marlin"][3:]
    assert srcs["trtllm"]["nvfp4"] == ("trtllm", "1.4.0rc1", None)
    assert moe_sources.newest_sources(tmp_path / "absent") == {}
