"""Hybrid linear attention (Qwen3-Next, Qwen3.5: Gated DeltaNet layers between full-attention ones), read from the
config and costed (issue 37, coverage). Checked against numbers that do not come from the model: the checkpoint's
name (397B total, 17B active) and hand computations of the cached bytes and the recurrent state."""
import dataclasses
import json

import numpy as np
import pytest
from test_differential_policies import assert_same, both, trace

from perfmodel import linear_attn, memory
from perfmodel.hardware import load_hardware
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.modelspec import from_config, load_model

CFG = "perfmodel/models/qwen3.5-397b-a17b.json"


def test_qwen35_is_read_as_a_hybrid_of_its_sizes():
    s = load_model("Qwen/Qwen3.5-397B-A17B-FP8", weights="fp8")
    assert (s.num_layers, s.num_linear_layers, s.num_kv_layers) == (60, 45, 15)
    assert (s.linear_key_heads, s.linear_value_heads, s.linear_key_dim, s.linear_value_dim) == (16, 64, 128, 128)
    assert s.attn_output_gate and (s.num_experts, s.experts_per_token, s.shared_expert_size) == (512, 10, 1024)
    assert s.num_params / 1e9 == pytest.approx(397, rel=0.005)  # Qwen3.5-397B-A17B
    assert s.num_active_params / 1e9 == pytest.approx(17, rel=0.03)


def test_only_full_attention_layers_cache_kv_by_hand():
    s = load_model("qwen3.5-397b-a17b", weights="fp8", kv="fp8")
    assert s.kv_bytes_per_token == 15 * 2 * 2 * 256 * 1  # 15 layers x K,V x 2 KV heads x 256 x fp8
    # TP8: the 2 KV heads are replicated (one a GPU)
    assert memory.kv_bytes_per_token_per_gpu(s, ParallelLayout(tp=8)) == 15 * 2 * 1 * 256 * 1
    # the recurrent state of one sequence on one of 8 GPUs: 45 layers x (64/8 heads x 128 x 128 x 4 B float32
    # + conv: (2 x 16 x 128 + 64 x 128) / 8 channels x 3 taps x 2 B)
    conv = (2 * 16 * 128 + 64 * 128) / 8 * 3 * 2
    assert linear_attn.state_bytes_per_seq(s, 8, 45) == 45 * (8 * 128 * 128 * 4 + conv)


def test_linear_decode_is_independent_of_the_context():
    """The decode closed form needs c0 + c1 x keys: a Gated DeltaNet step reads its state, whatever the context."""
    hw = load_hardware("h200")
    s = load_model("qwen3.5-397b-a17b", weights="fp8")
    t = [float(linear_attn.attention_s(s, 8, 0.0, 0.0, 16.0, hw)) for _ in range(2)]
    state = 8 * 128 * 128 * 4.0
    assert t[0] == t[1] == pytest.approx(max(16 * 2 * state / (hw.achieved_hbm_gbs * 1e9),
                                             16 * 8 * 4 * 128 * 128 / (hw.matmul_tflops("bf16") * 1e12 * 0.6))
                                         + 4e-6)


def test_fast_path_equals_step_by_step_on_qwen35():
    rng = np.random.default_rng(2)
    a = np.sort(rng.uniform(0, 4, 10))
    w = trace(a - a[0], rng.integers(100, 5000, 10), rng.choice([1, 40, 300], 10))
    assert_same(*both(w, "layout", {"model": "qwen3.5-397b-a17b", "hardware": "h200", "gpus": 8, "weights": "fp8",
                                    "layout": "tp=8,ep=8"}))


def test_refusals_name_the_field():
    s = load_model("qwen3.5-397b-a17b", weights="fp8")
    with pytest.raises(LayoutError, match="num_linear_layers=45"):
        ParallelLayout(tp=4, sp=2).validate(s, 8)
    cfg = json.loads(open(CFG).read())
    del cfg["text_config"]["linear_num_value_heads"]
    with pytest.raises(ValueError, match="lacks 'linear_num_value_heads'"):
        from_config(cfg, name="q")
    other = json.loads(open("perfmodel/models/llama-3.1-8b.json").read())
    other["layer_types"] = ["linear_attention"] * 32
    with pytest.raises(ValueError, match="linear_attention.*not modelled"):
        from_config(other, name="l")


def test_dense_models_are_unchanged_by_the_hybrid_fields():
    s = load_model("llama-3.1-8b")
    assert s.num_kv_layers == s.num_layers and s.attn_params_per_layer == s.full_attn_params_per_layer
    assert dataclasses.replace(s, attn_output_gate=True).full_attn_params_per_layer == \
        s.full_attn_params_per_layer + s.q_size * s.hidden_size


def test_the_state_dtype_flag_halves_the_state_a_decode_step_reads(tmp_path):
    """SGLang's --mamba-ssm-dtype (InferenceX's Qwen3.5 script passes bfloat16): `simulate --mamba-ssm-dtype`
    (RunSpec.ssm_dtype) replaces the config's float32 state, so decode gets cheaper; bad values are refused."""
    from simulator.run import RunSpec, run

    w = trace([0.0, 0.0, 0.0, 0.0], [512] * 4, [200] * 4)
    kw = dict(policy="layout", layout="tp=8,ep=8", model="qwen3.5-397b-a17b", hardware="h200", gpus=8, weights="fp8")
    f32, bf16 = run(w, RunSpec(**kw)), run(w, RunSpec(**kw, ssm_dtype="bfloat16"))
    assert bf16.summary["median_tpot_ms"] < f32.summary["median_tpot_ms"]
    assert run(w, RunSpec(**kw, ssm_dtype="float32")).summary["median_tpot_ms"] == f32.summary["median_tpot_ms"]
    with pytest.raises(ValueError, match="ssm_dtype='int8' not one of"):
        RunSpec(**kw, ssm_dtype="int8")
