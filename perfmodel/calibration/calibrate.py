"""Fit a calibrated profile from measurements (and derive one for a GPU without measurements).

The profile JSON holds the fitted numbers, the datasheet roofline they are normalised by, and the
provenance: source files with sha256 and rows used, the split, the date, the fit error per op.
"""
from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from . import attention as att
from . import collectives as coll
from . import gemm as gm
from . import fp8_scale, measured, mla_decode, moe, moe_sources, split
from .coverage import EXTRA
from .device import check_devices
from .profile import FORMAT, PROFILE_DIR, from_dict
from .readers import sha256
from .validate import repeat_noise, predict_us

FORMS = {
    "gemm": "efficiency = datasheet roofline / time on the measured (m, n, k) grid per dtype, trilinear in "
            "log m, log n, log k; constant outside the grid (time follows the roofline there)",
    "attention_prefill": "efficiency grid per head_dim over log2 (s, seqs*heads, heads/kv_heads), s = fresh-prefill "
                         "length with the same query-key pairs; smoothed least squares in log time",
    "attention_decode": "t = fixed_us(seqs*kv_heads, gqa) + kv_bytes / kv_gbs(seqs*kv_heads, gqa) per head_dim: "
                        "affine in keys read; relative least squares, reweighted, fixed >= 0, kv_gbs <= datasheet HBM",
    "collectives": "median measured time per size (repeats pooled), log-log interpolation per (op, group); "
                   "constant below the smallest size, last bus bandwidth above the largest",
    "collectives_multinode": "as collectives, per (op, group, nodes) for groups spanning nodes (keys "
                             "'group@nodes'; unknown nodes: ceil(group / gpus_per_node)); used only for "
                             "that exact placement, never interpolated",
    "copies": "as collectives, per copy kind (h2d, d2h, d2d, p2p)",
}


def roofline_of(hw, fp4_rows: bool = False) -> dict:
    """Datasheet peaks the efficiencies are normalised by (fp32 and fp16 use the bf16 peak: only a
    normalisation, it cancels between fit and prediction). fp4 is there where the preset has fp4 tensor
    cores (fp4_tflops), or where fp4 rows are fitted on a preset without them: then 2x the fp8 peak
    (Blackwell's dense fp4:fp8 ratio), again only a normalisation. GPUs without either keep the dict
    they always had (the bundled H100 / H200 profiles)."""
    bf16 = hw.bf16_tflops
    peaks = {"bf16": bf16, "fp16": bf16, "fp32": bf16, "fp8": hw.fp8_tflops or bf16}
    src = f"perfmodel/hardware/{hw.name}.toml datasheet bf16_tflops, fp8_tflops, hbm_bw_gbs"
    fp4 = getattr(hw, "fp4_tflops", 0.0)
    if fp4 > 0:
        peaks["fp4"] = fp4
        src = src.replace("fp8_tflops,", "fp8_tflops, fp4_tflops,")
    elif fp4_rows:
        peaks["fp4"] = 2.0 * peaks["fp8"]
        src += f"; fp4 = 2 x fp8 ({hw.name} has no fp4_tflops: a normalisation only)"
    return {"peak_tflops": peaks, "hbm_gbs": hw.hbm_bw_gbs, "source": src}


def _label(kind: str, df):
    if kind in ("prefill", "decode"):
        return np.full(len(df), "attention_" + kind)
    return {"gemm": lambda: "gemm " + df.dtype, "collective": lambda: df.op,
            "copy": lambda: "memcpy_" + df.kind}[kind]().to_numpy()


def _errors(kind, df, prof, held) -> dict:
    """Fit-row and held-out median / p90 |relative error| per op label."""
    pred = predict_us(kind, df, prof)
    err = np.abs(pred / df.t_us.to_numpy() - 1)
    labels = _label(kind, df)
    out = {}
    for lab in sorted(set(labels)):
        sel = labels == lab
        rec = {}
        for part, mask in (("fit", sel & ~held.to_numpy()), ("heldout", sel & held.to_numpy())):
            e = err[mask]
            e = e[np.isfinite(e)]
            rec[f"{part}_rows"] = int(len(e))
            if len(e):
                rec[f"{part}_median_abs_rel_err"] = round(float(np.median(e)), 4)
                rec[f"{part}_p90_abs_rel_err"] = round(float(np.percentile(e, 90)), 4)
        sub = df[sel]
        noise = repeat_noise(kind, sub)
        if np.isfinite(noise):
            rec["repeat_noise_median_abs_rel"] = round(noise, 4)
        out[lab] = rec
    return out


def calibrate(meas, hw, split_mode: str = "fit", name: str | None = None, command: str = "",
              progress=None, allow_device_mismatch: bool = False, extra_dirs: dict | None = None,
              records: dict | None = None, tables: measured.Tables | None = None) -> dict:
    """The profile dict fitted on `meas` (readers.Measurements): on the fit split ("fit", the
    default: validate then reports held-out error) or on every row ("all"). `progress`, if given,
    is called as progress(stage, done, total) before each stage (one per op kind fitted, then
    "fit error") and once at the end with done == total. Refuses (ValueError) measurements whose
    device column names other hardware than `hw` unless allow_device_mismatch (calibration/device.py);
    adds the `mla_decode` and `moe` sections (add_extra_sections below; calibration/coverage.py), looking for
    their tables in `extra_dirs` first (folder -> the name the profile records it by: aiconfigurator's
    systems/data/<gpu>/ in the installed package), then beside the measurements; `records`: more provenance
    entries (e.g. "aiconfigurator": what came from that package, aiconfigurator.provenance); `tables`: kernel
    tables measured on the node (measured.read_tables: microbench's moe / mla suites), which those sections are
    fitted on first, their files device-checked and recorded like the measurements'."""
    if split_mode not in ("fit", "all"):
        raise ValueError(f"--split {split_mode!r}: choose fit or all")
    sources = [*meas.sources, *(tables.sources if tables else ())]
    device_check = check_devices(sources, hw, allow_device_mismatch)
    roof = roofline_of(hw, fp4_rows=bool((meas.frame("gemm").dtype == "fp4").any()))
    d = {"format": FORMAT, "name": name or hw.name, "hardware": hw.name, "roofline": roof}
    held = {}
    fitters = {"gemm": ("gemm", lambda f: gm.fit_gemm(f, roof)),
               "prefill": ("attention_prefill", lambda f: att.fit_prefill(f, roof)),
               "decode": ("attention_decode", lambda f: att.fit_decode(f, roof)),
               "collective": ("collectives", coll.fit_collectives), "copy": ("copies", coll.fit_copies)}
    frames = {kind: meas.frame(kind) for kind in fitters}
    # rows of unknown placement (aiconfigurator tables, older files): node-major on whole nodes
    frames["collective"] = coll.with_nodes(frames["collective"], hw.gpus_per_node)
    stages = [kind for kind in fitters if len(frames[kind])] + ["fit error"]
    tick = progress or (lambda stage, done, total: None)
    for kind, (key, fit) in fitters.items():
        df = frames[kind]
        if not len(df):
            continue
        tick(key, stages.index(kind), len(stages))
        held[kind] = split.heldout(kind, df) if split_mode == "fit" else pd.Series(False, index=df.index)
        d[key] = fit(df[~held[kind]])
    if not held:
        raise ValueError("no measurement rows to fit (gemm, attention, collective or memcpy rows)")
    extra_dirs = {str(k): v for k, v in (extra_dirs or {}).items()}
    extra = add_extra_sections(d, [*extra_dirs, *sorted({src["dir"] for src in meas.sources})], hw,
                               "mismatch" not in device_check, tables)
    for key, how in extra.items():  # a folder fitted from by its recorded name; the section's own source record
        for folder, name in extra_dirs.items():  # keeps the code it follows at its commit and names the data
            if how.startswith(f"fitted on {folder}"):
                extra[key] = how.replace(folder, name, 1)
                d[key]["source"] = {**{k: v for k, v in d[key]["source"].items() if k != "file"},
                                    "data": extra[key][len("fitted on "):]}
    prof = from_dict(d)
    errors = {}
    tick("fit error", len(stages) - 1, len(stages))
    for kind in held:
        errors.update(_errors(kind, frames[kind], prof, held[kind]))
    tick("done", len(stages), len(stages))
    d["provenance"] = {
        "tool": "perfmodel calibrate (perfmodel/calibration)",
        "command": command,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sources": sources,
        "rows_skipped": {**meas.skipped, **(tables.skipped if tables else {})},
        "split": {"fit_on": split_mode, "rule": split.RULE},
        "fits": {k: v for k, v in FORMS.items() if k in d or (k == "collectives_multinode" and _multinode(d))},
        "fit_error": errors,
        "device_check": device_check,
        "extra_sections": extra,  # mla_decode / moe: fitted here, copied from the bundled profile, or missing
    }
    d["provenance"].update(records or {})
    if any(src["file"].startswith(("gemm_", "gemm/trtllm/")) and src["format"] == "aiconfigurator"
           for src in meas.sources) \
            and "fp8" in d.get("gemm", {}):
        d["provenance"]["notes"] = {"gemm": "fp8 times include TensorRT-LLM's activation-quantisation kernel "
                                            "(~10 us floor per GEMM), as measured in the aiconfigurator table"}
    return d


def _multinode(d: dict) -> bool:
    return any("@" in key for curves in d.get("collectives", {}).values() for key in curves)


def derive(base_path: Path, base_hw, target_hw, name: str | None = None, out_dir: Path | None = None) -> dict:
    """A profile for a GPU without measurements: the base fit, with the HBM-bound share of GEMM and
    attention times scaled by the datasheet bandwidth ratio. Only for the same tensor cores and the
    same NVLink (H100 SXM -> H200 SXM); anything else would need measurements."""
    for f in ("bf16_tflops", "fp8_tflops", "link_bw_gbs", "gpus_per_node"):
        if getattr(base_hw, f) != getattr(target_hw, f):
            raise ValueError(f"cannot derive {target_hw.name} from {base_hw.name}: {f} differs "
                             f"({getattr(target_hw, f)} vs {getattr(base_hw, f)}); measure it instead")
    base_path = Path(base_path)
    ratio = base_hw.hbm_bw_gbs / target_hw.hbm_bw_gbs
    rel = os.path.relpath(base_path.resolve(), (out_dir or base_path.parent).resolve())
    return {
        "format": FORMAT, "name": name or target_hw.name, "hardware": target_hw.name,
        "derived_from": {"profile": rel, "sha256": sha256(base_path), "hardware": base_hw.name},
        "transfer": {"hbm_ratio": round(ratio, 6), "base_hbm_gbs": base_hw.hbm_bw_gbs,
                     "target_hbm_gbs": target_hw.hbm_bw_gbs},
        "provenance": {
            "tool": "perfmodel calibrate --derive-from (perfmodel/calibration/calibrate.py:derive)",
            "created_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "measurements": f"none on {target_hw.name}: no {target_hw.name} measurements are available to the team",
            "transferred_unchanged": (
                f"every fitted table of {base_path.name} ({base_hw.name}): the GPUs share the Hopper die "
                f"(bf16 {target_hw.bf16_tflops} / fp8 {target_hw.fp8_tflops} TFLOP/s), NVLink 4 + NVSwitch "
                f"({target_hw.link_bw_gbs} GB/s per direction) and {target_hw.gpus_per_node} GPUs per node, so "
                "compute efficiency, latency floors and collective / copy curves carry over as measured"),
            "scaled": (
                f"HBM bandwidth {base_hw.hbm_bw_gbs} -> {target_hw.hbm_bw_gbs} GB/s (datasheets): the share of a "
                f"GEMM or prefill time that moving its bytes at {base_hw.hbm_bw_gbs} GB/s takes is multiplied by "
                f"{ratio:.4f}; decode attention's per-KV-byte cost is multiplied by {ratio:.4f}, its fixed part is "
                "kept. Why: HBM3e vs HBM3 is the only datasheet difference that changes kernel time; the measured "
                "device copies (TARGETS.md: 3.0 of 3.35 and 4.3 of 4.8 TB/s) both reach ~90% of the datasheet"),
            "not_in_profile": (f"memory capacity ({target_hw.hbm_bytes / 1e9:.0f} GB) comes from the hardware preset "
                               f"perfmodel/hardware/{target_hw.name}.toml (memory planner), not from a timing profile"),
        },
    }


def _inline(x) -> bool:
    return isinstance(x, list) and all(isinstance(v, (int, float)) or _inline(v) for v in x)


def dumps(d, indent: int = 0) -> str:
    """JSON with dicts indented and numeric arrays on one line each (small and readable)."""
    pad = " " * (indent + 1)
    if isinstance(d, dict):
        if not d:
            return "{}"
        items = [f"{pad}{json.dumps(str(k))}: {dumps(v, indent + 1)}" for k, v in d.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if _inline(d):
        return json.dumps(d, separators=(",", ":"))
    if isinstance(d, list):
        return "[\n" + ",\n".join(pad + dumps(v, indent + 1) for v in d) + "\n" + " " * indent + "]"
    return json.dumps(d)


def write_profile(d: dict, path) -> None:
    Path(path).write_text(dumps(d) + "\n")


def tables_in(dirs) -> dict:
    """section -> the folder of its aiconfigurator tables (<dir>/moe, <dir>/mla) where every file its fit
    reads is there."""
    found = {}
    for d in map(Path, dirs):
        need = {"moe": moe_sources.pinned_files(d / "moe"),
                "mla_decode": [d / "mla" / Path(*mla_decode.FIT_SOURCE) / "generation_mla_perf.parquet"]}
        for key, files in need.items():
            if key not in found and all(f.is_file() for f in files):
                found[key] = files[0].parents[2]
    return found


def newest_moe_in(dirs) -> tuple:
    """(<dir>/moe, moe_sources.newest_sources of it) of the first dir whose moe/ has a version folder per
    framework, else (None, {}): the `moe` tables of a GPU without the pinned versions."""
    for d in map(Path, dirs):
        srcs = moe_sources.newest_sources(d / "moe")
        if srcs:
            return d / "moe", srcs
    return None, {}


def add_extra_sections(d: dict, dirs, hw, copy: bool = True, tables: measured.Tables | None = None) -> dict:
    """Add `mla_decode` and `moe` to the profile dict `d` being written (fit on kernel tables measured on the node,
    `tables`, where they hold rows for it; else on the pinned tables, else copy
    unless not `copy`: measurements of other hardware; else, for `moe`, fit on each framework's newest
    tables: a GPU with neither, such as a Blackwell system); returns the provenance record: section -> how
    it was made or why it is missing. The order keeps the H100 section as shipped (its package folder lacks
    a pinned version, the bundled section was fitted on them)."""
    found, how, unused = tables_in(dirs), {}, {}
    newest_dir, newest = (None, {}) if "moe" in found else newest_moe_in(dirs)
    bundled = PROFILE_DIR / f"{getattr(hw, 'profile', '') or hw.name}.json"
    ship = json.loads(bundled.read_text()) if bundled.is_file() else {}
    same = ship.get("hardware") == hw.name and "derived_from" not in ship
    for key in EXTRA:
        if key in measured.sections(tables):
            section, text = measured.fit(key, tables, d, hw)
            if section is not None:
                d[key], how[key] = section, text
                continue
            unused[key] = text
        if key in found:
            d[key] = (mla_decode.fit(found[key], d["roofline"], hw.name) if key == "mla_decode"
                      else moe.fit(found[key], hw, from_dict(d), hw.name))  # before moe: the formula's denominator
            how[key] = f"fitted on {found[key]}"
        elif copy and same and ship.get(key):
            d[key] = ship[key]
            how[key] = (f"copied unchanged from the bundled {bundled.name} (measured on {hw.name}): its source "
                        f"tables are not in the measurements ({FALLBACK_SRC[key]})")
        elif key == "moe" and newest:
            d[key] = moe.fit(newest_dir, hw, from_dict(d), hw.name, sources=newest)
            versions = ", ".join(f"{fw} {next(iter(q.values()))[1]}" for fw, q in newest.items())
            how[key] = f"fitted on {newest_dir} (each framework's newest tables: {versions}; not the pinned versions)"
        else:
            why = "" if copy else " (not copied: the measurements are of other hardware)"
            how[key] = f"missing: no {FALLBACK_SRC[key]} in the measurements and no bundled {hw.name} section{why}"
    key = "fp8_compute_scale"
    how[key] = fp8_scale.add(d, dirs)
    if how[key] is None and copy and same and ship.get(key):
        d[key], how[key] = ship[key], f"copied unchanged from the bundled {bundled.name} (measured on {hw.name})"
    how[key] = how[key] or f"missing: no <dir>/{fp8_scale.table_path(Path())} (static fp8 GEMMs cost as dynamic)"
    return {k: v + (f"; measured kernel tables not used: {unused[k]}" if k in unused else "") for k, v in how.items()}


FALLBACK_SRC = {"moe": "<dir>/moe/<backend>/<version>/moe_perf.parquet",
                "mla_decode": f"<dir>/mla/{'/'.join(mla_decode.FIT_SOURCE)}/generation_mla_perf.parquet"}
