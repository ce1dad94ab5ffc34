"""Own-shape residual tables of the fused-MoE calibration (perfmodel/calibration/moe.py): where a kernel
table measured a bundled preset's own shape, that preset is costed at its own measured points (the median
log(measured / cross-shape fit) per (split, log2 m_e) cell), and the cross-shape fit is kept for every shape
the table never measured. The fit's rows carry `residual` = log(measured / fit). Also the leave-one-shape-out
check of the fit's two forms (`python -m perfmodel.calibration.moe DATA_DIR --loso`)."""
from __future__ import annotations

import numpy as np


def shape_key(hidden, inter, experts, topk) -> str:
    """The key of a model shape's own residual table: 'hidden x moe_intermediate x experts x top-k'."""
    return f"{int(hidden)}x{int(inter)}x{int(experts)}x{int(topk)}"


def preset_shapes(routing: str) -> dict:
    """{shape_key: preset name} of the bundled MoE presets costed under `routing` (knobs.moe_routing)."""
    from ..knobs import moe_routing
    from ..modelspec import load_model, preset_names
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


def leave_one_shape_out(data_dir, hw, prof, routing: str = "power_law_1.2") -> list[tuple]:
    """[(framework, quant, shapes, rms ratio-only, rms floor + ratio)]: each multi-shape table refitted
    without one model shape and evaluated on it (log(fit / measured) over its points, both forms, no
    own-shape tables): how well each form carries a table to a shape it never measured."""
    from .moe import SOURCES, with_formula, fit_table, read_rows, source
    from .profile import moe_ratio
    out = []
    for fw, quants in SOURCES.items():
        for quant, src in quants.items():
            backend, version, kernel, data_dtype = source(quant, src)
            raw = read_rows(data_dir, backend, version, data_dtype, kernel, routing)
            key = [tuple(t) for t in raw[["hidden_size", "inter_size", "num_experts", "topk"]].to_numpy()]
            shapes = sorted(set(key))
            if len(shapes) < 2:
                continue
            rms = []
            for floors in (False, True):
                errs = []
                for s in shapes:
                    held = np.array([k == s for k in key])
                    tabs = fit_table(with_formula(raw[~held], quant.split("_marlin")[0], hw, prof, floors))
                    te = with_formula(raw[held], quant.split("_marlin")[0], hw, prof, False)
                    for (mode, split), g in te.groupby(["mode", "split"]):
                        if mode in tabs:
                            t = tabs[mode]["floor_ms"] + g.formula_ms * moe_ratio(tabs[mode], float(split), g.m_e.to_numpy())
                            errs += list(np.log(t / g.latency))
                rms.append(float(np.sqrt(np.mean(np.square(errs)))))
            out.append((fw, quant, len(shapes), *rms))
    return out
