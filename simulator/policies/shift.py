"""Shift Parallelism (`--policy shift`, SYSTEMS.md 2): base (SP x TP) and shift (TP) configurations
over one engine and one KV cache, chosen per step by batched tokens."""
from __future__ import annotations

import dataclasses

from perfmodel.deploy import SHIFT_MIN_KV_FRACTION, deployment
from perfmodel.knobs import SHIFT_THRESHOLD_TOKENS
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel import memory
from perfmodel.memory import shift_plan

from simulator.policies.base import EnginePlan, parse_args


def shift_plans(*, policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict, prof=None) -> list[EnginePlan]:
    """Shift Parallelism: base (SP x TP) and shift (TP = all GPUs) over one engine and one KV
    cache; steps with more batched tokens than `threshold` run the base config (SYSTEMS.md 2).
    Arguments: threshold (tokens, default perfmodel.knobs.SHIFT_THRESHOLD_TOKENS), base ('sp=8' or 'sp=4,tp=2'; default: smallest TP
    that holds the model, SP over the rest)."""
    a = parse_args(policy_args, {"threshold": int, "base": str})
    thr = a.get("threshold", SHIFT_THRESHOLD_TOKENS)
    try:
        dep = deployment("shift", spec, hw, gpus, fw, thr)  # on several nodes: one Shift engine per node
    except LayoutError:  # no SP x TP base holds two weight copies; on one node, tp over all GPUs may hold one
        if "base" in a or layout or gpus > hw.gpus_per_node:
            raise
        return _as_tp(spec, hw, fw, ParallelLayout(tp=gpus).validate(spec, gpus), gpus, 1)
    nodes, gpus = dep.base.dp, gpus // dep.base.dp
    base = dataclasses.replace(dep.base, dp=1)
    note = ("" if "base" in a or layout else f"shift: base {base} chosen by memory (the smallest TP whose two "
            f"weight copies leave >= {SHIFT_MIN_KV_FRACTION:.0%} of usable memory for KV); --policy-arg base=... sets it")
    if "base" in a or layout:
        base = ParallelLayout.parse((a.get("base") or layout).replace(";", ",")).validate(spec, gpus)
        if base.tp * base.sp != gpus or base.pp != 1 or base.dp != 1:
            raise LayoutError(f"shift base {base} must be SP x TP over all {gpus} GPUs")
        dep = dataclasses.replace(dep, base=base, plan=shift_plan(spec, base, hw, fw))
    if base.sp == 1:  # base = shift config = tp over all GPUs: no shift model to hold (ArcticInference builds
        # one only for SP > 1), so it is TP with one weight copy and TP's KV, said in a note (issue 33, item 8)
        return _as_tp(spec, hw, fw, base, gpus, nodes)
    if not dep.plan.fits:
        raise LayoutError(f"{spec.name} does not fit Shift ({dep.describe()}) on {gpus} x {hw.name}: two weight "
                          f"copies take {(dep.plan.weight_bytes_per_gpu + dep.plan.extra_bytes_per_gpu) / 1e9:.1f} GB "
                          "per GPU")
    modes = {"base": base, "shift": dataclasses.replace(dep.shift, dp=1)}
    return [EnginePlan(modes, lambda t: "base" if t > thr else "shift", dep.plan.kv_capacity_tokens,
                       tuple(range(i * gpus, (i + 1) * gpus)), note) for i in range(nodes)]


def _as_tp(spec, hw, fw, base: ParallelLayout, gpus: int, nodes: int) -> list[EnginePlan]:
    """Shift whose base has sp=1: one tp=gpus engine per node, exactly as --policy tp plans it."""
    p = memory.plan(spec, base, hw, fw)
    if not p.fits:
        raise LayoutError(f"{spec.name} does not fit {gpus} x {hw.name} as {base}: {p.weight_bytes_per_gpu / 1e9:.1f} "
                          f"GB of weights per GPU vs {p.usable_bytes_per_gpu / 1e9:.1f} GB usable")
    note = (f"shift: its base is sp=1, the same as its shift config {base} on {gpus} GPUs, so it runs as {base} "
            "with one weight copy (TP's numbers); --policy-arg base=sp=...,tp=... asks for SP")
    return [EnginePlan({"shift": base}, lambda t: "shift", p.kv_capacity_tokens,
                       tuple(range(i * gpus, (i + 1) * gpus)), note) for i in range(nodes)]
