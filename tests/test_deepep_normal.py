"""Framework.moe_a2a_call_s: DeepEP normal-mode cost on each inter-node MoE dispatch / combine."""
import dataclasses

import pytest

from perfmodel.batch import decode_batch
from perfmodel.calibration.profile import load_profile
from perfmodel.cost import step_cost
from perfmodel.framework import framework_preset
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model


@pytest.fixture(scope="module")
def setup():
    return (load_model("deepseek-ai/DeepSeek-R1", weights="fp8", kv="fp8"), load_hardware("h100"),
            load_profile("h100_sxm"), framework_preset("trtllm", ""))


def _a2a_s(spec, hw, prof, fw, layout):
    return step_cost(spec, layout, hw, decode_batch(4, 1500), prof, fw).breakdown().get("all_to_all", 0.0)


def test_each_inter_node_dispatch_and_combine_pays_it(setup):
    """DEP16 spans two H100 nodes: every MoE layer's dispatch and combine gain exactly the call cost; DEP8
    inside one node and TEP16 (no all_to_all) are unchanged."""
    spec, hw, prof, fw = setup
    slow = dataclasses.replace(fw, moe_a2a_call_s=200e-6)
    dep16, dep8, tep16 = ParallelLayout(dp=16, ep=16), ParallelLayout(dp=8, ep=8), ParallelLayout(tp=16, ep=16)
    moe_layers = spec.num_moe_layers
    extra = _a2a_s(spec, hw, prof, slow, dep16) - _a2a_s(spec, hw, prof, fw, dep16)
    assert extra == pytest.approx(2 * moe_layers * 200e-6, rel=1e-9)
    assert _a2a_s(spec, hw, prof, slow, dep8) == pytest.approx(_a2a_s(spec, hw, prof, fw, dep8))
    assert step_cost(spec, tep16, hw, decode_batch(4, 1500), prof, slow).total_s == \
        pytest.approx(step_cost(spec, tep16, hw, decode_batch(4, 1500), prof, fw).total_s)
    with pytest.raises(ValueError, match="moe_a2a_call_s"):
        dataclasses.replace(fw, moe_a2a_call_s=-1e-6)
