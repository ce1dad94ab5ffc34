"""microbench's nvfp4 GEMMs (microbench/nvfp4.py, suites/gemm.py) on a CPU machine: the error row a GPU without
fp4 tensor cores gets, the dtype wiring into the CSV and the calibration reader, the operand layout that
torch._scaled_mm's meta kernel checks, and (with the capability mocked) that a Blackwell GPU selects the fp4
path end to end, the kernel itself replaced by a float64 emulation. No fp4 kernel runs here."""
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from microbench import nvfp4, runner, timing
from microbench.cli import parser
from microbench.shapes import GEMM_DTYPES, sweep
from microbench.suites import gemm
from perfmodel import ops
from perfmodel.calibration.readers import read_measurements_any
from perfmodel.hardware import load_hardware
from perfmodel.measurements import read_measurements
from perfmodel.modelspec import load_model

ROOT = Path(__file__).resolve().parents[1]


def _ctx(device="cpu", dtypes=None, sweep_of=("cpu", True), hw="cpu"):
    args = types.SimpleNamespace(max_bytes=None, cuda_graph=False, tp=None, dtypes=dtypes, repeats=3, warmup=1, seed=0)
    return types.SimpleNamespace(sweep=sweep(*sweep_of), args=args, device=torch.device(device),
                                 spec=load_model("tiny"), single_backend=torch.device(device).type,
                                 hw=load_hardware(hw), prof=None, pool={}, cache=1 << 16, max_bytes=1 << 26)


@pytest.fixture
def capability(monkeypatch):
    """Set the (major, minor) compute capability torch.cuda reports (no GPU needed)."""
    def set_to(cap):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    return set_to


def test_dtype_wiring():
    assert "nvfp4" in GEMM_DTYPES and gemm.TORCH_DTYPES["nvfp4"] is torch.float4_e2m1fn_x2
    assert gemm.ELEM["nvfp4"] == 9 / 16 and "nvfp4" in sweep("cuda", True)["dtypes"]
    assert parser().parse_args(["--dtypes", "bf16,nvfp4"]).dtypes == ("bf16", "nvfp4")
    assert "nvfp4" not in sweep("cpu", True)["dtypes"]


def test_unsupported_devices_get_the_error_row(capability):
    """On the CPU and on a non-Blackwell GPU a requested nvfp4 case becomes one error row (as fp8 does on
    GPUs older than 8.9), never a crash."""
    for device, cap, why in (("cpu", None, "not cpu"), ("cuda", (9, 0), "device has 9.0"),
                             ("cuda", (12, 0), "device has 12.0")):
        if cap:
            capability(cap)
        ctx = _ctx(device, dtypes=("nvfp4",))
        case = gemm.cases(ctx)[0]
        row = {}
        assert runner._measure(ctx, gemm, case, row) is False
        assert row["error"].startswith("RuntimeError: unsupported dtype: nvfp4 GEMM needs") and why in row["error"]
        assert "\n" not in row["error"]


def test_default_sweep_adds_nvfp4_only_on_blackwell(capability):
    capability((9, 0))  # Hopper: the CUDA sweep's nvfp4 is left out rather than written as error rows
    assert {c["dtype"] for c in gemm.cases(_ctx("cuda", sweep_of=("cuda", True)))} == {"bf16", "fp8"}
    capability((10, 0))
    ctx = _ctx("cuda", sweep_of=("cuda", True))
    ctx.spec, ctx.max_bytes = load_model("mixtral-8x7b"), 1 << 40  # its router GEMM has n = 8 experts
    cases = gemm.cases(ctx)
    shapes = {dt: {(c["m"], c["n"], c["k"]) for c in cases if c["dtype"] == dt} for dt in ("bf16", "nvfp4")}
    assert shapes["nvfp4"] and shapes["nvfp4"] == {s for s in shapes["bf16"] if s[2] % 32 == 0 and s[1] % 16 == 0}
    assert any(n == 8 for _, n, _ in shapes["bf16"]) and not any(n == 8 for _, n, _ in shapes["nvfp4"])
    assert nvfp4.supported(torch.device("cuda")) == ""


def test_swizzle_is_cublas_block_scaling_layout():
    bits = torch.randint(0, 4, (200, 9), generator=torch.Generator().manual_seed(0)).to(torch.uint8) * 8 + 0x28
    flat = nvfp4.swizzle(bits).view(torch.uint8)
    assert flat.numel() == 256 * 12  # rows padded to 128, k/16 columns to 4
    col_tiles = 3
    for r in range(200):  # cuBLAS: offset = 512 * tile + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
        for c in range(9):
            off = 512 * ((r // 128) * col_tiles + c // 4) + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
            assert flat[off] == bits[r, c]
    assert torch.equal(_unswizzle(nvfp4.swizzle(bits), 200, 9), bits)


def test_decode_packing_and_scales():
    codes = torch.tensor([[0x21, 0xF7] * 8], dtype=torch.uint8)  # k = 32: low nibble first
    bits = torch.tensor([[0x38, 0x40]], dtype=torch.uint8)  # scales 1.0 for k 0-15, 2.0 for k 16-31
    v = nvfp4.decode(codes, bits)
    assert v.shape == (1, 32) and v[0, :4].tolist() == [0.5, 1.0, 6.0, -6.0]
    assert v[0, 16:20].tolist() == [1.0, 2.0, 12.0, -12.0]


def test_operands_pass_scaled_mm_layout_checks():
    """The operands as the suite makes them, on the meta device: torch._scaled_mm's own size and stride
    checks for fp4 with e4m3 block scales accept them (a wrong scale size is refused)."""
    ctx = _ctx()
    sets, (a_bits, w_bits) = nvfp4.operand_sets(ctx, 5, 48, 64)
    a, w, sa, sw = (t.to("meta") for t in sets[0])
    out = nvfp4.matmul(a, w, sa, sw)
    assert out.shape == (5, 48) and out.dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="scale_a should have 512"):
        nvfp4.matmul(a, w, sa[:-1], sw)
    assert a_bits.shape == (5, 4) and set(a_bits.unique().tolist()) <= set(nvfp4.SCALE_BITS)


def _emulated(a, w, sa, sw):
    """What the fp4 kernel computes, in float64 on the CPU (scales un-swizzled by the test's own inverse)."""
    m, n, kb = a.shape[0], w.shape[0], a.shape[1] * 2 // nvfp4.BLOCK
    return (nvfp4.decode(a, _unswizzle(sa, m, kb)) @ nvfp4.decode(w, _unswizzle(sw, n, kb)).t()).to(torch.bfloat16)


def _unswizzle(flat, rows, cols):
    """(rows, cols) uint8 scale bits read back from swizzle's flat layout (cuBLAS's offset formula)."""
    col_tiles = -(-cols // 4)
    r, c = torch.arange(rows).view(-1, 1), torch.arange(cols).view(1, -1)
    pos = 512 * ((r // 128) * col_tiles + c // 4) + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4
    return flat.view(torch.uint8)[pos.flatten()].view(rows, cols)


def test_blackwell_selects_the_fp4_path(monkeypatch, capability):
    """With compute capability 10.0 mocked, a run of an nvfp4 case builds fp4 operands and calls nvfp4.matmul
    (here a float64 emulation), passes the correctness check against the reference and reports TFLOP/s
    beside perfmodel's nvfp4 prediction."""
    capability((10, 0))
    calls = []
    monkeypatch.setattr(nvfp4, "matmul", lambda *t: calls.append(t) or _emulated(*t))
    monkeypatch.setattr(nvfp4, "supported", lambda device: "")  # the CPU tensors stand in for the GPU's
    ctx = _ctx("cpu", dtypes=("nvfp4",), hw="b200")
    row = gemm.run(ctx, dict(dtype="nvfp4", m=3, n=64, k=128, cuda_graph=0))
    a, w, sa, sw = calls[0]
    assert a.dtype == torch.uint8 and a.shape == (3, 64) and w.shape == (64, 64) and sa.dtype == torch.float8_e4m3fn
    assert row["achieved_unit"] == "TFLOP/s" and row["median_us"] > 0
    assert row["predicted_us"] == pytest.approx(ops.gemm_time_s(3, 64, 128, "nvfp4", ctx.hw) * 1e6)
    monkeypatch.setattr(nvfp4, "matmul", lambda a, w, sa, sw: _emulated(a, w, sa, sw).flip(1))  # a wrong kernel
    with pytest.raises(AssertionError, match="correctness check failed: gemm nvfp4"):
        gemm.run(ctx, dict(dtype="nvfp4", m=3, n=64, k=128, cuda_graph=0))


def test_uint8_pool_is_uniform_codes():
    buf = timing.random_pool({}, torch.device("cpu"), torch.uint8, 1 << 16)
    assert buf.dtype == torch.uint8 and len(buf.unique()) == 256  # every e2m1 pair occurs, zeros are rare


@pytest.mark.slow  # one spawned microbench worker: ~5 s
def test_cli_writes_nvfp4_error_rows_that_calibration_skips(tmp_path):
    out = tmp_path / "cpu.csv"
    sw = {"tp": [1], "model_m": [1], "grid_m": [1], "grid_n": [256], "grid_k": [256], "dtypes": ["bf16"]}
    p = subprocess.run([sys.executable, "-m", "microbench", "--device", "cpu", "--quick", "--repeats", "3",
                        "--warmup", "1", "--no-progress", "--nproc", "1", "--suite", "gemm", "--dtypes", "bf16,nvfp4",
                        "--cache-bytes", "4M",
                        "--sweep", json.dumps(sw), "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=150)
    assert p.returncode == 0, p.stderr[-3000:]
    df = read_measurements(out)
    fp4 = df[df.dtype == "nvfp4"]
    assert len(fp4) and fp4.error.str.startswith("RuntimeError: unsupported dtype: nvfp4 GEMM needs").all()
    assert (df[df.dtype == "bf16"].error == "").all()
    meas = read_measurements_any(out)
    assert set(meas.frame("gemm").dtype) == {"bf16"} and sum(meas.skipped.values()) == len(fp4)
