"""Flying Serving (`--policy flying`, SYSTEMS.md 5): DP engines bound on the fly into TP groups.

Every unit is the static DP instance (smallest TP that holds the model: one GPU for a 70B fp8 on
H200) with full weights; the Coordinator binds aligned contiguous groups of 2, 4, 8 units into a
TP group (GroupEngine, StepTable of tp = k x unit tp) for selected requests and releases them when
the group has no work left. Zero-copy weight views: no weight moves and no memory is saved, so
KV per GPU is the DP unit's and a TP-k group holds k x one unit's free tokens. Per request, in
order: longer than one unit's KV -> the narrowest group that holds it; priority < priority_tp ->
TP over priority_width units (default half the node); fewer than low_load requests in flight -> TP over all units; else DP.
A binding costs one switch (set_TP_mode) and its release another (reset_TP_mode): switch_ms
(live, 15 ms) or cold_restart_s (a restart into a new static layout, 146-292 s published);
each is a step-record row (steps = 0) under the group's leader with its cost in switch_s.
"""
from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from perfmodel.estimate import deployment, instance_layout
from perfmodel.layout import LayoutError, ParallelLayout

from simulator.engine.loop import Engine
from simulator.policies.flying.engine import WIDTHS, Binding, FlyingConfig, FlyingEngine, GroupEngine
from simulator.policies.base import EnginePlan, parse_args
from simulator.engine.runner import Runner

class Coordinator:
    """Cluster-level scheduler of the Flying pool (mutable simulation state, one per run)."""

    def __init__(self, n: int, unit: ParallelLayout, widths: tuple, cfg: FlyingConfig):
        self.n, self.unit, self.widths, self.cfg = n, unit, widths, cfg
        self.units: list = [None] * n
        self.groups: dict = {}  # (start, k) -> GroupEngine (the communicator pool: built once)
        self.bindings: list = []
        self.pending: deque = deque()  # TP requests whose group overlaps a bound one
        self.table_fn = None
        self.low_load = cfg.low_load or n

    # ---- set-up ----------------------------------------------------------------------------
    def attach(self, i: int, e) -> None:
        self.units[i], e.coord = e, self
        if all(u is not None for u in self.units):
            self.env, self.recs, self.steps = e.env, e.recs, e.steps

    def group(self, start: int, k: int) -> GroupEngine:
        if (start, k) not in self.groups:
            u = self.units[start]
            mode = f"tp{k * self.unit.tp}"
            table = self.table_fn(ParallelLayout(tp=k * self.unit.tp))
            g = GroupEngine(self.env, start, k, Runner.single(mode, table), u.cfg, u.budget, u.max_seqs,
                            self.recs, self.steps, u.on_finish)
            inner = g.on_finish

            def on_finish(pos, g=g):
                inner(pos)
                if g.outstanding_requests == 0:
                    self._group_idle(g)
            g.on_finish = on_finish
            self.groups[(start, k)] = g
        return self.groups[(start, k)]

    # ---- decisions -------------------------------------------------------------------------
    def _need(self, pos: int) -> int:
        return int(self.recs.input_tokens[pos] + self.recs.output_tokens[pos])

    def fits(self, pos: int) -> bool:
        u = self.units[0]
        cap = u.capacity_tokens * (max(self.widths) if self.widths else 1)
        return self._need(pos) <= (cap if u.cfg.enable_chunked_prefill else min(cap, u.budget))

    def in_flight(self) -> int:
        return (sum(u.outstanding_requests for u in self.units) + len(self.pending)
                + sum(g.outstanding_requests for g in self.groups.values()))

    def width(self, pos: int) -> int:
        """Units of the TP group this request runs on (0: DP)."""
        if not self.widths:
            return 0
        need, cap = self._need(pos), self.units[0].max_request_tokens
        if need > cap:
            return min(k for k in self.widths if k * cap >= need)
        if self.recs.priority[pos] < self.cfg.priority_tp:
            return self.cfg.priority_width or self.widths[max(0, len(self.widths) - 2)]  # half the node
        return max(self.widths) if self.in_flight() < self.low_load else 0

    def dispatch(self, pos: int, at_boundary: bool = True) -> None:
        self.recs.issued_s[pos] = self.env.now
        k = self.width(pos)
        if k == 0:
            return self._dp(pos, at_boundary)
        if not self._tp(pos, k, at_boundary):
            self.pending.append((pos, k))

    def _enqueue(self, e, pos: int, at_boundary: bool = True) -> None:
        """Engine.submit, keeping the request's first issue time (TTFT counts the wait for a group)."""
        t = self.recs.issued_s[pos]
        Engine.submit(e, pos, at_boundary)
        self.recs.issued_s[pos] = t

    def _dp(self, pos: int, at_boundary: bool) -> None:
        free = [u for u in self.units if u.binding is None] or self.units
        e = min(free, key=lambda u: (u.outstanding_tokens, u.index))
        b = e.binding
        if b is not None:  # DP work for a lent unit: the group takes no more and releases when done
            b.closing = True
            if b.started and b.group.outstanding_requests == 0:
                self._release(b)
        self._enqueue(e, pos, at_boundary)

    def _tp(self, pos: int, k: int, at_boundary: bool) -> bool:
        need = self._need(pos)
        for b in self.bindings:
            if len(b.members) >= k and not b.closing and need <= self._capacity(b):
                self._enqueue(b.group, pos, at_boundary)
                return True
        bound = {u.index for b in self.bindings for u in b.members}
        starts = [s for s in range(0, self.n - k + 1, k) if not bound & set(range(s, s + k))]
        if not starts:  # every aligned group overlaps a bound one: those take no more, release when idle
            for b in list(self.bindings):
                b.closing = True
                if b.started and b.group.outstanding_requests == 0:
                    self._release(b)
            return False
        s = min(starts, key=lambda s: (sum(u.outstanding_tokens for u in self.units[s:s + k]), s))
        members = self.units[s:s + k]
        bs = members[0].bs
        hard_cap = k * bs * min(u.num_blocks - u.used_blocks - -(-(u.budget + len(u.run)) // bs)
                                for u in members)  # paused DP work keeps its KV (+ one more step's growth)
        drain = self.cfg.switching != "hard" or need > hard_cap
        b = Binding(self.group(s, k), members, drain)
        b.cap = k * min(u.capacity_tokens for u in members) if drain else hard_cap
        self.bindings.append(b)
        idle = [u for u in members if len(u.run) == 0 and not u.waiting]
        if self.cfg.switching == "soft" and idle and len(idle) < k and need <= members[0].max_request_tokens:
            b.soft_host = idle[0]
            b.soft.append(pos)
            idle[0].binding = b
            self._enqueue(idle[0], pos, at_boundary)  # starts now in DP mode; recomputed under TP later
        else:
            self._enqueue(b.group, pos, at_boundary)
        for u in members:
            if u is not b.soft_host:
                self._hold(u, b, drain)
        return True

    def _hold(self, u, b: Binding, drain: bool) -> None:
        """Ask unit `u` to reach its safe point: after this step (hard) or once drained."""
        u.binding, u.hold, u.drain = b, self.env.event(), drain
        if u._wakeup is not None and not u._wakeup.triggered:
            u._wakeup.succeed()  # idle: parks at once
        elif not drain and u._stretch is not None:
            u.proc.interrupt(True)  # end its decode stretch after the step in progress

    def _capacity(self, b: Binding) -> int:
        return b.group.capacity_tokens if b.started else b.cap

    # ---- binding lifecycle -----------------------------------------------------------------
    def parked(self, u) -> None:
        b = u.binding
        b.parked.add(u.index)
        if b.started:
            return
        h = b.soft_host
        if h is not None and h.hold is None and len(b.parked) == len(b.members) - 1:
            self._hold(h, b, drain=False)  # the others are free: stop the DP run of the TP request
        if len(b.parked) == len(b.members) and not b.started:
            b.started = True
            if h is not None:
                self._move_to_group(b)
            self.env.process(self._start(b))

    def _move_to_group(self, b: Binding) -> None:
        """Soft preempt: the TP requests begun in DP on the host are recomputed under TP."""
        h, r = b.soft_host, self.recs
        for pos in b.soft:
            if not np.isnan(r.finish_s[pos]):
                continue
            hit = np.flatnonzero(h.run.idx == pos)
            if len(hit):
                i = int(hit[0])
                h.used_blocks -= int(h.run.blocks[i])
                r.generated[pos] = int(h.run.generated[i])
                h.run = h.run.keep(np.arange(len(h.run)) != i)
                r.preemptions[pos] += 1
            else:
                h.waiting.remove(pos)
            h.outstanding_tokens -= self._need(pos)
            h.outstanding_requests -= 1
            self._enqueue(b.group, pos)

    def _switch_row(self, b: Binding, mode: str, start_s: float) -> None:
        dur = self.env.now - start_s
        lead = b.members[0]
        self.steps.append(start_s, dur, lead.index, self.steps.mode_code(mode), 0, 0, 0, 0.0, 0.0, 0, 0.0,
                          lead.used_blocks * lead.bs, len(lead.waiting), dur)

    def _start(self, b: Binding):
        """set_TP_mode at the safe point: KV for the group, the switch, then the group runs."""
        g, t0 = b.group, self.env.now
        g.set_blocks(min(u.num_blocks - u.used_blocks for u in b.members))
        yield self.env.timeout(self.cfg.switch_s)
        self._switch_row(b, g.runner.choose(0), t0)
        ev, g.hold = g.hold, None
        ev.succeed()
        if g.outstanding_requests == 0:
            self._group_idle(g)

    def _group_idle(self, g) -> None:
        """Keep an idle group bound while the load stays low and no member has DP work."""
        b = next((b for b in self.bindings if b.group is g), None)
        if b is None or not b.started:
            return
        if b.closing or self.pending or self.in_flight() >= self.low_load or any(u.outstanding_requests for u in b.members):
            self._release(b)

    def _release(self, b: Binding) -> None:
        if b.group.hold is not None:  # already releasing
            return
        b.closing, b.group.hold = True, self.env.event()
        self.env.process(self._reset(b))

    def _reset(self, b: Binding):
        """reset_TP_mode: the switch back, then the members resume their DP work (KV intact)."""
        t0 = self.env.now
        yield self.env.timeout(self.cfg.switch_s)
        self._switch_row(b, "dp", t0)
        self.bindings.remove(b)
        for u in b.members:
            ev, u.hold, u.drain, u.binding = u.hold, None, False, None
            if ev is not None:
                ev.succeed()
        retry, self.pending = self.pending, deque()
        for pos, _ in retry:  # decided again: the load may have changed while they waited
            k = self.width(pos)
            if k == 0:
                self._dp(pos, True)
            elif not self._tp(pos, k, True):
                self.pending.append((pos, k))


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


@dataclasses.dataclass(frozen=True)
class FlyingPlan(EnginePlan):
    engine_cls: type = FlyingEngine
    attach: object = None


ARGS = {f.name: (str if f.type in ("str",) else float if f.type == "float" else int)
        for f in dataclasses.fields(FlyingConfig)}


def flying_plans(policy: str, layout: str | None, spec, hw, gpus: int, fw, policy_args: dict, prof=None) -> list[EnginePlan]:
    """Flying Serving over `gpus` GPUs (SYSTEMS.md 5). Arguments: switching (sequential | soft |
    hard), switch_ms (15), restart (live | cold), cold_restart_s (146), priority_tp (0: priority
    < 0 runs TP), priority_width (units; half the node), low_load (in-flight requests; the number of units)."""
    cfg = FlyingConfig(**parse_args(policy_args, ARGS))
    dep = deployment("dp", spec, hw, gpus, fw)
    unit = instance_layout(dep.base)
    n = dep.instances
    widths = []
    for k in WIDTHS:
        try:
            if k <= n and n % k == 0:
                widths.append(ParallelLayout(tp=k * unit.tp).validate(spec) and k)
        except LayoutError:
            pass
    if cfg.priority_width and cfg.priority_width not in widths:
        raise ValueError(f"priority_width={cfg.priority_width}: one of {widths} units")
    coord = Coordinator(n, unit, tuple(widths), cfg)
    modes = {"dp": FlyingMode(unit, coord)}
    modes.update({f"tp{k * unit.tp}": FlyingMode(ParallelLayout(tp=k * unit.tp), coord) for k in widths})
    per = unit.gpus_per_instance
    return [FlyingPlan(modes, lambda t: "dp", dep.plan.kv_capacity_tokens, tuple(range(i * per, (i + 1) * per)),
                       attach=lambda e, i=i: coord.attach(i, e)) for i in range(n)]
