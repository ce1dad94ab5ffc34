"""Own-shape residual tables of the fused-MoE calibration (perfmodel/calibration/moe.py): where a kernel
table measured a bundled preset's own shape, that preset is costed at its own measured points (the median
log(measured / cross-shape fit) per (split, log2 m_e) cell), and the cross-shape fit is kept for every shape
the table never measured. The fit's rows carry `residual` = log(measured / fit). `shape_key` is also what
perfmodel.cost looks a preset's own table up by at run time, so this module imports nothing of the fit."""
from __future__ import annotations

import numpy as np

from ..knobs import moe_routing
from ..modelspec import load_model, preset_names


def shape_key(hidden, inter, experts, topk) -> str:
    """The key of a model shape's own residual table: 'hidden x moe_intermediate x experts x top-k'."""
    return f"{int(hidden)}x{int(inter)}x{int(experts)}x{int(topk)}"


def preset_shapes(routing: str) -> dict:
    """{shape_key: preset name} of the bundled MoE presets costed under `routing` (knobs.moe_routing)."""
    out = {}
    for name in preset_names():
        spec = load_model(name)
        if spec.num_experts and moe_routing(spec) == routing:
            out.setdefault(shape_key(spec.hidden_size, spec.intermediate_size, spec.num_experts,
                                     spec.experts_per_token), name)
    return out


def add_shape_tables(tables: dict, d, routing: str, x_step: float) -> None:
    """Where the table measured a bundled preset's own shape (under the routing that preset is costed
    with), the median log(measured / cross-shape fit) per (split, log2 m_e) cell at that shape, on the
    mode's grid (tables[mode]["shapes"][shape_key]): the preset is then costed at its own measured
    points, and the cross-shape fit is left for shapes the table never measured."""
    wanted = preset_shapes(routing)
    x = np.round(np.log2(np.maximum(d.m_e, 1.0)) / x_step) * x_step
    d = d.assign(x=x, key=[shape_key(*t) for t in zip(d.hidden_size, d.inter_size, d.num_experts, d.topk)])
    for (mode, key), g in d[d.key.isin(list(wanted))].groupby(["mode", "key"]):
        grid = np.asarray(tables[mode]["log2_me"])
        splits = sorted(int(s) for s in g.split.unique())
        rows = []
        for sp in splits:
            med = g[g.split == sp].groupby("x").residual.median()
            rows.append(np.round(np.interp(grid, med.index.to_numpy(), med.to_numpy()), 3).tolist())
        tables[mode].setdefault("shapes", {})[key] = {"model": wanted[key], "splits": splits, "log_ratio": rows}
