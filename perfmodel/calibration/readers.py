"""Measurement readers: the project's microbenchmark CSV schema (perfmodel.measurements) and NVIDIA
aiconfigurator's published tables, both turned into one set of tidy frames (times in us).

Frames and columns (one row per measurement; `src` = file name, `line` = line in that file):
  gemm:       dtype, m, n, k, t_us                                      (dtype: bf16, fp16, fp32, fp8, fp4)
  prefill:    batch, seq_len, kv_len, heads, kv_heads, head_dim, t_us   (kv_len = cached + new keys)
  decode:     batch, kv_len, heads, kv_heads, head_dim, t_us            (one new token per sequence)
  collective: op, group, size_bytes, t_us, run, nodes                   (nccl-tests sizes; nodes the
              group spans, NaN = unknown: calibrate places it node-major, ceil(group / gpus_per_node))
  copy:       kind, size_bytes, t_us                                    (h2d, d2h, d2d, p2p)
Data is read where it lies (never copied); every file's sha256 goes into the profile's provenance.
"""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from ..measurements import read_measurements

FRAMES = {
    "gemm": ("dtype", "m", "n", "k"),
    "prefill": ("batch", "seq_len", "kv_len", "heads", "kv_heads", "head_dim"),
    "decode": ("batch", "kv_len", "heads", "kv_heads", "head_dim"),
    "collective": ("op", "group", "size_bytes", "run", "nodes"),
    "copy": ("kind", "size_bytes"),
}
# GEMM compute dtypes by the names the tables use. fp4: NVFP4 W4A4 (e2m1 weights and activations, one fp8
# e4m3 scale per 16 elements; aiconfigurator's GEMMQuantMode `nvfp4`, microbench's `nvfp4`, torch's
# float4_e2m1fn_x2) on GPUs with fp4 tensor cores; block-scaled fp8 (`fp8_block`) has no grid of its own
DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "float8_e4m3fn": "fp8", "fp16": "fp16",
          "float16": "fp16", "half": "fp16", "fp32": "fp32", "float32": "fp32", "float": "fp32",
          "nvfp4": "fp4", "fp4": "fp4", "float4_e2m1fn_x2": "fp4"}
COLLECTIVES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
               "alltoall": "all_to_all", "all_to_all": "all_to_all", "send_recv": "send_recv",
               "custom_all_reduce": "custom_all_reduce"}
COPIES = {"memcpy_h2d": "h2d", "memcpy_d2h": "d2h", "memcpy_d2d": "d2d", "memcpy_p2p": "p2p"}
# The custom all-reduce that vLLM issues for small TP messages under CUDA graphs (what decode pays).
CUSTOM_AR_KERNEL = "vLLM_custom_graph"


@dataclasses.dataclass(frozen=True)
class Measurements:
    """Tidy frames by kind, the files they came from (name, sha256, rows) and skipped-row counts."""

    frames: dict
    sources: tuple
    skipped: dict

    def frame(self, kind: str) -> pd.DataFrame:
        return self.frames.get(kind, _empty(kind))


def _empty(kind: str) -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in (*FRAMES[kind], "t_us", "src", "line")})


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _need(df: pd.DataFrame, path: Path, cols) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column {missing[0]!r}")


def _numeric(df: pd.DataFrame, path: Path, cols, positive=True) -> None:
    """Check that `cols` hold numbers (> 0 when `positive`); name the first bad line and field."""
    for c in cols:
        v = pd.to_numeric(df[c], errors="coerce")
        bad = v.isna() | ((v <= 0) if positive else (v < 0))
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"{path} line {int(df['line'].iloc[i])}: field {c!r} = {df[c].iloc[i]!r} "
                             f"is not a {'positive ' if positive else ''}number")
        df[c] = v.astype(float)


def _nodes(df: pd.DataFrame, path: Path) -> pd.Series:
    """The `nodes` column as float: blank (or a file written before the column existed) -> NaN;
    anything else must be a positive integer (the first bad line and field are named)."""
    raw = df.get("nodes", pd.Series("", index=df.index)).astype(str).str.strip()
    v = pd.to_numeric(raw, errors="coerce")
    bad = (raw != "") & ~((v > 0) & (v == np.floor(v)))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"{path} line {int(df['line'].iloc[i])}: field 'nodes' = {raw.iloc[i]!r} "
                         "is not a positive integer")
    return v.astype(float)


def _dtype(df: pd.DataFrame, path: Path, col: str) -> pd.Series:
    out = df[col].astype(str).str.strip().str.lower().map(DTYPES)
    if out.isna().any():
        i = int(np.flatnonzero(out.isna().to_numpy())[0])
        raise ValueError(f"{path} line {int(df['line'].iloc[i])}: field {col!r} = {df[col].iloc[i]!r} "
                         f"is not a known dtype ({', '.join(sorted(set(DTYPES.values())))})")
    return out


def _aic_gemm(df, path):
    _need(df, path, ("gemm_dtype", "m", "n", "k", "latency_ms"))
    _numeric(df, path, ("m", "n", "k", "latency_ms"))
    return {"gemm": pd.DataFrame({"dtype": _dtype(df, path, "gemm_dtype"), "m": df.m, "n": df.n, "k": df.k,
                                  "t_us": df.latency_ms * 1e3, "line": df.line})}, {}


def _aic_attention(df, path, decode: bool):
    _need(df, path, ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim", "latency_ms"))
    _numeric(df, path, ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "latency_ms"))
    _numeric(df, path, ("step",), positive=False)
    keep = pd.Series(True, index=df.index)
    skipped = {}
    if "window_size" in df.columns:  # sliding-window rows: the cost model clips keys itself
        win = pd.to_numeric(df.window_size, errors="coerce").fillna(0) > 0
        skipped["sliding-window attention rows (cost.py clips keys to the window itself)"] = int(win.sum())
        keep &= ~win
    for col in ("attn_dtype", "kv_cache_dtype"):
        if col in df.columns:
            other = df[col].astype(str).str.lower().map(DTYPES) != "bf16"
            if other.any():
                skipped[f"{col} other than bf16 (profiles fit bf16 attention)"] = int((other & keep).sum())
            keep &= ~other
    d = df[keep]
    common = {"batch": d.batch_size, "heads": d.num_heads, "kv_heads": d.num_key_value_heads,
              "head_dim": d.head_dim, "t_us": d.latency_ms * 1e3, "line": d.line}
    if decode:  # one new token per sequence after isl + step - 1 cached: keys read = isl + step
        return {"decode": pd.DataFrame({**common, "kv_len": d.isl + d.step})}, skipped
    return {"prefill": pd.DataFrame({**common, "seq_len": d.isl, "kv_len": d.isl + d.step})}, skipped


def _aic_nccl(df, path):
    _need(df, path, ("op_name", "num_gpus", "size_bytes"))
    t = "time_us" if "time_us" in df.columns else "latency"
    _need(df, path, (t,))
    _numeric(df, path, ("num_gpus", "size_bytes", t))
    op = df.op_name.map(COLLECTIVES)
    if op.isna().any():
        i = int(np.flatnonzero(op.isna().to_numpy())[0])
        raise ValueError(f"{path} line {int(df.line.iloc[i])}: field 'op_name' = {df.op_name.iloc[i]!r} "
                         "is not a collective")
    run = df.get("nccl_version_dir", pd.Series("", index=df.index)).astype(str) + "/" + \
        df.get("nccl_dtype", pd.Series("", index=df.index)).astype(str)
    return {"collective": pd.DataFrame({"op": op, "group": df.num_gpus, "size_bytes": df.size_bytes, "run": run,
                                        "t_us": df[t] * (1.0 if t == "time_us" else 1e3), "nodes": np.nan,
                                        "line": df.line})}, {}


def _aic_custom_ar(df, path):
    _need(df, path, ("kernel_source", "num_gpus", "message_size", "latency"))
    _numeric(df, path, ("num_gpus", "message_size", "latency"))
    mine = df[df.kernel_source == CUSTOM_AR_KERNEL]
    skipped = {f"custom all-reduce rows of other kernels than {CUSTOM_AR_KERNEL}": int(len(df) - len(mine))}
    if len(mine) and "version" in mine.columns:  # the newest release of that kernel
        version = mine.version.astype(str)
        newest = max(version.unique(), key=lambda v: tuple(int(x) for x in v.split(".") if x.isdigit()))
        skipped[f"{CUSTOM_AR_KERNEL} rows of releases older than {newest}"] = int((version != newest).sum())
        mine = mine[version == newest]
    nbytes = 2.0 if "allreduce_dtype" not in mine.columns else mine.allreduce_dtype.map(
        lambda s: {"fp32": 4.0, "fp8": 1.0}.get(DTYPES.get(str(s).lower(), "bf16"), 2.0))
    return {"collective": pd.DataFrame({"op": "custom_all_reduce", "group": mine.num_gpus,
                                        "size_bytes": mine.message_size * nbytes, "run": mine.get("version", ""),
                                        "t_us": mine.latency * 1e3, "nodes": np.nan, "line": mine.line})}, skipped


def _project_csv(path: Path):
    """Rows of our microbenchmark schema, by op; rows with an error or no time are skipped."""
    read_measurements(path)  # the schema's own header check (names the missing column)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)  # raw text: bad values are named as written
    df.insert(0, "line", np.arange(2, len(df) + 2))
    err = df.get("error", pd.Series("", index=df.index)).astype(str).str.strip() != ""
    notime = df.median_us.astype(str).str.strip() == ""
    skipped = {"rows with an error or no time (microbench marks failed runs)": int((err | notime).sum())}
    df = df[~(err | notime)].copy()
    _numeric(df, path, ("median_us",))
    out: dict = {}
    op = df.op.astype(str).str.strip()
    g = df[op == "gemm"].copy()
    if len(g):
        _need(g, path, ("dtype", "m", "n", "k"))
        _numeric(g, path, ("m", "n", "k"))
        out["gemm"] = pd.DataFrame({"dtype": _dtype(g, path, "dtype"), "m": g.m, "n": g.n, "k": g.k,
                                    "t_us": g.median_us, "line": g.line})
    for name in ("attention_prefill", "attention_decode"):
        a = df[op == name].copy()
        if not len(a):
            continue
        cols = ("batch", "kv_len", "num_heads", "num_kv_heads", "head_dim")
        cols += ("seq_len",) if name.endswith("prefill") else ()
        _need(a, path, cols)
        _numeric(a, path, cols)
        f = {"batch": a.batch, "kv_len": a.kv_len, "heads": a.num_heads, "kv_heads": a.num_kv_heads,
             "head_dim": a.head_dim, "t_us": a.median_us, "line": a.line}
        if name.endswith("prefill"):
            out["prefill"] = pd.DataFrame({**f, "seq_len": a.seq_len})
        else:
            out["decode"] = pd.DataFrame(f)
    c = df[op.isin(list(COLLECTIVES))].copy()
    if len(c):
        _need(c, path, ("size_bytes", "group_size"))
        _numeric(c, path, ("size_bytes", "group_size"))
        out["collective"] = pd.DataFrame({"op": c.op.map(COLLECTIVES), "group": c.group_size,
                                          "size_bytes": c.size_bytes, "run": c.get("backend", ""),
                                          "t_us": c.median_us, "nodes": _nodes(c, path), "line": c.line})
    m = df[op.isin(list(COPIES))].copy()
    if len(m):
        _need(m, path, ("size_bytes",))
        _numeric(m, path, ("size_bytes",))
        out["copy"] = pd.DataFrame({"kind": m.op.map(COPIES), "size_bytes": m.size_bytes, "t_us": m.median_us,
                                    "line": m.line})
    known = {"gemm", "attention_prefill", "attention_decode", *COLLECTIVES, *COPIES}
    other = int((~op.isin(list(known))).sum())
    if other:
        skipped["rows of ops no profile fits (broadcast, composite patterns)"] = other
    return out, skipped


# aiconfigurator file name prefixes -> reader (the layout of shared/data/calibration/<gpu>/)
AIC_FILES = (("gemm_", _aic_gemm), ("context_attention_", lambda d, p: _aic_attention(d, p, False)),
             ("generation_attention_", lambda d, p: _aic_attention(d, p, True)),
             ("nccl", _aic_nccl), ("custom_allreduce", _aic_custom_ar))


def _reader_for(path: Path, header: list):
    if "op" in header and "median_us" in header:
        return "project", None
    for prefix, fn in AIC_FILES:
        if path.name.startswith(prefix):
            return "aiconfigurator", fn
    cols = set(header)
    if {"gemm_dtype", "latency_ms"} <= cols:
        return "aiconfigurator", _aic_gemm
    if {"op_name", "num_gpus", "size_bytes"} <= cols:
        return "aiconfigurator", _aic_nccl
    if {"kernel_source", "message_size"} <= cols:
        return "aiconfigurator", _aic_custom_ar
    return None, None


def read_file(path: Path) -> tuple[dict, dict, dict]:
    """(frames, source record, skipped counts) of one CSV in either format; ValueError otherwise."""
    path = Path(path)
    header = pd.read_csv(path, nrows=0).columns.tolist()
    fmt, fn = _reader_for(path, header)
    if fmt is None:
        raise ValueError(f"{path}: neither a measurement CSV (op, median_us, ...) nor an aiconfigurator table")
    if fmt == "project":
        frames, skipped = _project_csv(path)
        dev = (pd.read_csv(path, usecols=["device"], dtype=str).device if "device" in header
               else pd.Series([], dtype=str))
    else:
        df = pd.read_csv(path)
        df.insert(0, "line", np.arange(2, len(df) + 2))
        frames, skipped = fn(df, path)
        dev = df.device if "device" in df else pd.Series([], dtype=str)
    rows = sum(len(f) for f in frames.values())
    for f in frames.values():
        f["src"] = path.name
    source = {"file": path.name, "dir": str(path.parent), "format": fmt, "sha256": sha256(path),
              "rows_used": int(rows),  # devices: what the device check (calibration/device.py) reads
              "devices": sorted({str(d).strip() for d in dev.dropna().unique()} - {""})}
    return frames, source, {f"{path.name}: {k}": v for k, v in skipped.items() if v}


def read_measurements_any(paths) -> Measurements:
    """Read measurement files: each path is a CSV, or a directory whose CSVs (aiconfigurator layout
    and/or our schema) are all read. Unrecognised CSVs in a directory are ignored."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.glob("*.csv")):
                header = pd.read_csv(f, nrows=0).columns.tolist()
                if _reader_for(f, header)[0] is not None:
                    files.append(f)
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such measurement file or directory")
    if not files:
        raise ValueError(f"{', '.join(map(str, paths))}: no measurement CSV found")
    acc: dict = {}
    sources, skipped = [], {}
    for f in files:
        frames, src, skip = read_file(f)
        sources.append(src)
        skipped.update(skip)
        for k, v in frames.items():
            acc.setdefault(k, []).append(v)
    frames = {k: pd.concat(v, ignore_index=True) for k, v in acc.items()}
    return Measurements(frames=frames, sources=tuple(sources), skipped=skipped)
