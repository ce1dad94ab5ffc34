"""Hybrid linear attention (Qwen3-Next, Qwen3.5): the Gated DeltaNet layers' weights, state and costs on one GPU.

Shapes (Qwen3.5-397B-A17B: d 4096, Hk 16 key heads, Hv 64 value heads, Dk = Dv = 128, conv kernel 4; HF
modeling_qwen3_next.py Qwen3NextGatedDeltaNet), per linear layer, TP splitting the heads:
  in_proj_qkvz  d -> 2 Hk Dk + 2 Hv Dv     (q, k, v and the output gate z)
  in_proj_ba    d -> 2 Hv                  (beta and the decay's a)
  conv1d        conv_dim = 2 Hk Dk + Hv Dv channels x kernel taps (depthwise), A_log and dt_bias Hv each,
                an RMSNorm of Dv
  out_proj      Hv Dv -> d
The recurrent state is Hv x Dk x Dv per sequence in mamba_ssm_dtype (ModelSpec.linear_state_bytes), plus the
conv's last kernel - 1 inputs (conv_dim, bf16); no KV cache. Costs:
  prefill  the chunked gated delta rule (FLA's chunk_gated_delta_rule, chunks of 64): per token and value head
           4 Dk Dv FLOPs for the state's update and read-out plus 2 x 64 x (Dk + Dv) within its chunk; bf16
           tensor-core rate x ops.ATTN_EFF
  decode   one recurrent step a sequence: the state read and written back (2 x state bytes) and 4 Dk Dv FLOPs a
           head; independent of the context, so the decode closed form stays affine in the keys
The state is not subtracted from the KV memory (SGLang sizes a pool of it for max_running_requests requests with
--disable-radix-cache, sglang 0.5.8 model_runner_kv_cache_mixin.py:168-203): a hybrid model's KV capacity is
over-stated by that pool (~3 GB per GPU for Qwen3.5-397B at 128 requests, TP8, bf16 state).
"""
from __future__ import annotations

import numpy as np

from . import layer_shapes, ops

CHUNK = 64  # the chunked delta rule's block (FLA chunk_gated_delta_rule's BT)


def state_bytes_per_seq(spec, tp: int, layers: int) -> float:
    """Recurrent + conv state of one sequence over `layers` linear layers on one of tp GPUs."""
    hv = spec.linear_value_heads / tp
    return layers * (hv * spec.linear_key_dim * spec.linear_value_dim * spec.linear_state_bytes
                     + layer_shapes.linear_conv_dim(spec) / tp * (spec.linear_conv_kernel - 1) * 2.0)


def proj_gemm_s(spec, tp: int, n_loc, hw, prof=None, st: bool = False):
    """in_proj_qkvz, in_proj_ba and out_proj of one linear layer for n_loc tokens on one of tp GPUs."""
    d, wd = spec.hidden_size, spec.attn_weight_dtype
    hk, hv, dk, dv = spec.linear_key_heads, spec.linear_value_heads, spec.linear_key_dim, spec.linear_value_dim
    return (ops.gemm_time_s(n_loc, (2 * hk * dk + 2 * hv * dv) / tp, d, wd, hw, prof, static_scales=st)
            + ops.gemm_time_s(n_loc, 2 * hv / tp, d, wd, hw, prof, static_scales=st)
            + ops.gemm_time_s(n_loc, d, hv * dv / tp, spec.o_proj_weight_dtype, hw, prof, static_scales=st))


def attention_s(spec, tp: int, prefill_tokens, prefill_seqs, decode_seqs, hw):
    """The delta rule of one linear layer on one of tp GPUs (module docstring): prefill chunks and decode steps."""
    pt, ps, dn = (np.asarray(x, dtype=float) for x in (prefill_tokens, prefill_seqs, decode_seqs))
    hv, dk, dv = spec.linear_value_heads / tp, spec.linear_key_dim, spec.linear_value_dim
    rate = hw.matmul_tflops("bf16") * 1e12 * ops.ATTN_EFF
    pre = pt * hv * (4.0 * dk * dv + 2.0 * CHUNK * (dk + dv)) / rate
    t = np.where(ps > 0, pre + ops.KERNEL_FLOOR_S, 0.0)
    state = hv * dk * dv * spec.linear_state_bytes  # per sequence
    dec = np.maximum(dn * 2.0 * state / (hw.achieved_hbm_gbs * 1e9), dn * hv * 4.0 * dk * dv / rate)
    return t + np.where(dn > 0, dec + ops.KERNEL_FLOOR_S, 0.0)
