"""Deployments: what a strategy name resolves to on N GPUs.

A Deployment is the layout each step runs under (Shift has two, chosen per step by a token
threshold) and the memory plan of one instance. perfmodel.estimate, the simulator's policies and
the CLI all resolve strategies here.
"""
from __future__ import annotations

import dataclasses

from . import memory
from .framework import DEFAULT_FRAMEWORK, Framework
from .knobs import SHIFT_THRESHOLD_TOKENS
from .layout import LayoutError, ParallelLayout


@dataclasses.dataclass(frozen=True)
class Deployment:
    """A strategy on N GPUs: `base` layout per instance, optional Shift `shift` layout and threshold."""

    strategy: str
    base: ParallelLayout  # includes dp = number of instances
    plan: memory.MemoryPlan
    shift: ParallelLayout | None = None
    threshold_tokens: int = SHIFT_THRESHOLD_TOKENS

    @property
    def instances(self) -> int:
        return self.base.dp

    def layout_for(self, tokens):
        """Per step: Shift runs the shift (TP) layout when tokens <= threshold, else the base."""
        if self.shift is None:
            return self.base
        return self.shift if tokens <= self.threshold_tokens else self.base

    def describe(self) -> str:
        """The whole deployment: 'dp=4 x tp=2', 'tp=8', Shift's 'base: sp=8 / shift: tp=8'."""
        if self.shift is None:
            return layout_name(self.base)
        return f"base: {layout_name(self.base)} / shift: {layout_name(self.shift)}"


def layout_name(lay: ParallelLayout) -> str:
    """A deployment layout by name, DP degree first: 'dp=4 x tp=2', 'tp=8', 'dp=8,ep=8' (an expert
    group spans the DP ranks, so DP and EP are one layout there)."""
    if lay.dp == 1 or lay.ep > 1:
        return str(lay)
    return f"dp={lay.dp} x {dataclasses.replace(lay, dp=1)}"


SHIFT_MIN_KV_FRACTION = 0.25  # Shift's default base keeps >= 25% of usable HBM for KV: this picks the
#   paper's bases (SP=8 for Llama-3.3-70B fp8 on 8 x H200; SP=4 x TP=2 for the 109B Llama-4 Scout)


def _min_tp(spec, hw, fw, gpus: int | None = None, shift: bool = False) -> int:
    """Smallest TP (power of two) whose instance holds the weights with room for KV; for Shift
    (two weight copies) room for at least SHIFT_MIN_KV_FRACTION of the usable memory."""
    tp = 1
    while tp <= hw.gpus_per_node:
        try:
            lay = ParallelLayout(tp=tp).validate(spec)
            if shift:
                sp = (gpus or hw.gpus_per_node) // tp
                p = memory.shift_plan(spec, ParallelLayout(tp=tp, sp=sp).validate(spec), hw, fw)
                if p.kv_bytes_per_gpu >= SHIFT_MIN_KV_FRACTION * p.usable_bytes_per_gpu:
                    return tp
            elif memory.plan(spec, lay, hw, fw).kv_capacity_tokens > 0:
                return tp
        except LayoutError:
            pass
        tp *= 2
    raise LayoutError(f"{spec.name} ({spec.weight_bytes / 1e9:.0f} GB of weights) does not fit "
                      f"{hw.gpus_per_node} x {hw.name} with any TP degree")


def _fit_tp(spec, hw, fw, gpus: int) -> int:
    """_min_tp, or why one replica does not fit `gpus` GPUs: weights per GPU (all of them) vs usable."""
    t = _min_tp(spec, hw, fw)
    if t > gpus:
        p = memory.plan(spec, ParallelLayout(tp=gpus), hw, fw)
        raise LayoutError(f"{spec.name} does not fit {gpus} x {hw.name} (one replica needs tp={t}): "
                          f"{p.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU vs "
                          f"{p.usable_bytes_per_gpu / 1e9:.1f} GB usable")
    return t


def deployment(strategy: str, spec, hw, gpus: int, fw: Framework = DEFAULT_FRAMEWORK,
               threshold_tokens: int = SHIFT_THRESHOLD_TOKENS) -> Deployment:
    """Resolve a strategy name (dp, tp, pp, sp, shift, ep) or a layout ('tp=2,pp=4') on `gpus`."""
    s = strategy.strip().lower()
    if gpus < 1:
        raise LayoutError(f"--gpus {gpus} must be >= 1")
    if gpus > hw.gpus_per_node:
        raise LayoutError(f"--gpus {gpus} exceeds the {hw.gpus_per_node} GPUs of a {hw.name} node")
    if "=" in s:
        lay = ParallelLayout.parse(s)
        inst = lay.gpus_per_instance
        if gpus % inst:
            raise LayoutError(f"layout {s} uses {inst} GPUs per instance, which does not divide {gpus} GPUs")
        if lay.dp == 1:
            lay = dataclasses.replace(lay, dp=gpus // inst)
    elif s in ("tp", "pp", "sp"):
        lay = ParallelLayout(**{s: gpus})
    elif s == "dp":
        t = _fit_tp(spec, hw, fw, gpus)
        if gpus > 1 and gpus // t < 2:  # one TP replica named "dp" (on 1 GPU every strategy is tp=1)
            raise LayoutError(f"dp: {spec.name} needs tp={t} per replica on {hw.name}, so {gpus} GPUs hold one "
                              "replica: no data parallelism; use --policy tp or more GPUs")
        lay = ParallelLayout(tp=t, dp=gpus // t)
    elif s == "ep":
        if not spec.is_moe:
            raise LayoutError(f"ep: {spec.name} has no experts; use --policy dp or tp")
        lay = ParallelLayout(dp=gpus, ep=gpus)
    elif s == "shift":
        t = _min_tp(spec, hw, fw, gpus, shift=True)
        base = ParallelLayout(tp=t, sp=gpus // t).validate(spec, gpus)
        shift = ParallelLayout(tp=gpus).validate(spec, gpus)
        return Deployment("shift", base, memory.shift_plan(spec, base, hw, fw), shift, threshold_tokens)
    else:
        raise LayoutError(f"unknown strategy {strategy!r}: dp, tp, pp, sp, shift, ep or a layout like tp=2,pp=4")
    lay.validate(spec, gpus)
    return Deployment(s, lay, memory.plan(spec, instance_layout(lay), hw, fw))


def instance_layout(lay: ParallelLayout) -> ParallelLayout:
    """The layout one engine (a DP rank) runs: dp=1, unless EP spans several DP ranks, in which
    case dp stays the number of ranks one expert group spans (cost and memory ignore dp)."""
    return dataclasses.replace(lay, dp=max(1, lay.ep // (lay.tp * lay.sp)))
