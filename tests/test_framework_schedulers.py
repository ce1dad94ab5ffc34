"""Each serving framework's admission rule on hand-worked cases (engine/scheduler.py: Limits.reserve),
SGLang's new_token_ratio (engine/ratio.py: NewTokenRatio), TRT-LLM's memory rule, and whole runs
that keep every framework's promise (TRT-LLM never preempts; every request ends)."""
import dataclasses
from collections import deque

import numpy as np
import pytest

from perfmodel.framework import DEFAULT_FRAMEWORK, framework_preset, reserve_bytes_of, with_knobs
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.memory import plan
from perfmodel.modelspec import load_model
from simulator.engine.batch import RunningBatch
from simulator.engine.config import EngineConfig
from simulator.engine.ratio import NewTokenRatio
from simulator.engine.scheduler import Limits, Waiting, reserved_blocks, schedule
from simulator.run import RunSpec, run
from simulator.workload.workload import make_workload

BS = 16


def batch(rows, block_size=BS):
    b = RunningBatch(block_size)
    for i, p, o, c, g in rows:
        b.append(i, p, o, c, g)
    b.decoding = True
    return b


def waiting(inputs, outputs, n=8):
    z = np.zeros(n, dtype=np.int64)
    inp, out = z.copy(), z.copy()
    inp[:len(inputs)], out[:len(outputs)] = inputs, outputs
    return Waiting(inp, out, z.copy(), z.copy(), np.zeros(n))


def lim(reserve, **kw):
    return Limits(**{"budget": 4096, "chunk_cap": 4096, "max_seqs": 8, "block_size": BS, "reserve": reserve, **kw})


# one running request: prompt 160, output 160, 10 tokens generated -> computed 169 = 11 blocks held;
# at full length (320 tokens) it needs 20 blocks, so 9 more are claimed under GUARANTEED_NO_EVICT
RUN = [(0, 160, 160, 169, 10)]
REQ = waiting([0, 160], [0, 160])  # position 1 waits: 160 + 160 tokens = 20 blocks whole, 10 for its prompt


def test_no_evict_claims_the_running_requests_full_length():
    assert reserved_blocks(batch(RUN), lim("request")) == 20 - 11
    assert reserved_blocks(batch(RUN), lim("chunk")) == 0


@pytest.mark.parametrize("free, admitted", [(28, False), (29, True)])
def test_no_evict_admits_only_when_the_whole_request_fits_beside_the_claims(free, admitted):
    # the decode step takes no new block (169 -> 170 stays in block 11); 9 claimed + 20 needed = 29
    s = schedule(batch(RUN), deque([1]), free, REQ, lim("request"))
    assert bool(s.admitted) is admitted
    # vLLM's rule needs only the first chunk's blocks (10): it admits at 28 free and may preempt later
    assert schedule(batch(RUN), deque([1]), free, REQ, lim("chunk")).admitted


def test_no_evict_counts_earlier_admissions_of_the_same_step():
    req = waiting([0, 160, 160], [0, 160, 160])
    s = schedule(batch(RUN), deque([1, 2]), 9 + 20 + 19, req, lim("request"))
    assert [c.pos for c in s.admitted] == [1]  # the second needs 20 more blocks: 48 - 29 = 19 left


def test_unchunked_recompute_past_the_budget_runs_in_chunks_and_a_prompt_whole():
    """Regression (2026-12-03, benchmarks/differential_fuzz.py seed 1001): TRT-LLM's rule bounds only a prompt by the
    step budget, so a request a policy moved (recompute of prompt + generated) could need more than one unchunked
    step; it was never admitted and its engine raised 'nothing schedulable'. Its recompute now runs in chunks."""
    gen = np.zeros(8, dtype=np.int64)
    gen[1] = 200  # position 1 was moved after 200 tokens: 4000 + 200 to recompute against a 4096-token budget
    req = Waiting(np.array([0, 4000, 3000, 0, 0, 0, 0, 0]), np.array([0, 400, 50, 0, 0, 0, 0, 0]), gen,
                  np.zeros(8, dtype=np.int64), np.zeros(8))
    unchunked = lim("request", chunked_prefill=False)
    s = schedule(RunningBatch(BS), deque([1, 2]), 10_000, req, unchunked)
    assert [a.pos for a in s.admitted] == [1] and list(s.admitted_tokens) == [4096] and not s.admitted_whole
    # a prompt alone still runs whole: 3000 tokens do not start in the 0 left beside the first chunk
    assert list(schedule(RunningBatch(BS), deque([2]), 10_000, req, unchunked).admitted_tokens) == [3000]


def test_sglang_admission_reserves_remaining_output_times_the_ratio():
    # running: 150 output tokens left; at ratio 0.7 it claims ceil(150 * 0.7) = 105 tokens, at 0.1 15;
    # the new request needs its prompt + min(output, clip) = 320 tokens (page size 1)
    b, req = batch(RUN, block_size=1), waiting([0, 160], [0, 160])
    one = dict(block_size=1)
    assert reserved_blocks(b, lim("sglang", **one), 0.7) == 105
    assert not schedule(b, deque([1]), 1 + 105 + 319, req, lim("sglang", **one), ratio=0.7).admitted
    assert schedule(b, deque([1]), 1 + 105 + 320, req, lim("sglang", **one), ratio=0.7).admitted
    assert schedule(b, deque([1]), 1 + 15 + 320, req, lim("sglang", **one), ratio=0.1).admitted
    # the output estimate is clipped (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION)
    assert schedule(b, deque([1]), 1 + 15 + 200, req, lim("sglang", clip_output_tokens=40, **one),
                    ratio=0.1).admitted


def test_new_token_ratio_decays_per_decode_step_and_restarts_after_a_retraction():
    r = NewTokenRatio(0.7, 0.1, 600)
    r.decoded(300)
    assert r.value == pytest.approx(0.4)
    r.decoded(10_000)
    assert r.value == pytest.approx(0.1)
    b = batch([(0, 100, 200, 149, 50), (1, 100, 200, 119, 20)])
    r.retracted(b, 2)  # (generated 70 + 20 x 2 retracted) / max_new_tokens 400
    assert r.value == pytest.approx(110 / 400)


def test_trtllm_kv_is_a_fraction_of_the_memory_weights_leave_free():
    spec, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    lay = ParallelLayout(tp=1)
    import dataclasses
    fw = dataclasses.replace(DEFAULT_FRAMEWORK, gpu_memory_utilization=0.9, kv_fraction_of_free=True)
    p = plan(spec, lay, hw, fw)
    free = hw.hbm_bytes - fw.reserve_bytes - p.weight_bytes_per_gpu
    assert p.kv_capacity_tokens == int(0.9 * free // p.kv_bytes_per_token_per_gpu)
    assert p.kv_capacity_tokens > plan(spec, lay, hw, DEFAULT_FRAMEWORK).kv_capacity_tokens  # 0.9 x free > 0.9 x all - w


def _pressure_run(scheduler: str, util: float = 0.3, **eng):
    """40 requests of 2000 + 1500 tokens on an 8B engine given ~49k tokens of KV (0.3 of an H100):
    far more than it holds at once."""
    n = 40
    wl = make_workload({"arrival_s": np.zeros(n), "input_tokens": np.full(n, 2000), "output_tokens": np.full(n, 1500)})
    rs = RunSpec(policy="layout", layout="tp=1", model="llama-3.1-8b", hardware="h100", gpus=1, weights="bf16",
                 engine=EngineConfig(scheduler=scheduler, **eng), profile="none", gpu_memory_utilization=util)
    return run(wl, rs)


def test_trtllm_never_preempts_and_vllm_does_under_the_same_pressure():
    t = _pressure_run("trtllm", block_size=32, enable_chunked_prefill=False)
    v = _pressure_run("vllm")
    assert t.summary["completed"] == 40 and t.summary["preemptions"] == 0
    assert v.summary["completed"] == 40 and v.summary["preemptions"] > 0
    # no-evict holds fewer requests at once: the KV in use never exceeds the full-length claims
    assert t.steps["kv_used_tokens"].max() <= t.summary["kv_capacity_tokens"]


def test_sglang_retracts_and_finishes_every_request():
    # an explicit SGLang fraction is its --mem-fraction-static (weights + KV, no reserve on top): 0.25 of 80 GB
    # leaves ~4 GB of KV past the 16 GB of weights
    s = _pressure_run("sglang", util=0.25, block_size=1, schedule_order="prefill-first")
    assert s.summary["kv_capacity_tokens"] < 60_000
    assert s.summary["completed"] == 40 and s.summary["rejected"] == 0


def test_unknown_scheduler_is_refused():
    with pytest.raises(ValueError, match="scheduler='tgi'"):
        EngineConfig(scheduler="tgi")
    with pytest.raises(ValueError, match="reserve='x'"):
        Limits(64, 64, 8, 16, reserve="x")


def test_cli_framework_flag_sets_the_scheduler_and_its_defaults_and_flags_win():
    import simulator.apps.cli as cli

    def spec(*flags):
        return cli.run_spec("tp", cli.build_parser().parse_args(["--trace", "x.csv", *flags])).engine
    assert spec().scheduler == "vllm" and spec().block_size == 16 and spec().enable_chunked_prefill
    t = spec("--framework", "trtllm")
    assert (t.scheduler, t.block_size, t.enable_chunked_prefill, t.enable_prefix_caching) == ("trtllm", 32, False, False)
    s = spec("--framework", "sglang", "--block-size", "16")
    assert (s.scheduler, s.block_size, s.schedule_order) == ("sglang", 16, "prefill-first")


def test_runspec_framework_picks_engine_and_memory_rule_and_refuses_a_mismatch():
    wl = make_workload({"arrival_s": np.zeros(4), "input_tokens": np.full(4, 512), "output_tokens": np.full(4, 16)})
    kw = dict(policy="layout", layout="tp=1", model="llama-3.1-8b", hardware="h100", gpus=1, weights="bf16",
              profile="none")
    caps = {}
    for fw in ("vllm", "sglang", "trtllm"):
        r = run(wl, RunSpec(framework=fw, **kw))
        assert r.summary["framework"] == fw and r.summary["completed"] == 4
        caps[fw] = r.summary["kv_capacity_tokens"]
    # 80 GB, 16 GB of weights: vLLM 0.9 x 80 - 1.5 - 16 = 54.5 GB; SGLang 80 - 10 GiB - 16 = 53.3 GB;
    # TRT-LLM 0.9 x (80 - 1.5 - 16) = 56.2 GB
    assert caps["sglang"] < caps["vllm"] < caps["trtllm"]
    assert RunSpec(framework="trtllm", **kw).engine.scheduler == "trtllm"
    with pytest.raises(ValueError, match="framework 'sglang' with an engine scheduled by 'trtllm'"):
        RunSpec(framework="sglang", engine=EngineConfig(scheduler="trtllm"), **kw)
    with pytest.raises(ValueError, match="framework 'tgi'"):
        RunSpec(framework="tgi", **kw)


def test_sweep_framework_axis_keeps_the_ids_of_vllm_runs():
    from simulator.apps.sweep.grid import expand_grid

    base = {"grid": {"policies": ["tp"], "traces": ["synthetic:poisson?n=4&rate=1&input=64&output=4"],
                     "models": ["llama-3.1-8b"], "hardware": ["h100"], "gpus": [1]}}
    old = expand_grid(base)
    new = expand_grid({"grid": {**base["grid"], "frameworks": ["vllm", "trtllm"]}})
    assert [t["run_id"] for t in new if t["framework"] == "vllm"] == [t["run_id"] for t in old]
    assert len({t["run_id"] for t in new}) == 2


def test_framework_version_where_a_default_changed():
    from perfmodel.framework import framework_preset

    assert framework_preset("vllm", "0.18.0").step_overhead_s == 0.0  # async scheduling by default
    assert framework_preset("vllm", "0.12.0").step_overhead_s == framework_preset("vllm").step_overhead_s > 0
    assert framework_preset("trtllm", "1.1.0rc2.post2") == framework_preset("trtllm")
    # TRT-LLM 1.0: the fitted host floor of its overlapped loop, and nothing else (perfmodel.framework)
    assert dataclasses.replace(framework_preset("trtllm", "1.0.0rc3"), host_floor_s=0.0, host_floor_seq_s=0.0) \
        == framework_preset("trtllm")
    with pytest.raises(ValueError, match="framework version 'latest'"):
        framework_preset("vllm", "latest")
    wl = make_workload({"arrival_s": np.zeros(2), "input_tokens": np.full(2, 256), "output_tokens": np.full(2, 8)})
    kw = dict(policy="layout", layout="tp=1", model="llama-3.1-8b", hardware="h100", gpus=1, profile="none")
    new, old = (run(wl, RunSpec(framework_version=v, **kw)).summary for v in ("0.18.0", None))
    assert new["framework_version"] == "0.18.0" and new["step_overhead_ms"] == 0.0
    assert new["median_tpot_ms"] < old["median_tpot_ms"]


def test_cuda_graph_padding_costs_a_step_at_its_captured_size():
    """vLLM V1 pads every step of <= 512 tokens to the next capture size (9 -> 16, 250 -> 256), runs
    larger ones eagerly at their size; SGLang graphs decode-only steps (0.5.1: [1, 2, 4, 8] then every 8, so
    9 -> 16); TRT-LLM (padding off by default) none. The padding is paid by every term but attention and the LM
    head. (perfmodel/graphs.py; tests/test_cuda_graphs.py checks each framework's lists.)"""
    from perfmodel.batch import decode_batch, make_batch
    from perfmodel.cost import step_cost, token_terms
    from perfmodel.framework import FRAMEWORKS, graph_tokens
    from perfmodel.graphs import capture_sizes
    from perfmodel.steptable import StepTable

    vllm, sgl, trt = FRAMEWORKS["vllm"], FRAMEWORKS["sglang"], FRAMEWORKS["trtllm"]
    spec, hw = load_model("llama-3.1-8b"), load_hardware("h100")
    lay = ParallelLayout(tp=1)
    assert [graph_tokens(t, False, vllm) for t in (1, 3, 9, 250, 512, 513, 4096)] == [1, 4, 16, 256, 512, 513, 4096]
    s_sgl, s_trt = (capture_sizes(f, lay, hw.hbm_bytes) for f in (sgl, trt))
    assert graph_tokens(9, False, sgl, s_sgl) == 9 and graph_tokens(9, True, sgl, s_sgl) == 16
    assert s_trt == () and graph_tokens(9, True, trt, s_trt) == 9
    pad, raw = (sum(token_terms(spec, lay, hw, float(t), None, vllm).values()) for t in (16, 9))
    with_graph = step_cost(spec, lay, hw, decode_batch(9, 1000), None, vllm).total_s
    no_graph = step_cost(spec, lay, hw, decode_batch(9, 1000), None, dataclasses.replace(vllm, cuda_graph_padding=False)).total_s
    assert float(with_graph - no_graph) == pytest.approx(float(pad - raw), rel=1e-9)  # same but the padding
    table = StepTable(spec, lay, hw, None, vllm, max_tokens=1024, max_seqs=64)
    assert table.time_s(dn=9, dkv=9000.0) == pytest.approx(float(with_graph), rel=1e-9)
    mixed = make_batch(prefill_tokens=100, prefill_seqs=1, prefill_pairs=5050, prefill_kv_tokens=100,
                       decode_seqs=9, decode_kv_tokens=9000)
    assert table.time_s(100, 1, 5050.0, 100.0, 9, 9000.0) == pytest.approx(
        float(step_cost(spec, lay, hw, mixed, None, vllm).total_s), rel=1e-9)  # 109 -> 112 tokens


def test_no_cuda_graph_padding_on_a_cpu():
    from perfmodel.framework import FRAMEWORKS, for_hardware

    assert for_hardware(FRAMEWORKS["vllm"], load_hardware("cpu")).cuda_graph_sizes == ()
    assert for_hardware(FRAMEWORKS["vllm"], load_hardware("h100")).cuda_graph_sizes == FRAMEWORKS["vllm"].cuda_graph_sizes


def test_sglang_from_053_reserves_by_its_chunk_and_graph_sizes():
    """SGLang >= 0.5.3 holds back 512 MB + 1.5 MB x chunk + 2 MB x cuda_graph_max_bs + tp x pp / 8 GiB (at least
    10 GiB over 60 GB; server_args.py _handle_gpu_memory_settings @0.5.3-0.5.9), 0.5.1 (9.5 + tp / 2) GiB;
    --mem-fraction-static replaces either. Regression (2026-12-02): every version reserved 0.5.1's amount."""
    h200 = 143771 * 2**20  # the driver's total, MiB
    old, new = framework_preset("sglang", "0.5.1.post1"), framework_preset("sglang", "0.5.9")
    for tp, graph_bs in ((1, 256), (2, 256), (4, 512), (8, 512)):
        assert reserve_bytes_of(old, tp, 1, h200) == (9.5 + tp / 2) * 2**30
        assert reserve_bytes_of(new, tp, 1, h200) == (512 + 1.5 * 8192 + 2 * graph_bs + tp / 8 * 1024) * 2**20
    chunked = dataclasses.replace(new, chunk_tokens=32768)  # --chunked-prefill-size 32768
    assert reserve_bytes_of(chunked, 8, 1, h200) == (512 + 1.5 * 32768 + 1024 + 1024) * 2**20
    assert reserve_bytes_of(new, 1, 1, 24 * 2**30) == (512 + 1.5 * 2048 + 2 * 24 + 128) * 2**20  # L4: no 10 GiB floor
    assert reserve_bytes_of(with_knobs(new, gpu_memory_utilization=0.82), 8, 1, h200) == 0.0
    spec, hw = load_model("llama-3.1-8b"), load_hardware("h200")
    one = ParallelLayout(tp=1)
    assert plan(spec, one, hw, new).kv_capacity_tokens < plan(spec, one, hw, old).kv_capacity_tokens
