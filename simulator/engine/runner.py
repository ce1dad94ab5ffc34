"""Runner: how long a step takes, asked of perfmodel (StepTables), in the mode a policy picks.

A static policy has one mode; Shift has two (base and shift) chosen per step by batched tokens.
The runner never invents a time: every number is a StepTable built from perfmodel.step_cost (or a
policy's step object built on one, e.g. SiDP's, whose times depend on the moment).
"""
from __future__ import annotations

from typing import Callable, Final, NamedTuple

from perfmodel.steptable import StepTable

_NEW: Final = tuple.__new__  # (a NamedTuple built without its __new__ call: scheduler.Schedule's note)


class DecodeLine(NamedTuple):
    """The next `steps` decode steps of n sequences take c0_s + c1_s_per_key x keys seconds each."""

    c0_s: float
    c1_s_per_key: float
    steps: int


class Runner:
    """Modes of one engine: name -> step-time object, and the rule choosing a mode from a step's
    batched tokens; decode lines of StepTables (pure functions of n) are remembered."""

    __slots__ = ("tables", "choose", "only", "_affine", "floor_s", "floor_seq_s", "floored")

    def __init__(self, tables: dict, choose: Callable[[int], str], floor: tuple = (0.0, 0.0)):
        self.tables, self.choose = tables, choose
        # the host floor of the engine's loop (Framework.host_floor_s, host_floor_seq_s): a step takes at least
        # floor_s + floor_seq_s x its sequences; `floored`: whether there is one (one test a step when not)
        self.floor_s, self.floor_seq_s = float(floor[0]), float(floor[1])
        self.floored = self.floor_s > 0 or self.floor_seq_s > 0
        # the one mode of a single-mode runner (its rule can only name it: not asked per step), else None
        self.only = next(iter(tables)) if len(tables) == 1 else None
        self._affine: dict = {}  # (mode, n) -> a StepTable's DecodeAffine

    @classmethod
    def single(cls, name: str, table, floor: tuple = (0.0, 0.0)) -> "Runner":
        return cls({name: table}, lambda tokens: name, floor)

    def floor_at(self, seqs: int) -> float:
        """The host floor of a step of `seqs` sequences (seconds; 0 without a floor)."""
        return self.floor_s + self.floor_seq_s * seqs

    def step_s(self, table, agg, rank_tokens=None) -> float:
        """Seconds of one step of aggregates `agg` on `table`: its time, or the host floor where that is longer."""
        t = table.step_s(agg) if rank_tokens is None else table.step_s(agg, rank_tokens=rank_tokens)
        if self.floored:
            h = self.floor_at(agg.prefill_seqs + agg.decode_seqs)
            return h if h > t else t
        return t

    def decode_line(self, mode: str, table, n: int, k0: float, steps: int) -> DecodeLine:
        """DecodeLine(c0, c1, steps): the next `steps` decode steps of n sequences from k0 keys take
        c0 + c1 * keys seconds each, keys growing by n a step. A StepTable's line holds for any number of steps; a step
        object whose time depends on the moment (SiDP's) says for how many of them its line is exact
        (fewer, down to 1: the engine then runs one step and asks again)."""
        if type(table) is not StepTable:
            line = table.decode_line(n, k0, steps)
            return floored_line(line, k0, n, self.floor_at(n)) if self.floored else line
        got = self._affine.get((mode, n))
        if got is None:
            got = self._affine[(mode, n)] = table.decode_affine(n)
        line = _NEW(DecodeLine, (got.c0_s, got.c1_s_per_key, steps))  # (scheduler.Schedule's note)
        return floored_line(line, k0, n, self.floor_at(n)) if self.floored else line


def floored_line(line: DecodeLine, k0: float, n: int, floor_s: float) -> DecodeLine:
    """`line` (decode steps of n sequences from k0 keys, each c0 + c1 x keys, keys growing by n a step) under a host
    floor of `floor_s` a step: each step takes max(c0 + c1 x keys, floor_s). The line grows with the keys, so it
    crosses the floor at most once: from the first step on above it, `line` itself; else the floor, for the steps
    whose line lies at or below it (at least one: the caller asks again after them, then from above the floor).
    Step by step (Runner.step_s) makes the same comparison at the same keys (equal up to the rounding any stretch's
    closed form has: tests/test_host_floor.py, benchmarks/differential_fuzz.py)."""
    c0, c1, steps = line
    if c0 + c1 * k0 >= floor_s:
        return line
    m = steps
    if c1 > 0:  # the steps j < m with c0 + c1 (k0 + j n) <= floor_s: estimated, then made exact
        m = max(1, min(steps, int((floor_s - c0 - c1 * k0) / (c1 * n)) + 1))
        while m > 1 and c0 + c1 * (k0 + (m - 1) * n) > floor_s:
            m -= 1
        while m < steps and c0 + c1 * (k0 + m * n) <= floor_s:
            m += 1
    return _NEW(DecodeLine, (floor_s, 0.0, m))
