"""microbench's CUDA path (events, CUDA graphs, pinned and pageable copies, peer copies, NCCL, NVML):
runs only where a CUDA GPU is visible; a tiny sweep, checked for structure, not speed."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from microbench import writer
from perfmodel.measurements import read_measurements

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[1]
SWEEP = {"tp": [1, 8], "model_m": [16], "grid_m": [1, 256], "grid_n": [1024, 4096], "grid_k": [1024],
         "dtypes": ["bf16", "fp16", "fp8", "nvfp4"], "prefill": [[1, 512]], "decode": [[8, 1024]],
         "msg": [1024, 1 << 20, 32], "copy": [4096, 1 << 22, 32], "ulysses_tokens": [1024], "cas_tokens": [16]}


def microbench(tmp_path, *args):
    out = tmp_path / "gpu.csv"
    p = subprocess.run([sys.executable, "-m", "microbench", "--device", "cuda", "--quick", "--repeats", "5",
                        "--no-progress", "--sweep", json.dumps(SWEEP), "--out", str(out), *args],
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return out, read_measurements(out)


@pytest.mark.parametrize("graph", [False, True])
def test_gemm_attention_memcpy_on_one_gpu(tmp_path, graph):
    out, df = microbench(tmp_path, "--suite", "gemm,attention,memcpy", "--nproc", "1",
                         *(["--cuda-graph"] if graph else []))
    ok = df[df.error == ""]
    assert set(ok.backend) <= {"cuda", "flash_attn"} and (ok.device.str.len() > 0).all()
    assert (ok.cuda_version != "").all() and (ok.median_us > 0).all()
    gemm = ok[ok.op == "gemm"]
    assert {"bf16", "fp16"} <= set(gemm.dtype)
    if torch.cuda.get_device_capability() >= (8, 9):
        assert "fp8" in set(gemm.dtype)  # Hopper / Ada run fp8 GEMMs
    else:
        assert df[(df.op == "gemm") & (df.dtype == "fp8")].error.str.contains("unsupported dtype").all()
    if torch.cuda.get_device_capability()[0] == 10:
        assert "nvfp4" in set(gemm.dtype)  # Blackwell runs W4A4 fp4 GEMMs (microbench/nvfp4.py)
    else:  # the sweep's nvfp4 is left out where there are no fp4 tensor cores (no error rows either)
        assert not (df.dtype == "nvfp4").any()
    assert set(gemm.cuda_graph) == {int(graph)}
    copies = ok[ok.op.isin(["memcpy_h2d", "memcpy_d2h"])]
    assert set(copies.pinned) == {0, 1}  # pinned and pageable host memory
    assert set(copies[copies.pinned == 0].cuda_graph) == {0}  # a pageable copy cannot be captured
    if torch.cuda.device_count() >= 2:
        assert (ok.op == "memcpy_p2p").any()
    name = torch.cuda.get_device_name()
    if "H100" in name or "H200" in name:
        assert ok[ok.op == "gemm"].predicted_us.notna().all()
    rec = json.loads(writer.env_path(out).read_text())["runs"][-1]
    assert rec["device_type"] == "cuda" and rec["device_count"] >= 1 and rec["capability"]
    assert rec["nvml"].get("gpus") or "error" in rec["nvml"]  # NVML facts, or why there are none
    assert "driver_version" in rec["nvml"] or "error" in rec["nvml"]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs for NCCL collectives")
def test_nccl_collectives_on_two_gpus(tmp_path):
    _, df = microbench(tmp_path, "--suite", "collectives", "--nproc", "2")
    ok = df[df.error == ""]
    assert set(ok.backend) == {"nccl"} and set(ok.group_size) == {2}
    assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv", "broadcast",
            "ulysses_all_to_all", "sidp_weight_fetch", "cas_activation"} <= set(ok.op)
    assert (ok.nccl_version != "").all() and (ok.achieved_unit == "GB/s").all()
