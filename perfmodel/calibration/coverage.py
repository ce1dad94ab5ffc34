"""What a profile covers, and what a run falls back to where it does not (issue 33: a user-made H100
profile without the bundled `moe` / `mla_decode` sections doubled EP throughput, silently).

`calibrate` fits the `moe` and `mla_decode` sections where their aiconfigurator tables lie beside the
measurements (<dir>/moe/<backend>/<version>/moe_perf.parquet, <dir>/mla/trtllm/1.3.0rc20/
generation_mla_perf.parquet: the layout of aiconfigurator's systems/data/<gpu>/), else copies them from the
bundled profile measured on the same hardware (perfmodel/profiles/<hw>.json, not a derived one), else
leaves them out; `caveats` names every section a profile lacks and what the run then uses instead.
"""
from __future__ import annotations

import json
from pathlib import Path

EXTRA = ("mla_decode", "moe")  # sections fitted by their own modules, from tables not in the CSV folder
FALLBACK = {  # section -> what a run uses without it
    "gemm": "GEMMs use the datasheet roofline (hardware preset)",
    "gemm fp8": "fp8 GEMMs use the datasheet roofline (the profile has no fp8 GEMM rows)",
    "attention_prefill": "prefill attention uses the datasheet roofline",
    "attention_decode": "decode attention uses the datasheet roofline",
    "collectives": "collectives use the datasheet alpha-beta of the hardware preset",
    "moe": "MoE layers use the dense-GEMM formula (perfmodel/cost.py) without the measured fused-MoE kernel "
           "factor (too fast: Qwen3-30B-A3B EP8 on H100 gets 2x the bundled profile's throughput)",
    "mla_decode": "MLA decode attention uses the roofline of perfmodel/mla.py (~2.5x faster than the measured "
                  "kernel at its median row)",
}


def caveats(d: dict) -> dict:
    """section -> one sentence for what the profile JSON `d` lacks and for a device mismatch it was fitted
    under; a derived profile answers for its base's tables (empty: the base is checked instead)."""
    if "derived_from" in d:
        return {}
    out = {}
    for key in ("gemm", "attention_prefill", "attention_decode", "collectives", *EXTRA):
        if not d.get(key):
            out[key] = f"no {key} section: {FALLBACK[key]}"
    peaks = d.get("roofline", {}).get("peak_tflops", {})
    if d.get("gemm") and "fp8" not in d["gemm"] and peaks.get("fp8", 0) > peaks.get("bf16", 0):
        out["gemm fp8"] = f"no fp8 GEMM rows: {FALLBACK['gemm fp8'].split(' (')[0]}"
    mismatch = d.get("provenance", {}).get("device_check", {}).get("mismatch")
    if mismatch:
        out["device"] = mismatch
    return out


def tables_in(dirs) -> dict:
    """section -> the folder of its aiconfigurator tables (<dir>/moe, <dir>/mla) where every file its fit
    reads is there."""
    from . import mla_decode, moe

    found = {}
    for d in map(Path, dirs):
        need = {"moe": [d / "moe" / s[0] / s[1] / "moe_perf.parquet" for q in moe.SOURCES.values()
                        for s in q.values()],
                "mla_decode": [d / "mla" / Path(*mla_decode.FIT_SOURCE) / "generation_mla_perf.parquet"]}
        for key, files in need.items():
            if key not in found and all(f.is_file() for f in files):
                found[key] = files[0].parents[2]
    return found


def add_extra_sections(d: dict, dirs, hw, copy: bool = True) -> dict:
    """Add `mla_decode` and `moe` to the profile dict `d` being written (fit, else copy unless not `copy`:
    measurements of other hardware; module docstring); returns the provenance record: section -> how it
    was made or why it is missing."""
    from . import mla_decode, moe
    from .profile import PROFILE_DIR, from_dict

    found, how = tables_in(dirs), {}
    bundled = PROFILE_DIR / f"{getattr(hw, 'profile', '') or hw.name}.json"
    ship = json.loads(bundled.read_text()) if bundled.is_file() else {}
    same = ship.get("hardware") == hw.name and "derived_from" not in ship
    for key in EXTRA:
        if key in found:
            d[key] = (mla_decode.fit(found[key], d["roofline"], hw.name) if key == "mla_decode"
                      else moe.fit(found[key], hw, from_dict(d), hw.name))  # before moe: the formula's denominator
            how[key] = f"fitted on {found[key]}"
        elif copy and same and ship.get(key):
            d[key] = ship[key]
            how[key] = (f"copied unchanged from the bundled {bundled.name} (measured on {hw.name}): its source "
                        f"tables are not in the measurements ({FALLBACK_SRC[key]})")
        else:
            why = "" if copy else " (not copied: the measurements are of other hardware)"
            how[key] = f"missing: no {FALLBACK_SRC[key]} in the measurements and no bundled {hw.name} section{why}"
    return how


FALLBACK_SRC = {"moe": "<dir>/moe/<backend>/<version>/moe_perf.parquet",
                "mla_decode": "<dir>/mla/trtllm/1.3.0rc20/generation_mla_perf.parquet"}


def source_line(prof) -> str:
    """Where a profile's numbers come from, in a few words (estimate's `profile:` line)."""
    d = prof.data or {}
    where = f"{Path(prof.path).name}" if prof.path else prof.name
    if prof.base:
        return (f"{where}: derived from {prof.base}'s measurements by the datasheet HBM ratio x{prof.hbm_ratio:.3f}; "
                f"nothing measured on {prof.hardware}")
    prov = d.get("provenance", {})
    dirs = sorted({s.get("dir", "") for s in prov.get("sources", [])})
    text = f"{where}: calibrated on {prof.hardware} from {len(prov.get('sources', []))} measurement file(s)"
    text += f" in {', '.join(dirs)}" if dirs else ""
    copied = [k for k, v in prov.get("extra_sections", {}).items() if v.startswith("copied")]
    return text + (f"; {' and '.join(copied)} copied from the bundled {prof.hardware} profile" if copied else "")
