"""Multi-head latent attention (kernels/mla.py): the absorbed (decode) form equals the non-absorbed
(prefill) form, the latent cache holds (kv_lora_rank + qk_rope_head_dim) x dtype bytes per token per
layer, and TP=2 over heads (latent replicated, gloo world of 2) equals the single-device layer."""
import pytest

torch = pytest.importorskip("torch")

from kernels.dist import spawn  # noqa: E402
from kernels.mla import BLOCK_TOKENS, LatentCache, build_mla, run_seq, tp_check  # noqa: E402

# Outputs are O(1) (|max| ~2.5, std ~0.5): the two forms only re-associate the same sums (W_UK
# applied to q instead of to every cached latent), observed 3.6e-7 in fp32 and 9e-16 in fp64.
TOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def inputs(dtype, n=12):
    return torch.randn(n, 64, generator=torch.Generator().manual_seed(1)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_absorbed_equals_non_absorbed(dtype):
    m, x = build_mla(dtype=dtype), inputs(dtype)
    ref, _ = run_seq(m, x, 7, absorbed_decode=False, absorbed_prefill=False)  # up-projected K, V throughout
    for prefill_form in (False, True):
        y, _ = run_seq(m, x, 7, absorbed_decode=True, absorbed_prefill=prefill_form)
        assert (y - ref).abs().max() <= TOL[dtype]
    assert ref.abs().max() > 0.5  # not trivially small


def test_decode_reads_the_cached_latent():
    m, x = build_mla(dtype=torch.float64), inputs(torch.float64)
    ref, cache = run_seq(m, x, 7)
    cache.pools[0][cache.tables[0][0], 3, 0] += 1.0  # corrupt token 3's latent (c_kv dim 0)
    y = m(x[11:12], cache, 0, 11, absorbed=True)
    assert (y - ref[11:12]).abs().max() > 1e-3


@pytest.mark.parametrize("dtype,nbytes", [(torch.float32, 4), (torch.float64, 8)])
def test_latent_cache_bytes_per_token(dtype, nbytes):
    m, x = build_mla(dtype=dtype), inputs(dtype)
    _, cache = run_seq(m, x, 7)
    assert cache.bytes_per_token_per_layer() == (m.r_kv + m.dr) * nbytes == (16 + 8) * nbytes
    assert cache.lengths[0] == 12 and len(cache.tables[0]) == -(-12 // BLOCK_TOKENS)
    assert cache.pools[0].shape[1:] == (BLOCK_TOKENS, m.r_kv + m.dr)  # nothing per head
    # DeepSeek-V3: kv_lora_rank 512 + rope 64 in bf16 = 1152 bytes per token per layer
    # (MHA with 128 heads of 192-dim K and 128-dim V would hold 81920)
    assert LatentCache(1, 512 + 64, num_blocks=1, dtype=torch.bfloat16).bytes_per_token_per_layer() == 1152


@pytest.mark.slow
def test_tp2_over_heads_equals_single_device():
    res = spawn(tp_check, 2)
    for rank_res in res:
        for (dtype, absorbed), r in rank_res.items():
            nb = 4 if dtype == "float32" else 8
            assert r["max_diff"] <= TOL[getattr(torch, dtype)], (dtype, absorbed, r["max_diff"])
            assert r["heads"] == 2  # 4 heads over TP=2
            assert r["bytes"] == {("all_reduce", "attn_out"): 12 * 64 * nb}  # t x d per step, 12 tokens
            assert r["cache_tokens"] == 12 and r["cache_bytes_per_token"] == (16 + 8) * nb  # replicated latent
