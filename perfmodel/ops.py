"""Times of the primitive ops (GEMM, attention, collectives, copies) on one GPU, vectorised.

Each function answers from a calibrated profile when one is given and covers the op
(perfmodel.calibration), else from the datasheet roofline of the Hardware preset:
t = max(FLOPs / achieved_flops, bytes / achieved_bw) + kernel floor.
All inputs may be numpy arrays (broadcast together); results are seconds (float64 arrays).
"""
from __future__ import annotations

import numpy as np

from .modelspec import DTYPE_BYTES

# Datasheet-path constants (used only when no calibrated profile covers the op).
KERNEL_FLOOR_S = 4e-6  # smallest GEMM/attention kernel on Hopper under CUDA graphs, ~4 us
#   (aiconfigurator h100 gemm table: m=1 n=k=1024 bf16 rows are 4-6 us)
ATTN_EFF = 0.6  # flash-attention forward reaches ~60% of dense matmul peak on Hopper
#   (FlashAttention-3 paper: 600-740 of 989 TFLOP/s at long sequences, bf16)
COPY_LATENCY_S = 10e-6  # cudaMemcpyAsync launch + PCIe round trip, ~10 us
# bytes per weight element of the GEMM tables of each compute dtype (fp4: the nvfp4 weights they read)
COMPUTE_BYTES = {**DTYPE_BYTES, "fp4": DTYPE_BYTES["nvfp4"]}


def _where_positive(x: np.ndarray, t):
    """np.where(x > 0, t, 0.0), without numpy's per-call cost when x and t are single numbers (the
    simulator's one-step path): the same 0-d array either way."""
    if x.ndim == 0 and np.ndim(t) == 0:
        return np.asarray(t if x > 0 else 0.0)
    return np.where(x > 0, t, 0.0)


# nccl-tests bus-bandwidth factors: busbw = algbw * factor(k); algbw = size_bytes / time
def busbw_factor(op: str, k):
    """nccl-tests PERFORMANCE.md: all_reduce 2(k-1)/k; all_gather, reduce_scatter, all_to_all
    (k-1)/k; send_recv and broadcast 1."""
    k = np.asarray(k, dtype=float)
    if op in ("all_reduce", "custom_all_reduce"):
        return 2.0 * (k - 1) / k
    if op in ("all_gather", "reduce_scatter", "all_to_all", "ulysses_all_to_all"):
        return (k - 1) / k
    if op in ("send_recv", "broadcast"):
        return np.ones_like(k)
    raise ValueError(f"unknown collective {op!r}")


def _compute_dtype(weight_dtype: str, hw) -> str:
    """fp8 weights run fp8 GEMMs (W8A8) where the GPU has fp8 tensor cores, else bf16 (W8A16). On GPUs with
    fp4 tensor cores (Blackwell) nvfp4 weights run fp4 GEMMs (W4A4: activations quantised to nvfp4; vLLM
    v0.33.0 modelopt.py:150-153 "NVFP4 W4A4", its sm_10x kernels quantise the input: kernels/linear/nvfp4/
    flashinfer.py:121-122, 243); elsewhere nvfp4 is weight-only (W4A16: its CUTLASS fp4 GEMM needs sm_100+,
    csrc/quantization/fp4/nvfp4_scaled_mm_entry.cu:71-86, so Marlin / Humming dequantise into a bf16 MMA).
    mxfp4 (gpt-oss) is W4A16 on both: vLLM v0.33.0's default MoE backend is FLASHINFER_TRTLLM_MXFP4_BF16 on
    sm_100 and the Triton kernel on sm_90 (fused_moe/oracle/mxfp4.py:402-435, 631; TensorRT-LLM's MXFP4 x
    MXFP8 path is not modelled). fp32
    weights run fp32 GEMMs (the reference implementations on a CPU: a profile's fp32 table, else its
    bf16 one through calibration.gemm.DTYPE_FALLBACK). Regression: fp32 used to ask for the bf16 table,
    2.3x too fast at 64 rows on this CPU (docs/sim_vs_real.md)."""
    if weight_dtype == "fp32":
        return "fp32"
    if weight_dtype == "nvfp4" and hw.has_fp4:
        return "fp4"
    return "fp8" if weight_dtype == "fp8" and hw.has_fp8 else "bf16"


def gemm_time_s(m, n, k, weight_dtype: str, hw, prof=None, static_scales: bool = False):
    """C[m,n] = A[m,k] @ W[k,n]: m tokens, weights stored in `weight_dtype`, bf16 activations. static_scales: an
    fp8 GEMM whose activation scale the checkpoint calibrated skips the measured dynamic kernel's compute-scale
    pass (calibration/fp8_scale.py; cost._layer_gemm_ew_s says when: a static checkpoint on its table's framework)."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    cd = _compute_dtype(weight_dtype, hw)
    if prof is not None:
        t = prof.gemm_time_s(m, n, k, cd)
        if t is not None:
            if static_scales and cd == "fp8":
                t = prof.fp8_static_time_s(t, m, n, k)
            # weight-only quantisation (W4A16 mxfp4, W8A16 fp8 without fp8 tensor cores): the measured table
            # is of GEMMs that read `cd` weights; the kernel reads the smaller stored ones, so the weight bytes
            # it does not read come off (never below the compute-bound time at the table's dtype)
            saved = n * k * (COMPUTE_BYTES[cd] - DTYPE_BYTES[weight_dtype])
            if np.any(saved > 0):
                floor = 2.0 * m * n * k / (hw.matmul_tflops(cd) * 1e12) + KERNEL_FLOOR_S
                t = np.maximum(t - saved / (hw.achieved_hbm_gbs * 1e9), floor)
            return np.where(m > 0, t, 0.0)
    flops = 2.0 * m * n * k
    # read weights once, read activations, write outputs (bf16 activations)
    nbytes = n * k * DTYPE_BYTES[weight_dtype] + 2.0 * (m * k + m * n)
    t = np.maximum(flops / (hw.matmul_tflops(cd) * 1e12),
                   nbytes / (hw.achieved_hbm_gbs * 1e9))
    return np.where(m > 0, t + KERNEL_FLOOR_S, 0.0)


def attn_prefill_time_s(pairs, kv_tokens, seqs, heads, kv_heads, head_dim, kv_dtype: str, hw, prof=None):
    """Causal prefill attention on one GPU: `pairs` = sum over sequences of query-key pairs
    (n*c + n(n+1)/2 for n new tokens after c cached ones), `kv_tokens` = keys read, `seqs` sequences,
    `heads`/`kv_heads` per GPU. FLOPs = 4 * heads * head_dim * pairs (QK^T and PV)."""
    pairs, kv_tokens, seqs = (np.asarray(x, dtype=float) for x in (pairs, kv_tokens, seqs))
    if prof is not None:
        t = prof.attn_prefill_time_s(pairs, kv_tokens, seqs, heads, kv_heads, head_dim, kv_dtype=kv_dtype)
        if t is not None:
            return _where_positive(seqs, t)
    flops = 4.0 * heads * head_dim * pairs
    nbytes = kv_tokens * 2.0 * kv_heads * head_dim * DTYPE_BYTES[kv_dtype]
    t = np.maximum(flops / (hw.achieved_bf16_tflops * 1e12 * ATTN_EFF), nbytes / (hw.achieved_hbm_gbs * 1e9))
    return _where_positive(seqs, t + KERNEL_FLOOR_S)


def attn_decode_time_s(seqs, kv_tokens, heads, kv_heads, head_dim, kv_dtype: str, hw, prof=None):
    """Decode attention on one GPU: `seqs` sequences with one query each, `kv_tokens` keys read in
    total. Affine in kv_tokens for a fixed batch, which the simulator's closed-form decode needs."""
    seqs, kv_tokens = (np.asarray(x, dtype=float) for x in (seqs, kv_tokens))
    if prof is not None:
        t = prof.attn_decode_time_s(seqs, kv_tokens, heads, kv_heads, head_dim, kv_dtype=kv_dtype)
        if t is not None:
            return _where_positive(seqs, t)
    nbytes = kv_tokens * 2.0 * kv_heads * head_dim * DTYPE_BYTES[kv_dtype]
    return _where_positive(seqs, nbytes / (hw.achieved_hbm_gbs * 1e9) + KERNEL_FLOOR_S)


def collective_time_s(op: str, size_bytes, group: int, hw, prof=None):
    """Alpha-beta time of one collective whose nccl-tests size is `size_bytes` over `group` ranks:
    alpha + size_bytes * busbw_factor / busbw. Zero for a group of one or an empty message."""
    size = np.asarray(size_bytes, dtype=float)
    if group <= 1:
        return np.zeros_like(size)
    if prof is not None:
        t = prof.collective_time_s(op, size, group)
        if t is not None:
            return np.where(size > 0, t, 0.0)
    c = hw.collectives[op]
    t = c.alpha_us * 1e-6 + size * busbw_factor(op, group) / (c.busbw_gbs * 1e9)
    return np.where(size > 0, t, 0.0)


def all_reduce_time_s(size_bytes, group: int, hw, prof=None, custom: bool = True,
                      custom_max_bytes: float = 8 * 2**20):
    """TP all-reduce as vLLM issues it: the custom one-/two-shot kernel for messages up to
    `custom_max_bytes` (8 MiB, vLLM's CustomAllreduce max_size) on NVLink/NVSwitch, else NCCL."""
    nccl = collective_time_s("all_reduce", size_bytes, group, hw, prof)
    if not custom or hw.link_type not in ("nvswitch", "nvlink"):
        return nccl
    cust = collective_time_s("custom_all_reduce", size_bytes, group, hw, prof)
    small = np.asarray(size_bytes, dtype=float) <= custom_max_bytes
    return np.where(small, np.minimum(nccl, cust), nccl)


def copy_time_s(kind: str, nbytes, hw, prof=None):
    """Copies: 'h2d'/'d2h' over the host link, 'd2d' within HBM (read + write), 'p2p' over NVLink/PCIe."""
    nbytes = np.asarray(nbytes, dtype=float)
    if prof is not None:
        t = prof.copy_time_s(kind, nbytes)
        if t is not None:
            return t
    if kind in ("h2d", "d2h"):
        t = COPY_LATENCY_S + nbytes / (hw.h2d_bw_gbs * 1e9)
    elif kind == "d2d":
        t = KERNEL_FLOOR_S + 2.0 * nbytes / (hw.achieved_hbm_gbs * 1e9)
    elif kind == "p2p":
        t = hw.link_latency_us * 1e-6 + nbytes / (hw.link_bw_gbs * 1e9)
    else:
        raise ValueError(f"unknown copy kind {kind!r}: h2d, d2h, d2d or p2p")
    return np.where(nbytes > 0, t, 0.0)


def elementwise_time_s(nbytes, hw):
    """Memory-bound elementwise kernels (norms, rotary, activation, residual): bytes / bandwidth."""
    nbytes = np.asarray(nbytes, dtype=float)
    return nbytes / (hw.achieved_hbm_gbs * 1e9)
