"""Issue 37: fp8 checkpoints with static activation scales (ModelOpt FP8) skip the compute-scale pass that the
profile's dynamic TRT-LLM fp8 GEMM rows include (perfmodel/calibration/fp8_scale.py): the kernel layer against
aiconfigurator's measured compute-scale table, which checkpoints are static, which frameworks take the saving,
and the validated rows that carry it."""
import json

import numpy as np
import pandas as pd
import pytest

from perfmodel import ops
from perfmodel.calibration import fp8_scale
from perfmodel.calibration.aiconfigurator import system_dir
from perfmodel.calibration import gemm as gm
from perfmodel.calibration.profile import PROFILE_DIR, load_profile
from perfmodel.cli import main as perfmodel_main
from perfmodel.formats import config_fp8_scales
from perfmodel.hardware import load_hardware
from perfmodel.modelspec import MODELS_DIR, load_model
from simulator.apps.cli import main
from simulator.apps.validate.harness import harness
from simulator.apps.validate.rows import case_of

TRACE = "synthetic:poisson?n=24&rate=1&input=512&output=32"
RUN = ["--trace", TRACE, "--policy", "layout", "--layout", "tp=2", "--model", "llama-3.1-70b", "--weights", "fp8",
       "--hardware", "h200_sxm", "--gpus", "2", "--format", "json"]


def _package_table(system: str):
    try:
        path = fp8_scale.table_path(system_dir(system))
    except ValueError as e:
        pytest.skip(f"aiconfigurator-core not installed: {e}")
    return pd.read_parquet(path)


@pytest.mark.parametrize("system", ["h100_sxm", "h200_sxm"])
def test_static_gemm_is_the_dynamic_row_less_the_measured_compute_scale(system):
    """At measured (m, k) nodes the saving is the package's measured compute-scale latency (median of repeats;
    within 3%: the section keeps 3 digits and drops m planes its neighbours interpolate within 3%), never below
    the fp8 roofline; bf16 GEMMs are unchanged."""
    measured = _package_table(system).groupby(["m", "k"]).latency.median() * 1e-3  # ms -> s
    hw, prof = load_hardware(system), load_profile(system)
    n = 10240
    for m, k in [(1, 8192), (16, 8192), (128, 4096), (1024, 8192), (8192, 8192)]:
        dyn = ops.gemm_time_s(m, n, k, "fp8", hw, prof)
        st = ops.gemm_time_s(m, n, k, "fp8", hw, prof, static_scales=True)
        floor = gm.roofline_s(np.float64(m), n, k, "fp8", prof.roof)
        if dyn - measured[(m, k)] > floor:
            assert dyn - st == pytest.approx(measured[(m, k)], rel=0.03), (m, k)
        assert st >= floor
        assert st < dyn
        bf16 = ops.gemm_time_s(m, n, k, "bf16", hw, prof)
        assert ops.gemm_time_s(m, n, k, "bf16", hw, prof, static_scales=True) == bf16
    # a decode-sized GEMM saves the ~7 us the dynamic kernel's amax pass costs (7.0-7.6 us measured at m <= 128)
    saved = (ops.gemm_time_s(16, 8192, 8192, "fp8", hw, prof)
             - ops.gemm_time_s(16, 8192, 8192, "fp8", hw, prof, static_scales=True))
    assert 6e-6 < saved < 9e-6


def test_bundled_sections_are_the_fit_of_the_package_tables():
    """The shipped profiles' fp8_compute_scale sections are what the importer fits from the package today."""
    for system in ("h100_sxm", "h200_sxm"):
        _package_table(system)  # (skips without the optional package)
        fitted = fp8_scale.fit(fp8_scale.table_path(system_dir(system)))
        shipped = json.loads((PROFILE_DIR / f"{system}.json").read_text())
        assert shipped["fp8_compute_scale"]["us"] == fitted["us"]
        assert (shipped["fp8_compute_scale"]["m"], shipped["fp8_compute_scale"]["k"]) == (fitted["m"], fitted["k"])


@pytest.mark.parametrize("q, want", [
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "static"),  # nvidia/*-FP8 (ModelOpt)
    ({"quant_method": "fp8", "activation_scheme": "static"}, "static"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "dynamic"),
    ({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]}, "dynamic"),
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "dynamic"),  # DeepSeek's
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "dynamic"),
    (None, "dynamic"),
])
def test_which_checkpoints_have_static_scales(q, want):
    cfg = {} if q is None else {"quantization_config": q}
    assert config_fp8_scales(cfg) == want
    assert config_fp8_scales({"text_config": cfg}) == want


def test_a_modelopt_config_loads_static_and_the_flag_overrides(tmp_path):
    base = json.loads((MODELS_DIR / "llama-3.1-8b.json").read_text())
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**base, "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}))
    assert load_model(str(p), weights="fp8").fp8_scales == "static"
    assert load_model(str(p), weights="fp8", fp8_scales="dynamic").fp8_scales == "dynamic"
    assert load_model("llama-3.1-8b", weights="fp8").fp8_scales == "dynamic"
    with pytest.raises(ValueError, match="fp8_scales='per-token' not one of"):
        load_model("llama-3.1-8b", fp8_scales="per-token")


def _tpot(capsys, *argv) -> float:
    assert main([*RUN, *argv]) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    return out["median_tpot_ms"], out["config"]["run_spec"]["fp8_scales"]


def test_only_the_framework_whose_table_it_is_takes_the_saving(capsys):
    """TRT-LLM (the table's own kernels) decodes faster with static scales; vLLM and SGLang, whose dynamic
    quantization the stand-in table does not isolate, are unchanged bit for bit; the run records the setting."""
    dyn, rec = _tpot(capsys, "--framework", "trtllm")
    st, rec_st = _tpot(capsys, "--framework", "trtllm", "--fp8-scales", "static")
    assert (rec, rec_st) == (None, "static")
    # 80 layers x 4 fp8 GEMMs a step save ~7 us each: ~2 ms a decode step at these sizes
    assert 1.0 < dyn - st < 3.5
    for fw in ("vllm", "sglang"):
        assert _tpot(capsys, "--framework", fw)[0] == _tpot(capsys, "--framework", fw, "--fp8-scales", "static")[0]


def test_inferencex_llama70b_rows_replay_the_modelopt_checkpoint(shared):
    """The InferenceX Llama-3.1-70B rows' workflows served nvidia/Llama-3.3-70B-Instruct-FP8 (ModelOpt FP8):
    their replay and its simulate command carry static scales; other rows keep the checkpoint's default."""
    rows = pd.read_csv(shared / "data" / "e2e" / "silicon_h200_sxm.csv", dtype=str, keep_default_na=False)
    trt = rows[rows.id.str.contains("llama_3_1_70b_h200_sxm_trtllm")].iloc[0]
    assert harness(case_of(0, trt.to_dict())).fp8_scales == "static"
    other = rows[rows.id.str.contains("gpt_oss_120b_h200_sxm_trtllm")].iloc[0]
    assert harness(case_of(0, other.to_dict())).fp8_scales is None


def test_estimate_takes_the_flag_and_says_so(capsys):
    """`perfmodel estimate --fp8-scales static` costs the same GEMMs as simulate and names the format in its header."""
    argv = ["estimate", "--model", "llama-3.1-70b", "--weights", "fp8", "--hardware", "h200", "--gpus", "8",
            "--strategies", "tp", "--framework", "trtllm", "--input", "1024", "--output", "256"]
    tpot = {}
    for scales in ("dynamic", "static"):
        assert perfmodel_main([*argv, "--fp8-scales", scales]) == 0
        text = capsys.readouterr().out
        assert ("static fp8 scales" in text) == (scales == "static")
        assert perfmodel_main([*argv, "--fp8-scales", scales, "--format", "json"]) == 0
        tpot[scales] = json.loads(capsys.readouterr().out)[0]["tpot_ms"]
    assert tpot["static"] < tpot["dynamic"]
