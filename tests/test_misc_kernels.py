"""Misc kernels per layer (perfmodel/misc_kernels.py): TensorRT-LLM's count from its source by model class, attention
TP and KV dtype; every other framework and model class keeps the generic count."""
from __future__ import annotations

import dataclasses

import pytest

from perfmodel import misc_kernels
from perfmodel.batch import make_batch
from perfmodel.cost import step_cost
from perfmodel.framework import FRAMEWORKS, framework_preset
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model

TRT = framework_preset("trtllm", "1.1.0rc2")


def count(name, tp, moe, weights="fp8", kv="bf16"):
    return misc_kernels.per_layer(TRT, load_model(name, weights=weights, kv=kv), tp, moe)


def test_model_type_comes_from_the_config():
    assert load_model("llama-3.1-70b").model_type == "llama"
    assert load_model("qwen3-235b-a22b").model_type == "qwen3_moe"
    assert load_model("kimi-k2.5").model_type == "kimi_k2"  # (its text config's: a DeepSeek-V3 decoder)


def test_llama_norms_fold_into_the_all_reduce_above_hidden_4096_only():
    # SiLU x mul alone at TP > 1 (both norms in the fused all-reduces); two norms more at TP 1
    assert count("llama-3.1-70b", 4, False, kv="fp8") == 1
    assert count("llama-3.1-70b", 1, False, kv="fp8") == 3
    # without an fp8 KV cache the XQA kernel does not apply RoPE itself: RoPE + KV append is one kernel more
    assert count("llama-3.1-70b", 4, False, kv="bf16") == 2
    # hidden 4096: TRT-LLM leaves fusion off, so TP changes nothing
    assert count("llama-3.1-8b", 8, False, weights="bf16") == count("llama-3.1-8b", 1, False, weights="bf16") == 4


def test_qwen3_dense_never_fuses_and_moe_does():
    assert count("qwen3-32b", 1, False) == count("qwen3-32b", 8, False) == 5
    assert count("qwen3-235b-a22b", 1, True) - count("qwen3-235b-a22b", 4, True) == 2


def test_deepseek_counts_mla_routing_and_shared_expert():
    moe_tp, dense_tp = count("deepseek-r1", 8, True, kv="fp8"), count("deepseek-r1", 8, False, kv="fp8")
    assert moe_tp - dense_tp == 3  # routing x 2 and the shared + routed add (a SiLU x mul in both)
    assert count("deepseek-r1", 1, True, kv="fp8") - moe_tp == 2  # attention DP: its two norms unfused
    assert moe_tp > TRT.misc_kernels_per_layer  # MLA launches more than a GQA layer's generic count


@pytest.mark.parametrize("fw", ["vllm", "sglang"])
def test_other_frameworks_keep_the_generic_count(fw):
    f = FRAMEWORKS[fw]
    assert f.misc_rule == ""
    for name in ("llama-3.1-70b", "qwen3-32b", "deepseek-r1"):
        assert misc_kernels.per_layer(f, load_model(name), 4, False) == f.misc_kernels_per_layer


def test_a_model_class_not_read_keeps_the_generic_count_on_trtllm():
    spec = load_model("minimax-m2.5")
    assert misc_kernels.per_layer(TRT, spec, 8, True) == TRT.misc_kernels_per_layer


def test_decode_step_is_shorter_by_the_kernels_trtllm_fuses():
    """The rule moves the elementwise term alone, by (generic - counted) launch floors on every layer."""
    spec = load_model("llama-3.1-70b", weights="fp8", kv="fp8")
    hw, lay = load_hardware("h200_sxm"), ParallelLayout(tp=4)
    batch = make_batch(0, 0, 0.0, 0.0, 8, 8 * 2048.0)
    generic = dataclasses.replace(TRT, misc_rule="")
    a, b = step_cost(spec, lay, hw, batch, None, TRT), step_cost(spec, lay, hw, batch, None, generic)
    saved = (generic.misc_kernels_per_layer - 1) * TRT.misc_kernel_floor_s * spec.num_layers
    assert float(b.breakdown()["elementwise"] - a.breakdown()["elementwise"]) == pytest.approx(saved, rel=1e-9)
    assert float(b.total_s - a.total_s) == pytest.approx(saved, rel=1e-9)
