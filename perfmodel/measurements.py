"""The measurement CSV schema: one row per measured op, written by `microbench`, read by
`perfmodel calibrate` / `validate`. docs/measurements.md documents every column."""
from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

# Column order of a measurement CSV. Times are microseconds; sizes are bytes or elements as named.
COLUMNS = (
    "op",             # see OPS
    "dtype",          # bf16, fp16, fp8, fp32, nvfp4 (gemm: NVFP4 W4A4 on fp4 tensor cores) (compute / message dtype)
    "m", "n", "k",    # GEMM C[m,n] = A[m,k] @ B[k,n]; m = tokens
    "batch",          # attention: sequences in the batch
    "seq_len",        # attention: new (query) tokens per sequence (prefill isl; 1 for decode)
    "kv_len",         # attention: keys per sequence (prefill: = seq_len; decode: context length)
    "num_heads", "num_kv_heads", "head_dim",
    "size_bytes",     # collectives: nccl-tests "size" (bytes of the per-rank buffer); copies: bytes moved
    "group_size",     # ranks in the collective (1 for single-device ops)
    "backend",        # nccl, gloo, cuda, cpu, trtllm, vllm_custom, ...
    "device",         # device name (torch.cuda.get_device_name or the CPU model)
    "device_count",
    "torch_version", "cuda_version", "nccl_version",
    "median_us", "p10_us", "p90_us",
    "iterations",     # timed op executions (samples x ops per sample)
    "achieved",       # achieved rate: TFLOP/s for gemm/attention, busbw GB/s for collectives, GB/s for copies
    "achieved_unit",  # "TFLOP/s" or "GB/s"
    "predicted_us",   # the perf model's prediction for the same shape (blank when unknown)
    "cuda_graph",     # 1 if timed under CUDA-graph replay
    "pinned",         # copies: 1 if host memory was pinned
    "error",          # blank on success; the error text (OOM, timeout, unsupported dtype) otherwise
    "timestamp",      # ISO-8601 UTC of the measurement
    "nodes",          # collectives: nodes the ranks of the group span (blank = unknown); last, so that
                      # files written before it existed stay readable (append_rows keeps their header)
)

OPS = (
    "gemm", "attention_prefill", "attention_decode",
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast",
    "custom_all_reduce",
    "memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memcpy_p2p",
    # composite patterns of the strategies
    "ulysses_all_to_all", "sidp_weight_fetch", "cas_activation",
)

INT_COLUMNS = ("m", "n", "k", "batch", "seq_len", "kv_len", "num_heads", "num_kv_heads", "head_dim",
               "size_bytes", "group_size", "device_count", "iterations", "cuda_graph", "pinned", "nodes")
FLOAT_COLUMNS = ("median_us", "p10_us", "p90_us", "achieved", "predicted_us")


def empty_row(**fields) -> dict:
    """A row with every column present (blank unless given); unknown keys raise ValueError."""
    bad = set(fields) - set(COLUMNS)
    if bad:
        raise ValueError(f"unknown measurement column(s): {', '.join(sorted(bad))}")
    row = {c: "" for c in COLUMNS}
    row.update(fields)
    return row


def append_rows(path: str | Path, rows: list[dict]) -> None:
    """Append rows to a measurement CSV, writing the header when the file is new (incremental). An
    existing file keeps its own header: one written before a column existed (e.g. `nodes`) gets rows
    in its columns, the newer columns dropped, rather than cells shifted under the wrong names."""
    path = Path(path)
    new = not path.exists() or path.stat().st_size == 0
    header = list(COLUMNS) if new else _header(path)
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header, extrasaction="ignore")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow(empty_row(**r))


def _header(path: Path) -> list:
    with path.open(newline="") as f:
        return next(csv.reader(f), None) or list(COLUMNS)


def read_measurements(path: str | Path):
    """Read a measurement CSV into a pandas DataFrame with typed columns; ValueError names the file
    and the first missing column when the header is wrong."""
    path = Path(path)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in ("op", "median_us") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a measurement CSV, missing column {missing[0]!r} "
                         f"(expected {', '.join(COLUMNS)})")
    for c in INT_COLUMNS:  # a non-integer ("1.5") reads as missing, not a cast error (readers name the field)
        if c in df.columns:
            v = pd.to_numeric(df[c], errors="coerce")
            df[c] = v.where(v.mod(1) == 0).astype("Int64")
    for c in FLOAT_COLUMNS:
        if c in df.columns:
            df[c] = pd.to_numeric(df[c], errors="coerce")
    return df
