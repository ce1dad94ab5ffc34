"""Blackwell presets, 4-bit formats and the NVL72 NVLink domain (issue 35).

The memory figures are recomputed by hand here from DeepSeek-R1's config.json numbers (not from the
model's own functions), so a wrong scale byte, expert count or format scope fails.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

from perfmodel import memory, ops
from perfmodel.comm import Call, placed
from perfmodel.formats import DTYPE_BYTES
from perfmodel.hardware import load_hardware
from perfmodel.layout import LayoutError, ParallelLayout
from perfmodel.modelspec import checkpoint_weights, load_model

# DeepSeek-R1 config.json (perfmodel/models/deepseek-r1.json)
D, L, DENSE, F_DENSE, F_MOE, E, H, VOCAB = 7168, 61, 3, 18432, 2048, 256, 128, 129280
Q_RANK, KV_RANK, ROPE, NOPE, V = 1536, 512, 64, 128, 128
NVFP4 = 0.5 + 1 / 16  # 4-bit e2m1 + one fp8 e4m3 scale per 16 elements
BF16 = 2.0


def _deepseek_weights_per_gpu(tp: int, ep_slots_per_gpu: float, routed_split_tp: bool = False) -> float:
    """DeepSeek-R1 under NVIDIA's NVFP4 recipe on one GPU: q_a/kv_a (replicated) and q_b/kv_b (per head) in
    bf16, o_proj nvfp4, dense MLPs / shared experts / routers nvfp4 (routers counted with the FFN, as for fp8),
    routed experts nvfp4 (`ep_slots_per_gpu` whole experts a GPU), embedding + LM head + norms bf16."""
    moe_layers = L - DENSE
    replicated = D * Q_RANK + Q_RANK + D * (KV_RANK + ROPE) + KV_RANK  # q_a + norm, kv_a + norm
    per_head = Q_RANK * H * (NOPE + ROPE) + KV_RANK * H * (NOPE + V)  # q_b, kv_b
    o_proj = H * V * D
    attn = L * (replicated * BF16 + per_head / tp * BF16 + o_proj / tp * NVFP4)
    ffn_other = DENSE * 3 * D * F_DENSE + moe_layers * (3 * D * F_MOE + D * E)  # dense MLPs, shared, router
    routed = moe_layers * ep_slots_per_gpu * 3 * D * F_MOE
    embed = 2 * VOCAB * D / tp
    norms = (2 * L + 1) * D
    return attn + ffn_other / tp * NVFP4 + routed * NVFP4 + (embed + norms) * BF16


def test_nvfp4_bytes_carry_the_scale():
    assert DTYPE_BYTES["nvfp4"] == 9 / 16 and DTYPE_BYTES["mxfp4"] == 17 / 32


def test_deepseek_r1_nvfp4_wide_ep_72_on_gb200_memory_by_hand():
    spec = load_model("deepseek-r1", weights="nvfp4", kv="fp8")
    hw = load_hardware("gb200")
    lay = ParallelLayout(dp=72, ep=72).validate(spec, 72)
    assert lay.expert_slots(E) == 4  # 288 slots = 256 experts + 32 redundant (TRT-LLM wide EP's num_slots)
    plan = memory.plan(spec, lay, hw)
    assert plan.weight_bytes_per_gpu == pytest.approx(_deepseek_weights_per_gpu(tp=1, ep_slots_per_gpu=4), rel=1e-12)
    assert plan.kv_bytes_per_token_per_gpu == L * (KV_RANK + ROPE) * 1.0  # one fp8 latent per layer
    usable = 186e9 * 0.9 - 1.5e9  # gb200 HBM x vLLM's gpu_memory_utilization - reserve (framework.py)
    assert plan.kv_capacity_tokens == int((usable - plan.weight_bytes_per_gpu) // (L * 576))


def test_deepseek_r1_nvfp4_on_8_b200_memory_by_hand():
    spec = load_model("deepseek-r1", weights="nvfp4", kv="fp8")
    hw = load_hardware("b200")
    tp8 = memory.plan(spec, ParallelLayout(tp=8), hw)
    assert tp8.weight_bytes_per_gpu == pytest.approx(_deepseek_weights_per_gpu(tp=8, ep_slots_per_gpu=E / 8),
                                                     rel=1e-12)
    ep8 = memory.plan(spec, ParallelLayout(dp=8, ep=8), hw)
    assert ep8.weight_bytes_per_gpu == pytest.approx(_deepseek_weights_per_gpu(tp=1, ep_slots_per_gpu=E / 8),
                                                     rel=1e-12)
    fp8 = memory.plan(load_model("deepseek-r1", weights="fp8", kv="fp8"), ParallelLayout(tp=8), hw)
    assert tp8.weight_bytes_per_gpu < 0.65 * fp8.weight_bytes_per_gpu  # experts dominate: 9/16 of fp8's bytes


def test_nvfp4_runs_fp4_gemms_on_blackwell_and_weight_only_on_hopper():
    b200, h200 = load_hardware("b200"), load_hardware("h200")
    assert ops._compute_dtype("nvfp4", b200) == "fp4" and ops._compute_dtype("nvfp4", h200) == "bf16"
    assert ops._compute_dtype("mxfp4", b200) == "bf16" == ops._compute_dtype("mxfp4", h200)  # vLLM: W4A16
    m, n, k = 8192, 8192, 8192  # compute-bound: the fp4 rate halves fp8's time on the datasheet roofline
    t4, t8 = ops.gemm_time_s(m, n, k, "nvfp4", b200), ops.gemm_time_s(m, n, k, "fp8", b200)
    assert float(t4) == pytest.approx(2 * m * n * k / (b200.achieved_fp4_tflops * 1e12) + ops.KERNEL_FLOOR_S)
    assert float(t4) < 0.55 * float(t8)
    one = ops.gemm_time_s(1, n, k, "nvfp4", h200)  # memory-bound decode GEMM reads 9/16 byte a weight
    assert float(one) == pytest.approx((n * k * NVFP4 + 2 * (k + n)) / (h200.achieved_hbm_gbs * 1e9) + ops.KERNEL_FLOOR_S)


def test_nvl72_collectives_inside_the_rack_stay_on_nvlink():
    hw = load_hardware("gb200")
    assert (hw.gpus_per_node, hw.gpus_per_host, hw.hosts_per_node) == (72, 4, 18)
    lay = ParallelLayout(dp=72, ep=72)
    call = Call("all_to_all", 72, np.array([1e6]), 1, "moe_dispatch", "ep")
    assert placed(call, lay, hw.gpus_per_node).nodes == 1  # one NVLink domain, though 18 hosts
    assert placed(call, ParallelLayout(dp=72, ep=72), 8).nodes == 9  # the same group on HGX nodes crosses NICs
    # Seesaw's CPU buffer: one tray's host memory is shared by its 4 GPUs; 8 GPUs span two trays
    assert memory.cpu_kv_buffer_bytes(hw, gpus=8) == pytest.approx(hw.host_mem_bytes * 2 * 0.5 / 8)
    assert memory.cpu_kv_buffer_bytes(hw) == pytest.approx(hw.host_mem_bytes * 0.5 / 4)


def test_every_blackwell_number_has_a_source():
    for name in ("b200", "b300", "gb200", "gb300"):
        hw = load_hardware(name)
        assert hw.has_fp4 and hw.fp4_tflops > hw.fp8_tflops > hw.bf16_tflops
        for f in ("hbm_gb", "hbm_bw_gbs", "bf16_tflops", "fp8_tflops", "fp4_tflops", "achieved_fp4_tflops",
                  "link_bw_gbs", "nic_bw_gbs", "gpus_per_node", "host_mem_gb"):
            assert hw.sources.get(f), f"{name}: {f} has no source"


def test_ep_beyond_the_expert_count_is_refused_naming_both():
    spec = load_model("mixtral-8x7b")
    with pytest.raises(LayoutError, match="ep=16 exceeds num_experts=8"):
        ParallelLayout(dp=16, ep=16).validate(spec, 16)


def test_modelopt_nvfp4_checkpoint_is_read_as_nvfp4(tmp_path):
    cfg = json.loads(open("perfmodel/models/deepseek-r1.json").read())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert checkpoint_weights(str(p)) == "nvfp4"


@pytest.mark.parametrize("args", [
    ["--hardware", "gb200", "--gpus", "72", "--strategies", "dp=72,ep=72"],
    ["--hardware", "b200", "--gpus", "8", "--strategies", "dp=8,ep=8;tp=8"],
])
def test_estimate_cli_deepseek_r1_nvfp4(args):
    out = subprocess.run([sys.executable, "-m", "perfmodel.cli", "estimate", "--model", "deepseek-r1",
                          "--weights", "nvfp4", "--kv-dtype", "fp8", "--format", "json", *args],
                         capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout)
    assert rows and all(r["weights"] == "nvfp4" and r["tpot_ms"] > 0 and r["kv_capacity_tokens"] > 0 for r in rows)
    gpus = int(args[3])
    want = _deepseek_weights_per_gpu(tp=1, ep_slots_per_gpu=-(-E // gpus)) / 1e9
    assert rows[0]["weights_gb_per_gpu"] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("args", [
    ["--hardware", "gb200", "--gpus", "72", "--layout", "dp=72,ep=72", "--framework", "trtllm"],
    ["--hardware", "b200", "--gpus", "8", "--layout", "dp=8,ep=8"],
])
def test_simulate_cli_deepseek_r1_nvfp4(args):
    out = subprocess.run([sys.executable, "-m", "simulator.apps.cli", "--trace",
                          "synthetic:gamma?rate=20&burstiness=0.5&n=200&input=512&output=64", "--policy", "layout",
                          "--model", "deepseek-r1", "--weights", "nvfp4", "--kv-dtype", "fp8", "--format", "json",
                          *args], capture_output=True, text=True, check=True)
    res = json.loads(out.stdout)
    assert res["completed"] + res["rejected"] == res["num_requests"] == 200 and res["completed"] == 200
    assert 0 < res["median_tpot_ms"] < 1000


def test_nvfp4_kv_cache_bytes_and_framework_support():
    spec = load_model("llama-3.1-70b", weights="fp8", kv="nvfp4")
    lay = ParallelLayout(tp=8)
    assert memory.kv_bytes_per_token_per_gpu(spec, lay) == 2 * 80 * 1 * 128 * NVFP4  # K+V, 80 layers, 1 KV head
    fp8 = memory.plan(load_model("llama-3.1-70b", weights="fp8", kv="fp8"), lay, load_hardware("b200"))
    fp4 = memory.plan(spec, lay, load_hardware("b200"))
    assert fp4.kv_capacity_tokens == pytest.approx(fp8.kv_capacity_tokens * 16 / 9, rel=1e-6)
    from perfmodel.formats import check_kv_dtype
    with pytest.raises(ValueError, match="SGLang keeps an nvfp4 KV cache on Blackwell"):
        check_kv_dtype("nvfp4", load_hardware("h200"), "sglang")
    check_kv_dtype("nvfp4", load_hardware("h200"), "vllm")  # vLLM >= 0.33: the FA2 path
    check_kv_dtype("nvfp4", load_hardware("b200"), "sglang")


def test_nvfp4_kv_reads_fewer_bytes_in_calibrated_decode_attention():
    from perfmodel.calibration.profile import resolve_profile
    hw = load_hardware("h200")
    prof = resolve_profile(hw, None)
    t = {kv: float(ops.attn_decode_time_s(64, 64 * 8192, 8, 1, 128, kv, hw, prof)) for kv in ("bf16", "fp8", "nvfp4")}
    assert t["nvfp4"] < t["fp8"] < t["bf16"]


def test_recommend_commands_name_the_redundant_expert_slots():
    from simulator.apps.recommend.serve import commands
    wide = commands({"policy": "layout", "deployment": "dp=72,ep=72"}, "deepseek-r1", 72)
    assert "288 expert slots, 32 redundant" in wide["note"] and "num_slots: 288" in wide["note"]
    assert commands({"policy": "layout", "deployment": "dp=8,ep=8"}, "deepseek-r1", 8)["note"] is None
