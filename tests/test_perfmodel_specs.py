"""ModelSpec parsing, parameter counts against the model cards, FLOPs against the cost model's GEMMs."""
import json

import pytest

from perfmodel import cost
from perfmodel.batch import decode_batch
from perfmodel.hardware import hardware_names, load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model, preset_names

# Published total / active parameter counts (model cards; billions). Active excludes the input
# embedding lookup where the card does (GPT-OSS: "5.1B active").
CARDS = {
    "llama-3.1-8b": (8.03, None), "llama-3.1-70b": (70.6, None), "llama-3.1-405b": (405.9, None),
    "llama-2-13b": (13.0, None), "llama-2-70b": (69.0, None), "codellama-34b": (33.7, None),
    "qwen2.5-32b": (32.8, None), "qwen2.5-72b": (72.7, None), "qwen3-32b": (32.8, None),
    "qwen3-30b-a3b": (30.5, 3.3), "mixtral-8x7b": (46.7, 12.9), "gpt-oss-120b": (116.8, None),
    "llama-4-scout-17b-16e": (109.0, 17.0),
}


@pytest.mark.parametrize("name", sorted(CARDS))
def test_param_counts_match_model_cards(name):
    spec = load_model(name)
    total, active = CARDS[name]
    tol = 0.02  # cards round to 3 significant digits; Llama-4's 109B includes ~1B of vision tower
    assert spec.num_params / 1e9 == pytest.approx(total, rel=tol)
    if active:
        assert spec.num_active_params / 1e9 == pytest.approx(active, rel=0.04)


def test_gpt_oss_active_matmul_params():
    # OpenAI's card: 5.1B active parameters per token (matmuls incl. unembedding)
    assert load_model("gpt-oss-120b").matmul_params_per_token / 1e9 == pytest.approx(5.13, rel=0.01)


def test_every_preset_and_hf_id_loads():
    for n in preset_names():
        load_model(n)
    a = load_model("meta-llama/Llama-3.1-70B")
    b = load_model("META-LLAMA/LLAMA-3.3-70B-INSTRUCT")
    assert a.num_params == b.num_params


def test_config_path_and_bad_config(tmp_path):
    cfg = json.loads((load_model.__globals__["MODELS_DIR"] / "llama-3.1-8b.json").read_text())
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert load_model(str(p)).num_params == load_model("llama-3.1-8b").num_params
    del cfg["hidden_size"]
    p.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="hidden_size"):
        load_model(str(p))
    with pytest.raises(ValueError, match="unknown model"):
        load_model("no-such-model")


def test_kv_bytes_per_token():
    # Llama-3-70B: 2 (K,V) x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 B
    assert load_model("llama-3.1-70b").kv_bytes_per_token == 327_680
    assert load_model("llama-3.1-70b", kv="fp8").kv_bytes_per_token == 163_840


class _FlopsAsSeconds:
    """A profile stub whose GEMM "time" is its FLOPs, so the gemm term sums FLOPs over the model."""

    def gemm_time_s(self, m, n, k, dtype):
        return 2.0 * m * n * k

    def __getattr__(self, name):  # attention, collectives: not under test here
        return lambda *a, **k: None


@pytest.mark.parametrize("name", ["llama-3.1-70b", "mixtral-8x7b", "qwen3-30b-a3b"])
def test_cost_model_gemm_flops_equal_2x_active_params(name):
    spec = load_model(name)
    c = cost.step_cost(spec, ParallelLayout(), load_hardware("h100"), decode_batch(1, 100), prof=_FlopsAsSeconds())
    # GEMMs of one decode token: every matmul weight once (router and LM head included)
    assert float(c.terms["gemm"]) == pytest.approx(2 * spec.matmul_params_per_token, rel=0.01)
    # and the attention term of flops_per_token: 4 * q_size * context per layer
    assert spec.flops_per_token(1000) - spec.flops_per_token(0) == pytest.approx(4 * spec.q_size * 1000)


def test_hardware_presets_carry_sources():
    for n in ("h100", "h200", "a100-40gb", "a100-80gb", "a100-pcie-80gb", "a10", "l4", "h20", "b200",
              "cpu", "h100_sxm", "h200_sxm"):
        hw = load_hardware(n)
        assert hw.sources["hbm_bw_gbs"] and hw.sources["bf16_tflops"] and hw.sources["collectives"]
    # H100 / H200 SXM: the memory the driver reports (nvidia-smi 81,559 / 143,771 MiB), not the datasheet's 80 / 141 GB
    assert (load_hardware("h100").hbm_bytes, load_hardware("h200").hbm_bytes) == (81559 * 2**20, 143771 * 2**20)
    with pytest.raises(ValueError, match="unknown hardware"):
        load_hardware("tpu-v9")
    assert "cpu" in hardware_names()


class _AskedDtypes:
    """A profile stand-in that records which compute dtype each GEMM asks its tables for."""

    def __init__(self):
        self.asked = []

    def gemm_time_s(self, m, n, k, dtype):
        self.asked.append(dtype)
        return 1e-3 + 0.0 * m


def test_fp32_weights_ask_the_profile_for_fp32_gemms():
    """Regression: fp32 weights (the reference implementations on a CPU) asked for the bf16 GEMM table,
    2.3x too fast at 64 rows on the CI CPU; fp8 keeps W8A8 where the GPU has fp8, bf16 stays bf16."""
    from perfmodel import ops
    from perfmodel.hardware import load_hardware

    for weights, hw, want in (("fp32", "cpu", "fp32"), ("fp32", "h100", "fp32"), ("bf16", "cpu", "bf16"),
                              ("fp8", "h100", "fp8"), ("fp8", "a100_80gb", "bf16")):
        prof = _AskedDtypes()
        ops.gemm_time_s(64, 512, 256, weights, load_hardware(hw), prof)
        assert prof.asked == [want], (weights, hw)
