"""Policies decide layouts and per-step modes; perfmodel decides every time and every byte.

A policy turns (model, hardware, GPUs, arguments) into EnginePlans: for each engine, its modes
(name -> instance ParallelLayout), the rule picking a mode from a step's batched tokens, and its
KV capacity (perfmodel's memory plan). Static policies resolve through the same
perfmodel.estimate.deployment() as `perfmodel estimate`, so both tools agree on layouts.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from perfmodel.estimate import deployment, instance_layout
from perfmodel.layout import LayoutError, ParallelLayout

STATIC = ("dp", "tp", "pp", "sp", "ep", "layout")


@dataclasses.dataclass(frozen=True)
class EnginePlan:
    """One engine: its modes (name -> per-instance layout), mode rule and KV capacity."""

    modes: dict
    choose: Callable[[int], str]
    kv_capacity_tokens: int
    gpus: tuple


def _parse_args(policy_args: dict, allowed: dict) -> dict:
    """Typed policy arguments: unknown names or bad values raise ValueError naming them."""
    out = {}
    for k, v in policy_args.items():
        if k not in allowed:
            raise ValueError(f"unknown policy argument {k!r}: allowed {', '.join(sorted(allowed)) or 'none'}")
        try:
            out[k] = allowed[k](v)
        except ValueError:
            raise ValueError(f"policy argument {k}={v!r} is not a valid {allowed[k].__name__}") from None
    return out


def static_plans(policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict) -> list[EnginePlan]:
    """dp/tp/pp/sp/ep over all GPUs, or an explicit --layout (DP fills the remaining GPUs)."""
    _parse_args(policy_args, {})
    name = layout if layout else policy
    if policy == "layout" and not layout:
        raise LayoutError("--policy layout needs --layout, e.g. --layout tp=2,pp=4")
    dep = deployment(name, spec, hw, gpus, fw)
    if not dep.plan.fits:
        raise LayoutError(f"{spec.name} does not fit {dep.describe()} on {hw.name}: "
                          f"{dep.plan.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU vs "
                          f"{dep.plan.usable_bytes_per_gpu / 1e9:.1f} GB usable")
    inst = instance_layout(dep.base)
    per = inst.gpus_per_instance
    mode = str(inst)
    return [EnginePlan({mode: inst}, lambda t, m=mode: m, dep.plan.kv_capacity_tokens,
                       tuple(range(i * per, (i + 1) * per))) for i in range(dep.instances)]


def shift_plans(policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict) -> list[EnginePlan]:
    """Shift Parallelism: base (SP x TP) and shift (TP = all GPUs) over one engine and one KV
    cache; steps with more batched tokens than `threshold` run the base config (SYSTEMS.md 2).
    Arguments: threshold (tokens, default 256), base ('sp=8' or 'sp=4,tp=2'; default: smallest TP
    that holds the model, SP over the rest)."""
    a = _parse_args(policy_args, {"threshold": int, "base": str})
    thr = a.get("threshold", 256)
    dep = deployment("shift", spec, hw, gpus, fw, thr)
    base = dep.base
    if "base" in a or layout:
        base = ParallelLayout.parse((a.get("base") or layout).replace(";", ",")).validate(spec, gpus)
        if base.tp * base.sp != gpus or base.pp != 1 or base.dp != 1:
            raise LayoutError(f"shift base {base} must be SP x TP over all {gpus} GPUs")
        from perfmodel.memory import shift_plan
        dep = dataclasses.replace(dep, base=base, plan=shift_plan(spec, base, hw, fw))
    if not dep.plan.fits:
        raise LayoutError(f"{spec.name} does not fit Shift ({dep.describe()}) on {hw.name}: two weight copies "
                          f"take {(dep.plan.weight_bytes_per_gpu + dep.plan.extra_bytes_per_gpu) / 1e9:.1f} GB per GPU")
    modes = {"base": base, "shift": dep.shift}
    return [EnginePlan(modes, lambda t: "base" if t > thr else "shift", dep.plan.kv_capacity_tokens,
                       tuple(range(gpus)))]


# The command line's registry (the one place names map to builders); dynamic policies add theirs.
POLICIES = {**{p: static_plans for p in STATIC}, "shift": shift_plans}
from .policies_sidp import sidp_plans  # noqa: E402  (dynamic policies in their own files; they import EnginePlan)
POLICIES["sidp"] = sidp_plans
from .policies_flying import flying_plans  # noqa: E402
POLICIES["flying"] = flying_plans
from .policies_seesaw import seesaw_plans  # noqa: E402
POLICIES["seesaw"] = seesaw_plans
