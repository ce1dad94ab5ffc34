"""Parameter and cache counts of the attention variants beside softmax attention, from a ModelSpec's fields
(ModelSpec's properties call these; the costs live in perfmodel/mla.py and perfmodel/linear_attn.py)."""
from __future__ import annotations


def hybrid_mean(spec, full, linear):
    """A per-layer figure of a hybrid model as the mean over its layers: `full` on the num_kv_layers
    full-attention ones, `linear` on the num_linear_layers Gated DeltaNet ones (so that num_layers x it is the
    total, as every per-layer count and cost is used)."""
    return (full * spec.num_kv_layers + linear * spec.num_linear_layers) / spec.num_layers


def indexer_params(spec) -> int:
    """DSA's lightning indexer, whole on every TP rank (SGLang 0.5.8 nsa_indexer.py:170-192: ReplicatedLinear
    wq_b q_rank -> heads x dim, wk d -> dim, weights_proj d -> heads, a LayerNorm of dim); 0 without DSA."""
    if not spec.sparse_topk:
        return 0
    hi, di = spec.indexer_heads, spec.indexer_head_dim
    return (spec.q_lora_rank or spec.hidden_size) * hi * di + spec.hidden_size * (di + hi) + 2 * di


def indexer_bytes(spec) -> float:
    """DSA's cached indexer key of one token in one layer: index_head_dim fp8 bytes + one fp32 scale per 128
    (SGLang 0.5.8 model_runner_kv_cache_mixin.py:70-79, NSATokenToKVPool.quant_block_size 128); 0 without."""
    if not spec.sparse_topk:
        return 0.0
    return float(spec.indexer_head_dim + spec.indexer_head_dim // 128 * 4)


def linear_conv_dim(spec) -> int:
    """Channels of a Gated DeltaNet layer's causal conv: q, k (key heads x key dim each) and v."""
    return 2 * spec.linear_key_heads * spec.linear_key_dim + spec.linear_value_heads * spec.linear_value_dim


def linear_params(spec) -> int:
    """One Gated DeltaNet layer (HF modeling_qwen3_next.py Qwen3NextGatedDeltaNet): in_proj_qkvz d -> 2 Hk Dk +
    2 Hv Dv, in_proj_ba d -> 2 Hv, the depthwise conv (conv_dim x kernel), A_log and dt_bias (Hv each), an
    RMSNorm of Dv, out_proj Hv Dv -> d; 0 without linear layers."""
    if not spec.num_linear_layers:
        return 0
    d, hk, hv = spec.hidden_size, spec.linear_key_heads, spec.linear_value_heads
    dk, dv = spec.linear_key_dim, spec.linear_value_dim
    return d * (2 * hk * dk + 2 * hv * dv) + d * 2 * hv + linear_conv_dim(spec) * spec.linear_conv_kernel \
        + 2 * hv + dv + hv * dv * d
