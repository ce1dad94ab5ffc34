"""The profile's `moe` and `mla_decode` sections fitted on kernel tables measured on the user's own node
(kernel_tables.py: microbench's `moe` and `mla` suites), by the same fits as aiconfigurator's tables
(moe.fit, mla_decode.fit): calibrate.add_extra_sections asks here first, so a node's own measurements win over
the package's tables and over the bundled profile's sections, and nothing changes where there are none.

Which rows: `moe`, each framework's newest version (aiconfigurator.version_key), every quant mode it measured
(moe_sources.MODEL_DTYPE keys; no kernel filter: a node's table is one kernel family per mode); `mla_decode`,
the (framework, version) with the most rows, one decode table per KV dtype it measured.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from . import kernel_tables as kt
from . import mla_decode, moe
from .aiconfigurator import version_key
from .moe_sources import MODEL_DTYPE
from .profile import from_dict
from .readers import sha256

TOOL = "microbench --suite moe,mla (perfmodel/calibration/kernel_tables.py)"


@dataclasses.dataclass(frozen=True)
class Tables:
    """The kernel tables of one calibrate run: rows per table and (framework, version), the file each came
    from, the chosen (framework, version) keys per table, and the files' source records (provenance)."""

    rows: dict  # table -> {(framework, version): frame}
    files: dict  # table -> {(framework, version): [file names]}
    chosen: dict  # table -> [(framework, version)] the fit reads
    sources: tuple = ()
    skipped: dict = dataclasses.field(default_factory=dict)


def read_tables(found: dict) -> Tables:
    """Tables of kernel_tables.find's {table: files}: every file read and checked, the versions to fit chosen."""
    rows, files, per_file, skipped = {}, {}, [], {}
    for table, paths in found.items():
        for path in map(Path, paths):
            df, n_bad = kt.read(path, table)
            if n_bad:
                skipped[f"{path.name}: rows with an error or no time (microbench marks failed cases)"] = n_bad
            for key, g in df.groupby(["framework", "version"], sort=True):
                key = (str(key[0]), str(key[1]))
                rows.setdefault(table, {})[key] = pd.concat([rows.get(table, {}).get(key, g.iloc[:0]), g])
                files.setdefault(table, {}).setdefault(key, []).append(path.name)
            per_file.append((table, path, df))
    chosen = {t: _choose(t, r) for t, r in rows.items()}
    sources = tuple({"file": path.name, "dir": str(path.parent), "format": f"microbench {table}",
                     "sha256": sha256(path),
                     "rows_used": int(sum(((df.framework == fw) & (df.version == v)).sum() for fw, v in chosen[table])
                                      if table in chosen else 0),
                     "devices": sorted({d.strip() for d in df.device.unique()} - {""})}
                    for table, path, df in per_file)
    return Tables(rows=rows, files=files, chosen=chosen, sources=sources, skipped=skipped)


def _choose(table: str, rows: dict) -> list:
    """(framework, version) keys the section is fitted on: moe, each framework's newest version; mla, the one key
    with the most rows (ties: the newest)."""
    if table == kt.MOE:
        newest = {}
        for fw, v in rows:
            if fw not in newest or version_key(v) > version_key(newest[fw]):
                newest[fw] = v
        return sorted(newest.items())
    return [max(rows, key=lambda k: (len(rows[k]), version_key(k[1])))]


def sections(tables: Tables | None) -> set:
    """The profile sections these tables fit (a table with measured rows)."""
    return {kt.SECTION[t] for t, keys in (tables.chosen.items() if tables else ()) if keys}


def fit(key: str, tables: Tables, d: dict, hw) -> tuple[dict | None, str]:
    """(section, provenance text) of `moe` or `mla_decode` fitted on the chosen rows, or (None, why) when they
    hold none the fit reads; `d` is the profile dict being written (its GEMM tables are the fused-MoE formula's
    denominator, its roofline the MLA bound)."""
    table = next(t for t, s in kt.SECTION.items() if s == key)
    keys = tables.chosen[table]
    names = [n for k in keys for n in tables.files[table][k]]
    if key == "mla_decode":
        (fw_v,) = keys
        section = mla_decode.fit(None, d["roofline"], hw.name, rows=tables.rows[table][fw_v])
    else:
        data = {k: tables.rows[table][k] for k in keys}
        srcs = {fw: {q: (fw, v, None) for q in MODEL_DTYPE if q in set(data[(fw, v)].moe_dtype)} for fw, v in keys}
        prof = from_dict({k: v for k, v in d.items() if k != "moe"})  # the formula without any fused-MoE factor
        section = moe.fit(data, hw, prof, hw.name, sources=srcs)
        for fw, v in keys:
            for tab in section["frameworks"].get(fw, {}).values():
                tab["file"] = ", ".join(tables.files[table][(fw, v)])
    if not (section.get("tables") or any(section.get("frameworks", {}).values())):
        return None, f"{', '.join(names)}: no rows the {key} fit reads (calibration/{key}.py)"
    section["source"] = {"data": f"kernel tables measured on this node: {', '.join(names)}", "tool": TOOL,
                         "reader": "perfmodel/calibration/measured.py"}
    versions = ", ".join(f"{fw} {v}" for fw, v in keys)
    return section, f"fitted on microbench kernel tables {', '.join(names)} ({versions})"
