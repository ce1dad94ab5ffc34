"""Regression (2026-11-26): with no --weights, a quantised checkpoint was modelled in the hardware's default
format: gpt-oss-120b (mxfp4 experts) as fp8 on an H100, i.e. ~1.9x its weight bytes and a third of its KV
capacity, and DeepSeek-V3 (fp8) as bf16 on an A100, which no engine does. The default is now the format
the checkpoint's quantization_config declares (perfmodel.modelspec.default_weights), else fp8 where the
hardware has fp8, else bf16; `--weights mxfp4` and `--weights int4` can be asked for."""
import json

import pytest

from perfmodel.cli import main as perfmodel_main
from perfmodel.modelspec import checkpoint_weights, default_weights
from simulator.apps.cli import main as simulate_main
from simulator.apps.sweep.grid import default_weights as grid_default_weights


@pytest.mark.parametrize("model, has_fp8, want", [
    ("gpt-oss-120b", True, "mxfp4"), ("gpt-oss-120b", False, "mxfp4"),
    ("deepseek-v3", False, "fp8"), ("minimax-m2.5", False, "fp8"),
    ("llama-3.1-8b", True, "fp8"), ("llama-3.1-8b", False, "bf16"),
    ("kimi-k2.5", True, "int4"), ("kimi-k2.5", False, "int4"),  # compressed-tensors int4, experts only
])
def test_default_is_the_checkpoint_format(model, has_fp8, want):
    assert default_weights(model, has_fp8) == want


def test_unreadable_config_leaves_the_error_to_load_model(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert checkpoint_weights(str(bad)) is None
    assert checkpoint_weights(str(tmp_path / "missing.json")) is None
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"quantization_config": "fp8"}))
    assert checkpoint_weights(str(odd)) is None


def _estimate(capsys, *extra) -> dict:
    rc = perfmodel_main(["estimate", "--model", "gpt-oss-120b", "--hardware", "h100_sxm", "--gpus", "2",
                         "--strategies", "tp", "--format", "json", *extra])
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)[0]


def test_perfmodel_estimate_uses_the_mxfp4_checkpoint(capsys):
    default, mx, fp8 = _estimate(capsys), _estimate(capsys, "--weights", "mxfp4"), _estimate(capsys, "--weights", "fp8")
    assert default["weights"] == "mxfp4"
    assert default["kv_capacity_tokens"] == mx["kv_capacity_tokens"]
    # 4.25 bits per expert weight against 8: far more room for KV on two 80 GB GPUs
    assert default["kv_capacity_tokens"] > 2 * fp8["kv_capacity_tokens"]


def test_simulate_and_sweep_default_alike(capsys):
    rc = simulate_main(["--model", "gpt-oss-120b", "--hardware", "h100", "--gpus", "2", "--policy", "tp",
                        "--profile", "none", "--trace", "synthetic:poisson?n=5&rate=2&input=128&output=8",
                        "--format", "json"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert json.loads(cap.out)["weights"] == "mxfp4"
    assert grid_default_weights("gpt-oss-120b", "h100") == "mxfp4"
    assert grid_default_weights("llama-3.1-8b", "a100_80gb") == "bf16"


def test_mxfp4_quantises_the_routed_experts_only():
    """Regression (2026-11-26): under mxfp4 every linear layer was costed and stored at 4.25 bits, while
    gpt-oss keeps attention, router, embedding and LM head in bf16 (its quantization_config
    `modules_to_not_convert`; vLLM's Mxfp4Config quantises FusedMoE layers only). The checkpoint the model
    card publishes is 60.8 GiB for 116.8B parameters (gpt-oss model card, arXiv 2508.10925): now within 1%
    (it was 59.4 GiB, 2.3% short)."""
    from perfmodel.modelspec import load_model
    s = load_model("gpt-oss-120b", weights="mxfp4")
    assert s.dense_weight_dtype == "bf16" and load_model("gpt-oss-120b", weights="fp8").dense_weight_dtype == "fp8"
    assert abs(s.num_params / 116.8e9 - 1) < 0.01
    assert abs(s.weight_bytes / 2**30 / 60.8 - 1) < 0.01


def test_mxfp4_attention_reads_bf16_weights():
    """A decode step's attention projections read bf16 weights under mxfp4: the same time as a bf16 model's
    (the experts differ), more than an fp8 model's."""
    import numpy as np

    from perfmodel import cost
    from perfmodel.hardware import load_hardware
    from perfmodel.layout import ParallelLayout
    from perfmodel.modelspec import load_model
    hw, lay, n = load_hardware("h100_sxm"), ParallelLayout(tp=2), np.array([4.0])
    attn = {}
    for w in ("mxfp4", "bf16", "fp8"):
        spec = load_model("gpt-oss-120b", weights=w)
        # the layer's GEMMs without its routed experts: a dense-FFN-free layer (the MoE term set aside)
        full = cost._layer_gemm_ew_s(spec, lay, hw, n, True, None, cost.DEFAULT_FRAMEWORK)[0]
        attn[w] = float((full - cost._expert_gemm_s(spec, lay, hw, n, None))[0])
    assert attn["mxfp4"] == pytest.approx(attn["bf16"], rel=1e-9)
    assert attn["mxfp4"] > 1.1 * attn["fp8"]  # (it was below the fp8 one: 4.25-bit attention weights)


def test_int4_is_kimi_experts_only_and_has_its_own_kernel_table(tmp_path):
    """Kimi-K2.5 ships int4 experts (compressed-tensors, 4-bit ints in groups of 32) with attention, shared
    experts, dense MLPs and LM head left out: 4.5 bits per expert weight, bf16 elsewhere, and vLLM's Marlin
    int4 MoE table (aiconfigurator vLLM 0.24.0 `int4_wo`). A compressed-tensors config that quantises
    attention too is not taken for it."""
    from perfmodel.calibration.profile import resolve_profile
    from perfmodel.hardware import load_hardware
    from perfmodel.modelspec import load_model, resolve_model_path
    s = load_model("kimi-k2.5", weights="int4")
    assert s.dense_weight_dtype == "bf16" and s.weight_bytes_per_param == 4.5 / 8
    fp8 = load_model("kimi-k2.5", weights="fp8")
    assert 0.5 < s.weight_bytes / fp8.weight_bytes < 0.65
    prof = resolve_profile(load_hardware("h100_sxm"), None)
    import numpy as np
    n = np.array([1.0, 64.0])
    assert prof.moe_factor("vllm", "int4", "ep", 8, n) is not None
    assert not np.allclose(prof.moe_factor("vllm", "int4", "ep", 8, n), prof.moe_factor("vllm", "mxfp4", "ep", 8, n))
    cfg = json.loads(resolve_model_path("kimi-k2.5").read_text())
    cfg["text_config"]["quantization_config"]["ignore"] = ["lm_head"]
    every = tmp_path / "config.json"
    every.write_text(json.dumps(cfg))
    assert checkpoint_weights(str(every)) is None
