"""Runner: how long a step takes, asked of perfmodel (StepTables), in the mode a policy picks.

A static policy has one mode; Shift has two (base and shift) chosen per step by batched tokens.
The runner never invents a time: every number is a StepTable built from perfmodel.step_cost.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from perfmodel.steptable import StepTable


@dataclasses.dataclass
class Runner:
    """Modes of one engine: name -> StepTable, and the rule choosing a mode from a step's tokens."""

    tables: dict  # mode name -> StepTable
    choose: Callable[[int], str]  # batched tokens -> mode name

    @classmethod
    def single(cls, name: str, table: StepTable) -> "Runner":
        return cls({name: table}, lambda tokens: name)

    def mode_for(self, tokens: int) -> tuple[str, StepTable]:
        name = self.choose(tokens)
        return name, self.tables[name]
