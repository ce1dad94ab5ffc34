"""Flying Serving's pool state: bindings of units to TP groups, and the step rows the pool writes."""
from __future__ import annotations

from simulator.results.records import StepRow


class Binding:
    """Units [start, start + k) lent to one TP group, from binding to release. `revocable`: bound
    only because the load was low (no priority or long-context request joined): a burst ends it."""

    def __init__(self, group, members, drain: bool, revocable: bool = False):
        self.group, self.members, self.drain, self.revocable = group, members, drain, revocable
        self.parked: set = set()
        self.started = self.closing = self.revoked = False
        self.cap = 0  # tokens the group can hold, known at binding
        self.soft_host, self.soft = None, []  # soft preempt: the idle unit running TP requests in DP
        self.moved: list = []  # revoked: the group's requests, withdrawn, waiting for the members' DP mode


class PoolSteps:
    """The run's StepRecords as a Flying engine writes them: `waiting` is the pool's queue (the
    coordinator syncs one waiting queue globally, SYSTEMS.md 5), not the engine's own, so requests
    queued at a unit that is lent to a TP group (which writes no rows while parked), or held at the
    coordinator, show in every row."""

    def __init__(self, steps, coord):
        self.steps, self.coord = steps, coord

    def mode_code(self, name: str) -> float:
        return self.steps.mode_code(name)

    def append(self, row: StepRow) -> None:
        self.steps.append(row._replace(waiting=self.coord.queued()))


class GroupSteps(PoolSteps):
    """A TP-k group's rows: KV used in one GPU's DP-token equivalents (TP tokens / k), so KV
    utilisation stays per GPU against the unit's capacity."""

    def __init__(self, steps, coord, k: int):
        super().__init__(steps, coord)
        self.k = k

    def append(self, row: StepRow) -> None:
        super().append(row._replace(kv_used_tokens=row.kv_used_tokens / self.k))
