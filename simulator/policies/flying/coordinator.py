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
from simulator.results.records import STEP_COLUMNS

KV_COL = STEP_COLUMNS.index("kv_used_tokens")


class Binding:
    """Units [start, start + k) lent to one TP group, from binding to release."""

    def __init__(self, group, members, drain: bool):
        self.group, self.members, self.drain = group, members, drain
        self.parked: set = set()
        self.started = self.closing = False
        self.cap = 0  # tokens the group can hold, known at binding
        self.soft_host, self.soft = None, []  # soft preempt: the idle unit running TP requests in DP


class GroupSteps:
    """The run's StepRecords as a TP-k group writes them: KV used in one GPU's DP-token
    equivalents (TP tokens / k), so KV utilisation stays per GPU against the unit's capacity."""

    def __init__(self, steps, k: int):
        self.steps, self.k = steps, k

    def mode_code(self, name: str) -> float:
        return self.steps.mode_code(name)

    def append(self, *values) -> None:
        v = list(values)
        v[KV_COL] = v[KV_COL] / self.k
        self.steps.append(*v)


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
        self.units[i] = e
        if all(u is not None for u in self.units):
            self.env, self.recs, self.steps = e.env, e.recs, e.steps

    def group(self, start: int, k: int):
        if (start, k) not in self.groups:
            u = self.units[start]
            mode = f"tp{k * self.unit.tp}"
            table = self.table_fn(ParallelLayout(tp=k * self.unit.tp))
            lim = dataclasses.replace(u.limits, block_size=u.limits.block_size * k)  # block_size_TP = k x DP
            g = Engine(self.env, start, Runner.single(mode, table), lim, 0, self.recs, GroupSteps(self.steps, k),
                       u.fast_forward, u.arrivals_due)
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
        """Servable by the largest TP group (the cluster rejects what no group can hold)."""
        u = self.units[0]
        cap = u.capacity_tokens * (max(self.widths) if self.widths else 1)
        return self._need(pos) <= (cap if u.limits.chunked_prefill else min(cap, u.limits.budget))

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
        k = self.width(pos)
        if k == 0:
            return self._dp(pos, at_boundary)
        if not self._tp(pos, k, at_boundary):
            self.pending.append((pos, k))

    def _dp(self, pos: int, at_boundary: bool) -> None:
        free = [u for u in self.units if u.index not in self.bound] or self.units
        e = min(free, key=lambda u: (u.outstanding_tokens, u.index))
        b = self.bound.get(e.index)
        if b is not None:  # DP work for a lent unit: the group takes no more and releases when done
            b.closing = True
            if b.started and b.group.outstanding_requests == 0:
                self._release(b)
        e.submit(pos, at_boundary)

    def _tp(self, pos: int, k: int, at_boundary: bool) -> bool:
        need = self._need(pos)
        for b in self.bindings:
            if len(b.members) >= k and not b.closing and need <= self._capacity(b):
                b.group.submit(pos, at_boundary)
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
        bs = members[0].kv.block_size
        hard_cap = k * bs * min(u.kv.free - -(-(u.limits.budget + u.num_running) // bs)
                                for u in members)  # paused DP work keeps its KV (+ one more step's growth)
        drain = self.cfg.switching != "hard" or need > hard_cap
        b = Binding(self.group(s, k), members, drain)
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
        lead = b.members[0]
        self.steps.append(start_s, dur, lead.index, self.steps.mode_code(mode), 0, 0, 0, 0.0, 0.0, 0, 0.0,
                          lead.kv.used_tokens, len(lead.waiting), dur)

    def _start(self, b: Binding):
        """set_TP_mode at the safe point: KV for the group, the switch, then the group runs."""
        g, t0 = b.group, self.env.now
        g.kv.resize(min(u.kv.free for u in b.members))
        yield self.env.timeout(self.cfg.switch_s)
        self._switch_row(b, g.runner.choose(0), t0)
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
        retry, self.pending = self.pending, deque()
        for pos, _ in retry:  # decided again: the load may have changed while they waited
            k = self.width(pos)
            if k == 0:
                self._dp(pos, True)
            elif not self._tp(pos, k, True):
                self.pending.append((pos, k))
