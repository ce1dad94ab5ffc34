"""Engines of Flying Serving (SYSTEMS.md 5): a DP unit that a TP group can borrow, and the group.

FlyingEngine is a simulator Engine (one DP unit, full weights) that hands its arrivals to the
coordinator (which picks DP or TP and where) and parks on `hold` while a TP group borrows its
GPUs: after the step in progress with its requests' KV intact (hard preempt), or once its
running requests have finished (`drain`: sequential and soft preempt). GroupEngine is an Engine
over an aligned group of k units: the StepTable of tp = k x the unit's tp, and KV blocks of
k x the unit's block size (the KV Cache Adaptor: same bytes per block, 1/k of each token per
GPU), as many as the fullest member has free (each GPU must hold its 1/k of every token).
"""
from __future__ import annotations

import dataclasses

from simulator.engine.loop import Engine
from simulator.results.records import STEP_COLUMNS

KV_COL = STEP_COLUMNS.index("kv_used_tokens")

SWITCHING = ("sequential", "soft", "hard")
WIDTHS = (2, 4, 8)  # aligned contiguous groups (SYSTEMS.md 5)
LIVE_SWITCH_MS = 15.0  # TARGETS.md, Flying Serving: live switch with pre-built communicators
COLD_RESTART_S = 146.0  # TARGETS.md: cold restart into a new static TP, 146-292 s (low end)


@dataclasses.dataclass(frozen=True, slots=True)
class FlyingConfig:
    """Scheduler knobs (policy arguments of the same names)."""

    switching: str = "hard"
    switch_ms: float = LIVE_SWITCH_MS
    restart: str = "live"  # live: switch_ms per switch; cold: cold_restart_s (the static comparison)
    cold_restart_s: float = COLD_RESTART_S
    priority_tp: int = 0  # priority < this runs TP (lower = more urgent, as in vLLM)
    priority_width: int = 0  # units per priority group; 0 = the widest group below all units (half)
    low_load: int = 0  # in-flight requests below which new requests run TP; 0 = the number of units

    def __post_init__(self):
        if self.switching not in SWITCHING or self.restart not in ("live", "cold"):
            raise ValueError(f"switching={self.switching!r} (one of {', '.join(SWITCHING)}), "
                             f"restart={self.restart!r} (live or cold)")
        if self.switch_ms < 0 or self.cold_restart_s < 0 or self.low_load < 0 or self.priority_width < 0:
            raise ValueError(f"negative flying argument in {self}")

    @property
    def switch_s(self) -> float:
        return self.switch_ms / 1e3 if self.restart == "live" else self.cold_restart_s


class Binding:
    """Units [start, start + k) lent to one TP group, from binding to release."""

    def __init__(self, group, members, drain: bool):
        self.group, self.members, self.drain = group, members, drain
        self.parked: set = set()
        self.started = self.closing = False
        self.cap = 0  # tokens the group can hold, known at binding
        self.soft_host, self.soft = None, []  # soft preempt: the idle unit running TP requests in DP




class FlyingEngine(Engine):
    """One DP engine of the Flying pool; `coord` (set at attach) routes and binds groups."""

    def __init__(self, *args, **kw):
        self.coord = None
        self.hold = None  # event while a TP group borrows this unit (set/cleared by the coordinator)
        self.drain = False  # park only once the running requests are done (sequential / soft)
        self.binding = None
        super().__init__(*args, **kw)

    def submit(self, pos: int, at_boundary: bool = True) -> None:
        """Arrivals routed here by the cluster go to the coordinator, which decides DP or TP."""
        self.coord.dispatch(pos, at_boundary)

    def fits(self, pos: int) -> bool:
        """Servable by the largest TP group (the cluster rejects what no group can hold)."""
        return self.coord.fits(pos)

    def park(self):
        if self.hold is None or (self.drain and len(self.run)):
            return None
        self.coord.parked(self)
        return self.hold

    def _schedule(self):
        """While a group waits for this unit (draining), admit nothing new: finish what runs."""
        if self.hold is None:
            return super()._schedule()
        saved, self.max_seqs = self.max_seqs, len(self.run)
        try:
            return super()._schedule()
        finally:
            self.max_seqs = saved


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


class GroupEngine(Engine):
    """A TP group over units [start, start + k): parked until its binding starts; records its
    steps under the leader unit's index (one row per group step)."""

    def __init__(self, env, leader, k, runner, unit_cfg, budget, max_seqs, recs, steps, on_finish):
        self.k, self.hold = k, env.event()
        cfg = dataclasses.replace(unit_cfg, block_size=unit_cfg.block_size * k)  # block_size_TP = k x DP
        super().__init__(env, leader, runner, cfg, budget, max_seqs, 0, recs, GroupSteps(steps, k), on_finish)

    def park(self):
        return self.hold

    def set_blocks(self, blocks: int) -> None:
        """KV for this binding: `blocks` TP blocks (k x the unit block size in tokens)."""
        self.num_blocks = int(blocks)
        self.capacity_tokens = self.num_blocks * self.bs
