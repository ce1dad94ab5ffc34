"""NVFP4 GEMM operands for the gemm suite: C[m,n] = A[m,k] @ W[n,k]^T with A and W in e2m1 (4 bits, two per
byte: torch.float4_e2m1fn_x2) and one fp8 e4m3 scale per 16 elements along k (W4A4, what NVFP4 checkpoints run
on fp4 tensor cores), through torch._scaled_mm on Blackwell (compute capability 10.x).

Layout torch._scaled_mm takes for it (torch/_meta_registrations.py _check_scaled_mm_sizes; torch's
test_scaled_matmul_cuda.py nvfp4 cases): A (m, k/2) row-major, W^T (k/2, n) column-major (W stored (n, k/2)
row-major, as nn.Linear), k/2 and n multiples of 16; scales e4m3, each operand's (rows, k/16) grid padded to
(128 rows, 4 columns) tiles and swizzled into cuBLAS's 32x4x4 order inside each tile, flattened: 128 *
ceil(rows/128) * 4 * ceil(k/64) bytes. Operands are exact (random e2m1 codes, power-of-two scales), so the
float64 reference differs from the kernel only by fp32 accumulation and the bf16 output.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import timing

FP4 = getattr(torch, "float4_e2m1fn_x2", None)  # None: a torch without fp4 (then no nvfp4 cases run)
E4M3 = getattr(torch, "float8_e4m3fn", None)
BLOCK = 16  # elements of k per scale
# e2m1 code -> value: bit 3 sign, bits 2-1 exponent (bias 1), bit 0 mantissa
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
# e4m3 bit patterns of the scales drawn: 0.25, 0.5, 1, 2 (exponent field 5..8, bias 7; mantissa 0): exact
# in every dtype, and a scale placed in the wrong block of the swizzle changes C (the check catches it)
SCALE_BITS = (0x28, 0x30, 0x38, 0x40)


def supported(device) -> str:
    """'' when NVFP4 GEMMs can run on `device`, else why not (the error row's text, like fp8_supported's)."""
    if FP4 is None or E4M3 is None or not hasattr(torch, "_scaled_mm"):
        return "unsupported dtype: this torch has no float4_e2m1fn_x2 / _scaled_mm"
    if device.type != "cuda":
        return f"unsupported dtype: nvfp4 GEMM needs a CUDA GPU of compute capability 10.x, not {device.type}"
    cap = torch.cuda.get_device_capability(device)
    if cap[0] != 10:
        return (f"unsupported dtype: nvfp4 GEMM needs compute capability 10.x (B200, B300, GB200, GB300), "
                f"device has {cap[0]}.{cap[1]}")
    return ""


def shape_ok(n: int, k: int) -> bool:
    """Shapes _scaled_mm takes in fp4: k/2 bytes per row a multiple of 16 (k % 32), n % 16."""
    return k % 32 == 0 and n % 16 == 0


def swizzle(scale_bits: torch.Tensor) -> torch.Tensor:
    """(rows, k/16) uint8 e4m3 bits -> the flat e4m3 tensor _scaled_mm reads: rows padded to 128 and columns
    to 4 with zeros, each 128x4 tile stored as 32 rows x (4 row groups x 4 columns) (cuBLAS block scaling
    factors layout: offset = tile + (r % 32) * 16 + (r // 32) * 4 + c)."""
    rows, cols = scale_bits.shape
    pr, pc = -(-rows // 128) * 128, -(-cols // 4) * 4
    padded = F.pad(scale_bits, (0, pc - cols, 0, pr - rows))  # (pr, pc)
    tiles = padded.view(pr // 128, 128, pc // 4, 4).permute(0, 2, 1, 3)  # (row tile, col tile, 128, 4)
    out = tiles.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1)  # 128 = 4 groups of 32 rows
    return out.contiguous().view(E4M3)


def random_scale_bits(rows: int, k: int, device, gen: torch.Generator) -> torch.Tensor:
    """(rows, k/16) uint8: e4m3 bit patterns drawn from SCALE_BITS."""
    pick = torch.randint(0, len(SCALE_BITS), (rows, k // BLOCK), device=device, generator=gen)
    return torch.tensor(SCALE_BITS, dtype=torch.uint8, device=device)[pick]


def operand_sets(ctx, m: int, n: int, k: int) -> tuple[list, tuple]:
    """Rotating input sets [(A codes (m, k/2) uint8, W codes (n, k/2) uint8, A scales, W scales)], scales
    swizzled e4m3, and (A scale bits, W scale bits) of set 0 for the reference. Bytes per set:
    (m + n) * k * 9/16 (codes from the shared uniform uint8 pool, scales drawn per set)."""
    sets = timing.input_sets(ctx.pool, ctx.device, torch.uint8, [(m, k // 2), (n, k // 2)], ctx.cache,
                             ctx.max_bytes, seed=ctx.args.seed)
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.args.seed)
    out, bits = [], []
    for a, w in sets:
        bits.append((random_scale_bits(m, k, ctx.device, gen), random_scale_bits(n, k, ctx.device, gen)))
        out.append((a, w, swizzle(bits[-1][0]), swizzle(bits[-1][1])))
    return out, bits[0]


def matmul(a: torch.Tensor, w: torch.Tensor, sa: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    """C (m, n) bf16 = dequant(A) @ dequant(W)^T on fp4 tensor cores: 2*m*n*k FLOPs, reads (m + n) * k * 9/16
    bytes, writes 2*m*n."""
    return torch._scaled_mm(a.view(FP4), w.view(FP4).t(), sa, sw, out_dtype=torch.bfloat16)


def decode(codes: torch.Tensor, scale_bits: torch.Tensor) -> torch.Tensor:
    """(r, k/2) uint8 codes and (r, k/16) scale bits -> (r, k) float64 values on the CPU: element 2i is the
    low nibble of byte i, 2i+1 the high one (torch's float4_e2m1fn_x2 packing)."""
    codes, scale_bits = codes.cpu(), scale_bits.cpu()
    lut = torch.tensor(E2M1, dtype=torch.float64)
    vals = torch.stack([lut[(codes & 0xF).long()], lut[(codes >> 4).long()]], dim=-1).flatten(-2)  # (r, k)
    scales = scale_bits.view(E4M3).double().repeat_interleave(BLOCK, dim=-1)  # (r, k)
    return vals * scales


def reference(a, w, a_bits, w_bits, rows, cols) -> torch.Tensor:
    """float64 C[rows][:, cols] from the codes and unswizzled scales (the check's reference)."""
    return decode(a[rows.to(a.device)], a_bits[rows.to(a.device)]) @ \
        decode(w[cols.to(w.device)], w_bits[cols.to(w.device)]).t()
