"""Runner: how long a step takes, asked of perfmodel (StepTables), in the mode a policy picks.

A static policy has one mode; Shift has two (base and shift) chosen per step by batched tokens.
The runner never invents a time: every number is a StepTable built from perfmodel.step_cost (or a
policy's step object built on one, e.g. SiDP's, whose times depend on the moment).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from perfmodel.steptable import StepTable


class DecodeLine(NamedTuple):
    """The next `steps` decode steps of n sequences take c0_s + c1_s_per_key x keys seconds each."""

    c0_s: float
    c1_s_per_key: float
    steps: int


class Runner:
    """Modes of one engine: name -> step-time object, and the rule choosing a mode from a step's
    batched tokens; decode lines of StepTables (pure functions of n) are remembered."""

    __slots__ = ("tables", "choose", "only", "_affine")

    def __init__(self, tables: dict, choose: Callable[[int], str]):
        self.tables, self.choose = tables, choose
        # the one mode of a single-mode runner (its rule can only name it: not asked per step), else None
        self.only = next(iter(tables)) if len(tables) == 1 else None
        self._affine: dict = {}  # (mode, n) -> a StepTable's DecodeAffine

    @classmethod
    def single(cls, name: str, table) -> "Runner":
        return cls({name: table}, lambda tokens: name)

    def decode_line(self, mode: str, table, n: int, k0: float, steps: int) -> DecodeLine:
        """DecodeLine(c0, c1, steps): the next `steps` decode steps of n sequences from k0 keys take
        c0 + c1 * keys seconds each, keys growing by n a step. A StepTable's line holds for any number of steps; a step
        object whose time depends on the moment (SiDP's) says for how many of them its line is exact
        (fewer, down to 1: the engine then runs one step and asks again)."""
        if type(table) is not StepTable:
            return table.decode_line(n, k0, steps)
        got = self._affine.get((mode, n))
        if got is None:
            got = self._affine[(mode, n)] = table.decode_affine(n)
        return tuple.__new__(DecodeLine, (got.c0_s, got.c1_s_per_key, steps))  # (scheduler.Schedule's note)
