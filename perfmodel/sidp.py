"""SiDP (shared-weight intra-node DP) step costs: WaS, CaS, FSDP-style, and the switch point B*.

A DP group of D replicas on one NVLink node stores each layer's FFN weights on one owner
(l mod D); attention stays replicated (SYSTEMS.md section 3). All times come from perfmodel.ops.
Per-replica batches are given per step; every function returns seconds of one group step
(replicas run in lock step at layer granularity, so the slowest replica sets the pace).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import ops
from .batch import decode_batch
from .cost import ACT_BYTES, attention_s, seq_terms
from .framework import DEFAULT_FRAMEWORK, Framework
from .layout import ParallelLayout

VARIANTS = ("was", "cas", "fsdp", "cas-nofuse", "cas-nodummyskip")


@dataclasses.dataclass(frozen=True)
class SiDPConfig:
    """D replicas, K weight cache slots, look-ahead window, peak shifting (SYSTEMS.md 3)."""

    dp: int = 8
    cache_slots: int = 2
    window: int = 1
    peak_shifting: bool = True

    def __post_init__(self):
        if self.dp < 2 or self.cache_slots < 1 or self.window < 1:
            raise ValueError(f"SiDP needs dp >= 2 (got {self.dp}), cache_slots >= 1 ({self.cache_slots}) "
                             f"and window >= 1 ({self.window})")


def ffn_layer_bytes(spec) -> float:
    """Bytes of one layer's FFN weights (all experts for MoE), the unit a WaS fetch moves."""
    return spec.ffn_params_total / spec.num_layers * spec.weight_bytes_per_param


def _ffn_gemm_s(spec, hw, m, prof):
    """One layer's FFN GEMMs on `m` rows with full (unsharded) weights."""
    f, d, wd = spec.dense_ffn_width, spec.hidden_size, spec.weight_dtype
    return ops.gemm_time_s(m, 2 * f, d, wd, hw, prof) + ops.gemm_time_s(m, d, f, wd, hw, prof)


def _attn_part_s(spec, hw, m, ctx, prof):
    """One layer's non-FFN work on one replica: QKV/O GEMMs and decode attention of m sequences."""
    d, q, kv, wd = spec.hidden_size, spec.q_size, spec.kv_size, spec.weight_dtype
    g = ops.gemm_time_s(m, q + 2 * kv, d, wd, hw, prof) + ops.gemm_time_s(m, d, q, wd, hw, prof)
    a = attention_s(spec, ParallelLayout(), hw, decode_batch(m, ctx), prof) / spec.num_layers
    return g + a


def fetch_s(spec, hw, cfg: SiDPConfig) -> float:
    """One non-owner's fetch of a layer's FFN weights over NVLink. Without peak shifting the D-1
    readers of one owner share its egress link; with it each reads a different owner."""
    readers = 1 if cfg.peak_shifting else cfg.dp - 1
    return float(ops.copy_time_s("p2p", ffn_layer_bytes(spec) * readers, hw))


def was_step_s(spec, hw, batch_per_replica, ctx, cfg: SiDPConfig, prof=None, fw: Framework = DEFAULT_FRAMEWORK):
    """Weight-as-a-service decode step: per layer max(compute, fetch) for the (D-1)/D layers a
    replica does not own (K >= 2 slots and a window let fetches overlap compute; one slot
    serialises them), plain compute for the owned ones; plus LM head and step overhead."""
    b = np.asarray(batch_per_replica, dtype=float)
    comp = _attn_part_s(spec, hw, b, ctx, prof) + _ffn_gemm_s(spec, hw, b, prof)
    f = fetch_s(spec, hw, cfg)
    remote = comp + f if cfg.cache_slots == 1 else np.maximum(comp, f)
    L = spec.num_layers
    owned = L // cfg.dp
    t = owned * comp + (L - owned) * remote + f * (cfg.cache_slots > 1)  # first fetch of the step is exposed
    return t + sum(seq_terms(spec, ParallelLayout(), hw, b, prof, fw).values()) + fw.step_overhead_s


def fsdp_step_s(spec, hw, batch_per_replica, ctx, cfg: SiDPConfig, prof=None, fw: Framework = DEFAULT_FRAMEWORK):
    """FSDP-style baseline: every layer's FFN weights all-gathered (blocking collective) before use."""
    b = np.asarray(batch_per_replica, dtype=float)
    comp = _attn_part_s(spec, hw, b, ctx, prof) + _ffn_gemm_s(spec, hw, b, prof)
    ag = ops.collective_time_s("all_gather", ffn_layer_bytes(spec), cfg.dp, hw, prof)
    return spec.num_layers * (comp + ag) + sum(seq_terms(spec, ParallelLayout(), hw, b, prof, fw).values()) \
        + fw.step_overhead_s


def cas_step_s(batches, ctx, spec, hw, cfg: SiDPConfig, variant: str = "cas", prof=None,
               fw: Framework = DEFAULT_FRAMEWORK) -> float:
    """Compute-as-a-service step for one group step with per-replica batches `batches` (length D):
    per layer, non-owners ship FFN inputs (b_r x d) to the owner, which runs one fused GEMM over
    all rows (variant 'cas-nofuse': one GEMM per replica, re-reading the weights each time) and
    returns the outputs. Replicas with no work send nothing ('cas-nodummyskip': a dummy message
    and a dummy GEMM launch each)."""
    b = np.asarray(batches, dtype=float)
    if len(b) != cfg.dp:
        raise ValueError(f"cas_step_s needs {cfg.dp} per-replica batches, got {len(b)}")
    d = spec.hidden_size
    attn = float(np.max(_attn_part_s(spec, hw, np.maximum(b, 1), ctx, prof) * (b > 0))) if b.any() else 0.0
    L = spec.num_layers
    total = 0.0
    for layer in range(L):  # owners rotate; the per-owner cost depends on which replica owns it
        o = layer % cfg.dp
        senders = [r for r in range(cfg.dp) if r != o and (b[r] > 0 or variant == "cas-nodummyskip")]
        rows = float(b.sum())
        ship = float(ops.copy_time_s("p2p", sum(b[r] for r in senders) * d * ACT_BYTES, hw)) if senders else 0.0
        if variant == "cas-nodummyskip":
            ship = max(ship, len(senders) * hw.link_latency_us * 1e-6)
        if variant == "cas-nofuse":
            gemm = float(sum(_ffn_gemm_s(spec, hw, x, prof) for x in b if x > 0))
        else:
            gemm = float(_ffn_gemm_s(spec, hw, rows, prof)) if rows else 0.0
        total += attn + 2 * ship + gemm  # send, fused GEMM on the owner, return
    lm = float(max(sum(seq_terms(spec, ParallelLayout(), hw, x, prof, fw).values()) for x in b))
    return total + lm + fw.step_overhead_s


def b_star(spec, hw, cfg: SiDPConfig, ctx: float = 1024, prof=None, max_batch: int = 4096) -> int:
    """Smallest per-replica batch whose FFN compute hides one layer's weight fetch (SYSTEMS.md 3:
    WaS at or above B*, CaS below)."""
    b = np.arange(1, max_batch + 1, dtype=float)
    comp = _attn_part_s(spec, hw, b, ctx, prof) + _ffn_gemm_s(spec, hw, b, prof)
    ok = np.nonzero(comp >= fetch_s(spec, hw, cfg))[0]
    return int(b[ok[0]]) if len(ok) else max_batch
