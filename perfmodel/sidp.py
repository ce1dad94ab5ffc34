"""SiDP (shared-weight intra-node DP) step costs: WaS, CaS (v1/v2/v3), FSDP-style, and B*.

A DP group of D replicas on one NVLink node stores layer l's FFN weights only on owner l mod D;
attention stays replicated (SYSTEMS.md 3). Every function takes the replica's *local* step time
(the same step on an ordinary TP instance holding all weights: perfmodel.cost / StepTable) and adds
what SiDP changes: the remote weight fetches (WaS), the activation round trips and the owner's
GEMM (CaS), or a blocking all-gather (FSDP). All terms come from perfmodel.ops and the hardware
profile (NVLink p2p bandwidth and latency, send_recv alpha-beta, all_gather alpha-beta).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import ops
from .batch import decode_batch
from .cost import ACT_BYTES, step_cost
from .framework import DEFAULT_FRAMEWORK, Framework, SchedulerLimits
from .knobs import SIDP_B_STAR_CONTEXT_TOKENS, SIDP_HYSTERESIS_DECISIONS
from .layout import ParallelLayout

CAS_VARIANTS = {  # name: (owner fuses all rows into one GEMM, replicas with no work send nothing)
    "v1": (False, False),  # async P2P activations only (SiDP paper's 25 s row)
    "v2": (True, False),  # + owner GEMM fusion (19 s)
    "v3": (True, True),  # + dummy skipping (12 s): the default
}
# What-if, not in SYSTEMS.md: replicas staggered by a layer, so at any moment each owner serves one
# replica (no fusion) and all owners work at once; see cas_step_s.
STAGGERED = "staggered"
# B*'s search bound: vLLM's largest default token budget, so no replica decodes more rows in a step
MAX_ROWS = SchedulerLimits().max_num_batched_tokens


@dataclasses.dataclass(frozen=True)
class SiDPConfig:
    """D replicas of `tp` GPUs each, K weight cache slots, look-ahead window, peak shifting."""

    dp: int = 8
    tp: int = 1
    cache_slots: int = 2
    window: int = 1
    peak_shifting: bool = True
    cas_variant: str = "v3"

    def __post_init__(self):
        if self.dp < 2 or self.tp < 1 or self.cache_slots < 1 or self.window < 1:
            raise ValueError(f"SiDP needs dp >= 2 (got {self.dp}), tp >= 1 ({self.tp}), cache_slots >= 1 "
                             f"({self.cache_slots}) and window >= 1 ({self.window})")
        if self.cas_variant not in (*CAS_VARIANTS, STAGGERED):
            raise ValueError(f"cas_variant={self.cas_variant!r}: one of {', '.join(CAS_VARIANTS)}, {STAGGERED}")


def ffn_layer_bytes(spec, tp: int = 1) -> float:
    """Bytes of one layer's FFN weights on one GPU of a replica (the unit a WaS fetch moves)."""
    return spec.ffn_bytes_total / spec.num_layers / tp


def ffn_gemm_s(spec, hw, rows, tp: int = 1, prof=None):
    """One layer's FFN GEMMs (gate/up, down) on `rows` tokens with the replica's 1/tp of the weights."""
    f, d, wd = spec.dense_ffn_width / tp, spec.hidden_size, spec.dense_weight_dtype
    return ops.gemm_time_s(rows, 2 * f, d, wd, hw, prof) + ops.gemm_time_s(rows, d, f, wd, hw, prof)


def owned_layers(spec, dp: int, rank: int = 0) -> int:
    """Layers whose FFN rank `rank` owns (l mod D == rank)."""
    return len(range(rank, spec.num_layers, dp))


def fetch_s(spec, hw, cfg: SiDPConfig, prof=None) -> float:
    """One non-owner's fetch of a layer's FFN shard over NVLink (one-sided p2p copy). Without peak
    shifting the D-1 readers hit the same owner at once and share its egress link."""
    readers = 1 if cfg.peak_shifting else cfg.dp - 1
    return float(ops.copy_time_s("p2p", ffn_layer_bytes(spec, cfg.tp) * readers, hw, prof))


def was_step_s(local_s, spec, hw, cfg: SiDPConfig, rank: int = 0, prof=None,
               fw: Framework = DEFAULT_FRAMEWORK):
    """Weight-as-a-service step. c = per-layer compute of the local step, f = fetch time:
    one slot: fetch then compute, L c + R f (R = remote layers); K >= 2 slots, window 1: the next
    remote layer streams in while this one computes, (L - R) c + R max(c, f); window w >= 2 with
    K >= w + 1 slots: the link streams continuously across owned layers, max(L c, R f). The first
    remote fetch of a step is exposed (the slots hold the previous step's layers)."""
    local = np.asarray(local_s, dtype=float)
    L = spec.num_layers
    R = L - owned_layers(spec, cfg.dp, rank)
    f = fetch_s(spec, hw, cfg, prof)
    over = np.where(local > 0, fw.step_overhead_s, 0.0)
    c = (local - over) / L
    if cfg.cache_slots == 1:
        body = L * c + R * f
    elif cfg.window >= 2 and cfg.cache_slots >= cfg.window + 1:
        body = np.maximum(L * c, R * f) + f
    else:
        body = (L - R) * c + R * np.maximum(c, f) + f
    return np.where(local > 0, body + over, 0.0)


def cas_ffn_s(rows, spec, hw, cfg: SiDPConfig, prof=None) -> float:
    """The FFN part of a compute-as-a-service group step, given every replica's FFN rows (`rows`,
    length D). Per layer, the non-owners send their FFN inputs (rows x d activations) to the owner
    and get the outputs back (send_recv each way, handled one message at a time on the owner's
    stream); the owner runs one fused GEMM over all rows (v1: one GEMM per replica, each re-reading
    the weights). v3 skips replicas with no work; v1/v2 exchange a dummy row with each of them."""
    rows = np.asarray(rows, dtype=float)
    if len(rows) != cfg.dp:
        raise ValueError(f"CaS needs {cfg.dp} per-replica row counts, got {len(rows)}")
    fuse, skip = CAS_VARIANTS[cfg.cas_variant]
    act = rows if skip else np.maximum(rows, 1.0)  # dummy replicas contribute one padding row
    if fuse:
        gemm = float(ffn_gemm_s(spec, hw, act.sum(), cfg.tp, prof))
    else:
        gemm = float(np.sum(ffn_gemm_s(spec, hw, act[act > 0], cfg.tp, prof)))
    # every TP rank of a replica ships its full (rows, d) FFN input to the owner's rank with the same
    # TP index and gets that shard's partial sums back (kernels/sidp.py; tests/test_kernels_parity)
    msg = ops.collective_time_s("send_recv", act * spec.hidden_size * ACT_BYTES, 2, hw, prof)
    total = 0.0
    for owner in range(cfg.dp):  # each owner serves its layers; senders = every other replica with rows
        total += owned_layers(spec, cfg.dp, owner) * (2 * float(msg.sum() - msg[owner]) + gemm)
    return total


def cas_step_s(local_s, rows, rank: int, spec, hw, cfg: SiDPConfig, prof=None) -> float:
    """Compute-as-a-service step of replica `rank`: its local step without its own FFN GEMMs, plus
    the group's FFN service (cas_ffn_s), in which every replica waits for every layer's owner.

    cas_variant="staggered" is a what-if, not SYSTEMS.md's CaS: replica r runs layer l while the
    others run l +- 1, ..., so each owner serves one replica at a time and all owners work at once.
    Per layer a GPU then does its own attention and one replica's FFN, which for equal batches is
    the local step; the replica adds its activation round trips to the R remote owners. Optimistic:
    replicas are assumed equally paced (a slower one would hold the others back)."""
    local = float(local_s)
    if local <= 0:
        return 0.0
    if cfg.cas_variant == STAGGERED:
        msg = float(ops.collective_time_s("send_recv", float(rows[rank]) * spec.hidden_size * ACT_BYTES, 2, hw, prof))
        return local + 2 * (spec.num_layers - owned_layers(spec, cfg.dp, rank)) * msg
    own_ffn = spec.num_layers * float(ffn_gemm_s(spec, hw, float(rows[rank]), cfg.tp, prof))
    return local - own_ffn + cas_ffn_s(rows, spec, hw, cfg, prof)


def fsdp_step_s(local_s, spec, hw, cfg: SiDPConfig, prof=None):
    """FSDP-style baseline: each layer's FFN weights all-gathered (blocking) before it runs."""
    local = np.asarray(local_s, dtype=float)
    ag = float(ops.collective_time_s("all_gather", ffn_layer_bytes(spec, cfg.tp), cfg.dp, hw, prof))
    return np.where(local > 0, local + spec.num_layers * ag, 0.0)


def hide_batch(spec, hw, cfg: SiDPConfig, ctx: float = SIDP_B_STAR_CONTEXT_TOKENS, prof=None,
               fw: Framework = DEFAULT_FRAMEWORK, max_batch: int = MAX_ROWS) -> int:
    """The smallest per-replica decode batch (contexts of `ctx` tokens) whose per-layer compute
    hides one layer's fetch: above it WaS costs what a replica holding every weight costs
    (SYSTEMS.md 3's definition of B*)."""
    b = np.arange(1, max_batch + 1, dtype=float)
    local = step_cost(spec, ParallelLayout(tp=cfg.tp), hw, decode_batch(b, ctx), prof, fw).total_s
    c = (local - fw.step_overhead_s) / spec.num_layers
    ok = np.nonzero(c >= fetch_s(spec, hw, cfg, prof))[0]
    return int(b[ok[0]]) if len(ok) else max_batch


def b_star(spec, hw, cfg: SiDPConfig, ctx: float = SIDP_B_STAR_CONTEXT_TOKENS, prof=None,
           fw: Framework = DEFAULT_FRAMEWORK, max_batch: int = MAX_ROWS) -> int:
    """B*, the orchestrator's threshold: the smallest per-replica decode batch (every replica at
    it, contexts of `ctx` tokens) at which a WaS step is no slower than a CaS step. It is at most
    hide_batch: below hide_batch WaS waits on the fetch, but CaS in lockstep runs the owners one
    layer at a time, so its FFN costs the whole group's rows on one GPU (D x the local FFN once the
    GEMM is compute-bound) and it overtakes the fetch-bound WaS step well before compute hides the
    fetch (Llama-3.1-70B bf16, H200, D=4 x TP2, 1K context: 263 rows vs 875). Found by bisection:
    WaS - CaS falls with the batch (CaS grows D x faster)."""
    def was_not_slower(b: int) -> bool:
        local = float(step_cost(spec, ParallelLayout(tp=cfg.tp), hw, decode_batch(np.array([float(b)]), ctx),
                                prof, fw).total_s[0])
        cas = cas_step_s(local, np.full(cfg.dp, float(b)), 0, spec, hw, cfg, prof)
        return float(was_step_s(local, spec, hw, cfg, 0, prof, fw)) <= cas

    lo, hi = 1, min(max_batch, hide_batch(spec, hw, cfg, ctx, prof, fw, max_batch))
    if not was_not_slower(hi):
        return hi
    while lo < hi:  # smallest b in [lo, hi] with was_not_slower(b)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if was_not_slower(mid) else (mid + 1, hi)
    return lo


def next_mode(mode: str, streak: int, want: str, decisions: int = SIDP_HYSTERESIS_DECISIONS) -> tuple:
    """The orchestrator's switching rule, shared by the simulator and the kernels: (mode, streak)
    after one decision that wants `want`. `streak` counts the decisions running that the other side
    has won; one for the running mode resets it, and the mode flips on the `decisions`-th."""
    streak = streak + 1 if want != mode else 0
    return (want, 0) if streak >= decisions else (mode, streak)
