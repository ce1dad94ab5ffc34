"""What a profile covers, and what a run falls back to where it does not (issue 33: a user-made H100
profile without the bundled `moe` / `mla_decode` sections doubled EP throughput, silently).

`calibrate` (calibrate.add_extra_sections) fits the `moe` and `mla_decode` sections on the node's own kernel
tables (microbench's moe / mla suites: calibration/measured.py) where the measurements have them, else where
their aiconfigurator tables lie beside the measurements (<dir>/moe/<backend>/<version>/moe_perf.parquet,
<dir>/mla/trtllm/1.3.0rc20/generation_mla_perf.parquet: the layout of aiconfigurator's systems/data/<gpu>/),
else copies them from the bundled profile measured on the same hardware (perfmodel/profiles/<hw>.json, not a
derived one), else leaves them out; `caveats` names every section a profile lacks and what the run then uses instead.
"""
from __future__ import annotations

from pathlib import Path

EXTRA = ("mla_decode", "moe")  # sections fitted by their own modules, from tables not in the CSV folder
FALLBACK = {  # section -> what a run uses without it
    "gemm": "GEMMs use the datasheet roofline (hardware preset)",
    "gemm fp8": "fp8 GEMMs use the datasheet roofline (the profile has no fp8 GEMM rows)",
    "gemm fp4": "fp4 (NVFP4) GEMMs use the datasheet roofline (the profile has no fp4 GEMM rows)",
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
    if d.get("gemm") and "fp4" not in d["gemm"] and peaks.get("fp4", 0) > peaks.get("fp8", 0):
        out["gemm fp4"] = f"no fp4 GEMM rows: {FALLBACK['gemm fp4'].split(' (')[0]}"
    mismatch = d.get("provenance", {}).get("device_check", {}).get("mismatch")
    if mismatch:
        out["device"] = mismatch
    return out


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
    names = ", ".join(copied[:-1]) + " and " + copied[-1] if len(copied) > 1 else "".join(copied)
    return text + (f"; {names} copied from the bundled {prof.hardware} profile" if copied else "")
