"""Memory plan: weights per GPU, KV bytes per token per GPU, KV capacity in tokens.

KV capacity of an instance = (HBM * gpu_memory_utilization - reserve - weights) / KV bytes per
token per GPU (TRT-LLM: (HBM - reserve - weights) * fraction, Framework.kv_fraction_of_free), on the fullest GPU: every GPU of an instance stores a slice of every token's KV
(TP and SP split heads, PP splits layers), so the instance holds as many tokens as one GPU does.
"""
from __future__ import annotations

import dataclasses

from .comm import ep_replicated
from .framework import DEFAULT_FRAMEWORK, Framework, reserve_bytes_of
from .layout import ParallelLayout
from .modelspec import DTYPE_BYTES


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU bytes and the resulting KV capacity of one instance."""

    weight_bytes_per_gpu: float
    extra_bytes_per_gpu: float  # second weight copy (Shift), SiDP cache slots
    kv_bytes_per_token_per_gpu: float
    usable_bytes_per_gpu: float  # HBM * utilisation - reserve
    kv_capacity_tokens: int

    @property
    def fits(self) -> bool:
        return self.kv_capacity_tokens > 0

    @property
    def kv_bytes_per_gpu(self) -> float:
        return max(0.0, self.usable_bytes_per_gpu - self.weight_bytes_per_gpu - self.extra_bytes_per_gpu)


def weight_bytes_per_gpu(spec, layout, ffn_owner_group: int = 1) -> float:
    """Weight bytes on the fullest GPU. TP shards attention/FFN/vocab, PP splits layers (the first
    stage holds the embedding, the last the LM head; both counted on the fullest stage), SP
    replicates, EP splits routed experts (full width) instead of TP. `ffn_owner_group` > 1: SiDP,
    each FFN layer stored on one of that many GPUs."""
    tp, pp = layout.tp, layout.pp
    b = spec.weight_bytes_per_param  # routed experts
    bd = DTYPE_BYTES[spec.dense_weight_dtype]  # dense FFN, shared experts (bf16 under mxfp4)
    layers = max(layout.layers_per_stage(spec.num_layers))
    frac = layers / spec.num_layers
    rep = spec.attn_params_replicated_per_layer  # MLA's q_a/kv_a: whole on every TP rank (0 for GQA)
    # attention: TP-split part (o_proj in its own format) + MLA's replicated down-projections (bf16 or fp8)
    split = spec.attn_bytes_per_layer - rep * DTYPE_BYTES[spec.attn_weight_dtype]
    attn = spec.num_layers * (split / tp + rep * DTYPE_BYTES[spec.attn_weight_dtype]) * frac
    routed = spec.routed_expert_params
    ffn_other = spec.ffn_params_total - routed
    # routed experts: over EP across DP ranks; over all tp ranks when TP-sharded or EP lies inside the TP
    # group (ep < tp also TP-shards each expert over tp / ep)
    routed_split = layout.ep if layout.ep > 1 and not ep_replicated(layout) else tp
    if layout.ep > 1 and spec.num_experts % layout.ep:  # redundant slots: ceil(E / ep) experts per EP rank
        routed = routed / spec.num_experts * layout.expert_slots(spec.num_experts) * layout.ep
    ffn = (ffn_other / tp * bd + routed / routed_split * b) * frac
    ffn = ffn / ffn_owner_group
    hi = DTYPE_BYTES["bf16"]  # embeddings / LM head / norms stay bf16 in fp8 checkpoints
    vocab = spec.vocab_size * spec.hidden_size / tp * hi * (1 if spec.tie_embeddings or pp > 1 else 2)
    norms = spec.norm_params * frac * hi
    return attn + ffn + vocab + norms


def kv_bytes_per_token_per_gpu(spec, layout) -> float:
    """K and V of one token on one GPU: its stage's layers x its KV heads (replicated when
    tp*sp > KV heads) x 2 x head_dim x bytes. MLA: the whole latent, (kv_lora_rank + rope) x bytes per
    layer, on every TP rank (vLLM and SGLang replicate it over TP: it has no heads to split); attention
    DP splits sequences, not tokens (each DP rank is its own instance), so no layout term divides it."""
    layers = max(layout.layers_per_stage(spec.num_layers))
    if spec.is_mla:  # (+ DSA's indexer key, replicated like the latent)
        return float(layers * (spec.kv_elems_per_token_per_layer * spec.kv_bytes_per_elem
                               + spec.indexer_bytes_per_token_per_layer))
    kvh = layout.kv_heads_per_gpu(spec.num_kv_heads)
    if spec.num_linear_layers:  # hybrid: only the full-attention layers cache K and V (their share of the stage)
        layers = layers * spec.num_kv_layers / spec.num_layers
    return 2.0 * layers * kvh * spec.head_dim * spec.kv_bytes_per_elem


def plan(spec, layout, hw, fw: Framework = DEFAULT_FRAMEWORK, extra_bytes_per_gpu: float = 0.0,
         ffn_owner_group: int = 1) -> MemoryPlan:
    """MemoryPlan of one instance of `layout` on `hw` (DP replicas each get their own)."""
    w = weight_bytes_per_gpu(spec, layout, ffn_owner_group)
    kv_tok = kv_bytes_per_token_per_gpu(spec, layout)
    reserve = reserve_bytes_of(fw, layout.tp, layout.pp, hw.hbm_bytes)
    usable = hw.hbm_bytes * fw.gpu_memory_utilization - reserve
    if fw.kv_fraction_of_free:  # TRT-LLM: a fraction of what weights and runtime leave free
        free = max(0.0, hw.hbm_bytes - reserve - w - extra_bytes_per_gpu)
        usable = w + extra_bytes_per_gpu + free * fw.gpu_memory_utilization
    cap = int(max(0.0, usable - w - extra_bytes_per_gpu) // kv_tok)
    return MemoryPlan(w, extra_bytes_per_gpu, kv_tok, usable, cap)


def shift_plan(spec, base, hw, fw: Framework = DEFAULT_FRAMEWORK) -> MemoryPlan:
    """Shift Parallelism: base (SP x TP) weights W/tp plus the shift model (TP = sp*tp) W/(sp*tp)
    on every GPU (separate-models strategy, SYSTEMS.md 2), one KV cache in the base layout."""
    shift = ParallelLayout(tp=base.tp * base.sp, pp=base.pp)
    return plan(spec, base, hw, fw, extra_bytes_per_gpu=weight_bytes_per_gpu(spec, shift))


def sidp_plan(spec, hw, dp: int, tp: int = 1, cache_slots: int = 2,
              fw: Framework = DEFAULT_FRAMEWORK) -> MemoryPlan:
    """SiDP: attention weights replicated, FFN layers owned one per rank of the DP group
    (W_attn + W_ffn/D), plus `cache_slots` buffers of one layer's FFN weights for WaS fetches."""
    layout = ParallelLayout(tp=tp)
    per_layer_ffn = spec.ffn_bytes_total / spec.num_layers / tp
    return plan(spec, layout, hw, fw, extra_bytes_per_gpu=cache_slots * per_layer_ffn, ffn_owner_group=dp)


def cpu_kv_buffer_bytes(hw, fraction: float = 0.5, gpus: int | None = None) -> float:
    """Seesaw's CPU KV store: `fraction` of host memory, shared by the host's GPUs (per GPU). host_mem_bytes
    is one host's: the node's on HGX (8 GPUs), one compute tray's on an NVL72 rack (4 of its 72 GPUs), so
    `gpus` GPUs placed tray by tray there hold ceil(gpus / 4) trays' memory."""
    gpus = gpus or hw.gpus_per_host or hw.gpus_per_node
    hosts = -(-gpus // hw.gpus_per_host) if hw.gpus_per_host else 1
    return hw.host_mem_bytes * hosts * fraction / gpus
