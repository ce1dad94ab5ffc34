"""ParallelLayout: rank grid, groups, Shift's SP_TP order, and one clear error per invalid layout."""
import dataclasses

import pytest

from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.modelspec import load_model


def test_sp_tp_groups_match_systems_md():
    lay = ParallelLayout(sp=3, tp=2)
    assert lay.groups("tp") == [[0, 1], [2, 3], [4, 5]]
    assert lay.groups("sp") == [[0, 2, 4], [1, 3, 5]]
    assert lay.shift_tp_order() == [0, 2, 4, 1, 3, 5]
    # GPU g = (s, t) owns head block t*SP + s; the shift order gives rank i head block i
    order = lay.shift_tp_order()
    for i, g in enumerate(order):
        c = lay.coords(g)
        assert lay.head_block(c["sp"], c["tp"]) == i


def test_groups_partition_the_world():
    lay = ParallelLayout(dp=2, pp=2, sp=2, tp=2, ep=4)
    for kind in ("tp", "sp", "pp", "dp", "ep", "instance"):
        ranks = sorted(r for g in lay.groups(kind) for r in g)
        assert ranks == list(range(16)), kind
    assert lay.groups("pp")[0] == [0, 4]


def test_parse():
    assert ParallelLayout.parse("tp=2,pp=4") == ParallelLayout(tp=2, pp=4)
    with pytest.raises(LayoutError, match="tq=2"):
        ParallelLayout.parse("tq=2")
    with pytest.raises(LayoutError, match="not an integer"):
        ParallelLayout.parse("tp=two")


@pytest.mark.parametrize("layout, model, gpus, msg", [
    (ParallelLayout(tp=3), "llama-3.1-70b", 8, "num_heads=64 is not divisible by tp\\*sp=3"),
    (ParallelLayout(tp=16), "llama-3.1-70b", 8, "needs tp\\*pp\\*sp\\*dp=16 GPUs but only 8"),
    (ParallelLayout(pp=100), "llama-3.1-8b", 128, "pp=100 exceeds num_layers=32"),
    (ParallelLayout(ep=2, tp=2), "llama-3.1-8b", 8, "no experts"),
    (ParallelLayout(tp=4), "kv6", 8, "num_kv_heads=6 is not divisible by tp=4"),
    (ParallelLayout(tp=2, sp=4), "kv6", 8, "3 KV heads per TP shard are not divisible by sp=4|sp=4 exceeds"),
])
def test_invalid_layouts_name_the_numbers(layout, model, gpus, msg):
    spec = (dataclasses.replace(load_model("llama-3.1-8b"), num_heads=48, num_kv_heads=6)
            if model == "kv6" else load_model(model))
    with pytest.raises(LayoutError, match=msg):
        layout.validate(spec, gpus)


def test_kv_replication_is_valid_and_counted():
    spec = load_model("llama-3.1-70b")  # 8 KV heads
    lay = ParallelLayout(tp=2, sp=8).validate(spec, 16)
    assert lay.kv_replication(8) == 2 and lay.sp_split(8) == (4, 2)
    assert ParallelLayout(sp=8).sp_split(8) == (8, 1)
