"""Flying Serving's coordinator: places each request on a DP unit or binds a TP group of units.

Units are plain engines (one DP instance each, full weights). A TP group over aligned units
[start, start + k) is another engine (tp = k x the unit's tp; KV blocks of k x the unit's block
size: the KV Cache Adaptor, same bytes per block, 1/k of each token per GPU, as many as the fullest
member has free), parked until its binding starts. The coordinator acts on engines only through
their public interface: submit, hold/release, withdraw, and read-only facts.
"""
from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np

from perfmodel.layout import ParallelLayout
from simulator.engine.loop import Engine
from simulator.engine.runner import Runner
from simulator.engine.step import NO_WORK

from .pool import Binding


class Coordinator:
    """Cluster-level scheduler of the Flying pool (mutable simulation state, one per run); the
    cluster's front door: `fits` and `dispatch` every request."""

    def __init__(self, n: int, unit: ParallelLayout, widths: tuple, cfg):
        self.n, self.unit, self.widths, self.cfg = n, unit, widths, cfg
        self.units: list = [None] * n
        self.bound: dict = {}  # unit index -> its Binding while lent to a group
        self.groups: dict = {}  # (start, k) -> group engine (the communicator pool: built once)
        self.bindings: list = []
        self.pending: deque = deque()  # TP requests whose group overlaps a bound one
        self.table_fn = None
        self.low_load = cfg.low_load or n

    # ---- set-up ----------------------------------------------------------------------------
    def attach(self, i: int, e) -> None:
        # its rows report the pool's queue: the coordinator syncs one waiting queue globally (SYSTEMS.md 5),
        # so requests queued at a unit lent to a TP group (no rows while parked), or held here, show in every row
        e.report_queue(self.queued)
        self.units[i] = e
        if all(u is not None for u in self.units):
            self.env, self.recs, self.steps = e.env, e.recs, e.steps

    def group(self, start: int, k: int):
        if (start, k) not in self.groups:
            u = self.units[start]
            mode = f"tp{k * self.unit.tp}"
            table = self.table_fn(ParallelLayout(tp=k * self.unit.tp))
            lim = dataclasses.replace(u.limits, block_size=u.limits.block_size * k)  # block_size_TP = k x DP
            runner = Runner.single(mode, table, (u.runner.floor_s, u.runner.floor_seq_s))  # (the units' host floor)
            g = Engine(env=self.env, index=start, runner=runner, limits=lim, kv_capacity_tokens=0,
                       recs=self.recs, steps=self.steps, fast_forward=u.fast_forward, arrivals_due=u.arrivals_due,
                       kv_per_gpu_divisor=k)  # (its rows' KV per GPU against the unit's capacity)
            g.report_queue(self.queued)
            g.hold()  # parked until a binding starts it
            for hook in u.finish_hooks:
                g.add_finish_hook(hook)
            g.add_finish_hook(lambda pos, g=g: self._group_idle(g) if g.outstanding_requests == 0 else None)
            self.groups[(start, k)] = g
        return self.groups[(start, k)]

    # ---- decisions -------------------------------------------------------------------------
    def _need(self, pos: int) -> int:
        return int(self.recs.input_tokens[pos] + self.recs.output_tokens[pos])

    def fits(self, pos: int) -> bool:
        """Servable by the largest TP group (the cluster rejects what no group can hold), by the units' own rule
        (Engine.holds: unchunked, TRT-LLM bounds only the prompt by the step budget, vLLM the whole request)."""
        u = self.units[0]
        cap = u.capacity_tokens * (max(self.widths) if self.widths else 1)
        return u.holds(self.recs.input_tokens[pos], self._need(pos), cap)

    def in_flight(self) -> int:
        return (sum(u.outstanding_requests for u in self.units) + len(self.pending)
                + sum(g.outstanding_requests for g in self.groups.values())
                + sum(len(b.moved) for b in self.bindings))

    def queued(self) -> int:
        """Requests in the pool that no step runs yet: on a unit's or group's waiting queue (a unit
        lent to a TP group keeps its queue until the group releases it), pending at the coordinator
        (their TP group overlaps a bound one), or withdrawn from a revoked group (until its reset)."""
        return (sum(len(u.waiting) for u in self.units) + sum(len(g.waiting) for g in self.groups.values())
                + len(self.pending) + sum(len(b.moved) for b in self.bindings))

    def decide(self, pos: int) -> tuple:
        """(units of the TP group this request runs on, 0: DP; why): long (outgrows one unit's KV:
        the narrowest group that holds it), priority, load (fewer than low_load in flight: TP over
        all units), burst (DP; the low-load groups end, `_revoke_all`)."""
        if not self.widths:
            return 0, "dp"
        need, cap = self._need(pos), self.units[0].max_request_tokens
        if need > cap:
            return min(k for k in self.widths if k * cap >= need), "long"
        if self.recs.priority[pos] < self.cfg.priority_tp:
            return self.cfg.priority_width or self.widths[max(0, len(self.widths) - 2)], "priority"  # half the node
        return (max(self.widths), "load") if self.in_flight() < self.low_load else (0, "burst")

    def dispatch(self, pos: int, at_boundary: bool = True) -> None:
        k, why = self.decide(pos)
        if why == "burst":
            self._revoke_all()
        if why == "load":  # all units, else the widest group clear of priority / long-context ones
            if any(self._tp(pos, w, at_boundary, why) for w in sorted(self.widths, reverse=True) if w <= k):
                return
        elif k and self._tp(pos, k, at_boundary, why):
            return
        if k and why != "load":
            self.pending.append((pos, k))  # waits at the coordinator: its group overlaps a bound one
            return
        self._dp(pos, at_boundary)

    def _dp(self, pos: int, at_boundary: bool) -> None:
        free = [u for u in self.units if u.index not in self.bound] or self.units
        e = min(free, key=lambda u: (u.outstanding_tokens, u.index))
        b = self.bound.get(e.index)
        if b is not None:  # DP work for a lent unit (waits there until the group releases it): the
            b.closing = True  # group takes no more and releases when done (a low-load one ends sooner: `_revoke_all`)
            if b.started and b.group.outstanding_requests == 0:
                self._release(b)
        e.submit(pos, at_boundary)

    def _tp(self, pos: int, k: int, at_boundary: bool, why: str = "priority") -> bool:
        need = self._need(pos)
        for b in self.bindings:
            # a low-load request waits for no other kind of group's switch (cold: 146 s)
            joins = why != "load" or b.revocable or not b.group.is_held  # (held: not running yet)
            if joins and len(b.members) >= k and not b.closing and need <= self._capacity(b):
                b.revocable = b.revocable and why == "load"
                b.group.submit(pos, at_boundary)
                return True
        bound = {u.index for b in self.bindings for u in b.members}
        starts = [s for s in range(0, self.n - k + 1, k) if not bound & set(range(s, s + k))]
        if not starts and why == "load":  # overlaps a priority / long-context group: narrower, or DP
            return False
        if not starts:  # every aligned group overlaps a bound one: those take no more, release when idle
            for b in list(self.bindings):
                b.closing = True
                if b.started and b.group.outstanding_requests == 0:
                    self._release(b)
            return False
        s = min(starts, key=lambda s: (sum(u.outstanding_tokens for u in self.units[s:s + k]), s))
        members = self.units[s:s + k]
        bs = members[0].kv.block_size
        hard_cap = k * bs * min(u.free_blocks_now(at_boundary) - -(-(u.limits.budget + u.num_running) // bs)
                                for u in members)  # paused DP work keeps its KV (+ one more step's growth)
        drain = self.cfg.switching != "hard" or need > hard_cap
        b = Binding(self.group(s, k), members, drain, revocable=why == "load")
        b.cap = k * min(u.capacity_tokens for u in members) if drain else hard_cap
        self.bindings.append(b)
        idle = [u for u in members if u.num_running == 0 and not u.waiting]
        if self.cfg.switching == "soft" and idle and len(idle) < k and need <= members[0].max_request_tokens:
            b.soft_host = idle[0]
            b.soft.append(pos)
            self.bound[idle[0].index] = b
            idle[0].submit(pos, at_boundary)  # starts now in DP mode; recomputed under TP later
        else:
            b.group.submit(pos, at_boundary)
        for u in members:
            if u is not b.soft_host:
                self._hold(u, b, drain)
        return True

    def _hold(self, u, b: Binding, drain: bool) -> None:
        """Ask unit `u` to reach its safe point: after this step (hard) or once drained."""
        self.bound[u.index] = b
        u.hold(drain, on_parked=self.parked)

    def _capacity(self, b: Binding) -> int:
        return b.group.capacity_tokens if b.started else b.cap

    # ---- binding lifecycle -----------------------------------------------------------------
    def parked(self, u) -> None:
        b = self.bound[u.index]
        b.parked.add(u.index)
        if b.started:
            return
        h = b.soft_host
        if h is not None and not h.is_held and len(b.parked) == len(b.members) - 1:
            self._hold(h, b, drain=False)  # the others are free: stop the DP run of the TP request
        if len(b.parked) == len(b.members) and not b.started:
            b.started = True
            if h is not None:
                self._move_to_group(b)
            self.env.process(self._start(b))

    def _move_to_group(self, b: Binding) -> None:
        """Soft preempt: the TP requests begun in DP on the host are recomputed under TP."""
        for pos in b.soft:
            if np.isnan(self.recs.finish_s[pos]):
                b.soft_host.withdraw(pos)
                b.group.submit(pos)

    def _switch_row(self, b: Binding, mode: str, start_s: float) -> None:
        dur = self.env.now - start_s
        lead = b.members[0]  # (the switch's row is its first unit's, against the unit's KV)
        lead.record(start_s=start_s, duration_s=dur, mode=mode, steps=0, agg=NO_WORK, kv_used_tokens=lead.kv.used_tokens,
                    switch_s=dur)

    def _start(self, b: Binding):
        """set_TP_mode at the safe point: KV for the group, the switch, then the group runs."""
        g, t0 = b.group, self.env.now
        g.kv.resize(min(u.kv.free for u in b.members))
        yield self.env.timeout(self.cfg.switch_s)
        self._switch_row(b, g.runner.choose(0), t0)
        if b.revoked:  # a burst came during the switch: straight back to DP
            return self._evict(b)
        g.release()
        if g.outstanding_requests == 0:
            self._group_idle(g)

    def _group_idle(self, g) -> None:
        """Keep an idle group bound while the load stays low and no member has DP work."""
        b = next((b for b in self.bindings if b.group is g), None)
        if b is None or not b.started:
            return
        if b.closing or self.pending or self.in_flight() >= self.low_load or any(u.outstanding_requests for u in b.members):
            self._release(b)

    def _revoke_all(self) -> None:
        """A burst: every low-load group stops after its step in progress (not after its last
        request, which may decode for seconds while the burst queues behind it, issue 33); its
        requests are recomputed in DP (a TP layout's KV, 1/k per GPU, is no unit's)."""
        for b in self.bindings:
            # (not a soft preempt's group: its request runs on the host in DP until the group starts, and
            # taking it back from either side mid-move left a request in two batches: a soft group drains)
            if b.revocable and not b.revoked and b.soft_host is None:
                b.revoked = b.closing = True
                if b.started and not b.group.is_held:  # running: at its next safe point
                    b.group.hold(False, on_parked=lambda g, b=b: self._evict(b))
                # not running yet: `_start` evicts after the switch

    def _evict(self, b: Binding) -> None:
        """A revoked group, parked: take its requests back, then reset_TP_mode."""
        g = b.group
        b.moved = list(g.batch.idx) + list(g.waiting)
        for pos in b.moved:
            g.withdraw(pos)
        self.env.process(self._reset(b))

    def _release(self, b: Binding) -> None:
        if b.group.is_held:  # already releasing
            return
        b.closing = True
        b.group.hold()
        self.env.process(self._reset(b))

    def _reset(self, b: Binding):
        """reset_TP_mode: the switch back, then the members resume their DP work (KV intact)."""
        t0 = self.env.now
        yield self.env.timeout(self.cfg.switch_s)
        self._switch_row(b, "dp", t0)
        self.bindings.remove(b)
        for u in b.members:
            self.bound.pop(u.index, None)
            u.release()
        moved, b.moved = b.moved, []
        for pos in moved:  # a revoked group's requests: on with DP (a recompute of their tokens)
            self._dp(pos, True)
        retry, self.pending = self.pending, deque()
        for pos, _ in retry:  # decided again: the load may have changed while they waited
            self.dispatch(pos, True)
