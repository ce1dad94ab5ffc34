"""microbench's moe and mla suites on a CPU machine (no GPU, no vLLM): the one error row a node without CUDA or
without the framework gets; with the framework's kernel replaced by a float64-exact fake module and the clock by a
fake timer, the rows' columns and values (aiconfigurator's moe_perf / generation_mla_perf columns), the calls the
suite makes (expert map, fp8 block scales, both fused_experts signatures), the correctness check catching a wrong
kernel, the routing skews, and the kernel-table files, resume keys and in-flight marker. No kernel runs here."""
import sys
import types

import pytest
import torch

from microbench import mla_kernels, routing, runner, timing, vllm_moe, writer
from microbench.shapes import sweep
from microbench.suites import mla, moe
from perfmodel.calibration import kernel_tables as kt
from perfmodel.hardware import load_hardware
from perfmodel.modelspec import load_model

SAMPLES_S = [1e-3, 2e-3, 2e-3, 2e-3, 3e-3]  # the fake timer's per-op samples: median 2 ms, p10 1.4, p90 2.6
MOE_SWEEP = dict(moe_models=("tiny-moe",), moe_dtypes=("bfloat16", "fp8_block"), moe_tokens=(1, 5, 16),
                 moe_tp=(1, 2), moe_ep=(2,), moe_routings=("power_law_1.2", "balanced"))


def _ctx(device="cpu", **over):
    args = types.SimpleNamespace(cuda_graph=False, repeats=3, warmup=1, seed=0, tp=None, dtypes=None)
    sw = dict(sweep("cpu", True), **over)
    return types.SimpleNamespace(sweep=sw, args=args, device=torch.device(device), spec=load_model("tiny"),
                                 hw=load_hardware("h100_sxm"), prof=None, pool={}, cache=1 << 16, max_bytes=1 << 30,
                                 common={"device": "NVIDIA H100 80GB HBM3", "torch_version": torch.__version__,
                                         "cuda_version": "12.9", "nccl_version": "2.27"})


def _row(ctx, mod, case):
    """The row run_cases writes for `case` (the run's columns, the case's public ones, the measurement)."""
    row = {**runner._common(ctx, mod.TABLE), **{k: v for k, v in case.items() if not k.startswith("_")}}
    ok = runner._measure(ctx, mod, case, row)
    return ok, row


@pytest.fixture
def no_frameworks(monkeypatch):
    """vLLM, FlashMLA and FlashInfer absent (a None entry in sys.modules makes the import fail)."""
    for name in ("vllm", "flash_mla", "flashinfer"):
        monkeypatch.setitem(sys.modules, name, None)


def test_without_cuda_each_suite_writes_one_error_row():
    for mod, start in ((moe, "RuntimeError: fused MoE needs a CUDA GPU"),
                       (mla, "RuntimeError: MLA decode needs a CUDA GPU")):
        ctx = _ctx(**MOE_SWEEP)
        (case,) = mod.cases(ctx)
        ok, row = _row(ctx, mod, case)
        assert not ok and row["error"].startswith(start) and "\n" not in row["error"]
        assert set(row) <= set(kt.COLUMNS[mod.TABLE]) and "nccl_version" not in row


def test_without_the_framework_on_cuda_one_error_row(no_frameworks):
    ctx = _ctx("cuda", **MOE_SWEEP)
    (case,) = moe.cases(ctx)
    ok, row = _row(ctx, moe, case)
    assert not ok and "vLLM's fused MoE does not import here" in row["error"] and row["version"] == "not-installed"
    (case,) = mla.cases(ctx)
    ok, row = _row(ctx, mla, case)
    assert not ok and row["error"].startswith("RuntimeError: no MLA decode kernel importable: ")
    assert "flash_mla" in row["error"] and "flashinfer" in row["error"]


def _fake_fused_experts(legacy=False, wrong=False):
    """A float64-exact fused_experts with vLLM's semantics (silu(gate) * up, routed weights on the down
    projection, experts outside expert_map give nothing); the signature of vLLM >= 0.11 or of older releases."""
    calls = []

    def compute(x, w1, w2, tw, ti, expert_map, s1, s2):
        out = vllm_moe.reference(x, vllm_moe.Experts(w1, w2, s1, s2), tw, ti, expert_map, torch.arange(x.shape[0]))
        return (out * (1.5 if wrong else 1.0)).to(torch.bfloat16)

    if legacy:
        def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, inplace=False, use_fp8_w8a8=False,
                          global_num_experts=-1, expert_map=None, w1_scale=None, w2_scale=None, block_shape=None):
            calls.append(dict(fp8=use_fp8_w8a8, experts=global_num_experts, emap=expert_map, block=block_shape))
            return compute(hidden_states, w1, w2, topk_weights, topk_ids, expert_map, w1_scale, w2_scale)
    else:
        def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, inplace=False, activation="silu",
                          global_num_experts=-1, expert_map=None, quant_config=None):
            calls.append(dict(quant=quant_config, experts=global_num_experts, emap=expert_map))
            q = quant_config or types.SimpleNamespace(w1_scale=None, w2_scale=None)
            return compute(hidden_states, w1, w2, topk_weights, topk_ids, expert_map, q.w1_scale, q.w2_scale)
    return fused_experts, calls


@pytest.fixture
def fake_vllm(monkeypatch):
    """Install a fake vllm.model_executor.layers.fused_moe (and its config); returns install(legacy, wrong)
    -> the list of recorded calls. The suite's CUDA check is lifted and the clock replaced."""
    def install(legacy=False, wrong=False):
        fn, calls = _fake_fused_experts(legacy, wrong)
        names = ("vllm", "vllm.model_executor", "vllm.model_executor.layers", "vllm.model_executor.layers.fused_moe")
        for name in names:
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        sys.modules[names[-1]].fused_experts = fn
        config = types.ModuleType(names[-1] + ".config")
        config.fp8_w8a8_moe_quant_config = lambda **kw: types.SimpleNamespace(**kw)
        monkeypatch.setitem(sys.modules, config.__name__, config)
        monkeypatch.setattr(vllm_moe, "unavailable", lambda device: "")
        monkeypatch.setattr(vllm_moe, "version", lambda: "0.99.0")
        return calls
    monkeypatch.setattr(timing, "time_single", lambda fn, *a, **k: (fn(0), fn(1), (SAMPLES_S, 1))[-1])
    return install


@pytest.mark.parametrize("legacy", [False, True])
def test_moe_rows_with_the_kernel_mocked(fake_vllm, legacy, tmp_path):
    calls = fake_vllm(legacy)
    ctx = _ctx(**MOE_SWEEP)
    cases = moe.cases(ctx)
    # tiny-moe: hidden 256, moe_intermediate 256, 4 experts, top-2; splits tp1, tp2, ep2; 2 routings x 3 token counts
    assert len(cases) == 2 * 3 * 2 * 3 and not any("_error" in c for c in cases)
    out = tmp_path / "node.csv"
    for case in cases:
        ok, row = _row(ctx, moe, case)
        assert ok, row.get("error")
        assert row["latency"] == pytest.approx(2.0) and row["p10_ms"] == pytest.approx(1.4)
        assert row["p90_ms"] == pytest.approx(2.6) and row["iterations"] == 5
        # perfmodel's time where the row's routing is the one tiny-moe is costed with (power_law_1.2)
        assert (row["predicted_ms"] != "") == (case["distribution"] == "power_law_1.2")
        writer.write_table_row(out, moe.TABLE, dict(row, timestamp="t"))
    fp8 = [c for c, case in zip(calls[::3], cases) if case["moe_dtype"] == "fp8_block"]  # 3 calls a case
    assert fp8 and all((c["block"] if legacy else c["quant"].block_shape) == [128, 128] for c in fp8)
    ep = [c for c, case in zip(calls[::3], cases) if case["moe_ep_size"] == 2]
    assert ep and all(c["emap"].tolist() == [0, 1, -1, -1] and c["experts"] == 4 for c in ep)
    path = tmp_path / "moe_perf_vllm_0.99.0.csv"
    df, skipped = kt.read(path, kt.MOE)
    assert list(df.columns[1:]) == list(kt.COLUMNS[kt.MOE]) and len(df) == len(cases) and skipped == 0
    assert set(df.framework) == {"vllm"} and set(df.version) == {"0.99.0"} and set(df.op_name) == {"moe"}
    assert set(df.moe_dtype) == {"bfloat16", "fp8_block"} and set(df.device) == {"NVIDIA H100 80GB HBM3"}
    assert sorted(set(zip(df.moe_tp_size, df.moe_ep_size))) == [(1, 1), (1, 2), (2, 1)]


def test_a_wrong_kernel_fails_the_check(fake_vllm):
    fake_vllm(wrong=True)  # 1.5x the layer's output
    ctx = _ctx(**dict(MOE_SWEEP, moe_dtypes=("bfloat16",), moe_tp=(), moe_tokens=(16,)))
    (case, _) = moe.cases(ctx)
    ok, row = _row(ctx, moe, case)
    assert not ok and row["error"].startswith("AssertionError: correctness check failed: moe bfloat16")


def test_unsupported_moe_dtype_is_one_error_row_per_format(fake_vllm):
    fake_vllm()
    ctx = _ctx(**dict(MOE_SWEEP, moe_dtypes=("nvfp4", "bfloat16")))
    cases = moe.cases(ctx)
    errors = [c for c in cases if "_error" in c]
    assert len(errors) == 1 and errors[0]["moe_dtype"] == "nvfp4"
    assert "unsupported moe_dtype 'nvfp4'" in errors[0]["_error"]
    assert len(cases) == 1 + 3 * 2 * 3


def test_block_fp8_and_the_reference():
    w = torch.randn(2, 256, 384, generator=torch.Generator().manual_seed(1), dtype=torch.bfloat16)
    q, s = vllm_moe.block_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (2, 2, 3)
    assert torch.equal(torch.exp2(torch.log2(s).round()), s)  # power-of-two scales (UE8M0)
    back = q.float() * s.repeat_interleave(128, 1).repeat_interleave(128, 2)
    assert timing.rel_err(back, w.float()) < 0.05  # e4m3: 3 mantissa bits
    # the reference is a plain MoE: one expert, weight 1 -> down(silu(gate x) * up x)
    ex = vllm_moe.make_experts(2, 8, 4, "bfloat16", "cpu", torch.Generator().manual_seed(0))
    x = torch.randn(3, 8, dtype=torch.bfloat16)
    ti, tw = torch.tensor([[1], [0], [1]], dtype=torch.int32), torch.ones(3, 1)
    ref = vllm_moe.reference(x, ex, tw, ti, None, torch.arange(3))
    h = ex.w1[1].double() @ x[2].double()
    assert torch.allclose(ref[2], ex.w2[1].double() @ (torch.nn.functional.silu(h[:4]) * h[4:]))
    remote = vllm_moe.reference(x, ex, tw, ti, torch.tensor([0, -1]), torch.arange(3))
    assert remote[0].abs().sum() == 0 and torch.equal(remote[1], ref[1])


def test_power_law_routing():
    gen = torch.Generator().manual_seed(0)
    for n, e, k, ep in ((1, 128, 8, 1), (64, 128, 8, 8), (4096, 256, 8, 8)):
        counts = routing.power_law_counts(n, e, k, ep, 1.2, gen)
        per_rank = counts.view(ep, e // ep).sum(1)
        assert int(counts.sum()) == n * k and int(per_rank[0]) == int(per_rank.max())  # busiest rank is rank 0
        w, ids = routing.route(n, e, k, ep, "power_law_1.01", gen)
        assert ids.shape == (n, k) and ids.dtype == torch.int32 and torch.allclose(w.sum(1), torch.ones(n))
        assert all(len(set(r)) == k for r in ids.tolist())  # a token's experts are distinct
    _, ids = routing.route(8, 8, 2, 1, "balanced", gen)
    assert torch.bincount(ids.flatten().long(), minlength=8).tolist() == [2] * 8
    with pytest.raises(ValueError, match="power_law_<alpha>"):
        routing.route(4, 8, 2, 1, "zipf", gen)


def _fake_flash_mla():
    """FlashMLA's interface, computing softmax(q K^T * scale) V on the paged cache in float64."""
    m = types.ModuleType("flash_mla")
    m.get_mla_metadata = lambda seqlens, heads_per_k, heads_k: ("meta", None)

    def flash_mla_with_kvcache(q, cache, block_table, seqlens, dv, meta, splits, softmax_scale=None, causal=False):
        assert meta == "meta" and dv == 512 and causal and softmax_scale == mla_kernels.SCALE
        outs = [mla_kernels.reference(q, cache, block_table, int(seqlens[s]), s) for s in range(q.shape[0])]
        return torch.stack(outs)[:, None].to(torch.bfloat16), None
    m.flash_mla_with_kvcache = flash_mla_with_kvcache
    return m


def test_mla_rows_with_the_kernel_mocked(monkeypatch, no_frameworks, tmp_path):
    monkeypatch.setitem(sys.modules, "flash_mla", _fake_flash_mla())
    monkeypatch.setattr(mla_kernels, "backend", lambda device: mla_kernels.first_importable())
    monkeypatch.setattr(mla_kernels, "dist_version", lambda dist: "1.0.0")
    monkeypatch.setattr(timing, "time_single", lambda fn, *a, **k: (fn(0), fn(1), (SAMPLES_S, 1))[-1])
    ctx = _ctx(mla_heads=(16, 128), mla_batch=(1, 3), mla_kv=(70, 129), mla_kv_dtypes=("bfloat16", "fp8"))
    cases = mla.cases(ctx)
    errors = [c for c in cases if "_error" in c]
    assert len(errors) == 1 and "unsupported kv_cache_dtype 'fp8'" in errors[0]["_error"]  # FlashMLA: bf16 here
    assert len(cases) == 1 + 2 * 2 * 2
    for case in cases:
        ok, row = _row(ctx, mla, case)
        assert ok == ("_error" not in case), row.get("error")
        writer.write_table_row(tmp_path / "node.csv", mla.TABLE, dict(row, timestamp="t"))
        if ok:
            assert row["latency"] == pytest.approx(2.0) and row["predicted_ms"] > 0
            assert row["isl"] + row["step"] in (70, 129) and row["tp_size"] == 128 // row["num_heads"]
    df, skipped = kt.read(tmp_path / "generation_mla_perf_flash-mla_1.0.0.csv", kt.MLA)
    assert len(df) == 8 and skipped == 1 and set(df.kernel_source) == {"flashmla"}
    assert set(df.op_name) == {"mla_generation"} and set(df.kv_cache_dtype) == {"bfloat16"}


def test_kernel_table_resume_keys_and_pending(tmp_path):
    out = tmp_path / "node.csv"
    row = dict(framework="vllm", version="0.99.0", device="d", op_name="moe", kernel_source="k", moe_dtype="bfloat16",
               num_tokens=4, hidden_size=256, inter_size=256, topk=2, num_experts=4, moe_tp_size=1, moe_ep_size=1,
               distribution="balanced", cuda_graph=0)
    writer.write_table_row(out, kt.MOE, dict(row, latency=0.5))
    writer.write_table_row(out, kt.MOE, dict(row, num_tokens=8, error="OOM: x"))
    keys = writer.table_done_keys(out)
    assert writer.is_done(row, keys, kt.MOE) and not writer.is_done(dict(row, num_tokens=8), keys, kt.MOE)
    assert not writer.is_done(row, keys)  # a measurement-CSV key never matches a table row
    writer.mark_pending(out, row, kt.MOE)
    dead = writer.take_pending(out)
    assert dead.pop("_table") == kt.MOE and dead["num_tokens"] == "4" and not writer.pending_path(out).exists()
    with pytest.raises(ValueError, match="unknown moe_perf column"):
        writer.write_table_row(out, kt.MOE, dict(row, median_us=1.0))
    writer.write_table_row(out, kt.MOE, dict(row, latency=0.7), fresh=True)  # a fresh run starts the file afresh
    assert len(kt.read(out.with_name("moe_perf_vllm_0.99.0.csv"), kt.MOE)[0]) == 1
