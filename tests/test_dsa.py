"""DeepSeek sparse attention (GLM-5, DeepSeek-V3.2): read from the config, counted in weights and KV, costed
(issue 37, coverage). The figures are checked against numbers that do not come from the model: GLM-5's model
card (744B parameters) and a hand computation of the cached bytes."""
import dataclasses
import json

import numpy as np
import pytest
from test_differential_policies import assert_same, both, trace

from perfmodel import memory, mla, ops
from perfmodel.batch import StepBatch
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import from_config, load_model

GLM5 = "perfmodel/models/glm-5.json"


def test_glm5_is_read_with_its_sparse_attention_and_744b_parameters():
    s = load_model("zai-org/GLM-5-FP8", weights="fp8")
    assert (s.sparse_topk, s.indexer_heads, s.indexer_head_dim) == (2048, 32, 128)
    assert (s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim, s.num_heads) == (512, 192, 64, 256, 64)
    assert s.num_params / 1e9 == pytest.approx(744, rel=0.005)  # the GLM-5 model card: 744B (40B active)
    assert s.num_active_params / 1e9 == pytest.approx(40, rel=0.06)


def test_glm5_kv_per_token_by_hand():
    """Per layer: the 512 + 64 latent in the KV dtype + the indexer key, 128 fp8 bytes and one fp32 scale."""
    for kv, b in (("bf16", 2), ("fp8", 1)):
        s = load_model("glm-5", weights="fp8", kv=kv)
        want = 78 * (576 * b + 128 + 4)
        assert s.kv_bytes_per_token == want
        assert memory.kv_bytes_per_token_per_gpu(s, ParallelLayout(tp=8)) == want  # replicated over TP


def test_sparse_attention_caps_prefill_and_adds_the_indexer():
    hw = load_hardware("h200")
    s = load_model("glm-5", weights="fp8")
    dense = dataclasses.replace(s, sparse_topk=0, indexer_heads=0, indexer_head_dim=0)
    n = 16384.0  # one 16K-token prompt: most queries see more than 2,048 keys
    b = StepBatch(n, 1.0, n * (n + 1) / 2, n, 0.0, 0.0)
    t_sparse = float(mla.attention_s(s, 8, b, b.prefill_pairs, n, 0.0, hw, None, True, False))
    t_dense = float(mla.attention_s(dense, 8, b, b.prefill_pairs, n, 0.0, hw, None, True, False))
    assert t_sparse < t_dense  # capped pairs outweigh the indexer at 16K
    idx = float(mla.indexer_s(s, b.prefill_pairs, n, 1.0, hw))
    flops = 2 * 32 * 128 * b.prefill_pairs
    assert idx == pytest.approx(flops / (hw.matmul_tflops("fp8") * 1e12 * ops.ATTN_EFF) + ops.KERNEL_FLOOR_S)
    # short prompts (every query below 2,048 keys) attend densely: only the indexer is added
    m = 1024.0
    short = StepBatch(m, 1.0, m * (m + 1) / 2, m, 0.0, 0.0)
    diff = float(mla.attention_s(s, 8, short, short.prefill_pairs, m, 0.0, hw, None, True, False)
                 - mla.attention_s(dense, 8, short, short.prefill_pairs, m, 0.0, hw, None, True, False))
    assert diff == pytest.approx(float(mla.indexer_s(s, short.prefill_pairs, m, 1.0, hw)))


def test_decode_stays_affine_in_the_keys():
    """The decode closed form needs c0 + c1 x keys for a fixed batch: the indexer's cost is affine too."""
    hw = load_hardware("h200")
    s = load_model("glm-5", weights="fp8")

    def t(k):
        return float(mla.attention_s(s, 8, StepBatch(0.0, 0.0, 0.0, 0.0, 16.0, k), 0.0, 0.0, k, hw, None, False, True))
    assert t(2e5) - t(1e5) == pytest.approx(t(1e5) - t(0.0), rel=1e-9)


def test_fast_path_equals_step_by_step_on_glm5():
    rng = np.random.default_rng(1)
    a = np.sort(rng.uniform(0, 4, 10))
    w = trace(a - a[0], rng.integers(100, 5000, 10), rng.choice([1, 40, 300], 10))
    assert_same(*both(w, "tp", {"model": "glm-5", "hardware": "h200", "gpus": 8, "weights": "fp8"}))


def test_sparse_attention_without_mla_is_refused_naming_the_field():
    cfg = json.loads(open("perfmodel/models/llama-3.1-8b.json").read())
    cfg["index_topk"] = 2048
    with pytest.raises(ValueError, match="index_topk=2048 .* without MLA"):
        from_config(cfg, name="x")
    g = json.loads(open(GLM5).read())
    del g["index_head_dim"]
    with pytest.raises(ValueError, match="lacks index_head_dim"):
        from_config(g, name="g")
