"""The compute-scale pass of dynamic per-tensor fp8 GEMMs (the profile's `fp8_compute_scale` section).

The profile's fp8 GEMM rows are TensorRT-LLM 1.3.0rc20's FP8 linear as aiconfigurator collects it: its weights
carry no input_scale, so the op runs TRT-LLM's *dynamic* path and each row includes the activation's amax
(`collector/trtllm/collect_gemm.py:198-201` @095f58a5). A checkpoint with calibrated static activation scales
(ModelOpt FP8, e.g. nvidia/Llama-3.3-70B-Instruct-FP8) skips that pass. aiconfigurator prices such a GEMM
(`fp8_static`) as the dynamic row minus its measured compute-scale time at (m, k), floored at the GEMM's own
roofline (`aic-core/rust/aiconfigurator-core/src/operators/gemm.rs:77-160` @095f58a5); the compute-scale time is
TRT-LLM's dynamic quantize kernel minus its static one (`collector/trtllm/collect_computescale.py:44-81`), in
aiconfigurator-core 0.12.0's `systems/data/<system>/quantize/trtllm/1.3.0rc20/computescale_perf.parquet`
(H200: 7.0-7.6 us at m <= 128, 0.2 ms at m = 16384, k = 8192).

Only where the GEMM table is the framework's own kernels (Framework.own_fp8_gemm_table: TRT-LLM) is the saving
taken. vLLM's and SGLang's dynamic quantization is a different, cheaper kernel: their own computescale tables
are ~6x smaller than TRT-LLM's (same package, 1.0-1.3 us at decode sizes), and their own fp8 GEMM collections sit
between TRT-LLM's dynamic and static rows (docs/fidelity.md, open residuals).

    python -m perfmodel.calibration.fp8_scale SYSTEM [--profile NAME] [--write]
fits the section from the installed aiconfigurator-core package's tables of SYSTEM (h100_sxm, h200_sxm) and,
with --write, puts it into the profile JSON, every other byte unchanged; `perfmodel calibrate
--from-aiconfigurator` adds it the same way.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from . import gemm as gm
from . import grid, sections
from .aiconfigurator import PACKAGE, package_version, system_dir
from .profile import ComputeScale

FIT_SOURCE = ("trtllm", "1.3.0rc20")
COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
PRUNE_LOG = 0.03  # an m plane goes when its neighbours interpolate 90% of its cells within 3% (gemm.prune)
RELATIVE = "quantize/{fw}/{version}/computescale_perf.parquet"


def table_path(system_root: Path) -> Path:
    """The compute-scale table of FIT_SOURCE under a package system folder (systems/data/<system>)."""
    return Path(system_root) / RELATIVE.format(fw=FIT_SOURCE[0], version=FIT_SOURCE[1])


def fit(path: Path, label: str = "") -> dict:
    """The section: median microseconds per (m, k) of the table, on the measured grid (holes filled)."""
    d = pd.read_parquet(path)
    d = d[d.get("quant_dtype", pd.Series("fp8", index=d.index)).astype(str).str.lower() == "fp8"]
    if d.empty:
        raise ValueError(f"{path}: no fp8 compute-scale rows")
    us = d.assign(us=d.latency.astype(float) * 1e3).groupby(["m", "k"]).us.median().unstack("k")
    values = grid.fill_holes(np.log(np.maximum(us.to_numpy(dtype=float), 1e-3)))
    keep = gm.prune(np.log(us.index.to_numpy(dtype=float)), values, PRUNE_LOG)  # m planes the rest interpolate
    us, values = us.iloc[keep], values[keep]
    source = {"repo": "ai-dynamo/aiconfigurator", "commit": COMMIT, "license": "Apache-2.0",
              "reader": "collector/trtllm/collect_computescale.py:44-81 (dynamic minus static per-tensor fp8 quantize "
                        "kernel, ms); aic-core/rust/aiconfigurator-core/src/operators/gemm.rs:77-160 (fp8_static)",
              "data": label or str(path)}
    return {"source": source, "m": [int(x) for x in us.index], "k": [int(x) for x in us.columns],
            "us": gm.sig(np.exp(values), 3)}


def add(d: dict, dirs) -> str | None:
    """Put the section into the profile dict `d` being written, from the first of `dirs` (package system folders)
    holding the table; the provenance line, or None when none holds it."""
    for root in map(Path, dirs):
        path = table_path(root)
        if path.is_file():
            d["fp8_compute_scale"] = fit(path)
            return f"fitted on {path}"
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfmodel.calibration.fp8_scale", description=__doc__.split("\n")[0])
    p.add_argument("system", help="aiconfigurator system folder (h100_sxm, h200_sxm)")
    p.add_argument("--profile", help="profile JSON to write into (name in perfmodel/profiles or path; default SYSTEM)")
    p.add_argument("--write", action="store_true", help="write the fp8_compute_scale section into the profile JSON")
    a = p.parse_args(argv)
    try:
        root = system_dir(a.system)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = sections.checked_inputs(a.profile or a.system, [table_path(root)])
    if path is None:
        return 2
    section = fit(table_path(root), f"aiconfigurator-core {package_version()}: {PACKAGE}/systems/data/{a.system}/"
                                    f"{table_path(root).relative_to(root).as_posix()}")
    cs = ComputeScale(section)
    for m in (1, 16, 128, 1024, 16384):
        print(f"m={m:6d} k=8192: {cs.time_s(m, 8192) * 1e6:8.2f} us")
    if a.write:
        path.write_text(sections.with_section(path.read_text(), "fp8_compute_scale", section, before="provenance"))
        print(f"wrote fp8_compute_scale section to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
