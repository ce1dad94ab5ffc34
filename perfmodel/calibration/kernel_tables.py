"""Kernel tables measured on the user's own node: what microbench's `moe` and `mla` suites write beside their
measurement CSV, in the columns of NVIDIA aiconfigurator's `moe_perf` and `generation_mla_perf` tables (the ones
calibration/moe.py and mla_decode.py fit), so that `perfmodel calibrate --measurements DIR` fits the profile's
`moe` and `mla_decode` sections from them with the same code as from aiconfigurator's package.

One file per table, framework and framework version: moe_perf_<framework>_<version>.csv,
generation_mla_perf_<framework>_<version>.csv. `latency` is milliseconds per call, as in aiconfigurator's tables;
the columns after it are microbench's (spread, the perf model's prediction, versions, the error of a failed case).
The schema lives here, not in microbench, so calibrate reads what microbench writes without importing it.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

MOE, MLA = "moe_perf", "generation_mla_perf"
SECTION = {MOE: "moe", MLA: "mla_decode"}  # profile section each table fits
# aiconfigurator's columns (parquet tables of aiconfigurator-core 0.12.0, systems/data/<gpu>/moe|mla/...):
# moe_perf: one MoE layer's routed experts on ONE GPU of a moe_tp x moe_ep group, num_tokens entering it;
# generation_mla_perf: absorbed-MLA decode attention, num_heads query heads on the GPU, batch_size sequences
# of isl + step keys each (one new token per sequence)
AIC_COLUMNS = {
    MOE: ("framework", "version", "device", "op_name", "kernel_source", "moe_dtype", "num_tokens", "hidden_size",
          "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"),
    MLA: ("framework", "version", "device", "op_name", "kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads",
          "batch_size", "isl", "tp_size", "step", "latency"),
}
EXTRA_COLUMNS = ("p10_ms", "p90_ms", "iterations", "predicted_ms", "torch_version", "cuda_version", "cuda_graph",
                 "error", "timestamp")
COLUMNS = {t: cols + EXTRA_COLUMNS for t, cols in AIC_COLUMNS.items()}
# the columns that identify a case (microbench --resume): a row with the same values is the same measurement
KEY_COLUMNS = {t: tuple(c for c in cols if c not in ("device", "op_name", "latency")) + ("cuda_graph",)
               for t, cols in AIC_COLUMNS.items()}
POSITIVE = {MOE: ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
                  "latency"),
            MLA: ("num_heads", "batch_size", "isl", "tp_size", "latency")}
NOT_IN_NAME = re.compile(r"[^A-Za-z0-9.+-]+")


def file_name(table: str, framework: str, version: str) -> str:
    """moe_perf_vllm_0.11.0.csv: the file of one table, framework and version (odd characters -> '-')."""
    return f"{table}_{NOT_IN_NAME.sub('-', framework.lower())}_{NOT_IN_NAME.sub('-', version)}.csv"


def table_of(path) -> str | None:
    """The table a CSV file is by its name (moe_perf_*.csv, generation_mla_perf_*.csv), else None."""
    name = Path(path).name
    return next((t for t in AIC_COLUMNS if name.startswith(f"{t}_") and name.endswith(".csv")), None)


def split_paths(paths) -> tuple[list, list]:
    """(the other --measurements paths, the kernel-table files named among them)."""
    paths = [Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    tables = [p for p in paths if p.is_file() and table_of(p)]
    return [p for p in paths if p not in tables], tables


def find(paths) -> dict:
    """{table: sorted files} of the kernel tables among `paths`: named files, every table file in a named
    folder, and those beside a named measurement file (microbench writes them beside its --out)."""
    found: dict = {}
    for p in map(Path, [paths] if isinstance(paths, (str, Path)) else paths):
        folder = p if p.is_dir() else p.parent
        for f in ([p] if p.is_file() and table_of(p) else []) + sorted(folder.glob("*.csv")):
            if table_of(f):
                found.setdefault(table_of(f), set()).add(f.resolve())
    return {t: sorted(fs) for t, fs in found.items()}


def read(path: Path, table: str) -> tuple[pd.DataFrame, int]:
    """(rows of one table file that measured a time, rows skipped: error rows and blank latencies); aiconfigurator's
    columns as the fits read them (framework lower-case). ValueError naming the file, line and field otherwise."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in AIC_COLUMNS[table] if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column {missing[0]!r} (a {table} table has {', '.join(AIC_COLUMNS[table])})")
    df.insert(0, "line", np.arange(2, len(df) + 2))
    bad = (df.get("error", pd.Series("", index=df.index)).str.strip() != "") | (df.latency.str.strip() == "")
    df = df[~bad].copy()
    numeric = POSITIVE[table] + (("step",) if table == MLA else ())
    for c in numeric:
        v = pd.to_numeric(df[c], errors="coerce")
        wrong = v.isna() | ((v <= 0) if c != "step" else (v < 0))
        if wrong.any():
            i = int(np.flatnonzero(wrong.to_numpy())[0])
            raise ValueError(f"{path} line {int(df.line.iloc[i])}: field {c!r} = {df[c].iloc[i]!r} is not a "
                             f"{'positive ' if c != 'step' else ''}number")
        df[c] = v.astype(float) if c == "latency" else v.astype(int)
    df["framework"] = df.framework.str.strip().str.lower()
    return df, int(bad.sum())
