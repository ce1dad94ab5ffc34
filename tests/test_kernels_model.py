"""kernels/ without a process group: the reference model, its paged KV cache, scripts, routers,
SiDP's schedule and Flying's zero-copy TP views."""
import copy
import dataclasses

import pytest

torch = pytest.importorskip("torch")

from kernels import comm, scenario  # noqa: E402
from kernels.dp import make_router  # noqa: E402
from kernels.flying import storages, tp_view  # noqa: E402
from kernels.kvcache import KVCache, TokenBatch, make_cache, run_step  # noqa: E402
from kernels.model import build_model  # noqa: E402
from kernels.sidp import ModeState, choose_mode, min_slots, owner, prefetch_order  # noqa: E402
from perfmodel.modelspec import load_model  # noqa: E402

SPEC = load_model("tiny")


def batch(parts: dict) -> TokenBatch:
    return TokenBatch(tuple(parts), tuple(len(t) for t in parts.values()), torch.cat(list(parts.values())))


def test_decode_with_kv_cache_equals_one_shot_prefill():
    model = build_model(SPEC, seed=1)
    toks = torch.randint(0, SPEC.vocab_size, (21,), generator=torch.Generator().manual_seed(0))
    one = run_step(model, make_cache(model), batch({7: toks}))[7]
    cache = make_cache(model, block_tokens=4)  # 21 tokens over 6 blocks of 4
    run_step(model, cache, batch({7: toks[:13]}))
    for i in range(13, 21):
        out = run_step(model, cache, batch({7: toks[i:i + 1]}))[7]
    assert (out - one).abs().max() < 2e-5
    assert len(cache.tables[7]) == 6 and cache.lengths[7] == 21


def test_variable_length_batch_equals_sequences_alone():
    model = build_model(SPEC, seed=2)
    g = torch.Generator().manual_seed(1)
    parts = {0: torch.randint(0, 1024, (5,), generator=g), 1: torch.randint(0, 1024, (11,), generator=g)}
    together = run_step(model, make_cache(model), batch(parts))
    for sid, t in parts.items():
        alone = run_step(model, make_cache(model), batch({sid: t}))[sid]
        assert (together[sid] - alone).abs().max() < 2e-5


def test_moe_model_and_deterministic_init():
    spec = load_model("tiny-moe")
    a, b = build_model(spec, seed=3), build_model(spec, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(build_model(spec, seed=4).head.weight, a.head.weight)
    out = run_step(a, make_cache(a), batch({0: torch.arange(9)}))[0]
    assert out.shape == (spec.vocab_size,) and 0.3 < out.std() < 3  # O(1) logits: tolerances mean something


def test_kv_block_holds_more_tokens_with_fewer_heads():
    cache = KVCache([0], num_blocks=8, block_numel=16 * 2 * 32)  # 16 tokens of 2 KV heads x 32
    cache.reserve("dp", 20, heads=2, head_dim=32)
    cache.reserve("tp", 20, heads=1, head_dim=32)  # a TP-2 shard: 1 head per GPU
    assert cache.block_tokens("dp") == 16 and cache.block_tokens("tp") == 32
    assert len(cache.tables["dp"]) == 2 and len(cache.tables["tp"]) == 1
    with pytest.raises(ValueError, match="wrong head layout"):
        cache.reserve("dp", 21, heads=1, head_dim=32)


def test_scripts_cover_the_cases():
    steps = scenario.script(scenario.MIXED, 1024)
    tokens = [b.num_tokens for b in steps]
    assert tokens == [22, 3, 3, 3, 12, 3, 3, 2, 2, 1, 1]  # prefill, decodes < SP, a join, 10 decodes
    assert all(b.num_tokens % 2 == 0 for b in scenario.script(scenario.EVEN, 1024))
    again = scenario.script(scenario.MIXED, 1024)
    assert all(torch.equal(x.tokens, y.tokens) for x, y in zip(steps, again))


def test_router_is_least_loaded_and_sticky():
    route = make_router(2)
    subs = route(batch({0: torch.arange(9), 1: torch.arange(3), 2: torch.arange(4)}))
    assert [s.seq_ids for s in subs] == [(0,), (1, 2)]
    subs = route(batch({0: torch.arange(1), 2: torch.arange(1)}))
    assert [s.seq_ids for s in subs] == [(0,), (2,)]


def test_sidp_peak_shifted_prefetch_order():
    orders = [prefetch_order(r, 4, 8, 4) for r in range(4)]
    assert orders[1] == [2, 3, 0, 6, 7, 4]
    firsts = {owner(o[0], 4) for o in orders}
    assert len(firsts) == 4  # every rank starts reading from a different owner: no incast
    assert all(owner(l, 4) != r for r, o in enumerate(orders) for l in o)
    assert min_slots(4, 8, 4) == 3 and min_slots(2, 4, 2) == 1


def test_sidp_mode_hysteresis():
    """The simulator's streak rule (B* = 4 rows and a streak of 3: test values): the mode flips on
    the third decision running for the other side, and an agreeing decision resets the count."""
    s = ModeState("was")
    for _ in range(2):
        s = choose_mode(s, 3.9, b_star=4, hysteresis=3)
    assert s == ModeState("was", 2)
    assert choose_mode(s, 4.0, 4, 3) == ModeState("was", 0)  # rows >= B*: WaS wins, streak resets
    s = choose_mode(s, 1.0, 4, 3)
    assert s == ModeState("cas", 0)
    assert choose_mode(s, 4.0, 4, 1) == ModeState("was", 0)


def test_flying_tp_views_allocate_no_storage():
    model = build_model(SPEC, seed=0)
    before = storages(model)
    view = tp_view(model, comm.Group((0, 1), None, 1))  # builds only: no collective runs here
    assert storages(view) <= before and storages(model) == before
    assert view.layers[0].attn.wq.weight.shape == (SPEC.num_heads // 2 * SPEC.head_dim, SPEC.hidden_size)
    assert model.layers[0].attn.wq.weight.shape[0] == SPEC.num_heads * SPEC.head_dim  # DP engine intact
    assert view.layers[0].mlp.w2.weight.data_ptr() != model.layers[0].mlp.w2.weight.data_ptr()  # a row slice


def test_counting_uses_nccl_tests_sizes():
    with comm.counting() as recs:
        comm.count("all_gather", 4, 4096, "sp_output")
        comm.all_reduce(torch.ones(3), comm.SOLO, "attn_out")  # a group of one issues nothing
    assert comm.bytes_by_op(recs) == {"all_gather": 4096}
    assert comm.bytes_by_where(recs) == {("all_gather", "sp_output"): 4096}


def test_deepcopy_keeps_spec():
    spec = dataclasses.replace(SPEC, num_kv_heads=1)
    assert copy.deepcopy(build_model(spec)).spec.num_kv_heads == 1


def _naive_attention(q, k, v, pos0: int):
    """float64 softmax(QK^T / sqrt(hs)) V with the causal mask at offset pos0 and GQA by head // group."""
    import math

    t, h, hs = q.shape
    g = h // k.shape[0]
    out = torch.empty(t, h, hs, dtype=torch.float64)
    for i in range(h):
        sc = q[:, i].double() @ k[i // g].double().T / math.sqrt(hs)  # (t, T)
        visible = torch.arange(k.shape[1])[None, :] <= (pos0 + torch.arange(t))[:, None]
        out[:, i] = sc.masked_fill(~visible, float("-inf")).softmax(-1) @ v[i // g].double()
    return out


@pytest.mark.parametrize("t,pos0", [(37, 0), (1, 50), (9, 20)])  # whole prompt, decode, a later chunk
def test_attend_is_causal_gqa_attention_at_every_offset(t, pos0):
    """Regression: attend() moved to scaled_dot_product_attention (the kernel microbench times); a whole
    prompt, a decode and a chunk at an offset each keep exact causal GQA semantics."""
    from kernels.model import attend

    gen = torch.Generator().manual_seed(t + pos0)
    q = torch.randn(t, 8, 16, generator=gen)
    k, v = (torch.randn(2, pos0 + t, 16, generator=gen) for _ in range(2))
    got = attend(q, k, v, pos0)
    assert got.shape == (t, 8, 16)
    assert torch.allclose(got.double(), _naive_attention(q, k, v, pos0), atol=2e-6)


def test_ep_below_tp_shards_each_expert_over_tp_over_ep():
    """tp=4,ep=2 (TRT-LLM moe_tp 2 x moe_ep 2): TP rank t holds the experts of EP index t % 2, each cut to
    part t // 2 of its intermediate dimension, and the four parts of an expert add up to it (what
    perfmodel.memory sizes: routed experts / tp per GPU). Regression: experts were whole on 2 ranks."""
    from kernels.comm import Group
    from kernels.ep import ExpertParallelMoE
    from kernels.model import MoE

    from kernels.checks import make_spec

    spec = make_spec("tiny-moe")
    moe = MoE(spec)
    f, E = spec.intermediate_size, spec.num_experts
    x = torch.randn(5, spec.hidden_size, generator=torch.Generator().manual_seed(0))
    parts = {}
    for t in range(4):
        ep_idx = t % 2
        m = ExpertParallelMoE(moe, Group(tuple(range(2)), None, ep_idx), Group(tuple(range(4)), None, t),
                              replicated=True)
        assert m.moe_tp == 2 and m.first == ep_idx * E // 2 and len(m.experts) == E // 2
        assert all(e.w1.weight.shape[0] == f // 2 and e.w2.weight.shape[1] == f // 2 for e in m.experts)
        parts[t] = m.experts[0](x)  # this rank's part of its first expert
    with torch.no_grad():
        for ep_idx in range(2):
            whole = moe.experts[ep_idx * E // 2](x)
            assert torch.allclose(parts[ep_idx] + parts[ep_idx + 2], whole, atol=1e-5)
