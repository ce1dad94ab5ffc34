"""Flying Serving's pool state: bindings of units to TP groups."""
from __future__ import annotations


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
