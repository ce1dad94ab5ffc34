"""TP x SP combined (SYSTEMS.md Algorithm 2): TP shards weights inside each SP rank, Ulysses
splits the tokens across SP ranks; GPU (sp s, tp t) serves head block t*SP + s."""
from __future__ import annotations

from .comm import Group
from .sp import apply_sp
from .tp import apply_tp


def apply_tpsp(model, layout, tp_group: Group, sp_group: Group):
    """Column/row-parallel weights over `tp_group`, Ulysses over `sp_group`; with TP > 1 each SP
    rank produces the logits of ceil(seqs/SP) sequences (the perf model's logits all_gather)."""
    apply_tp(model, layout, tp_group)
    return apply_sp(model, layout, sp_group, split_logits=layout.tp > 1)
