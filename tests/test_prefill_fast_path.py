"""StepTable's calibrated prefill-attention fast path (cost.scalar_prefill_attention, issue 36) gives attention_s's
number bit for bit on random prefill steps, and stands aside where attention_s does more than one table lookup
(MLA, sliding windows, linear layers, derived bandwidth)."""
from __future__ import annotations

import random

import pytest

from perfmodel.batch import StepBatch
from perfmodel.cost import attention_s, scalar_prefill_attention
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model
from simulator.run import hardware_and_profile


@pytest.mark.parametrize("hw_name", ["h100_sxm", "h200"])
@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-32b", "qwen3-30b-a3b"])
def test_fast_path_equals_attention_s(hw_name, model):
    hw, prof = hardware_and_profile(hw_name, None)
    spec = load_model(model, weights="fp8")
    rng = random.Random(1)
    for lay in (ParallelLayout(tp=1), ParallelLayout(tp=4), ParallelLayout(tp=2, pp=2)):
        f = scalar_prefill_attention(spec, lay, prof)
        assert f is not None
        for _ in range(200):
            ps = rng.randint(1, 8)
            pt, c = rng.randint(ps, 8192), rng.randint(0, 20000)
            pairs, pkv = float(pt * c + pt * (pt + 1) // 2), float(c * ps + pt)
            want = float(attention_s(spec, lay, hw, StepBatch(float(pt), float(ps), pairs, pkv, 0.0, 0.0), prof))
            assert f(pairs, pkv, float(ps)) == want


def test_fast_path_stands_aside_where_attention_is_more_than_one_lookup():
    hw, prof = hardware_and_profile("h200", None)
    lay = ParallelLayout(tp=8)
    for model in ("openai/gpt-oss-120b", "deepseek-ai/DeepSeek-R1"):  # sliding window; MLA
        assert scalar_prefill_attention(load_model(model), lay, prof) is None
    assert scalar_prefill_attention(load_model("llama-3.1-8b"), lay, None) is None  # datasheet roofline
