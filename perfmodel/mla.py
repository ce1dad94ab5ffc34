"""Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi-K2) on one GPU: projection GEMMs and attention.

Shapes (DeepSeek-V3: d 7168, h 128 heads, q_rank 1536, kv_rank 512, nope 128, rope 64, v 128), per layer,
n new tokens, h_tp = h / tp heads on this GPU (docs/mla.md has the derivations and sources):
  fused_qkv_a  (n, d) @ (d, q_rank + kv_rank + rope)   replicated on every TP rank (not split over heads)
  q_b          (n, q_rank) @ (q_rank, h_tp*(nope+rope))
  o            (n, h_tp*v) @ (h_tp*v, d)              row-parallel (the TP all-reduce is in comm.py)
  kv_b         (rows, kv_rank) @ (kv_rank, h_tp*(nope+v)), costed in the attention term because its rows
               depend on the form: prefill (non-absorbed) up-projects every key's latent, the context's
               kv_tokens rows, in the checkpoint dtype (vLLM's kv_b_proj); decode (absorbed) runs W_UK on
               q_nope and W_UV on the output, one row per sequence, in bf16 (vLLM's MLACommonImpl keeps
               W_UK_T / W_UV dequantised to the activation dtype): the same FLOPs and weight bytes per row.
Attention:
  prefill  MHA flash attention over K = [k_nope | k_rope] (nope+rope = 192 dims) and V (128 dims), both
           bf16 after the up-projection: FLOPs 2*h_tp*pairs*(192 + 128), K+V bytes kv_tokens*h_tp*(192+128)*2,
           exactly ops.attn_prefill_time_s's GQA formulas at head_dim (192+128)/2 = 160 with kv_heads = h_tp.
  decode   absorbed (FlashMLA-style): per head q is 512+64 wide against the latent, scores over 576 dims and
           output over 512: FLOPs 2*h_tp*kv_tokens*(576 + 512); the latent is read once per token for all
           heads: bytes kv_tokens*576*kv dtype bytes. Compute-bound at 128 heads (242 FLOP/byte in bf16).
DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5; spec.sparse_topk > 0) adds a lightning indexer per
layer, whole on every TP rank: its projections (q_rank -> heads x dim, d -> dim, d -> heads) and scores of
every (query, cached key) pair, 2*heads*dim FLOPs each in fp8, reading each key's indexer entry once
(indexer_s); attention then reads each query's top sparse_topk keys: prefill pairs are capped at
sparse_topk a token. Decode attention is NOT capped: the simulator's decode closed form is affine in the
keys, so a cap would make its fast path disagree with its step-by-step run; decode past sparse_topk keys
a sequence is over-costed (docs/mla.md says by how much).
"""
from __future__ import annotations

import numpy as np

from . import ops
from .calibration.attention import LATENT
from .modelspec import DTYPE_BYTES


def latent_dim(spec) -> int:
    """Cached elements per token per layer: kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3)."""
    return spec.kv_elems_per_token_per_layer


def proj_gemm_s(spec, tp: int, n_loc, hw, prof=None, st: bool = False):
    """fused_qkv_a + q_b + o GEMMs of one MLA layer for n_loc new tokens on one GPU (kv_b: attention_s)."""
    d, h_tp, wd = spec.hidden_size, spec.num_heads // tp, spec.attn_weight_dtype
    qk, lat = spec.head_dim, latent_dim(spec)  # nope + rope (192); kv_rank + rope (576)
    if spec.q_lora_rank:  # (n, d) -> q_rank + latent in one GEMM (vLLM fused_qkv_a_proj), then q_b per head
        t = ops.gemm_time_s(n_loc, spec.q_lora_rank + lat, d, wd, hw, prof, static_scales=st)
        t = t + ops.gemm_time_s(n_loc, h_tp * qk, spec.q_lora_rank, wd, hw, prof, static_scales=st)
    else:  # DeepSeek-V2-Lite: q_proj (d -> h*(nope+rope)) split over heads, kv_a replicated
        t = (ops.gemm_time_s(n_loc, lat, d, wd, hw, prof, static_scales=st)
             + ops.gemm_time_s(n_loc, h_tp * qk, d, wd, hw, prof, static_scales=st))
    t = t + ops.gemm_time_s(n_loc, d, h_tp * spec.v_head_dim, spec.o_proj_weight_dtype, hw, prof, static_scales=st)
    if spec.sparse_topk:  # the indexer's wq_b, wk and weights_proj (replicated)
        hi, di = spec.indexer_heads, spec.indexer_head_dim
        t = t + ops.gemm_time_s(n_loc, hi * di, spec.q_lora_rank or d, wd, hw, prof, static_scales=st) \
            + ops.gemm_time_s(n_loc, di + hi, d, wd, hw, prof, static_scales=st)
    return t


def indexer_s(spec, pairs, keys, seqs, hw):
    """DSA's lightning indexer scoring of one layer on one GPU: `pairs` (query, cached key) pairs scored,
    `keys` indexer entries read (the step's prefill keys + decode keys). FLOPs 2 x heads x dim per pair at
    the fp8 rate x ops.ATTN_EFF (DeepGEMM's fp8 MQA logits kernel); bytes spec.indexer_bytes_per_token_per_layer
    per key; the roofline's max of the two plus a kernel floor where `seqs` > 0 (affine in the keys for a
    fixed batch, as the decode closed form needs). 0 without DSA."""
    pairs, keys, seqs = (np.asarray(x, dtype=float) for x in (pairs, keys, seqs))
    if not spec.sparse_topk:
        return np.zeros(np.shape(pairs))
    flops = 2.0 * spec.indexer_heads * spec.indexer_head_dim * pairs
    nbytes = keys * spec.indexer_bytes_per_token_per_layer
    t = np.maximum(flops / (hw.matmul_tflops("fp8") * 1e12 * ops.ATTN_EFF), nbytes / (hw.achieved_hbm_gbs * 1e9))
    return np.where(seqs > 0, t + ops.KERNEL_FLOOR_S, 0.0)


def ew_widths(spec, tp: int) -> tuple[int, int]:
    """(q width, k width) per token on one GPU that norms/rotary/KV writes touch: h_tp*(nope+rope), latent."""
    return spec.num_heads // tp * spec.head_dim, latent_dim(spec)


def decode_time_s(seqs, kv_tokens, heads: int, spec, hw, prof=None):
    """Absorbed MLA decode attention of `seqs` sequences reading `kv_tokens` latents in total, `heads`
    heads on this GPU. A profile with an `mla_decode` section (calibration/mla_decode.py: TensorRT-LLM's
    measured MLA kernel, affine in the keys for a batch) gives it where the latent is the measured one (576);
    else the roofline: max(FLOPs / (achieved bf16 x ATTN_EFF), latent bytes / HBM) + floor. ATTN_EFF 0.6
    matches FlashMLA's 580 TFLOP/s compute-bound on H800 (989 peak: 0.59; FlashMLA README); against the
    measured kernel the roofline is ~2.5x too fast at its median row (a ~12-20 us floor per call, not 5)."""
    if prof is not None and latent_dim(spec) == LATENT:
        t = prof.mla_decode_time_s(seqs, kv_tokens, heads, spec.kv_dtype)
        if t is not None:
            return np.where(np.asarray(seqs, dtype=float) > 0, t, 0.0)
    seqs, kv_tokens = (np.asarray(x, dtype=float) for x in (seqs, kv_tokens))
    lat = latent_dim(spec)
    flops = 2.0 * heads * kv_tokens * (lat + spec.kv_lora_rank)  # q.[c|k_pe]^T over 576, p.c over 512
    nbytes = kv_tokens * lat * DTYPE_BYTES[spec.kv_dtype]  # one latent per key, shared by every head
    t = np.maximum(flops / (hw.achieved_bf16_tflops * 1e12 * ops.ATTN_EFF), nbytes / (hw.achieved_hbm_gbs * 1e9))
    return np.where(seqs > 0, t + ops.KERNEL_FLOOR_S, 0.0)


def attention_s(spec, tp: int, batch, pairs, pkv, dkv, hw, prof=None, prefill: bool = True, decode: bool = True):
    """MLA attention of one layer on one GPU, kv_b up-projection included (module docstring).

    Calibrated profile: its prefill tables are flash-attention (GQA/MHA) measurements per head_dim, and the
    non-absorbed prefill is an MHA flash attention, so ops.attn_prefill_time_s asks them at head_dim 160 with
    kv_heads = heads (calibration.attention.by_head_dim: the nearest table outside the measured dims). Its
    GQA decode tables are of per-KV-head reads, which absorbed MLA is not: decode uses the profile's MLA table
    where it has one (decode_time_s; aiconfigurator's systems/data/<gpu>/mla/<engine>/generation_mla_perf.parquet)."""
    h_tp = spec.num_heads // tp
    kv_rank, nope, v = spec.kv_lora_rank, spec.qk_nope_head_dim, spec.v_head_dim
    t = np.zeros(np.shape(batch.decode_seqs))
    if prefill:
        up = ops.gemm_time_s(pkv, h_tp * (nope + v), kv_rank, spec.attn_weight_dtype, hw, prof)  # kv_b_proj
        att_pairs = np.minimum(pairs, np.asarray(batch.prefill_tokens, dtype=float) * spec.sparse_topk) \
            if spec.sparse_topk else pairs  # DSA: each query attends to its top sparse_topk keys
        att = ops.attn_prefill_time_s(att_pairs, pkv, batch.prefill_seqs, h_tp, h_tp, (spec.head_dim + v) / 2,
                                      "bf16", hw, prof)
        t = t + np.where(np.asarray(batch.prefill_seqs) > 0, up, 0.0) + att
        if spec.sparse_topk:
            t = t + indexer_s(spec, pairs, pkv, batch.prefill_seqs, hw)
    if decode:
        absorbed = ops.gemm_time_s(batch.decode_seqs, h_tp * (nope + v), kv_rank, "bf16", hw, prof)  # W_UK, W_UV
        t = t + absorbed + decode_time_s(batch.decode_seqs, dkv, h_tp, spec, hw, prof)
        if spec.sparse_topk:  # one query a sequence scores all of its keys: pairs = keys
            t = t + indexer_s(spec, dkv, dkv, batch.decode_seqs, hw)
    return t
