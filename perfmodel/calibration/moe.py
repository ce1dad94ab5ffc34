"""Fused-MoE calibration: how much slower real fused/grouped MoE kernels are than the dense-GEMM
formula of perfmodel.cost (one GEMM of m_e rows against the hit experts' weights side by side).

Source data: NVIDIA aiconfigurator's H100 perf database (Apache-2.0), repo ai-dynamo/aiconfigurator
@ 095f58a5, aic-core/src/aiconfigurator_core/systems/data/h100_sxm/moe/<backend>/<version>/moe_perf.parquet;
which file and rows per framework and quant mode (4-bit Blackwell modes included): moe_sources.py.
Column semantics (the SDK's reader, aic-core/rust/aiconfigurator-core/src/perf_database/table_view.rs:899-942
`view_moe`, keys quant/distribution/topk/num_experts/hidden/inter/moe_tp/moe_ep -> num_tokens -> latency;
the collector collector/vllm/collect_moe.py:702 `hidden_states = randn([num_tokens, hidden_size])`,
:542 `logical_parallel_size = moe_ep_size if moe_ep_size > 1 else moe_tp_size`, :772 latency in ms per
forward): one MoE layer (routing excluded: router logits are given) on ONE GPU of a moe_tp x moe_ep
group, `num_tokens` tokens entering the layer on that GPU, routed over all `num_experts`; with EP
the GPU computes only its num_experts/ep local experts (full width), with MoE-TP 1/tp of every
expert's width. That is perfmodel.cost's n_group (tokens the EP group's GPU sees) exactly.

What is fitted (per framework kernel family, weight format and routing skew): the median over model
shapes of log(measured / formula) on a grid of (mode = ep|tp, split = moe_ep or moe_tp, log2 m_e), m_e
the formula's rows per hit expert. Routing: the rows measured under the skew aiconfigurator's SDK predicts
with (ROUTINGS: power-law alpha 1.2 for its generic MoE family, 1.01 for DeepSeek/Kimi; perfmodel.knobs.
moe_routing picks one per model), against the formula as perfmodel.cost evaluates it (uniform expert hits,
the default busiest-rank rows knobs.moe_ep_imbalance under EP); the ratio carries what the skew changes
(fewer experts hit in decode, the hottest expert in prefill). Until 2026-11-26 the `balanced` rows were
fitted (docs/fidelity.md gives both). perfmodel.cost multiplies the formula by exp(interpolated log ratio).

Since 2026-11-26 each table also carries the kernel's fixed time per layer, `floor_ms` (per mode: the
intercept of time against the formula through the 1- and 2-token points, floor_intercept_ms), taken out
before the ratio: t = floor + ratio x formula. Held out one model shape at a time, this form carries a table
to a shape it never measured better on every multi-shape table (`--loso` prints it; docs/fidelity.md). An
entry may take its floor from another table of the same kernel family (SOURCES, 5th item: gpt-oss's Marlin). Where a table measured a bundled preset's own shape, that preset is costed at its own points
(moe_shapes.py): the cross-shape fit is only for shapes the table never measured.

CLI (the parquet files are NOT needed at run time; the fit is committed in the profile JSON):
    python -m perfmodel.calibration.moe DATA_DIR [--profile h100_sxm] [--write]
DATA_DIR holds <backend>/<version>/moe_perf.parquet (e.g. files taken out of the mirror with
`git show HEAD:aic-core/src/aiconfigurator_core/systems/data/h100_sxm/moe/vllm/0.19.0/moe_perf.parquet`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from .. import cost
from ..hardware import load_hardware
from ..knobs import moe_ep_imbalance
from ..layout import ParallelLayout
from . import sections
from .moe_shapes import add_shape_tables
from .moe_sources import MODEL_DTYPE, SOURCES, WEIGHT_DTYPE_MAP, source, weight_dtype_map  # noqa: F401 (re-exported)
from .moe_table import moe_ratio
from .profile import from_dict

REPO = "ai-dynamo/aiconfigurator"
COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
DATA_PATH = "aic-core/src/aiconfigurator_core/systems/data/{system}/moe/{backend}/{version}/moe_perf.parquet"
READER = ("aic-core/rust/aiconfigurator-core/src/perf_database/table_view.rs:899-942 (view_moe); "
          "collector/vllm/collect_moe.py:542,702,772 (rank-local experts, [num_tokens, hidden] input, ms)")
# which table each framework's kernels come from, per quant mode, and each mode's weight format: moe_sources.py
FALLBACK_FRAMEWORK = "vllm"  # sglang runs the same triton fused_moe family as vLLM
MAX_SPLIT = 32  # larger splits clamp to 32 (keeps the shipped profile < 210 kB)
X_STEP = 1.0  # log2 m_e grid step
MIN_ABOVE_FLOOR = 0.05  # the measured time above the floor at the floor's own point (keeps the log finite)
# model shapes whose measured points are committed for the tests (hidden, inter, experts, topk)
CHECK_SHAPES = {"gpt-oss-120b": (2880, 2880, 128, 4), "minimax-m2.5": (3072, 1536, 256, 8),
                "qwen3-235b-a22b": (4096, 1536, 128, 8), "qwen3-30b-a3b": (2048, 768, 128, 8)}
CHECK_TOKENS = (1, 64, 4096)
CHECK_COLUMNS = ("framework", "quant", "model", "hidden", "inter", "experts", "topk", "moe_tp", "moe_ep",
                 "num_tokens", "latency_ms")
# routing skews fitted (aiconfigurator `distribution` values; perfmodel.knobs.moe_routing cites the alphas);
# the first is the section's default_routing, the one the check points are measured under
ROUTINGS = ("power_law_1.2", "power_law_1.01")


def layout_of(moe_tp: int, moe_ep: int):
    """The ParallelLayout whose MoE layer the row measures: EP inside the TP group (every rank sees
    all num_tokens), or TP-sharded experts."""
    return ParallelLayout(tp=int(max(moe_tp, moe_ep)), ep=int(moe_ep))


def formula_s(hidden, inter, experts, topk, weight_dtype, moe_tp, moe_ep, num_tokens, hw, prof):
    """(seconds, m_e) of perfmodel.cost's uncalibrated fused-MoE formula for a table row, with the busiest EP
    rank's default rows (knobs.moe_ep_imbalance) as perfmodel.cost evaluates it."""
    spec = SimpleNamespace(num_experts=int(experts), experts_per_token=int(topk), hidden_size=int(hidden),
                           intermediate_size=int(inter), weight_dtype=weight_dtype)
    t, m_e = cost.expert_gemm_formula_s(spec, layout_of(moe_tp, moe_ep), hw, np.asarray(num_tokens, dtype=float),
                                        prof, moe_ep_imbalance(int(moe_ep)))
    return t, m_e


def family_floor_ms(data_dir, fw: str, src: tuple, routing: str, hw, prof, sources: dict = SOURCES) -> dict | None:
    """{mode: ms} of the entry's kernel-family floor where SOURCES names one (its 5th item: another key of
    the framework, whose rows' intercept is the floor), else None (the rows' own intercept)."""
    if len(src) < 5:
        return None
    key = src[4]
    backend, version, kernel, data_dtype = source(key, sources[fw][key])
    d = read_rows(data_dir, backend, version, data_dtype, kernel, routing)
    return floor_intercept_ms(with_formula(d, key.split("_marlin")[0], hw, prof, False))


def read_rows(data_dir, backend: str, version: str, data_dtype: str, kernel: str | None = None,
              routing: str = ROUTINGS[0]):
    """One table's rows of a quant mode and routing skew, at MoE-TP or EP alone. `data_dir`: a folder of
    <backend>/<version>/moe_perf.parquet, or {(backend, version): rows} (tables measured on the node by
    microbench, calibration/measured.py)."""
    d = (data_dir[(backend, version)] if isinstance(data_dir, dict)
         else pd.read_parquet(Path(data_dir) / backend / version / "moe_perf.parquet"))
    d = d[(d.moe_dtype == data_dtype) & (d.distribution == routing)
          & ((d.moe_tp_size == 1) | (d.moe_ep_size == 1))]
    if kernel:
        d = d[d.kernel_source.str.contains(kernel)]
    return d[np.maximum(d.moe_tp_size, d.moe_ep_size) <= MAX_SPLIT]


def with_formula(d, quant, hw, prof, floors: bool = True, floor_ms: dict | None = None):
    """Rows with the formula's time (formula_ms), m_e, log(measured/formula), mode and split; `floor_ms`
    ({mode: ms}) replaces the rows' own intercept (a kernel family's floor measured on other tables)."""
    parts = []
    for (h, i, e, k, tp, ep), g in d.groupby(["hidden_size", "inter_size", "num_experts", "topk",
                                             "moe_tp_size", "moe_ep_size"]):
        t, m_e = formula_s(h, i, e, k, MODEL_DTYPE[quant], tp, ep, g.num_tokens.to_numpy(), hw, prof)
        parts.append(g.assign(formula_ms=np.asarray(t) * 1e3, m_e=np.asarray(m_e)))
    d = pd.concat(parts)
    d["mode"] = np.where(d.moe_ep_size > 1, "ep", "tp")
    d["split"] = np.where(d.moe_ep_size > 1, d.moe_ep_size, d.moe_tp_size)
    # the kernel's fixed time per layer (launches, top-k, the alignment pass, the reduction), taken out
    # before the ratio so that a table carried to a smaller shape keeps it (the ratio alone scales it
    # down with the shape): per mode, floor_intercept_ms
    d["floor_ms"] = d["mode"].map(floor_ms or floor_intercept_ms(d)) if floors else 0.0
    d["log_ratio"] = np.log(np.maximum(d.latency - d.floor_ms, MIN_ABOVE_FLOOR * d.latency) / d.formula_ms)
    return d


def floor_intercept_ms(d) -> dict:
    """{mode: fixed ms}: the intercept of time against the formula through each (shape, split)'s 1- and
    2-token points (both one row per hit expert, so the ratio is shared and cancels: a = t1 - f1 (t2 - t1)
    / (f2 - f1)), the median over them, within [0, the mode's smallest measured time]."""
    out = {}
    for mode, g in d.groupby("mode"):
        a = []
        for _, p in g[g.num_tokens.isin([1, 2])].groupby(["hidden_size", "inter_size", "num_experts", "topk", "split"]):
            p = p.groupby("num_tokens")[["latency", "formula_ms"]].median()
            if len(p) == 2 and p.formula_ms[2] > p.formula_ms[1]:
                t1, t2, f1, f2 = p.latency[1], p.latency[2], p.formula_ms[1], p.formula_ms[2]
                a.append(t1 - f1 * (t2 - t1) / (f2 - f1))
        out[mode] = float(np.clip(np.median(a), 0.0, g.latency.min())) if a else 0.0
    return out


def fit_table(d) -> dict:
    """{mode: {splits, log2_me, log_ratio[split][x]}}: medians over shapes per grid cell; empty cells
    filled by interpolation along log2 m_e (flat beyond the measured range)."""
    out = {}
    x = np.round(np.log2(np.maximum(d.m_e, 1.0)) / X_STEP) * X_STEP
    d = d.assign(x=x)
    for mode, g in d.groupby("mode"):
        splits = sorted(int(s) for s in g.split.unique())
        grid = np.arange(0.0, float(g.x.max()) + X_STEP / 2, X_STEP)
        rows = []
        for s in splits:
            med = g[g.split == s].groupby("x").log_ratio.median()
            rows.append(np.round(np.interp(grid, med.index.to_numpy(), med.to_numpy()), 3).tolist())
        out[mode] = {"splits": splits, "log2_me": grid.tolist(), "log_ratio": rows,
                     "floor_ms": round(float(g.floor_ms.min()), 4)}
    return out


def fit(data_dir: Path, hw, prof, system: str = "h100_sxm", sources: dict = SOURCES) -> dict:
    """The profile's `moe` section fitted from the parquet files under data_dir, read as `sources` says
    (moe_sources: the pinned SOURCES, or newest_sources for a GPU without the pinned versions)."""
    section = {
        "method": ("t = floor_ms + formula(m_e rows x hit experts, perfmodel.cost) x exp(log_ratio), log_ratio "
                   "bilinear in (log2 split, log2 m_e) (clamped); floor_ms per mode: the 1-/2-token intercept; "
                   "log_ratio: median over model shapes of log((measured - floor)/formula), per routing skew "
                   "(tables '<quant>@<routing>'); a bundled preset's own measured shape: x exp(its own median "
                   "residual, tables[mode].shapes); one MoE layer on one GPU"),
        "default_routing": ROUTINGS[0],
        "source": {"repo": REPO, "commit": COMMIT, "reader": READER, "license": "Apache-2.0"},
        "weight_dtype_map": dict(WEIGHT_DTYPE_MAP),
        "framework_fallback": FALLBACK_FRAMEWORK,
        "frameworks": {},
        "check_points": {"columns": list(CHECK_COLUMNS), "rows": []},
    }
    for fw, quants in sources.items():
        section["frameworks"][fw] = {}
        for (quant, src), routing in ((q, r) for q in quants.items() for r in ROUTINGS):
            backend, version, kernel, data_dtype = source(quant, src)
            d = read_rows(data_dir, backend, version, data_dtype, kernel, routing)
            if d.empty:
                continue
            d = with_formula(d, quant.split("_marlin")[0], hw, prof,
                             floor_ms=family_floor_ms(data_dir, fw, src, routing, hw, prof, sources))
            med = d.groupby(["mode", "split", np.round(np.log2(np.maximum(d.m_e, 1)) / X_STEP)]).log_ratio.transform("median")
            res = np.log((d.floor_ms + d.formula_ms * np.exp(med)) / d.latency)  # log(fit / measured)
            tables = fit_table(d)
            add_shape_tables(tables, d.assign(residual=-res), routing, X_STEP)
            section["frameworks"][fw][f"{quant}@{routing}"] = {
                "file": DATA_PATH.format(system=system, backend=backend, version=version),
                "kernels": sorted(d.kernel_source.unique().tolist()),
                "rows": int(len(d)),
                "shapes": len({(h, i, e, k) for h, i, e, k in
                               zip(d.hidden_size, d.inter_size, d.num_experts, d.topk)}),
                "rms_log_residual": round(float(np.sqrt((res ** 2).mean())), 3),
                "tables": tables,
            }
            if routing != ROUTINGS[0]:
                continue
            for name, (h, i, e, k) in CHECK_SHAPES.items():
                c = d[(d.hidden_size == h) & (d.inter_size == i) & (d.num_experts == e) & (d.topk == k)
                      & d.num_tokens.isin(CHECK_TOKENS) & (d.split == 4) & (quant != "bfloat16")]
                for r in c.itertuples():
                    section["check_points"]["rows"].append(
                        [fw, quant, name, h, i, e, k, int(r.moe_tp_size), int(r.moe_ep_size),
                         int(r.num_tokens), round(float(r.latency), 5)])
    # which fitted key each weight format looks up (Profile.moe_factor): WEIGHT_DTYPE_MAP on Hopper tables;
    # where 4-bit tables were fitted, nvfp4 -> its own and mxfp4 -> every MXFP4 mode a framework has
    fitted = {q.split("@")[0] for qs in section["frameworks"].values() for q in qs}
    section["weight_dtype_map"] = weight_dtype_map(fitted, getattr(hw, "has_fp4", False))
    return section


def leave_one_shape_out(data_dir, hw, prof, routing: str = "power_law_1.2") -> list[tuple]:
    """[(framework, quant, shapes, rms ratio-only, rms floor + ratio)]: each multi-shape table refitted
    without one model shape and evaluated on it (log(fit / measured) over its points, both forms, no
    own-shape tables): how well each form carries a table to a shape it never measured."""
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


def with_section(text: str, section: dict) -> str:
    """The profile JSON text with its `moe` section (the last key) replaced or added; every other
    byte of the file unchanged."""
    return sections.with_section(text, "moe", section)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfmodel.calibration.moe", description=__doc__.split("\n")[0])
    p.add_argument("data_dir", type=Path, help="dir with <backend>/<version>/moe_perf.parquet")
    p.add_argument("--profile", default="h100_sxm", help="profile JSON (name in perfmodel/profiles or path)")
    p.add_argument("--hardware", default="h100")
    p.add_argument("--write", action="store_true", help="write the moe section into the profile JSON")
    p.add_argument("--loso", action="store_true",
                   help="print the leave-one-shape-out error of the ratio-only and the floor + ratio fits")
    a = p.parse_args(argv)
    path = sections.checked_inputs(a.profile, [a.data_dir / s[0] / s[1] / "moe_perf.parquet"
                                               for q in SOURCES.values() for s in q.values()])
    if path is None:
        return 2
    d = json.loads(path.read_text())
    d.pop("moe", None)
    prof = from_dict(d, str(path))  # the formula's denominator: GEMM tables without any moe section
    if a.loso:
        print("leave one model shape out, rms log(fit / measured) over the held-out shape's points")
        for fw, q, n, r0, r1 in leave_one_shape_out(a.data_dir, load_hardware(a.hardware), prof):
            print(f"{fw:7s} {q:12s} shapes {n:2d}  ratio only {r0:.3f}  floor + ratio {r1:.3f}")
        return 0
    section = fit(a.data_dir, load_hardware(a.hardware), prof)
    for fw, qs in section["frameworks"].items():
        for q, t in qs.items():
            print(f"{fw:7s} {q:12s} rows {t['rows']:5d} rms log residual {t['rms_log_residual']:.3f}  {t['file']}")
    if a.write:
        path.write_text(with_section(path.read_text(), section))
        print(f"wrote moe section to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
