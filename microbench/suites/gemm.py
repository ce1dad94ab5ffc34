"""GEMM microbenchmark: C[m,n] = A[m,k] @ W[k,n] (torch.matmul; fp8 through torch._scaled_mm, nvfp4 through its
fp4 path on Blackwell: microbench/nvfp4.py), checked against a float64 reference, timed over rotating inputs,
reported in TFLOP/s beside perfmodel's ops.gemm_time_s for the same shape. Shapes: the model's layers at each
TP degree plus an m x n x k grid."""
from __future__ import annotations

import torch

from .. import nvfp4, timing
from ..shapes import GEMM_DTYPES, gemm_shapes

RANKS = "zero"  # single-device op: rank 0 times it while the other ranks wait
TABLE = None  # rows go to the measurement CSV (--out), in perfmodel.measurements' columns
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                "fp8": getattr(torch, "float8_e4m3fn", None), "nvfp4": nvfp4.FP4}
assert tuple(TORCH_DTYPES) == GEMM_DTYPES
# ||C - C_ref|| / ||C_ref|| bounds: operands exact in the dtype, so only accumulation and the output
# rounding differ (bf16 output: 2^-8 relative per element; fp32 on CPU: ~1e-6; tf32 would be 3e-4)
TOL = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-3, "fp8": 2e-2, "nvfp4": 2e-2}
ELEM = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "nvfp4": 9 / 16}  # bytes per element (nvfp4: + its scales)
WEIGHTS = {"fp8": "fp8", "nvfp4": "nvfp4"}  # perfmodel weight format of a dtype's GEMM (others: the bf16 roofline)
CHECK = 64  # rows and columns of C compared with the float64 reference


def cases(ctx) -> list[dict]:
    sw = ctx.sweep
    # the CUDA sweeps list nvfp4, measured by default only where the GPU runs it (compute capability 10.x): a
    # Hopper sweep is not filled with error rows; asked for with --dtypes it is tried (or an error row) anywhere
    dtypes = ctx.args.dtypes or [d for d in sw["dtypes"] if d != "nvfp4" or not nvfp4.supported(ctx.device)]
    shapes = gemm_shapes(ctx.spec, ctx.args.tp or sw["tp"], sw["model_m"], sw["grid_m"], sw["grid_n"],
                         sw["grid_k"], sw["max_gemm_flops"])
    graph = int(bool(ctx.args.cuda_graph and ctx.device.type == "cuda"))
    return [dict(op="gemm", dtype=dt, m=m, n=n, k=k, group_size=1, device_count=1, backend=ctx.single_backend,
                 cuda_graph=graph, _source=src)
            for dt in dtypes for m, n, k, src in shapes
            if (m + n) * k * ELEM.get(dt, 2) <= ctx.max_bytes  # A and W within the case budget
            and (dt != "nvfp4" or nvfp4.shape_ok(n, k))]  # shapes _scaled_mm takes in fp4


def fp8_supported(device) -> str:
    """'' when fp8 GEMMs can run here, else why not (the error row's text)."""
    if TORCH_DTYPES["fp8"] is None or not hasattr(torch, "_scaled_mm"):
        return "unsupported dtype: this torch has no float8_e4m3fn / _scaled_mm"
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 9):
        return f"unsupported dtype: fp8 GEMM needs compute capability >= 8.9, device has " \
               f"{'.'.join(map(str, torch.cuda.get_device_capability(device)))}"
    return ""


def make_op(dtype: str):
    """The op under test: fn(a (m,k), w (n,k)) -> C (m,n). W is stored (n, k) row-major, the layout
    of nn.Linear weights, so C = A @ W^T; fp8 scales are per-tensor (1.0: inputs are N(0,1))."""
    if dtype != "fp8":
        return lambda a, w: torch.matmul(a, w.t())
    one = {}

    def fp8(a, w):
        s = one.get(a.device)
        if s is None:
            s = one[a.device] = torch.ones((), dtype=torch.float32, device=a.device)
        return torch._scaled_mm(a, w.t(), scale_a=s, scale_b=s, out_dtype=torch.bfloat16)
    return fp8


def check_index(m: int, n: int) -> tuple:
    """Rows and columns of C compared with the reference: the first and last CHECK/2 of each (a
    tiling or indexing bug shows at the edges), so the check costs O(CHECK^2 * k) at any size."""
    pick = lambda size: torch.unique(torch.cat([torch.arange(min(size, CHECK // 2)),  # noqa: E731
                                                torch.arange(max(0, size - CHECK // 2), size)]))
    return pick(m), pick(n)


def _take(t, idx):
    """t[idx] (rows) on t's device; fp8 through a uint8 view (index kernels need not exist for fp8)."""
    if t.element_size() == 1:
        return t.view(torch.uint8)[idx.to(t.device)].view(t.dtype)
    return t[idx.to(t.device)]


def reference(a, w, rows, cols):
    """float64 C[rows][:, cols] = A[rows] @ W[cols]^T on the CPU."""
    return _take(a, rows).cpu().double() @ _take(w, cols).cpu().double().t()


def predicted_us(ctx, m, n, k, dtype):
    if ctx.hw is None:
        return ""
    from perfmodel import ops
    from perfmodel.modelspec import DTYPE_BYTES

    wd = WEIGHTS.get(dtype, "bf16")  # fp16 / fp32 GEMMs: the bf16 roofline
    if wd not in DTYPE_BYTES:  # a perfmodel that cannot cost this format: no prediction
        return ""
    return float(ops.gemm_time_s(m, n, k, wd, ctx.hw, ctx.prof)) * 1e6


def operands(ctx, dt: str, m: int, n: int, k: int) -> tuple:
    """(rotating input sets, op(*set) -> C (m, n), ref(rows, cols) -> float64 C[rows][:, cols] of set 0)."""
    if dt == "nvfp4":
        sets, (a_bits, w_bits) = nvfp4.operand_sets(ctx, m, n, k)
        return sets, nvfp4.matmul, lambda r, c: nvfp4.reference(*sets[0][:2], a_bits, w_bits, r, c)
    sets = timing.input_sets(ctx.pool, ctx.device, TORCH_DTYPES[dt], [(m, k), (n, k)], ctx.cache, ctx.max_bytes,
                             seed=ctx.args.seed)
    return sets, make_op(dt), lambda r, c: reference(*sets[0], r, c)


def run(ctx, case) -> dict:
    dt, m, n, k = case["dtype"], case["m"], case["n"], case["k"]
    if dt == "nvfp4" and nvfp4.supported(ctx.device):  # not Blackwell, or a torch without fp4
        raise RuntimeError(nvfp4.supported(ctx.device))
    if dt not in TORCH_DTYPES or TORCH_DTYPES[dt] is None:
        raise ValueError(f"unsupported dtype {dt!r}: choose from {', '.join(TORCH_DTYPES)}")
    if dt == "fp8" and fp8_supported(ctx.device):
        raise RuntimeError(fp8_supported(ctx.device))
    sets, op, ref = operands(ctx, dt, m, n, k)
    rows, cols = check_index(m, n)
    out = op(*sets[0])  # correctness first: (m, n)
    got = out[rows.to(out.device)][:, cols.to(out.device)].cpu()
    timing.check(timing.rel_err(got, ref(rows, cols)), TOL[dt], f"gemm {dt} {m}x{n}x{k}")
    del out
    fn = lambda i: op(*sets[i % len(sets)])  # noqa: E731
    samples, inner = timing.time_single(fn, ctx.device, ctx.sweep, ctx.args, graph=bool(case["cuda_graph"]))
    st = timing.row_times(samples, inner)
    return {**st, "achieved": 2.0 * m * n * k / (st["median_us"] * 1e-6) / 1e12,
            "achieved_unit": "TFLOP/s", "predicted_us": predicted_us(ctx, m, n, k, dt)}
