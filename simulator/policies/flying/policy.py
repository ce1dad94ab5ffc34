"""Flying Serving (`--policy flying`, SYSTEMS.md 5): DP engines bound on the fly into TP groups.

Every unit is the static DP instance (smallest TP that holds the model: one GPU for a 70B fp8 on
H200) with full weights; the Coordinator binds aligned contiguous groups of 2, 4, 8 units into a
TP group (an engine over the StepTable of tp = k x unit tp: coordinator.py) for selected requests
and releases them when the group has no work left. Zero-copy weight views: no weight moves and no memory is saved, so
KV per GPU is the DP unit's and a TP-k group holds k x one unit's free tokens. Per request, in
order: longer than one unit's KV -> the narrowest group that holds it; priority < priority_tp ->
TP over priority_width units (default half the node); fewer than low_load requests in flight -> TP over all units
(or the widest group clear of the others'); else DP, a burst: the low-load groups end after their step in progress, their
requests recomputed in DP (issue 33: not after their last decode while the burst queues). Step rows carry the pool's
queue in `waiting` (pool.py).
A binding costs one switch (set_TP_mode) and its release another (reset_TP_mode): switch_ms
(live, 15 ms) or cold_restart_s (a restart into a new static layout, 146-292 s published);
each is a step-record row (steps = 0) under the group's leader with its cost in switch_s.
"""
from __future__ import annotations

import dataclasses

from perfmodel.deploy import deployment, instance_layout
from perfmodel.layout import LayoutError, ParallelLayout
from simulator.policies.base import EnginePlan, parse_args

from .config import WIDTHS, FlyingConfig
from .coordinator import Coordinator


@dataclasses.dataclass(frozen=True)
class FlyingMode:
    """A mode entry of the unit plans: gives the coordinator the cluster's table(layout)."""

    layout: ParallelLayout
    coord: Coordinator

    def __call__(self, table_fn):
        self.coord.table_fn = table_fn
        return table_fn(self.layout)

    def __str__(self) -> str:
        return str(self.layout)



ARGS = {f.name: (str if f.type in ("str",) else float if f.type == "float" else int)
        for f in dataclasses.fields(FlyingConfig)}


def flying_plans(*, policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict, prof=None) -> list[EnginePlan]:
    """Flying Serving over `gpus` GPUs (SYSTEMS.md 5). Arguments: switching (sequential | soft |
    hard), switch_ms (15), restart (live | cold), cold_restart_s (146), priority_tp (0: priority
    < 0 runs TP), priority_width (units; half the node), low_load (in-flight requests; the number of units)."""
    cfg = FlyingConfig(**parse_args(policy_args, ARGS))
    try:
        dep = deployment("dp", spec, hw, gpus, fw)
    except LayoutError as e:  # dp refuses one replica: the unit's tp, a power of two, is above gpus / 2
        if not str(e).startswith("dp:"):  # does not fit at all, too many GPUs: deployment's own words
            raise
        raise LayoutError(f"flying: {spec.name} needs tp={1 << (gpus.bit_length() - 1)} per unit on {hw.name}, so "
                          f"{gpus} GPUs hold one unit: nothing to bind; use --policy tp") from None
    unit = instance_layout(dep.base)
    n = dep.instances
    widths = []
    for k in WIDTHS:
        try:
            # a group stays inside one node (aligned, dividing it): on several nodes Flying binds per node
            if k <= n and n % k == 0 and hw.gpus_per_node % (k * unit.tp) == 0:
                widths.append(ParallelLayout(tp=k * unit.tp).validate(spec) and k)
        except LayoutError:
            pass
    if cfg.priority_width and cfg.priority_width not in widths:
        raise ValueError(f"priority_width={cfg.priority_width}: one of {widths} units")
    coord = Coordinator(n, unit, tuple(widths), cfg)
    modes = {"dp": FlyingMode(unit, coord)}
    modes.update({f"tp{k * unit.tp}": FlyingMode(ParallelLayout(tp=k * unit.tp), coord) for k in widths})
    per = unit.gpus_per_instance
    # each unit's plan: the coordinator observes the unit and is the cluster's front door
    return [EnginePlan(modes, lambda t: "dp", dep.plan.kv_capacity_tokens, tuple(range(i * per, (i + 1) * per)),
                       attach=lambda e, i=i: coord.attach(i, e), front=coord) for i in range(n)]
