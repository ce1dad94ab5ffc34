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
    tp, most = 1, min(gpus or hw.gpus_per_node, hw.gpus_per_node)  # TP spans at most the GPUs of the run
    while tp <= most:
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
    copies = ", held twice by Shift: base and shift copies" if shift else ""
    raise LayoutError(f"{spec.name} ({spec.weight_bytes / 1e9:.0f} GB of weights{copies}) does not fit "
                      f"{most} x {hw.name} with any TP degree")


def _fit_tp(spec, hw, fw, gpus: int) -> int:
    """_min_tp, or why one replica does not fit `gpus` GPUs: weights per GPU (all of them) vs usable."""
    t = _min_tp(spec, hw, fw)
    if t > gpus:
        p = memory.plan(spec, ParallelLayout(tp=gpus), hw, fw)
        raise LayoutError(f"{spec.name} does not fit {gpus} x {hw.name} (one replica needs tp={t}): "
                          f"{p.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU vs "
                          f"{p.usable_bytes_per_gpu / 1e9:.1f} GB usable")
    return t


STATIC_STRATEGIES = ("dp", "tp", "pp", "sp", "shift", "ep")
DYNAMIC_STRATEGIES = ("sidp", "seesaw", "flying", "disagg")  # layout / mode changes per step (perfmodel.estimate)


def check_strategy(strategy: str) -> None:
    """LayoutError (one line naming every valid name) unless `strategy` is a strategy name or a layout."""
    s = strategy.strip().lower()
    if s in STATIC_STRATEGIES or s in DYNAMIC_STRATEGIES:
        return
    if "=" in s:
        ParallelLayout.parse(s)  # names a bad key or number itself
        return
    raise LayoutError(f"unknown strategy {strategy!r}: {', '.join(STATIC_STRATEGIES + DYNAMIC_STRATEGIES)} "
                      "or a layout like tp=2,pp=4")


def deployment(strategy: str, spec, hw, gpus: int, fw: Framework = DEFAULT_FRAMEWORK,
               threshold_tokens: int = SHIFT_THRESHOLD_TOKENS) -> Deployment:
    """Resolve a strategy name (dp, tp, pp, sp, shift, ep) or a layout ('tp=2,pp=4') on `gpus`."""
    s = strategy.strip().lower()
    if gpus < 1:
        raise LayoutError(f"--gpus {gpus} must be >= 1")
    multi = gpus > hw.gpus_per_node  # ranks placed node-major over ceil(gpus / gpus_per_node) nodes
    if multi and not hw.has_network:
        raise LayoutError(f"--gpus {gpus} exceeds the {hw.gpus_per_node} GPUs of a {hw.name} node and {hw.name} "
                          f"has no inter-node network (nic_bw_gbs = 0 in its preset)")
    if multi and s in ("tp", "pp", "sp", "shift"):
        return _per_node(s, spec, hw, gpus, fw, threshold_tokens)
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
                              "replica: no data parallelism; use tp or more GPUs")
        lay = ParallelLayout(tp=t, dp=gpus // t)
    elif s == "ep":
        if not spec.is_moe:
            raise LayoutError(f"ep: {spec.name} has no experts; use dp or tp")
        lay = ParallelLayout(dp=gpus, ep=gpus)
    elif s == "shift":
        t = _min_tp(spec, hw, fw, gpus, shift=True)
        base = ParallelLayout(tp=t, sp=gpus // t).validate(spec, gpus)
        shift = ParallelLayout(tp=gpus).validate(spec, gpus)
        if base.sp == 1:  # base = shift config: ArcticInference builds no second model (SP > 1 only), so
            # it is TP with one weight copy and TP's KV, as the simulator runs it (issue 33, item 8)
            return Deployment("shift", base, memory.plan(spec, base, hw, fw), shift, threshold_tokens)
        return Deployment("shift", base, memory.shift_plan(spec, base, hw, fw), shift, threshold_tokens)
    else:
        check_strategy(s)  # an unknown name: the error that lists every valid one
        raise LayoutError(f"{s}: its layout changes per step; perfmodel.estimate costs it, not deployment()")
    lay.validate(spec, gpus)
    if multi:
        _check_aligned(instance_layout(lay).gpus_per_instance, hw)
    return Deployment(s, lay, memory.plan(spec, instance_layout(lay), hw, fw))


# strategies whose engines share one node's host memory or weight cache (Seesaw's CPU KV store, SiDP's
# weight sharing over NVLink): refused on several nodes rather than run across the NICs unmodelled
SINGLE_NODE_STRATEGIES = ("seesaw", "sidp")


def _check_aligned(inst: int, hw) -> None:
    """Over several nodes every instance must sit alike (inside one node, or on whole nodes), so that
    one StepTable, costed for the instance on GPUs 0..inst-1, serves them all."""
    g = hw.gpus_per_node
    if inst % g and g % inst:
        raise LayoutError(f"an instance of {inst} GPUs neither divides nor fills whole {g}-GPU nodes: "
                          f"its instances would straddle nodes unevenly; use a multiple or divisor of {g}")


def _per_node(s: str, spec, hw, gpus: int, fw, threshold_tokens: int) -> Deployment:
    """tp, pp, sp and shift on several nodes: the single-node deployment on each node, DP across
    nodes (TP or SP over the NICs is slow; --policy layout --layout tp=16 asks for it by name). A
    model one node cannot hold gets tp/pp/sp over the fewest whole nodes that hold it."""
    g = hw.gpus_per_node
    if gpus % g:
        raise LayoutError(f"{s} on {gpus} GPUs: several nodes run one {s} instance per node, so --gpus must be "
                          f"a multiple of the {g} GPUs of a {hw.name} node")
    one = deployment(s, spec, hw, g, fw, threshold_tokens)
    nodes = gpus // g
    for k in range(2, nodes + 1):  # nodes per instance, while one node's instance does not fit
        if one.plan.fits or s == "shift" or nodes % k:
            continue
        try:
            lay = ParallelLayout(**{s: k * g}).validate(spec)
            one = Deployment(s, lay, memory.plan(spec, lay, hw, fw))
        except LayoutError:
            pass
    nodes = gpus // one.base.gpus_per_instance
    shift = dataclasses.replace(one.shift, dp=nodes) if one.shift is not None else None
    return dataclasses.replace(one, base=dataclasses.replace(one.base, dp=nodes), shift=shift)


def cluster(hw, nodes: int = 1, gpus_per_node: int | None = None, gpus: int | None = None,
            default_gpus: int = 8):
    """(hw with gpus_per_node = the node size used, total GPUs) of `nodes` x `gpus_per_node` GPUs:
    `gpus` (the GPUs the deployment uses) defaults to all of them on several nodes, else
    `default_gpus`; more than nodes x gpus_per_node, or several nodes without a network, raise."""
    per = hw.gpus_per_node if gpus_per_node is None else gpus_per_node
    if nodes < 1:
        raise LayoutError(f"--nodes {nodes} must be >= 1")
    if not 1 <= per <= hw.gpus_per_node:
        raise LayoutError(f"--gpus-per-node {per}: a {hw.name} node has 1 to {hw.gpus_per_node} GPUs")
    if nodes > 1 and not hw.has_network:
        raise LayoutError(f"--nodes {nodes}: {hw.name} has no inter-node network in its preset (nic_bw_gbs = 0), "
                          f"so multi-node layouts are refused; use one node or a preset with a NIC (h100, h200)")
    if gpus is None:  # a cluster named by --nodes or --gpus-per-node is used whole
        gpus = nodes * per if nodes > 1 or gpus_per_node is not None else default_gpus
    if gpus < 1:
        raise LayoutError(f"--gpus {gpus} must be >= 1")
    if gpus > nodes * per:
        more = -(-gpus // per)
        raise LayoutError(f"--gpus {gpus} exceeds the {nodes * per} GPUs of {nodes} x {per}-GPU {hw.name} "
                          f"node{'s' if nodes > 1 else ''}" + (f"; add --nodes {more}" if hw.has_network else ""))
    return (hw if per == hw.gpus_per_node else dataclasses.replace(hw, gpus_per_node=per)), gpus


def instance_layout(lay: ParallelLayout) -> ParallelLayout:
    """The layout one engine (a DP rank) runs: dp=1, unless EP spans several DP ranks, in which
    case dp stays the number of ranks one expert group spans (cost and memory ignore dp)."""
    return dataclasses.replace(lay, dp=max(1, lay.ep // (lay.tp * lay.sp)))
