"""microbench conventions and timing: nccl-tests busbw and sizes, FLOP counts, correctness checks,
statistics, retries of disturbed runs, rotating inputs, environment record (no process group)."""
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from microbench import env, timing
from microbench.shapes import sweep
from microbench.suites import attention, collectives, gemm, memcpy
from perfmodel import ops
from perfmodel.hardware import load_hardware
from perfmodel.modelspec import load_model


@pytest.mark.parametrize("op,g,factor", [
    ("all_reduce", 8, 2 * 7 / 8), ("all_reduce", 2, 1.0), ("all_gather", 8, 7 / 8), ("reduce_scatter", 4, 3 / 4),
    ("all_to_all", 8, 7 / 8), ("ulysses_all_to_all", 2, 1 / 2), ("send_recv", 8, 1.0), ("broadcast", 8, 1.0),
    ("sidp_weight_fetch", 4, 1.0), ("cas_activation", 4, 1.0)])
def test_busbw_nccl_tests_convention(op, g, factor):
    size, t = 256 << 20, 1e-3  # busbw = algbw * factor, algbw = size / time (nccl-tests PERFORMANCE.md)
    assert collectives.achieved_gbs(op, size, g, t) == pytest.approx(size / t * factor / 1e9)


def _ctx(world=8, device="cpu", local_world=None, **args):
    a = dict(max_bytes=None, cuda_graph=False, tp=None, dtypes=None, repeats=None, warmup=None, seed=0)
    a.update(args)
    groups = {g: None for g in (2, 4, 8) if g <= world}
    return types.SimpleNamespace(sweep=sweep("cpu", True), args=types.SimpleNamespace(**a), groups=groups,
                                 device=torch.device(device), backend="gloo", spec=load_model("tiny"),
                                 single_backend=device, hw=load_hardware("cpu"), prof=None,
                                 local_world=local_world or world)


def test_collective_cases_sizes_divide_and_follow_nccl_tests():
    cases = collectives.cases(_ctx(max_bytes=1 << 20))
    basic = [c for c in cases if c["op"] in collectives.OPS]
    assert {c["group_size"] for c in basic} == {2, 4, 8}
    assert max(c["size_bytes"] for c in basic) <= 1 << 20
    for c in basic:  # a whole number of bf16 elements per rank chunk, same size on every rank
        assert c["size_bytes"] % (2 * c["group_size"]) == 0 and c["device_count"] == c["group_size"]
        assert c["dtype"] == "bf16" and c["backend"] == "gloo"
    assert {c["op"] for c in cases} >= {"ulysses_all_to_all", "sidp_weight_fetch", "cas_activation"}
    uly = [c for c in cases if c["op"] == "ulysses_all_to_all" and c["group_size"] == 2][0]
    assert uly["size_bytes"] == uly["seq_len"] // 2 * (8 + 2 * 2) * 32 * 2  # tiny: Q+K+V heads of 32, bf16
    assert {c["nodes"] for c in cases} == {1}  # 8 ranks spawned on one machine


def test_collective_cases_record_the_nodes_their_group_spans():
    # torchrun --nnodes 2 --nproc-per-node 4: ranks 0-3 on node 0, 4-7 on node 1 (node-major)
    cases = collectives.cases(_ctx(max_bytes=1 << 12, local_world=4))
    by_group = {}
    for c in cases:  # collectives and the composite patterns alike
        by_group.setdefault(c["group_size"], set()).add(c["nodes"])
    assert by_group == {2: {1}, 4: {1}, 8: {2}}


def test_collective_check_pattern_is_exact_small_integers():
    x = collectives.pattern(1000, 3, torch.device("cpu"), start=5, scale=2, add=1)
    i = torch.arange(5, 1005)
    assert torch.equal(x.double(), (i % 7 * 2 + 3 + 1).double())


def test_attention_pairs_and_flops():
    pre = dict(op="attention_prefill", batch=2, seq_len=512, kv_len=512)
    dec = dict(op="attention_decode", batch=4, seq_len=1, kv_len=1000)
    assert attention.pairs(pre) == 2 * 512 * 513 / 2  # causal: s(s+1)/2 per sequence
    assert attention.pairs(dec) == 4 * 1000


@pytest.mark.parametrize("causal,s,kv", [(True, 40, 40), (False, 1, 70)])
def test_attention_reference_matches_sdpa_and_catches_wrong_gqa(causal, s, kv):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, s, 16, generator=g, dtype=torch.bfloat16)
    k, v = (torch.randn(2, 2, kv, 16, generator=g, dtype=torch.bfloat16) for _ in range(2))
    heads, rows = attention.check_index(8, 2, s)
    ref = attention.reference(q, k, v, causal, heads, rows)
    out = attention.make_op("cpu", causal)(q, k, v)[0][heads][:, rows]
    assert timing.rel_err(out, ref) < attention.TOL
    wrong = F.scaled_dot_product_attention(q, k.flip(1), v.flip(1), is_causal=causal, enable_gqa=True)
    assert timing.rel_err(wrong[0][heads][:, rows], ref) > attention.TOL  # swapped KV groups fail


def test_gemm_reference_and_check_index():
    g = torch.Generator().manual_seed(1)
    a, w = torch.randn(100, 48, generator=g), torch.randn(300, 48, generator=g)
    rows, cols = gemm.check_index(100, 300)
    assert len(rows) == 64 and rows[0] == 0 and rows[-1] == 99 and cols[-1] == 299
    c = gemm.make_op("fp32")(a, w)
    assert timing.rel_err(c[rows][:, cols], gemm.reference(a, w, rows, cols)) < gemm.TOL["fp32"]
    assert timing.rel_err((a @ w.t().flip(1))[rows][:, cols], gemm.reference(a, w, rows, cols)) > 0.5


def test_predictions_come_from_perfmodel_ops():
    ctx = _ctx()
    hw = ctx.hw
    want = ops.gemm_time_s(16, 256, 512, "bf16", hw) * 1e6
    assert gemm.predicted_us(ctx, 16, 256, 512, "bf16") == pytest.approx(want)
    c = dict(op="all_reduce", size_bytes=1 << 20, group_size=2)
    assert collectives.predicted_us(ctx, c) == pytest.approx(ops.collective_time_s("all_reduce", 1 << 20, 2, hw) * 1e6)
    assert collectives.predicted_us(ctx, dict(op="broadcast", size_bytes=1024, group_size=2)) == ""
    cp = dict(op="memcpy_d2d", size_bytes=1 << 20)
    assert memcpy.predicted_us(ctx, cp) == pytest.approx(ops.copy_time_s("d2d", 1 << 20, hw) * 1e6)
    ctx.hw = None  # a device without a preset: blank prediction
    assert gemm.predicted_us(ctx, 1, 1, 1, "bf16") == ""


def test_stats_settle_and_rel_err():
    st = timing.stats_us([1e-6 * x for x in range(1, 11)])
    assert st["median_us"] == pytest.approx(5.5) and st["p10_us"] == pytest.approx(1.9)
    runs = iter([([1.0, 1.0, 9.0, 9.0, 9.0], 1), ([2.0, 2.1, 2.2, 2.0, 2.1], 4), ([0.1] * 5, 1)])
    samples, inner = timing.settle(lambda: next(runs), attempts=3, max_spread=1.5)
    assert inner == 4 and samples[0] == 2.0  # second run is steady: kept, third never runs
    runs = iter([([1.0, 1.0, 9.0, 9.0, 9.0], 1), ([5.0, 1.0, 9.0, 9.0, 1.0], 2)])
    assert timing.settle(lambda: next(runs), attempts=2, max_spread=1.5)[1] == 2  # smaller median wins
    a = torch.randn(1000, dtype=torch.float64)
    assert timing.rel_err(a * 1.01, a, chunk=7) == pytest.approx(0.01)
    assert not timing.rel_err(torch.full((3,), float("nan")), torch.ones(3)) <= 1.0
    with pytest.raises(AssertionError, match="correctness check failed"):
        timing.check(float("nan"), 1e-2, "x")


def test_time_op_counts_calls_and_agreement():
    calls, agreed, barriers = [], [], []
    samples, inner = timing.time_op(lambda i: calls.append(i), torch.device("cpu"), warmup=2, repeats=5,
                                    min_sample_s=0.0, barrier=lambda: barriers.append(1),
                                    agree=lambda xs: agreed.append(list(xs)) or [xs[0], 7])
    assert inner == 1 and len(samples) == 7 and len(barriers) == 7  # agreed repeat count used
    assert calls == list(range(2 + 1 + 7))  # warm-up, one estimate, timed: running input-set index
    seen = []
    timing.idle(lambda: seen.append("b"), lambda xs: seen.append(tuple(xs)) or [1, 3])
    assert seen == [(1, 0), "b", "b", "b"]  # an idle rank mirrors the agreement and barriers


def test_input_sets_rotate_beyond_cache_without_overlap():
    pool = {}
    sets = timing.input_sets(pool, torch.device("cpu"), torch.bfloat16, [(4, 8), (8, 2)], cache=1 << 12,
                             max_bytes=1 << 20)
    assert len(sets) * (32 + 16) * 2 >= 2 * (1 << 12)  # one pass touches twice the cache
    ptrs = [t.data_ptr() for s in sets for t in s]
    assert len(set(ptrs)) == len(ptrs) and sets[0][0].shape == (4, 8)
    again = timing.input_sets(pool, torch.device("cpu"), torch.bfloat16, [(2, 2)], cache=64, max_bytes=1 << 20)
    assert again[0][0].data_ptr() == sets[0][0].data_ptr()  # the pool is reused across cases
    assert sets[0][0].abs().sum() > 0  # random data, never zeros
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if fp8 is not None:
        assert timing.input_sets({}, torch.device("cpu"), fp8, [(16, 16)], 1024, 1 << 20)[0][0].dtype == fp8


def test_hardware_presets_from_device_names():
    cuda = torch.device("cuda", 0)
    assert env.hardware_preset(cuda, "NVIDIA H100 80GB HBM3") == "h100_sxm"
    assert env.hardware_preset(cuda, "NVIDIA H200") == "h200_sxm"
    assert env.hardware_preset(cuda, "NVIDIA H100 PCIe") is None
    assert env.hardware_preset(cuda, "NVIDIA A100-SXM4-80GB") == "a100_80gb"
    assert env.hardware_preset(cuda, "NVIDIA L4") == "l4"
    assert env.hardware_preset(cuda, "NVIDIA A100-PCIE-40GB") is None  # not the A10 preset
    assert env.hardware_preset(cuda, "NVIDIA GH200 480GB") is None
    assert env.hardware_preset(torch.device("cpu"), "AMD EPYC") == "cpu"
    hw, _ = env.perf_model("cpu")
    assert hw.name == "cpu"
    assert env.perf_model(None) == (None, None)


def test_environment_record_on_cpu():
    rec = env.environment(torch.device("cpu"), world=2, threads=1)
    for key in ("cpu_model", "cpu_count", "torch_version", "torch_threads_per_rank", "hostname", "started"):
        assert rec[key] not in (None, "")
    assert rec["cuda_version"] == "" and rec["nccl_version"] == "" and rec["device_count"] == 2
    if not torch.cuda.is_available():
        assert env.start_sampler()() == {}  # no NVML on CPU: nothing sampled, nothing required


def test_cpu_cache_size_is_read():
    assert timing.cache_bytes(torch.device("cpu")) >= 1 << 20
    assert np.isfinite(timing.cache_bytes(torch.device("cpu")))


def _fake_nvml():
    """A stand-in for nvidia-ml-py with two NVLink-connected GPUs (the NVML path runs on CPU too)."""
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0
    nv.NVML_NVLINK_MAX_LINKS, nv.NVML_P2P_CAPS_INDEX_NVLINK = 4, 2
    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=b"0000:1%d:00.0" % h)
    nv.nvmlDeviceGetMaxClockInfo = lambda h, c: 1980 if c == 1 else 2619
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700000
    nv.nvmlDeviceGetNvLinkState = lambda h, link: 1 if link < 3 else (_ for _ in ()).throw(RuntimeError("n/a"))
    nv.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 0
    nv.nvmlDeviceGetP2PStatus = lambda a, b, idx: 0
    nv.nvmlSystemGetDriverVersion = lambda: "550.54"
    nv.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1755
    nv.nvmlDeviceGetPowerUsage = lambda h: 350000 + 1000 * h
    nv.nvmlDeviceGetTemperature = lambda h, s: 40
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=99)
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 4
    return nv


def test_nvml_record_and_sampler(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pynvml", _fake_nvml())
    rec = env.nvml_static()
    assert rec["driver_version"] == "550.54" and len(rec["gpus"]) == 2
    g0 = rec["gpus"][0]
    assert g0["name"] == "NVIDIA H100 80GB HBM3" and g0["pci_bus_id"] == "0000:10:00.0"
    assert g0["nvlink_links_up"] == 3 and g0["power_limit_w"] == 700.0 and g0["max_sm_clock_mhz"] == 1980
    assert rec["pairs"]["0-1"] == {"topology": "same board", "nvlink_p2p_ok": True}
    stop = env.start_sampler(interval_s=0.01)
    import time

    time.sleep(0.05)
    tele = stop()
    assert tele[1]["power_w"]["median"] == 351.0 and tele[0]["sm_clock_mhz"]["min"] == 1755
    assert tele[0]["clock_event_reasons"] == [4] and tele[0]["util_pct"]["samples"] >= 1
