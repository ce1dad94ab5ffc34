"""The engine interface, declared once: what the cluster, the routers and the policies may use of an engine.

Every engine kind (Engine, the disaggregated DecodeEngine, SeesawEngine) is an EngineCore
(simulator.engine.core) and so has the shared part; the kinds that take requests from the cluster's
router add `submit`, those a policy lends out add hold/release. tests/test_engine_interface.py checks
every engine a run builds, of every policy, against these.
"""
from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable


@runtime_checkable
class EngineLike(Protocol):
    """Every engine: its counts (the routers' load figures), its queue, capacity, finish hooks, rows."""

    index: int
    outstanding_tokens: int  # prompt + output of unfinished requests routed here
    outstanding_requests: int
    waiting: object  # requests queued here (a deque of workload positions)

    @property
    def capacity_tokens(self) -> int: ...

    def fits(self, pos: int) -> bool:
        """Whether request `pos` could ever run here (its whole sequence fits)."""

    def add_finish_hook(self, fn: Callable[[int], None]) -> None:
        """`fn(pos)` after each completion here, in completion order."""

    def report_queue(self, queued: Callable[[], int]) -> None:
        """Step rows' `waiting` is `queued()` (the policy's queue) instead of this engine's own."""

    def record(self, *, start_s: float, duration_s: float, mode: str, steps: int, agg, kv_used_tokens: float,
               switch_s: float = 0.0) -> None:
        """One step row of this engine."""


@runtime_checkable
class ServingEngine(EngineLike, Protocol):
    """An engine the cluster routes requests to."""

    def submit(self, pos: int, at_boundary: bool = True) -> None:
        """Queue request `pos` here (`at_boundary`: whether a step ending at this instant sees it)."""


@runtime_checkable
class LendableEngine(ServingEngine, Protocol):
    """An engine a dynamic policy parks, re-plans and takes requests back from (Flying, SiDP, disagg)."""

    @property
    def is_held(self) -> bool: ...

    def hold(self, drain: bool = False, on_parked=None) -> None: ...

    def release(self) -> None: ...

    def cut(self, at_boundary: bool = True) -> None: ...

    def withdraw(self, pos: int) -> None: ...


@runtime_checkable
class KVReceiver(EngineLike, Protocol):
    """A disaggregated decode instance: requests join once their KV arrived from a prefill instance."""

    def can_reserve(self, pos: int) -> bool: ...

    def reserve(self, pos: int) -> None: ...

    def transferred(self, pos: int, transfer_s: float) -> None: ...

    def deliver(self, pos: int) -> None: ...
