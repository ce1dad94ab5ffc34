"""Absorbed-MLA decode attention fitted on measured kernel tables (the profile's `mla_decode` section).

DeepSeek-V3-class MLA decodes against one latent per key (kv_lora_rank + rope = 576 elements) shared by
every query head, so the GQA decode tables (per-KV-head reads) do not describe it; perfmodel.mla used a
roofline. aiconfigurator measures the kernel itself: `generation_mla_perf.parquet` (op mla_generation: the
attention kernel alone, the W_UK / W_UV products are its separate `mla_bmm` op), per query heads on the rank
(1-128), batch (1-1024), context (2-131072 keys) and KV dtype (bf16, fp8).

Form: attention.fit_decode's, fixed(seqs, heads) + seconds per KV byte(seqs, heads) x latent bytes read,
affine in the keys for a fixed batch (the simulator's decode stretch needs that). The latent enters as one
KV "head" of an equivalent head_dim, latent x bytes per element / attention.KV_BYTES (bf16 288, fp8 144),
so the bytes the fit sees are the bytes the kernel reads and fit_decode's bound (no faster than the datasheet
HBM) holds for them. One table per KV dtype: at 128 heads the kernel is compute-bound and fp8 keys do not
halve its time. The fit source is TensorRT-LLM's kernel table; SGLang 0.5.9's FlashAttention-3 MLA table is
the held-out check (`python -m perfmodel.calibration.mla_decode DATA_DIR` prints both errors).

CLI (the parquet files are NOT needed at run time; the fit is committed in the profile JSON):
    python -m perfmodel.calibration.mla_decode DATA_DIR [--profile h100_sxm] [--write]
DATA_DIR holds <backend>/<version>/generation_mla_perf.parquet (e.g. taken out of the mirror with
`git show HEAD:aic-core/src/aiconfigurator_core/systems/data/h100_sxm/mla/trtllm/1.3.0rc20/generation_mla_perf.parquet`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from . import attention as att
from . import sections
from .attention import LATENT, equiv_head_dim

REPO = "ai-dynamo/aiconfigurator"
COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
DATA_PATH = "aic-core/src/aiconfigurator_core/systems/data/{system}/mla/{backend}/{version}/generation_mla_perf.parquet"
FIT_SOURCE = ("trtllm", "1.3.0rc20")
CHECK_SOURCE = ("sglang", "0.5.9")
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}


def frame(path, kv_dtype: str):
    """Decode rows of one table (a parquet file, or its rows) and KV dtype in attention.fit_decode's columns
    (kv_heads 1: one latent)."""
    d = path if isinstance(path, pd.DataFrame) else pd.read_parquet(path)
    d = d[d.kv_cache_dtype.map(KV_DTYPES) == kv_dtype]
    return pd.DataFrame({"batch": d.batch_size.to_numpy(dtype=float), "kv_len": (d.isl + d.step).to_numpy(dtype=float),
                         "heads": d.num_heads.to_numpy(dtype=float), "kv_heads": 1.0,
                         "head_dim": equiv_head_dim(kv_dtype), "t_us": d.latency.to_numpy(dtype=float) * 1e3})


def fit(data_dir: Path | None, roof: dict, system: str = "h100_sxm", rows=None) -> dict:
    """The profile's `mla_decode` section: one decode table per KV dtype, fitted on FIT_SOURCE's rows; `rows`
    (a generation_mla_perf frame measured on the node, calibration/measured.py) instead: a table per KV dtype
    they hold."""
    backend, version = FIT_SOURCE
    path = data_dir / backend / version / "generation_mla_perf.parquet" if rows is None else rows
    tables = {}
    for kv in ("bf16", "fp8"):
        f = frame(path, kv)
        if rows is not None and f.empty:
            continue
        (tab,) = att.fit_decode(f, roof).values()
        tables[kv] = tab
    return {"method": "attention.fit_decode on the latent as one KV head of head_dim latent x bytes / "
                      "attention.KV_BYTES; one table per KV dtype (calibration/mla_decode.py)",
            "latent": LATENT, "source": {"repo": REPO, "commit": COMMIT, "license": "Apache-2.0",
                                         "file": DATA_PATH.format(system=system, backend=backend, version=version)},
            "tables": tables}


def errors(section: dict, path: Path) -> dict:
    """Median and p90 |relative error| of the section's tables against one table file, per KV dtype."""
    out = {}
    for kv, tab in section["tables"].items():
        table, e = att.DecodeTable(tab), []
        for h, f in frame(path, kv).groupby("heads"):  # (DecodeTable.terms takes one head count)
            t = table.time_s(f.batch.to_numpy(), f.batch.to_numpy() * f.kv_len.to_numpy(), h, 1.0,
                             equiv_head_dim(kv)) * 1e6
            e.append(np.abs(t / f.t_us.to_numpy() - 1))
        e = np.concatenate(e)
        out[kv] = (float(np.median(e)), float(np.percentile(e, 90)), len(e))
    return out


def with_section(text: str, section: dict) -> str:
    """The profile JSON text with its `mla_decode` section (just before `moe`, the last key, or last when
    there is none) replaced or added; every other byte unchanged."""
    return sections.with_section(text, "mla_decode", section, before="moe")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfmodel.calibration.mla_decode", description=__doc__.split("\n")[0])
    p.add_argument("data_dir", type=Path, help="dir with <backend>/<version>/generation_mla_perf.parquet")
    p.add_argument("--profile", default="h100_sxm", help="profile JSON (name in perfmodel/profiles or path)")
    p.add_argument("--write", action="store_true", help="write the mla_decode section into the profile JSON")
    a = p.parse_args(argv)
    table = a.data_dir / FIT_SOURCE[0] / FIT_SOURCE[1] / "generation_mla_perf.parquet"
    path = sections.checked_inputs(a.profile, [table])
    if path is None:
        return 2
    section = fit(a.data_dir, json.loads(path.read_text())["roofline"])
    for label, (backend, version) in (("fit", FIT_SOURCE), ("held out", CHECK_SOURCE)):
        f = a.data_dir / backend / version / "generation_mla_perf.parquet"
        if f.is_file():
            for kv, (med, p90, n) in errors(section, f).items():
                print(f"{label:8s} {backend} {version} {kv}: {n} rows, median |err| {med:.3f}, p90 {p90:.3f}")
    if a.write:
        path.write_text(with_section(path.read_text(), section))
        print(f"wrote mla_decode section to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
