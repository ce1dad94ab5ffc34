"""EP inside one TP group (tp=4,ep=4: vLLM --enable-expert-parallel without DP, TRT-LLM
moe_expert_parallel_size) moves no tokens: one all_reduce of the MoE output over EP. EP across
DP ranks (dp=4,ep=4) dispatches with all_to_all. Regression: every EP layout was costed with the
dispatch/combine all_to_alls, Qwen3-235B TP4/EP4 decode TPOT +34% against the TRT-LLM H100 rows."""
from perfmodel.comm import ep_replicated, layer_calls
from perfmodel.cost import step_cost
from perfmodel.batch import decode_batch
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model


def test_which_layouts_replicate_tokens():
    assert ep_replicated(ParallelLayout(tp=4, ep=4)) and ep_replicated(ParallelLayout(tp=4, ep=2))
    assert not ep_replicated(ParallelLayout(dp=4, ep=4)) and not ep_replicated(ParallelLayout(tp=2, dp=2, ep=4))
    assert not ep_replicated(ParallelLayout(tp=4))


def test_ep_inside_tp_is_an_all_reduce_not_a_dispatch():
    spec = load_model("qwen3-30b-a3b")
    calls = layer_calls(spec, ParallelLayout(tp=4, ep=4), 64.0, moe_layer=True)
    assert {(c.op, c.where, c.group) for c in calls} == {("all_reduce", "attn_out", 4), ("all_reduce", "ffn_out", 4)}
    calls = layer_calls(spec, ParallelLayout(dp=4, ep=4), 64.0, moe_layer=True)
    assert {c.where for c in calls} == {"moe_counts", "moe_dispatch", "moe_combine"}


def test_replicated_ep_decode_costs_no_all_to_all():
    spec, hw = load_model("Qwen/Qwen3-235B-A22B-FP8", weights="fp8", kv="fp8"), load_hardware("h100")
    rep = step_cost(spec, ParallelLayout(tp=4, ep=4), hw, decode_batch(8, 1024), None).breakdown()
    assert rep["all_to_all"] == 0 and rep["all_reduce"] > 0


def test_ep_smaller_than_tp_also_tp_shards_each_expert():
    """tp=4,ep=2 (TRT-LLM moe_tp_size 2 x moe_expert_parallel_size 2; the two H100 Qwen3-235B rows that were
    refused as not fitting): experts split over 2 EP ranks and each one over 2 TP ranks, so the routed
    weights per GPU are those of tp=4,ep=4 and of tp=4 alone; the MoE output sums over the whole TP group.
    Regression: the routed experts were split over ep only (115.9 GB per GPU instead of ~58)."""
    from perfmodel.memory import weight_bytes_per_gpu

    spec = load_model("Qwen/Qwen3-235B-A22B-FP8", weights="fp8", kv="fp8")
    w = {str(lay): weight_bytes_per_gpu(spec, ParallelLayout(**lay)) for lay in
         ({"tp": 4, "ep": 2}, {"tp": 4, "ep": 4}, {"tp": 4})}
    assert len(set(round(v) for v in w.values())) == 1, w
    assert 50e9 < next(iter(w.values())) < 65e9  # 235B fp8 parameters / 4 GPUs, embeddings in bf16
    calls = layer_calls(spec, ParallelLayout(tp=4, ep=2), 64.0, moe_layer=True)
    ffn = [c for c in calls if c.where == "ffn_out"]
    assert len(ffn) == 1 and ffn[0].group == 4 and not any(c.op == "all_to_all" for c in calls)
    # half the experts per rank at half their width: the same decode weight reads as tp=4,ep=4
    hw = load_hardware("h100")
    a = step_cost(spec, ParallelLayout(tp=4, ep=2), hw, decode_batch(8, 1024), None).breakdown()
    b = step_cost(spec, ParallelLayout(tp=4, ep=4), hw, decode_batch(8, 1024), None).breakdown()
    assert 0.5 < a["gemm"] / b["gemm"] < 2.0
