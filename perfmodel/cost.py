"""Step cost: the time of one engine step of one model instance, broken into named terms.

`step_cost(spec, layout, hw, batch)` -> StepCost with terms (seconds, arrays over steps):
gemm, attention, elementwise, all_reduce, all_gather, all_to_all, send_recv, pipeline_bubble,
overhead. One instance = tp*pp*sp GPUs (a DP replica); DP adds no per-step term. Work is that
of the busiest GPU (first pipeline stage); every GPU of a stage runs in lock step.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import linear_attn, misc_kernels, mla, ops
from .batch import StepBatch, micro_batch
from .calibration.moe_shapes import shape_key
from .comm import ep_replicated, padded_tokens, placed, step_calls
from .framework import DEFAULT_FRAMEWORK, Framework, graph_tokens
from .graphs import capture_sizes
from .layer_shapes import hybrid_mean
from .knobs import moe_ep_imbalance, moe_routing
from .network import spanning_time_s

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


def expert_gemm_formula_s(spec, layout, hw, n_loc, prof, imbalance: float = 1.0):
    """(seconds, m_e) of the routed-expert FFN of one MoE layer on one GPU as per-expert GEMMs of the
    hit experts (uncalibrated formula; m_e = rows per hit expert under uniform routing). `imbalance`
    (EP only): the busiest rank is routed `imbalance` x the mean rows on the experts uniform routing
    would hit there (skew concentrates rows on popular experts: more rows per expert, never more experts
    hit, so decode's weight reads stay those of uniform routing and prefill's FLOPs grow)."""
    E, k, d = spec.num_experts, spec.experts_per_token, spec.hidden_size
    if layout.ep > 1:  # experts split over EP ranks, full width; tokens from the whole EP group
        # (all of the instance's tokens when EP lies inside the TP group: they are replicated there)
        # EP inside the TP group with ep < tp: each expert is also TP-sharded over tp / ep ranks (TRT-LLM's
        # moe_tp_size x moe_expert_parallel_size = tensor_parallel_size, SGLang's --ep-size < --tp-size)
        rep = ep_replicated(layout)
        n_group = n_loc if rep else n_loc / layout.tp * layout.ep
        experts_here = E / layout.ep
        width = spec.intermediate_size / (layout.tp // layout.ep if rep else 1)
    else:  # experts TP-sharded: every GPU holds 1/tp of every expert
        n_group, experts_here, width, imbalance = n_loc, E, spec.intermediate_size / layout.tp, 1.0
    hit = 1.0 - (1.0 - k / E) ** n_group  # chance an expert gets >= 1 token (uniform routing)
    rows = n_group * k * experts_here / E * imbalance  # routed rows landing on the busiest GPU
    if layout.ep > 1 and E % layout.ep:  # ceil(E / ep) slots a rank, redundant copies splitting hot experts'
        experts_here = layout.expert_slots(E)  # load (layout.expert_slots): the mean rows, more weights read
    active = np.maximum(experts_here * hit, 1e-9)
    m_e = rows / active
    wd = spec.weight_dtype
    # a fused MoE kernel (vLLM's fused_moe) is one launch over the hit experts: the same FLOPs and
    # weight bytes as one GEMM of m_e rows against `active` experts' weights side by side
    per = ops.gemm_time_s(m_e, 2 * width * active, d, wd, hw, prof) + ops.gemm_time_s(m_e, d * active, width, wd, hw, prof)
    return np.where(n_loc > 0, per, 0.0), m_e


def _expert_gemm_s(spec, layout, hw, n_loc, prof, fw: Framework = DEFAULT_FRAMEWORK):
    """Routed-expert FFN of one MoE layer on one GPU: the formula above, times the profile's measured
    fused-MoE slowdown for fw's kernels and the weight format (profile `moe` section,
    perfmodel/calibration/moe.py) where the profile has one; else the formula alone. The factor is read
    from the table measured under the model family's routing skew (knobs.moe_routing) and was fitted
    against this formula with the default busiest-rank rows (knobs.moe_ep_imbalance), so the product
    reproduces the measured skewed kernel; fw.moe_imbalance, where set, moves the formula's busiest-rank
    rows only."""
    imb = fw.moe_imbalance if fw.moe_imbalance is not None else moe_ep_imbalance(layout.ep)
    t, m_e = expert_gemm_formula_s(spec, layout, hw, n_loc, prof, imb)
    factor = getattr(prof, "moe_factor", None)
    if factor is not None:
        mode, split = ("ep", layout.ep) if layout.ep > 1 else ("tp", layout.tp)
        keys = (fw.name, spec.weight_dtype, mode)
        f = factor(*keys, split, m_e, fw.moe_kernel, moe_routing(spec))
        if f is not None:
            # the kernel's fixed time per layer (its table's floor_ms: launches, routing, the alignment
            # pass; taken out before the ratio was fitted) + the ratio on the formula's weight/FLOP time
            t = np.where(n_loc > 0, prof.moe_floor_s(*keys, fw.moe_kernel, moe_routing(spec)), 0.0) + t * f
            # a shape the table measured itself (a bundled preset's): its own points, not the cross-shape fit
            shape = shape_key(spec.hidden_size, spec.intermediate_size, spec.num_experts, spec.experts_per_token)
            t = t * prof.moe_shape_factor(*keys, split, m_e, shape, fw.moe_kernel, moe_routing(spec))
    return t


def dispatches_experts(layout) -> bool:
    """EP across attention-DP ranks (`dp=w,ep=w`): each rank's routed experts serve the tokens of the whole
    EP group, so their time depends on the group's load, not the costed rank's alone."""
    return layout.ep > 1 and not ep_replicated(layout)


def routed_experts_s(spec, layout, hw, rank_tokens, prof=None, fw: Framework = DEFAULT_FRAMEWORK):
    """Routed experts of every MoE layer of the busiest stage on the busiest GPU, when the attention-DP
    ranks of the EP group hold `rank_tokens` (CUDA-graph padded) tokens each on average. With
    rank_tokens = the costed rank's own tokens this is the routed part of token_terms (equal load)."""
    n_loc = padded_tokens(rank_tokens, layout.sp) / layout.sp
    return _stage_layers(spec, layout)[1] * _expert_gemm_s(spec, layout, hw, n_loc, prof, fw)


def _layer_gemm_ew_s(spec, layout, hw, tokens, moe: bool, prof, fw: Framework, routed: bool = True):
    """(gemm, elementwise) seconds of one layer on one GPU for `tokens` new tokens (routed=False: without
    the routed experts, which routed_experts_s costs from the EP group's load)."""
    tp, sp = layout.tp, layout.sp
    d, dh, wd = spec.hidden_size, spec.head_dim, spec.dense_weight_dtype  # (routed experts: spec.weight_dtype)
    wa, wo = spec.attn_weight_dtype, spec.o_proj_weight_dtype  # attention projections (modelspec)
    n_loc = padded_tokens(tokens, sp) / sp
    st = spec.fp8_scales == "static" and fw.own_fp8_gemm_table  # no compute-scale pass (calibration/fp8_scale.py)
    if spec.is_mla:  # q_a/kv_a replicated, q_b/o over heads (kv_b: in attention, perfmodel/mla.py)
        q_tp, kv_tp = mla.ew_widths(spec, tp)
        gemm = mla.proj_gemm_s(spec, tp, n_loc, hw, prof, st)
    else:
        q_tp = spec.num_heads // tp * dh
        kv_tp = max(1, spec.num_kv_heads // tp) * dh
        gate = q_tp if spec.attn_output_gate else 0  # (Qwen3-Next / 3.5: q_proj also emits the output gate)
        gemm = (ops.gemm_time_s(n_loc, q_tp + gate + 2 * kv_tp, d, wa, hw, prof, static_scales=st)
                + ops.gemm_time_s(n_loc, d, q_tp, wo, hw, prof, static_scales=st))
        if spec.num_linear_layers:  # hybrid: the mean over the full and the Gated DeltaNet layers
            gemm = hybrid_mean(spec, gemm, linear_attn.proj_gemm_s(spec, tp, n_loc, hw, prof, st))
    if moe:
        gemm = gemm + ops.gemm_time_s(n_loc, spec.num_experts, d, "bf16", hw, prof)  # router
        if routed:
            gemm = gemm + _expert_gemm_s(spec, layout, hw, n_loc, prof, fw)
        f = spec.shared_expert_size / tp
    else:
        f = spec.dense_ffn_width / tp
    if f:  # the dense FFN, or the shared expert
        gemm = (gemm + ops.gemm_time_s(n_loc, 2 * f, d, wd, hw, prof, static_scales=st)
                + ops.gemm_time_s(n_loc, d, f, wd, hw, prof, static_scales=st))
    # norms (2 x read+write n*d), rotary (q, k), SiLU*mul (read 2f write f), residual adds, KV write
    f_tp = (spec.dense_ffn_width if not moe else spec.intermediate_size * spec.experts_per_token) / tp
    ew_bytes = n_loc * ACT_BYTES * (8 * d + 3 * f_tp + 2 * (q_tp + kv_tp))
    misc_s = misc_kernels.per_layer(fw, spec, tp, moe) * fw.misc_kernel_floor_s  # launch floors (perfmodel/misc_kernels.py)
    elementwise = ops.elementwise_time_s(ew_bytes, hw) + misc_s
    return gemm, np.where(n_loc > 0, elementwise, 0.0)


def _any(x) -> bool:
    """np.any(x), without its ~2 us per call for one number (StepTable asks one step at a time)."""
    return bool(x) if isinstance(x, (int, float)) else bool(np.any(x))


def _heads_per_gpu(spec, layout) -> tuple[int, int]:
    """(query heads, KV heads) of one GPU: split over tp x sp (Ulysses), at least one KV head."""
    shards = layout.tp * layout.sp
    return spec.num_heads // shards, max(1, spec.num_kv_heads // shards)


def _layer_attention_s(spec, layout, hw, batch: StepBatch, prof):
    """Attention of one layer on one GPU: all tokens of the step (after the Ulysses all-to-all),
    this GPU's heads; sliding-window layers read at most `sliding_window` keys per query."""
    shards = layout.tp * layout.sp
    heads, kvh = _heads_per_gpu(spec, layout)
    dh = spec.head_dim
    win_frac = spec.num_sliding_layers / spec.num_layers if spec.sliding_window else 0.0
    pairs, pkv, dkv = batch.prefill_pairs, batch.prefill_kv_tokens, batch.decode_kv_tokens
    if win_frac:
        w = spec.sliding_window
        dkv = dkv * (1 - win_frac) + np.minimum(dkv, batch.decode_seqs * w) * win_frac
        pairs = pairs * (1 - win_frac) + np.minimum(pairs, batch.prefill_tokens * w) * win_frac
        pkv = pkv * (1 - win_frac) + np.minimum(pkv, batch.prefill_seqs * w + batch.prefill_tokens) * win_frac
    if spec.is_mla:  # latent KV, non-absorbed prefill / absorbed decode (no SP: layout.validate refuses it)
        return mla.attention_s(spec, layout.tp, batch, pairs, pkv, dkv, hw, prof,
                               _any(batch.prefill_seqs), _any(batch.decode_seqs))
    t = np.zeros(np.shape(batch.decode_seqs))
    if _any(batch.prefill_seqs):  # (skipped for decode-only steps: the simulator's hot path)
        t = t + ops.attn_prefill_time_s(pairs, pkv, batch.prefill_seqs, heads, kvh, dh, spec.kv_dtype, hw, prof)
    if _any(batch.decode_seqs):
        t = t + ops.attn_decode_time_s(batch.decode_seqs, dkv, heads, kvh, dh, spec.kv_dtype, hw, prof)
    if spec.num_linear_layers:  # hybrid: the mean over the full and the Gated DeltaNet layers
        t = hybrid_mean(spec, t, linear_attn.attention_s(spec, shards, batch.prefill_tokens, batch.prefill_seqs,
                                                         batch.decode_seqs, hw))
    return t


def _stage_layers(spec, layout) -> tuple[int, int]:
    """(dense layers, MoE layers) of the busiest pipeline stage."""
    layers = max(layout.layers_per_stage(spec.num_layers))
    n_moe = round(layers * spec.num_moe_layers / spec.num_layers)
    return layers - n_moe, n_moe


def _collective_s(c, layout, hw, prof, fw: Framework):
    """Seconds of one Call entry (all its calls) on the stage; a group spanning nodes (ranks placed
    node-major, hw.gpus_per_node per node) is costed hierarchically by perfmodel.network."""
    c = placed(c, layout, hw.gpus_per_node)
    if c.nodes > 1:
        t = spanning_time_s(c, hw, prof)
        if fw.moe_a2a_call_s and c.where in ("moe_dispatch", "moe_combine"):  # DeepEP normal mode (Framework)
            t = t + np.where(np.asarray(c.size_bytes) > 0, fw.moe_a2a_call_s, 0.0)
        if c.where.startswith("ulysses"):
            t = t + np.where(np.asarray(c.size_bytes) > 0, fw.eager_op_overhead_s, 0.0)
    elif c.op == "all_reduce":
        t = ops.all_reduce_time_s(c.size_bytes, c.group, hw, prof, custom=fw.custom_all_reduce)
    else:
        t = ops.collective_time_s(c.op, c.size_bytes, c.group, hw, prof)
        if c.where.startswith("ulysses"):
            t = t + np.where(np.asarray(c.size_bytes) > 0, fw.eager_op_overhead_s, 0.0)
    if c.where == "logits":  # once per step on the last stage, spread over the pp stage-times
        t = t / layout.pp
    return c.calls * t


def token_terms(spec, layout, hw, tokens, prof=None, fw: Framework = DEFAULT_FRAMEWORK,
                routed: bool = True) -> dict:
    """Terms of one micro-batch on the busiest stage that depend only on its token count:
    layer GEMMs, elementwise kernels and every collective but the logits gather (routed=False:
    without the routed experts, routed_experts_s)."""
    tokens = np.asarray(tokens, dtype=float)
    terms = {t: np.zeros_like(tokens) for t in TERMS}
    for moe, count in zip((False, True), _stage_layers(spec, layout)):
        if count:
            g, e = _layer_gemm_ew_s(spec, layout, hw, tokens, moe, prof, fw, routed)
            terms["gemm"] = terms["gemm"] + count * g
            terms["elementwise"] = terms["elementwise"] + count * e
    host = sum(_stage_layers(spec, layout)) * hw.host_layer_s + hw.host_step_s  # eager host time (a CPU's; 0 on GPUs)
    for c in step_calls(spec, layout, tokens, np.zeros_like(tokens), ACT_BYTES):
        if c.where != "logits":
            terms[c.op] = terms[c.op] + _collective_s(c, layout, hw, prof, fw)
            per = hw.host_all_to_all_s if c.op == "all_to_all" and hw.host_all_to_all_s else hw.host_collective_s
            host = host + c.calls * per
    if hw.host_layer_s or hw.host_collective_s or hw.host_step_s:
        terms["overhead"] = terms["overhead"] + np.where(tokens > 0, host, 0.0)
    return terms


def seq_terms(spec, layout, hw, seqs, prof=None, fw: Framework = DEFAULT_FRAMEWORK) -> dict:
    """Terms that depend only on the sequences of the step: the LM head on each sequence's last
    token (vocab-parallel, bf16 even in fp8 checkpoints) and the logits all-gather; with PP the last
    stage runs them, charged as 1/pp of each of the pp stage-times."""
    seqs = np.asarray(seqs, dtype=float)
    seqs_loc = np.ceil(seqs / layout.sp)
    gemm = ops.gemm_time_s(seqs_loc, spec.vocab_size / layout.tp, spec.hidden_size, "bf16", hw, prof) / layout.pp
    terms = {"gemm": gemm, "all_gather": np.zeros_like(seqs)}
    for c in step_calls(spec, layout, np.zeros_like(seqs), seqs, ACT_BYTES):
        if c.where == "logits":
            terms[c.op] = terms[c.op] + _collective_s(c, layout, hw, prof, fw)
    return terms


def attention_s(spec, layout, hw, batch: StepBatch, prof=None) -> np.ndarray:
    """Attention of one micro-batch over every layer of the busiest stage."""
    return stage_layers(spec, layout) * _layer_attention_s(spec, layout, hw, batch, prof)


def stage_layers(spec, layout) -> int:
    """Layers of the busiest pipeline stage (attention_s = this x one layer's)."""
    return sum(_stage_layers(spec, layout))



def scalar_prefill_attention(spec, layout, prof):
    """f(pairs, kv_tokens, seqs) -> float, a PrefillPoint (compiled: calibration/point.py): attention_s of a
    prefill-only step of Python floats, where a profile's one prefill table answers it (plain attention: no MLA,
    sliding window or linear layers; a table at exactly this head_dim; no derived bandwidth rescaling): the same
    numbers without the array plumbing around them (issue 36: prefill attention was ~10% of an overloaded run).
    None otherwise: attention_s."""
    if prof is None or spec.is_mla or spec.sliding_window or spec.num_linear_layers:
        return None
    tab = prof.prefill_table(spec.head_dim)
    if tab is None:
        return None
    heads, kvh = _heads_per_gpu(spec, layout)
    return tab.point(heads, kvh, spec.head_dim, prof.roof, stage_layers(spec, layout))  # (compiled: point.py)


def _stage_s(spec, layout, hw, batch: StepBatch, prof, fw: Framework, load_share: float = 1.0) -> dict:
    """Terms of one micro-batch through the busiest pipeline stage."""
    # a CUDA-graph step runs at its captured size: every term but attention and the LM head (applied to
    # the sampled rows outside the graph) pays for the padding
    sizes = capture_sizes(fw, layout, hw.hbm_bytes)
    tokens = graph_tokens(batch.tokens, np.asarray(batch.prefill_seqs) == 0, fw, sizes)
    if load_share != 1.0 and dispatches_experts(layout) and spec.num_moe_layers:
        terms = token_terms(spec, layout, hw, tokens, prof, fw, routed=False)
        terms["gemm"] = terms["gemm"] + routed_experts_s(spec, layout, hw, tokens * load_share, prof, fw)
    else:
        terms = token_terms(spec, layout, hw, tokens, prof, fw)
    for k, v in seq_terms(spec, layout, hw, batch.seqs, prof, fw).items():
        terms[k] = terms[k] + v
    terms["attention"] = terms["attention"] + attention_s(spec, layout, hw, batch, prof)
    return terms


def step_cost(spec, layout, hw, batch: StepBatch, prof=None, fw: Framework = DEFAULT_FRAMEWORK,
              load_share: float = 1.0) -> StepCost:
    """Time of one engine step of one instance: every scheduled sequence advances by its new tokens.

    `load_share`: where the instance is one attention-DP rank of an EP group (dispatches_experts), the
    group's mean tokens per rank over this rank's: its routed experts serve the whole group (1, equal
    load, the default; 1 / dp for a rank busy alone beside idle ones, as a lock-step tick costs it).

    PP: the batch is split into m = min(pp, seqs) micro-batches, the largest pacing the pipeline;
    in steady state the pipeline holds pp micro-batches in flight, so a step takes pp stage-times
    of the largest micro-batch, (pp - m) of them idle
    (pipeline_bubble). m = pp re-reads each stage's weights pp times per step (SYSTEMS.md 1).
    """
    pp = layout.pp
    if pp > 1:
        m = np.clip(np.minimum(pp, batch.seqs), 1, None)
        stage = _stage_s(spec, layout, hw, micro_batch(batch, m), prof, fw, load_share)
        stage_total = sum(stage.values())
        terms = {k: v * m for k, v in stage.items()}
        terms["pipeline_bubble"] = np.where(batch.tokens > 0, (pp - m) * stage_total, 0.0)
    else:
        terms = _stage_s(spec, layout, hw, batch, prof, fw, load_share)
    terms["overhead"] = terms["overhead"] + np.where(batch.tokens > 0, fw.step_overhead_s, 0.0) \
        + hw.host_prefill_seq_s * batch.prefill_seqs \
        + fw.seq_overhead_s * (batch.prefill_seqs + batch.decode_seqs)  # (host_prefill_seq_s: a CPU loop's, 0 on GPUs)
    if fw.host_floor_s > 0 or fw.host_floor_seq_s > 0:  # an overlapped loop's host floor: the GPU waits for it
        seqs = batch.prefill_seqs + batch.decode_seqs  # (as overhead: max(kernels + overhead, floor), runner.py)
        floor = np.where(batch.tokens > 0, fw.host_floor_s + fw.host_floor_seq_s * seqs, 0.0)
        terms["overhead"] = terms["overhead"] + np.maximum(floor - sum(terms.values()), 0.0)
    return StepCost(terms)
