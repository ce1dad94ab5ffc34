"""One engine per strategy name (the launcher's --strategy): build(...) -> step(batch) -> StepResult.

Each engine builds the reference model from the same seed, applies its strategy's plan and
reports, per step, the logits rows this rank produced, the mode it ran and the perf-model
steps it ran (layout, tokens and sequences per instance, micro-batches) so that the bytes it
counted can be checked against perfmodel.comm.step_calls.
"""
from __future__ import annotations

import dataclasses

import torch

from perfmodel.knobs import SHIFT_THRESHOLD_TOKENS, SIDP_HYSTERESIS_DECISIONS
from perfmodel.layout import ParallelLayout

from .disagg import apply_disagg
from .dist import device, make_group
from .dp import apply_dp
from .ep import apply_ep
from .flying import apply_flying
from .kvcache import make_cache, run_step
from .model import build_model
from .pp import apply_pp, micro_batches, pipeline_step
from .seesaw import KVStore, apply_seesaw
from .shift import apply_shift, shift_layout, shift_step
from .sidp import ModeState, apply_sidp, choose_mode, sidp_step
from .sp import apply_sp
from .tp import apply_tp
from .tpsp import apply_tpsp

STRATEGIES = ("tp", "pp", "sp", "tpsp", "dp", "ep", "shift", "sidp", "seesaw", "flying", "disagg")


@dataclasses.dataclass
class StepResult:
    """What one rank did in one step."""

    logits: dict  # sid -> (V,) logits of the rows this rank produced
    mode: str
    parts: list  # [(ParallelLayout, tokens, seqs, micro_batches)] perf-model steps run here
    facts: dict = dataclasses.field(default_factory=dict)  # e.g. SiDP's rows per replica


def default_layout(strategy: str, world_size: int) -> ParallelLayout:
    """The layout a strategy uses on `world_size` GPUs unless one is given."""
    w = world_size
    return {"tp": ParallelLayout(tp=w), "pp": ParallelLayout(pp=w), "sp": ParallelLayout(sp=w),
            "tpsp": ParallelLayout(sp=2, tp=w // 2) if w >= 4 else ParallelLayout(sp=w),
            "dp": ParallelLayout(dp=w), "ep": ParallelLayout(tp=2, dp=w // 2, ep=w),
            "shift": ParallelLayout(sp=w), "sidp": ParallelLayout(dp=w), "seesaw": ParallelLayout(pp=w),
            "flying": ParallelLayout(dp=w)}[strategy]


def _parts(layout, batch, m: int = 1):
    """The perf-model steps of `batch`: one per micro-batch, with its exact tokens and sequences."""
    return [(layout, mb.num_tokens, len(mb.seq_ids), 1) for mb in micro_batches(batch, m)]


def _static(strategy, model, layout, rank):
    """TP, SP, TP x SP or PP on one instance."""
    def group(kind):
        return make_group(layout.groups(kind))
    if strategy == "pp":
        pp = group("pp")
        apply_pp(model, layout, pp)
        apply_tp(model, layout, group("tp"))
        cache = make_cache(model)

        def step(b):
            m = max(1, min(layout.pp, len(b.seq_ids)))
            return StepResult(pipeline_step(model, cache, b, pp, m), "pp", _parts(layout, b, m))
        return step
    if strategy == "tp":
        apply_tp(model, layout, group("tp"))
    elif strategy == "sp":
        apply_sp(model, layout, group("sp"))
    else:
        apply_tpsp(model, layout, group("tp"), group("sp"))
    cache = make_cache(model)
    return lambda b: StepResult(run_step(model, cache, b), strategy, _parts(layout, b))


def _replicated(strategy, model, layout, rank, opts):
    """DP, EP (DP attention instances, TP inside, experts over EP) and SiDP: routed replicas."""
    model, route = apply_dp(model, layout)
    inst = layout.coords(rank)["dp"]
    if strategy == "ep":
        tp = make_group(layout.groups("tp"))
        apply_tp(apply_ep(model, layout, make_group(layout.groups("ep")), tp), layout, tp)
    if strategy == "sidp":
        tp = make_group(layout.groups("tp")) if layout.tp > 1 else None
        if tp is not None:  # replicas are TP groups: shard first, then share the FFN shards
            apply_tp(model, layout, tp)
        rt = apply_sidp(model, layout, make_group(layout.groups("dp")), opts.get("slots"), opts.get("cycle"), tp)
        forced = opts.get("mode", "auto")
        if forced == "auto" and "b_star" not in opts:  # B* depends on model and GPUs: no default
            raise ValueError("SiDP mode='auto' needs b_star (FFN rows per replica; perfmodel.sidp.b_star "
                             "for a deployment, or a test value that the request script crosses)")
        mode = {"now": ModeState("was" if forced == "auto" else forced)}
    cache = make_cache(model)

    def step(b):
        subs = route(b)
        if strategy != "sidp":  # a DP replica skips an empty step; EP ranks must join the all_to_alls
            run = subs[inst].seq_ids or strategy == "ep"
            return StepResult(run_step(model, cache, subs[inst]) if run else {}, strategy, _parts(layout, subs[inst]))
        rows = [s.num_tokens for s in subs]
        if forced == "auto":
            mode["now"] = choose_mode(mode["now"], sum(rows) / len(rows), opts["b_star"],
                                      opts.get("hysteresis", SIDP_HYSTERESIS_DECISIONS))
        now = mode["now"].mode
        return StepResult(sidp_step(model, cache, rt, subs, now), now, [], {"replica_rows": rows})
    step.sidp = rt if strategy == "sidp" else None
    return step


def build(strategy: str, spec, rank: int, world_size: int, layout: ParallelLayout | None = None,
          seed: int = 0, dtype=None, **opts):
    """A step function for `strategy` on this rank: step(batch) -> StepResult."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}: one of {', '.join(STRATEGIES)}")
    if strategy == "disagg":  # two TP instances (prefill ranks, then decode ranks), not one layout
        model = build_model(spec, seed, dtype or torch.float32, device())
        inner = apply_disagg(model, rank, world_size, opts.get("prefill_tp"), opts.get("decode_tp"))
        return lambda b: StepResult(*inner(b))
    layout = layout or default_layout(strategy, world_size)
    if layout.world_size != world_size:
        raise ValueError(f"layout {layout} needs {layout.world_size} ranks, the world has {world_size}")
    layout.validate(spec)
    dtype = dtype or torch.float32
    model = build_model(spec, seed, dtype, "cpu" if strategy == "seesaw" else device())  # seesaw: host copy
    if strategy in ("tp", "pp", "sp", "tpsp"):
        return _static(strategy, model, layout, rank)
    if strategy in ("dp", "ep", "sidp"):
        return _replicated(strategy, model, layout, rank, opts)
    if strategy == "shift":
        base, shift = apply_shift(model, layout, opts.get("order"))
        del model
        cache = make_cache(base)
        threshold = opts.get("threshold", SHIFT_THRESHOLD_TOKENS)

        def step(b):
            out, mode = shift_step(base, shift, cache, b, threshold)
            return StepResult(out, mode, _parts(layout if mode == "base" else shift_layout(layout), b))
        return step
    if strategy == "seesaw":
        decode = opts.get("decode_layout") or ParallelLayout(tp=world_size)
        store = KVStore(opts["store_path"], spec, dtype=dtype)
        inner = apply_seesaw(model, layout, decode, store, rank)

        def step(b):
            out, phase = inner(b)
            lay = layout if phase == "prefill" else decode
            m = max(1, min(lay.pp, len(b.seq_ids)))
            return StepResult(out, phase, _parts(lay, b, m))
        return step
    placement = opts.get("placement", {})
    inner = apply_flying(model, world_size, rank, placement)

    def step(b):
        out, modes = inner(b)
        parts = []
        for (start, size) in sorted({placement[s] for s in b.seq_ids if s in placement}):
            if start <= rank < start + size:
                sub = b.subset([s for s in b.seq_ids if placement.get(s) == (start, size)])
                parts += _parts(ParallelLayout(tp=size), sub)
        return StepResult(out, "+".join(modes) or "idle", parts)
    step.flying = inner
    return step
