"""Runner: how long a step takes, asked of perfmodel (StepTables), in the mode a policy picks.

A static policy has one mode; Shift has two (base and shift) chosen per step by batched tokens.
The runner never invents a time: every number is a StepTable built from perfmodel.step_cost (or a
policy's step object built on one, e.g. SiDP's, whose times depend on the moment).
"""
from __future__ import annotations

from typing import Callable

from perfmodel.steptable import StepTable


class Runner:
    """Modes of one engine: name -> step-time object, and the rule choosing a mode from a step's
    batched tokens; decode lines of StepTables (pure functions of n) are remembered."""

    __slots__ = ("tables", "choose", "_affine")

    def __init__(self, tables: dict, choose: Callable[[int], str]):
        self.tables, self.choose = tables, choose
        self._affine: dict = {}  # (mode, n) -> (c0, c1) of a StepTable

    @classmethod
    def single(cls, name: str, table) -> "Runner":
        return cls({name: table}, lambda tokens: name)

    def mode_for(self, tokens: int) -> tuple[str, object]:
        name = self.choose(tokens)
        return name, self.tables[name]

    def decode_affine(self, mode: str, table, n: int) -> tuple[float, float]:
        """(c0, c1) of a decode step of n sequences: c0 + c1 * keys seconds."""
        if type(table) is not StepTable:  # a step object whose line depends on the moment
            return table.decode_affine(n)
        got = self._affine.get((mode, n))
        if got is None:
            got = self._affine[(mode, n)] = table.decode_affine(n)
        return got
