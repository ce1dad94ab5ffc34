"""microbench shape generation: model GEMMs per TP degree, grids, attention GQA heads, sizes, groups."""
import pytest

from microbench import shapes
from perfmodel.modelspec import load_model


def test_llama8b_gemms_per_tp():
    spec = load_model("llama-3.1-8b")  # d=4096, 32 heads / 8 KV heads of 128, FFN 14336, vocab 128256
    tp1 = {name: (n, k) for n, k, name in shapes.model_gemms(spec, 1)}
    assert tp1 == {"qkv": (6144, 4096), "o_proj": (4096, 4096), "gate_up": (28672, 4096),
                   "down": (4096, 14336), "lm_head": (128256, 4096)}
    tp8 = {name: (n, k) for n, k, name in shapes.model_gemms(spec, 8)}
    assert tp8 == {"qkv": (512 + 2 * 128, 4096), "o_proj": (4096, 512), "gate_up": (3584, 4096),
                   "down": (4096, 1792), "lm_head": (16032, 4096)}


def test_kv_heads_replicate_beyond_their_count():
    spec = load_model("tiny")  # 8 heads, 2 KV heads of 32
    n_qkv = {tp: dict((name, n) for n, k, name in shapes.model_gemms(spec, tp))["qkv"] for tp in (1, 2, 4)}
    assert n_qkv == {1: (8 + 4) * 32, 2: (4 + 2) * 32, 4: (2 + 2) * 32}  # tp=4: one KV head each, replicated


def test_moe_model_adds_expert_gemms():
    names = {name for _, _, name in shapes.model_gemms(load_model("mixtral-8x7b"), 2)}
    assert {"expert_gate_up", "expert_down", "router", "expert_gate_up_tp", "expert_down_tp"} <= names


def test_gemm_shapes_grid_model_dedupe_and_flops_cap():
    spec = load_model("tiny")
    out = shapes.gemm_shapes(spec, (1, 2), (1, 16), (1, 16), (256, 1024), (256,), max_flops=2 * 16 * 1024 * 256)
    keys = [(m, n, k) for m, n, k, _ in out]
    assert len(keys) == len(set(keys)) and keys == sorted(keys)
    assert all(2 * m * n * k <= 2 * 16 * 1024 * 256 for m, n, k in keys)
    grid = {(m, n, k) for m in (1, 16) for n in (256, 1024) for k in (256,)}
    assert grid <= set(keys)  # the full factorial grid is there
    src = {(m, n, k): s for m, n, k, s in out}
    assert src[(1, 384, 256)] == "tiny tp=1 qkv" and src[(16, 192, 256)] == "tiny tp=2 qkv"
    assert src[(1, 1024, 256)].startswith("tiny tp=1")  # model shape wins the label over the grid


def test_tp_that_does_not_split_heads_is_skipped():
    spec = load_model("tiny")
    assert shapes.gemm_shapes(spec, (3,), (1,)) == []
    assert shapes.attention_shapes(spec, (3,), [(1, 8)], [(1, 8)]) == []


def test_attention_shapes_gqa_heads_and_lengths():
    spec = load_model("llama-3.1-8b")
    cases = shapes.attention_shapes(spec, (1, 8, 16), [(2, 512)], [(4, 1024)])
    pre = [c for c in cases if c["op"] == "attention_prefill"]
    dec = [c for c in cases if c["op"] == "attention_decode"]
    assert [(c["num_heads"], c["num_kv_heads"]) for c in pre] == [(32, 8), (4, 1), (2, 1)]
    assert all(c["seq_len"] == c["kv_len"] == 512 and c["batch"] == 2 for c in pre)
    assert all(c["seq_len"] == 1 and c["kv_len"] == 1024 and c["head_dim"] == 128 for c in dec)


def test_geometric_and_group_sizes():
    assert shapes.geometric(1024, 16384, 4) == [1024, 4096, 16384]
    assert shapes.geometric(1, 1, 2) == [1]
    with pytest.raises(ValueError):
        shapes.geometric(0, 8, 2)
    assert shapes.group_sizes(1) == []
    assert shapes.group_sizes(2) == [2]
    assert shapes.group_sizes(8) == [2, 4, 8]
    assert shapes.group_sizes(6) == [2, 4, 6]


def test_patterns_shapes():
    spec = load_model("llama-3.1-8b")
    assert shapes.ulysses_heads(spec, 8) == (32, 8)  # Q, K and V in one all-to-all
    assert shapes.ulysses_heads(spec, 16) == (32, 0)  # 8 KV heads do not split over 16: Q only
    assert shapes.ulysses_heads(load_model("tiny"), 3) == (0, 0)
    assert shapes.sidp_layer_bytes(spec) == 3 * 4096 * 14336 * 2


@pytest.mark.parametrize("device,quick", [("cpu", True), ("cpu", False), ("cuda", True), ("cuda", False)])
def test_sweeps_complete_and_endpoints_in_fit(device, quick):
    s = shapes.sweep(device, quick)
    need = {"model", "tp", "model_m", "grid_m", "grid_n", "grid_k", "max_gemm_flops", "dtypes", "prefill",
            "decode", "msg", "copy", "ulysses_tokens", "cas_tokens", "warmup", "repeats", "min_sample_s",
            "coll_min_sample_s", "coll_budget_s", "coll_max_repeats", "attempts", "max_spread", "coll_max_spread"}
    assert need <= set(s)
    load_model(s["model"])
    assert s == shapes.sweep(device, quick) and len(s["prefill"]) > 0  # pure: the same every call
    for key in ("msg", "copy"):  # an odd count: calibrate's every-other held-out split keeps both ends
        assert len(shapes.geometric(*s[key])) % 2 == 1, key


def test_quick_cpu_sweep_size():
    """The acceptance sweep: 30-80 GEMM shapes, ~16 message sizes per op (one group of 2 on 2 cores)."""
    s = shapes.sweep("cpu", True)
    n = len(shapes.gemm_shapes(load_model(s["model"]), s["tp"], s["model_m"], s["grid_m"], s["grid_n"],
                               s["grid_k"], s["max_gemm_flops"]))
    assert 30 <= n <= 80
    assert 10 <= len(shapes.geometric(*s["msg"])) <= 20 and s["msg"][1] <= 64 << 20


def test_sweep_overrides():
    s = shapes.sweep("cpu", True, {"grid_m": [1, 2], "prefill": [[1, 8]]})
    assert s["grid_m"] == (1, 2) and s["prefill"] == ((1, 8),)
    with pytest.raises(ValueError, match="unknown sweep key 'nope'"):
        shapes.sweep("cpu", True, {"nope": 1})
