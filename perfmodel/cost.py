"""Step cost: the time of one engine step of one model instance, broken into named terms.

`step_cost(spec, layout, hw, batch)` -> StepCost with terms (seconds, arrays over steps):
gemm, attention, elementwise, all_reduce, all_gather, all_to_all, send_recv, pipeline_bubble,
overhead. One instance = tp*pp*sp GPUs (a DP replica); DP adds no per-step term. Work is that
of the busiest GPU (first pipeline stage); every GPU of a stage runs in lock step.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import ops
from .batch import Batch
from .comm import padded_tokens, step_calls
from .framework import DEFAULT_FRAMEWORK, Framework

TERMS = ("gemm", "attention", "elementwise", "all_reduce", "all_gather", "all_to_all",
         "reduce_scatter", "send_recv", "pipeline_bubble", "overhead")
ACT_BYTES = 2.0  # bf16 activations and messages


@dataclasses.dataclass(frozen=True)
class StepCost:
    """Named time terms of a step (seconds; arrays when the batch is an array of steps)."""

    terms: dict

    @property
    def total_s(self) -> np.ndarray:
        return sum(self.terms.values())

    def breakdown(self, index=None) -> dict:
        """{term: seconds} of one step (index into arrays) as plain floats."""
        return {k: float(np.asarray(v).ravel()[index or 0]) for k, v in self.terms.items()}


def _expert_gemm_s(spec, layout, hw, n_loc, prof):
    """Routed-expert FFN of one MoE layer on one GPU, as per-expert GEMMs of the hit experts."""
    E, k, d = spec.num_experts, spec.experts_per_token, spec.hidden_size
    if layout.ep > 1:  # experts split over EP ranks, full width; tokens from the whole EP group
        n_group = n_loc / layout.tp * layout.ep
        experts_here, width = E / layout.ep, spec.intermediate_size
    else:  # experts TP-sharded: every GPU holds 1/tp of every expert
        n_group, experts_here, width = n_loc, E, spec.intermediate_size / layout.tp
    hit = 1.0 - (1.0 - k / E) ** n_group  # chance an expert gets >= 1 token (uniform routing)
    active = np.maximum(experts_here * hit, 1e-9)
    rows = n_group * k * experts_here / E  # routed rows landing on this GPU
    m_e = rows / active
    wd = spec.weight_dtype
    per = ops.gemm_time_s(m_e, 2 * width, d, wd, hw, prof) + ops.gemm_time_s(m_e, d, width, wd, hw, prof)
    return np.where(n_loc > 0, active * per, 0.0)


def _layer_compute_s(spec, layout, hw, batch: Batch, moe: bool, prof, fw: Framework):
    """(gemm, attention, elementwise) seconds of one layer on one GPU."""
    tp, sp = layout.tp, layout.sp
    d, dh, wd = spec.hidden_size, spec.head_dim, spec.weight_dtype
    n_loc = padded_tokens(batch.tokens, sp) / sp
    q_tp = spec.num_heads // tp * dh
    kv_tp = max(1, spec.num_kv_heads // tp) * dh
    gemm = (ops.gemm_time_s(n_loc, q_tp + 2 * kv_tp, d, wd, hw, prof)
            + ops.gemm_time_s(n_loc, d, q_tp, wd, hw, prof))
    if moe:
        gemm = gemm + ops.gemm_time_s(n_loc, spec.num_experts, d, "bf16", hw, prof)  # router
        gemm = gemm + _expert_gemm_s(spec, layout, hw, n_loc, prof)
        if spec.shared_expert_size:
            f = spec.shared_expert_size / tp
            gemm = gemm + ops.gemm_time_s(n_loc, 2 * f, d, wd, hw, prof) + ops.gemm_time_s(n_loc, d, f, wd, hw, prof)
    else:
        f = spec.dense_ffn_width / tp
        gemm = gemm + ops.gemm_time_s(n_loc, 2 * f, d, wd, hw, prof) + ops.gemm_time_s(n_loc, d, f, wd, hw, prof)
    # attention after the Ulysses all-to-all: all tokens, this GPU's heads
    shards = tp * sp
    heads = spec.num_heads // shards
    kvh = max(1, spec.num_kv_heads // shards)
    win_frac = spec.num_sliding_layers / spec.num_layers if spec.sliding_window else 0.0
    pairs, pkv, dkv = batch.prefill_pairs, batch.prefill_kv_tokens, batch.decode_kv_tokens
    if win_frac:  # sliding layers read at most `sliding_window` keys per query
        w = spec.sliding_window
        dkv = dkv * (1 - win_frac) + np.minimum(dkv, batch.decode_seqs * w) * win_frac
        pairs = pairs * (1 - win_frac) + np.minimum(pairs, batch.prefill_tokens * w) * win_frac
        pkv = pkv * (1 - win_frac) + np.minimum(pkv, batch.prefill_seqs * w + batch.prefill_tokens) * win_frac
    attn = (ops.attn_prefill_time_s(pairs, pkv, batch.prefill_seqs, heads, kvh, dh, spec.kv_dtype, hw, prof)
            + ops.attn_decode_time_s(batch.decode_seqs, dkv, heads, kvh, dh, spec.kv_dtype, hw, prof))
    # norms (2 x read+write n*d), rotary (q, k), SiLU*mul (read 2f write f), residual adds, KV write
    f_tp = (spec.dense_ffn_width if not moe else spec.intermediate_size * spec.experts_per_token) / tp
    ew_bytes = n_loc * ACT_BYTES * (8 * d + 3 * f_tp + 2 * (q_tp + kv_tp))
    elementwise = ops.elementwise_time_s(ew_bytes, hw) + fw.misc_kernels_per_layer * fw.misc_kernel_floor_s
    return gemm, attn, np.where(n_loc > 0, elementwise, 0.0)


def _stage_s(spec, layout, hw, batch: Batch, prof, fw: Framework) -> dict:
    """Terms of one micro-batch through the busiest pipeline stage (first stage: embedding)."""
    layers = max(layout.layers_per_stage(spec.num_layers))
    n_moe = round(layers * spec.num_moe_layers / spec.num_layers)
    terms = {t: np.zeros_like(batch.tokens) for t in TERMS}
    for moe, count in ((False, layers - n_moe), (True, n_moe)):
        if count:
            g, a, e = _layer_compute_s(spec, layout, hw, batch, moe, prof, fw)
            terms["gemm"] = terms["gemm"] + count * g
            terms["attention"] = terms["attention"] + count * a
            terms["elementwise"] = terms["elementwise"] + count * e
    # LM head on the last tokens (vocab-parallel, bf16 even for fp8 checkpoints); with PP the last
    # stage runs it, charged here as if one stage did all (stages are balanced to within a layer).
    seqs_loc = np.ceil(batch.seqs / layout.sp)
    terms["gemm"] = terms["gemm"] + ops.gemm_time_s(seqs_loc, spec.vocab_size / layout.tp,
                                                    spec.hidden_size, "bf16", hw, prof) / layout.pp
    for c in step_calls(spec, layout, batch.tokens, batch.seqs, ACT_BYTES):
        if c.op == "all_reduce":
            t = ops.all_reduce_time_s(c.size_bytes, c.group, hw, prof, custom=fw.custom_all_reduce)
        else:
            t = ops.collective_time_s(c.op, c.size_bytes, c.group, hw, prof)
            if c.where.startswith("ulysses"):
                t = t + np.where(np.asarray(c.size_bytes) > 0, fw.eager_op_overhead_s, 0.0)
        if c.where in ("logits", "pp_stage"):
            t = t / layout.pp if c.where == "logits" else t
        terms[c.op] = terms[c.op] + c.calls * t
    return terms


def step_cost(spec, layout, hw, batch: Batch, prof=None, fw: Framework = DEFAULT_FRAMEWORK) -> StepCost:
    """Time of one engine step of one instance: every scheduled sequence advances by its new tokens.

    PP: the batch is split into m = min(pp, seqs) micro-batches; in steady state the pipeline
    holds pp micro-batches in flight, so a step takes pp stage-times, (pp - m) of them idle
    (pipeline_bubble). m = pp re-reads each stage's weights pp times per step (SYSTEMS.md 1).
    """
    pp = layout.pp
    if pp > 1:
        m = np.clip(np.minimum(pp, batch.seqs), 1, None)
        stage = _stage_s(spec, layout, hw, batch.scaled(1.0 / m), prof, fw)
        stage_total = sum(stage.values())
        terms = {k: v * m for k, v in stage.items()}
        terms["pipeline_bubble"] = np.where(batch.tokens > 0, (pp - m) * stage_total, 0.0)
    else:
        terms = _stage_s(spec, layout, hw, batch, prof, fw)
    terms["overhead"] = np.where(batch.tokens > 0, fw.step_overhead_s, 0.0)
    return StepCost(terms)
