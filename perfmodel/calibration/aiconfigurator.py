"""Kernel tables from NVIDIA aiconfigurator's performance database, read from the installed package.

`perfmodel calibrate --from-aiconfigurator SYSTEM` reads the tables that the `aiconfigurator-core` package
(PyPI, Apache-2.0; the optional extra `aic` pins the version the bundled profiles were made with) ships
under `aiconfigurator_core/systems/data/<SYSTEM>/`, converts them to the frames the CSV readers produce
(readers.py: the same columns and units as the aiconfigurator CSVs in ../shared/data/calibration) and hands
them to the same fit. Per system, for one framework's collection (`--aic-framework`, default trtllm: the
tables aiconfigurator itself costs TRT-LLM with, and the ones ../shared holds):

  gemm/<fw>/<newest>/gemm_perf.parquet                      -> gemm (bf16, per-tensor fp8, nvfp4 as fp4;
                                                               fp8_block and other modes skipped and counted)
  attention/<fw>/<newest>/{context,generation}_attention_perf.parquet -> attention_prefill / _decode
  comm/nccl/*/nccl_perf.parquet                             -> collectives (every NCCL folder: repeats)
  comm/vllm/<newest>/custom_allreduce_perf.parquet          -> custom_all_reduce (readers.CUSTOM_AR_KERNEL:
                                                               vLLM's graph-captured kernel, as from the CSV)
  moe/..., mla/...                                          -> the `moe` and `mla_decode` sections
                                                               (calibrate.add_extra_sections, as for a folder)

The package is located without importing it (importlib.util.find_spec). Only files under
systems/data/<SYSTEM>/ are ever opened (`_table` refuses any other path): the package also ships, under
systems/ beside data/, an end-to-end sample whose Blackwell rows are this project's held-out test, and
tests/test_calibration_aiconfigurator.py checks that no project code reads or names it.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import numpy as np
import pandas as pd

from .readers import AIC_FILES, DTYPES, Measurements, sha256

PACKAGE, DIST = "aiconfigurator_core", "aiconfigurator-core"
FRAMEWORKS = ("trtllm", "vllm", "sglang")
NCCL_BYTES = {"half": 2.0, "bfloat16": 2.0, "float": 4.0, "float32": 4.0, "int8": 1.0, "fp8": 1.0}
INSTALL = "pip install 'aiconfigurator-core==0.12.0' (or the project's extra: pip install -e '.[aic]')"


def package_dir() -> Path:
    """The installed aiconfigurator_core package folder (not imported); ValueError when it is absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"--from-aiconfigurator: the {DIST} package is not installed; {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0])


def package_version() -> str:
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def label(system: str) -> str:
    """How a profile names the package's folder of `system` (its version, not this machine's site-packages path)."""
    return f"{DIST} {package_version()}: {PACKAGE}/systems/data/{system}"


def systems() -> list[str]:
    """The systems whose kernel tables the installed package ships."""
    return sorted(p.name for p in (package_dir() / "systems" / "data").iterdir() if p.is_dir())


def system_dir(system: str) -> Path:
    d = package_dir() / "systems" / "data" / system
    if not d.is_dir():
        raise ValueError(f"--from-aiconfigurator {system}: not a system of {DIST} {package_version()} "
                         f"(it has: {', '.join(systems())})")
    return d


_VERSION = re.compile(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?$")


def version_key(v: str):
    """PEP 440 order of a version folder (1.3.0rc20 < 1.3.0rc23 < 1.3.0 < 1.3.0.post1; 0.1.dev1 < 0.1);
    a folder not named by a version sorts before every version."""
    m = _VERSION.match(v)
    if not m:
        return (0, (), ())
    release = tuple(int(x) for x in m.group(1).split("."))
    release += (0,) * (6 - len(release))  # 1.3 == 1.3.0
    pre = ({"a": 0, "b": 1, "rc": 2}[m.group(2)], int(m.group(3))) if m.group(2) else (3, 0)  # none: after rc
    if m.group(5) and not m.group(2) and not m.group(4):  # a dev release comes before its release's a/b/rc
        pre = (-1, int(m.group(5)))
    return (1, release, (*pre, int(m.group(4) or -1)))


def newest(folder: Path, name: str) -> Path | None:
    """folder/<newest version>/name (versions compared numerically), None when none holds it."""
    found = [p for p in folder.glob(f"*/{name}") if p.is_file()] if folder.is_dir() else []
    return max(found, key=lambda p: version_key(p.parent.name)) if found else None


def _table(path: Path, root: Path) -> pd.DataFrame:
    """One parquet table of root (systems/data/<system>), with a `line` column (1-based row + 1, as the
    CSV readers number rows, for their error messages)."""
    if root not in path.parents:  # (the held-out end-to-end sample lies outside every systems/data/<system>/)
        raise ValueError(f"{path}: not a kernel table of {root} (refused: only that folder is read)")
    df = pd.read_parquet(path)
    df.insert(0, "line", np.arange(2, len(df) + 2))
    return df


def table_paths(system: str, framework: str = "trtllm") -> dict:
    """reader prefix (readers.AIC_FILES) -> parquet paths, for one framework's collection."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"--aic-framework {framework!r}: choose one of {', '.join(FRAMEWORKS)}")
    root = system_dir(system)
    out = {"gemm_": [newest(root / "gemm" / framework, "gemm_perf.parquet")],
           "context_attention_": [newest(root / "attention" / framework, "context_attention_perf.parquet")],
           "generation_attention_": [newest(root / "attention" / framework, "generation_attention_perf.parquet")],
           "nccl": sorted((root / "comm" / "nccl").glob("*/nccl_perf.parquet")),
           "custom_allreduce": [newest(root / "comm" / "vllm", "custom_allreduce_perf.parquet")]}
    return {k: [p for p in v if p is not None] for k, v in out.items()}


def _as_csv(prefix: str, df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The parquet frame in the columns and units of the aiconfigurator CSV the reader expects."""
    if prefix in ("gemm_", "context_attention_", "generation_attention_"):
        return df.rename(columns={"latency": "latency_ms"})  # ms in both
    if prefix == "nccl":
        nbytes = df.nccl_dtype.astype(str).str.lower().map(NCCL_BYTES)
        if nbytes.isna().any():
            i = int(np.flatnonzero(nbytes.isna().to_numpy())[0])
            raise ValueError(f"{path} row {i + 1}: field 'nccl_dtype' = {df.nccl_dtype.iloc[i]!r} has no known size")
        # the folder names the run (the CSV's nccl_version_dir): two folders of one NCCL are a repeat
        return df.assign(size_bytes=df.message_size * nbytes, nccl_version_dir=path.parent.name)
    return df


def read_system(system: str, framework: str = "trtllm") -> Measurements:
    """The kernel tables of `system` (one framework's collection) as readers.Measurements; each source
    record names the package, its version and the file's path inside the package, with its sha256."""
    root, readers = system_dir(system), dict(AIC_FILES)
    acc, sources, skipped = {}, [], {}
    for prefix, paths in table_paths(system, framework).items():
        for path in paths:
            df = _table(path, root)
            rel = path.relative_to(root).as_posix()
            if prefix == "gemm_":  # the GEMM grid is per dtype the readers know (nvfp4 -> fp4; no block-scaled
                # fp8 grid, no weight-only grids: int8_wo, nvfp4_wo, w4a16_nvfp4 are counted as skipped)
                keep = df.gemm_dtype.astype(str).str.strip().str.lower().isin(DTYPES)
                skipped[f"{rel}: gemm rows of other dtypes (fp8_block, ...)"] = int((~keep).sum())
                df = df[keep]
            frames, skip = readers[prefix](_as_csv(prefix, df, path), path)
            skipped.update({f"{rel}: {k}": v for k, v in skip.items() if v})
            for k, v in frames.items():
                acc.setdefault(k, []).append(v.assign(src=rel))
            sources.append({"file": rel, "dir": label(system),
                            "format": "aiconfigurator", "sha256": sha256(path),
                            "rows_used": int(sum(len(f) for f in frames.values())),
                            "devices": sorted({str(d) for d in df.get("device", pd.Series([], dtype=str)).unique()})})
    if not acc:
        raise ValueError(f"--from-aiconfigurator {system}: no {framework} kernel tables in {root}")
    frames = {k: pd.concat(v, ignore_index=True) for k, v in acc.items()}
    return Measurements(frames=frames, sources=tuple(sources), skipped={k: v for k, v in skipped.items() if v})


def provenance(system: str, framework: str, kernels: bool) -> dict:
    """What the profile took from the package (the profile's provenance `aiconfigurator` record)."""
    return {"package": DIST, "version": package_version(), "license": "Apache-2.0", "system": system,
            "tables": f"{PACKAGE}/systems/data/{system}/",
            "kernel_tables": f"{framework} collection" if kernels else "none (--measurements gave them)",
            "sections": "moe, mla_decode (moe/, mla/) " + ("and every kernel table" if kernels else "only"),
            "never_read": f"anything outside {PACKAGE}/systems/data/{system}/ (the held-out end-to-end sample)"}
