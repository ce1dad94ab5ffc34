"""Per-pool engine limits of --policy disagg and the srt-slurm recipes behind the TRT-LLM DeepSeek disagg rows."""
import dataclasses

import numpy as np
import pytest

from simulator import run
from simulator.engine.config import EngineConfig
from simulator.run import RunSpec
from simulator.apps.validate.harness import as_launched, harness, source_of
from simulator.apps.validate.recipes import TRTLLM_DSR1_H100, trtllm_dsr1_recipes
from simulator.apps.validate.rows import Case
from simulator.workload.workload import make_workload

# (no front-end tokenization: requests sent together reach the pools together, as the hand-worked cases say)
SMALL = dict(model="llama-3.1-8b", hardware="h100", weights="bf16", profile="none", tokenize_us_per_token=0.0)
POOLS = (("prefill", "1x(tp=1)"), ("decode", "3x(tp=1)"))


def _run(n, extra=(), **kw):
    wl = make_workload({"arrival_s": np.zeros(n), "input_tokens": np.full(n, 256), "output_tokens": np.full(n, 64)},
                       source="disagg-limits")
    return run(wl, RunSpec(policy="disagg", gpus=4, policy_args=POOLS + tuple(extra), **SMALL, **kw)).requests


def test_a_full_decode_pool_holds_the_first_token():
    """Hand-worked: 6 requests at t=0, 3 decode instances of max 1 request each. Requests 4-6 get their
    first token only once one of requests 1-3 finished (its slot frees), so after the earliest finish;
    without the limit all six first tokens precede every finish."""
    r = _run(6, (("decode_max_seqs", "1"),))
    assert (r["status"] == "completed").all()
    first = np.sort(r["first_token_s"].to_numpy())
    finish = np.sort(r["finish_s"].to_numpy())
    assert first[2] < finish[0] <= first[3]  # the 4th first token waits for the 1st finish
    assert r.groupby("engine").size().tolist() == [2, 2, 2]
    free = _run(6)
    assert free["first_token_s"].max() < free["finish_s"].min()
    # the wait is in TTFT, not TPOT: per-token time is that of a batch of one either way
    assert r["ttft_ms"].mean() > 5 * free["ttft_ms"].mean()


def test_prefill_limits_cap_each_prefill_step():
    """prefill_max_seqs=1: six prompts take six prefill steps of one prompt each (one step of six without it);
    prefill_max_tokens=300 with chunked prefill off fits one 256-token prompt per step."""
    def prefill_steps(extra):
        wl = make_workload({"arrival_s": np.zeros(6), "input_tokens": np.full(6, 256),
                            "output_tokens": np.full(6, 64)}, source="disagg-limits")
        eng = EngineConfig(enable_chunked_prefill=False)
        st = run(wl, RunSpec(policy="disagg", gpus=4, policy_args=POOLS + tuple(extra), engine=eng, **SMALL)).steps
        return st[st["mode"] == "prefill"]["prefill_seqs"].tolist()
    assert prefill_steps((("prefill_max_seqs", "1"),)) == [1.0] * 6
    assert prefill_steps((("prefill_max_tokens", "300"),)) == [1.0] * 6
    assert prefill_steps(()) == [6.0]


@pytest.mark.parametrize("arg", ["decode_max_seqs=0", "prefill_max_tokens=-1", "decode_max_seqs=x"])
def test_bad_limits_are_one_clear_error(arg):
    k, v = arg.split("=")
    with pytest.raises(ValueError, match=k):
        _run(2, ((k, v),))


def _case(isl, conc, model="deepseek-ai/DeepSeek-R1", backend="trtllm"):
    return Case(0, "row", backend, "0.8.1.post3", model, "h100", "fp8", "prefill 1x(tp=16,ep=16) decode 1x(tp=16,ep=16)",
                32, isl, 1024, conc, conc, 1000.0, 20.0, "disagg",
                (("prefill", "1x(tp=16,ep=16)"), ("decode", "1x(tp=16,ep=16)")), 4)


def test_recipes_oversubscribe_their_decode_slots():
    """InferenceX ran each recipe at ~1.2x its decode slots (workers x DP ranks x max_batch_size): the
    property that puts the slot wait into TTFT. A transcription slip in the table breaks it."""
    for (isl, osl, conc), recs in TRTLLM_DSR1_H100.items():
        for r in recs:
            slots = r.gen_workers * (16 if r.gen_attention_dp else 1) * r.gen_max_batch
            assert 1.1 <= conc / slots <= 2.0, (isl, conc, r.name)
            assert r.name.endswith(f"mtp{r.mtp}") and (r.ctx_max_tokens >= isl)


def test_rows_are_replayed_as_their_recipe():
    c = as_launched(_case(1024, 6))
    args = dict(c.policy_args)
    assert args["decode"] == "3x(tp=16,ep=16)" and args["decode_max_seqs"] == "1"
    assert args["prefill"] == "1x(dp=16,tp=1,ep=16)" and args["prefill_max_tokens"] == "2048"
    assert c.gpus == 64 and c.nodes == 8 and "ctx1_gen3_tep16_batch1_eplb0_mtp0" in c.layout
    h = harness(_case(1024, 6))
    assert (source_of(_case(1024, 6)), h.rounds, h.length_ratio, h.kv_dtype) == ("srt", 10, 0.8, "fp8")
    dep = dict(as_launched(_case(8192, 308)).policy_args)
    assert dep["decode"] == "1x(dp=16,tp=1,ep=16)" and dep["prefill"] == "2x(dp=16,tp=1,ep=16)"
    mtp = dict(as_launched(_case(1024, 117)).policy_args)  # only an MTP recipe ran at 117
    assert mtp["decode_mtp"] == "3" and mtp["decode_max_seqs"] == "32" and mtp["decode"] == "3x(tp=16,ep=16)"
    for other in (_case(1024, 7), _case(1024, 6, backend="sglang"), dataclasses.replace(_case(1024, 6), hardware="h200")):
        assert as_launched(other) == other and source_of(other) != "srt"
    assert [r.mtp for r in trtllm_dsr1_recipes(1024, 1024, 6)] == [0, 3]  # both ran at 6: plain first
    assert "decode_mtp" not in args


def test_sglang_deepseek_rows_replay_the_max_tp_mtp_recipe():
    """SGLang 0.5.8 DeepSeek disagg rows on H100 sit on InferenceX's MTP-only search space of their date:
    replayed as its max-tp recipe (EAGLE, 2 draft tokens; 2 decode workers for 1k prompts, 1 for 8k)."""
    c = dataclasses.replace(_case(1024, 64), backend="sglang", version="0.5.8", osl=8192)
    a = dict(as_launched(c).policy_args)
    assert (a["prefill"], a["decode"], a["decode_max_seqs"], a["decode_mtp"]) == ("1x(tp=16)", "2x(tp=16)", "64", "2")
    assert as_launched(c).gpus == 48 and harness(c).kv_dtype == "bf16" and harness(c).rounds == 10
    long = dict(as_launched(dataclasses.replace(c, isl=8192, osl=1024, concurrency=128)).policy_args)
    assert long["decode"] == "1x(tp=16)" and long["decode_max_seqs"] == "128"
    for other in (dataclasses.replace(c, version="0.5.6.post2"), dataclasses.replace(c, concurrency=3)):
        assert as_launched(other) == other


def test_round_robin_binds_a_request_to_its_worker():
    """Hand-worked: 2 decode workers of 1 slot, 3 requests at t=0 with outputs 400, 20, 20 tokens. Round
    robin binds the 3rd to worker 0, behind the 400-token one, though worker 1 is free after 20 tokens;
    least_loaded gives it worker 1 then. Both end every request."""
    def third(routing):
        wl = make_workload({"arrival_s": np.zeros(3), "input_tokens": np.full(3, 128),
                            "output_tokens": np.array([400, 20, 20])}, source="disagg-routing")
        r = run(wl, RunSpec(policy="disagg", gpus=3, **SMALL, policy_args=(
            ("prefill", "1x(tp=1)"), ("decode", "2x(tp=1)"), ("decode_max_seqs", "1"), ("decode_routing", routing))))
        q = r.requests.sort_values("request_id")
        assert (q["status"] == "completed").all()
        return q.iloc[2], q.iloc[0], q.iloc[1]
    c, a, b = third("round_robin")
    assert c["engine"] == a["engine"] and c["first_token_s"] >= a["finish_s"]
    c, a, b = third("least_loaded")
    assert c["engine"] == b["engine"] and b["finish_s"] <= c["first_token_s"] < a["finish_s"]
    with pytest.raises(ValueError, match="decode_routing"):
        third("random")


def test_pp_prefill_pool_budget_is_pp_batches_not_pp_squared():
    """A pp=2 prefill instance of a 512-token budget keeps 2 batches of 512 in flight, as an aggregated pp=2
    engine does (a first version of prefill_max_tokens halved it: this guards the budget's path)."""
    wl = make_workload({"arrival_s": np.zeros(8), "input_tokens": np.full(8, 512), "output_tokens": np.full(8, 4)},
                       source="disagg-pp")
    eng = EngineConfig(max_num_batched_tokens=512)
    st = run(wl, RunSpec(policy="disagg", gpus=3, engine=eng, **SMALL,
                         policy_args=(("prefill", "1x(tp=1,pp=2)"), ("decode", "1x(tp=1)")))).steps
    pre = st[st["mode"] == "prefill"]["prefill_tokens"]
    assert pre.max() == 1024


def test_pd_handoff_delays_the_first_token_not_the_prefill_link():
    """Hand-worked: Framework.pd_handoff_s = 50 ms. One request: TTFT and finish move by exactly 50 ms, TPOT
    not at all. Two requests on one prefill instance: the second's transfer does not wait for the first's
    handoff (the link is free at the transfer's end), so both first tokens move by the same 50 ms."""
    from perfmodel.framework import framework_preset

    def go(n, handoff_s):
        wl = make_workload({"arrival_s": np.zeros(n), "input_tokens": np.full(n, 256),
                            "output_tokens": np.full(n, 64)}, source="handoff")
        rs = RunSpec(policy="disagg", gpus=4, policy_args=POOLS, **SMALL)
        fw = dataclasses.replace(framework_preset(rs.framework, rs.framework_version), pd_handoff_s=handoff_s)
        return run(wl, rs, framework=fw).requests
    for n in (1, 2):
        a, b = go(n, 0.0), go(n, 0.05)
        assert np.allclose(b["first_token_s"] - a["first_token_s"], 0.05)
        assert np.allclose(b["finish_s"] - a["finish_s"], 0.05) and np.allclose(b["tpot_ms"], a["tpot_ms"])
    with pytest.raises(ValueError, match="pd_handoff_s"):
        dataclasses.replace(framework_preset("vllm", ""), pd_handoff_s=-1.0)


def test_first_token_leaves_at_the_decode_step_boundary_after_the_kv():
    """Hand-worked: A (400 tokens out) decodes alone on the one decode instance; B's KV arrives while A's step
    is in flight. B's first token leaves when the decode loop takes B up: at the end of that step (a decode
    step boundary), after B's transfer ended and less than one step later; with the decode side idle (A
    alone) the first token leaves as its KV lands."""
    wl = make_workload({"arrival_s": np.array([0.0, 0.05]), "input_tokens": np.array([256, 256]),
                        "output_tokens": np.array([400, 8])}, source="boundary")
    res = run(wl, RunSpec(policy="disagg", gpus=2, policy_args=(("prefill", "1x(tp=1)"), ("decode", "1x(tp=1)")),
                          **SMALL))
    req, st = res.requests, res.steps
    pre, dec = st[st["engine"] == 0], st[st["engine"] == 1]
    kv_in = (pre["start_s"] + pre["duration_s"]).to_numpy() + req["kv_transfer_ms"].to_numpy() / 1e3
    assert req["first_token_s"][0] == pytest.approx(kv_in[0])  # idle decode side: at once
    ends = (dec["start_s"] + dec["duration_s"]).to_numpy()
    b = req["first_token_s"][1]
    assert np.isclose(ends, b).any() and b > kv_in[1]  # a step boundary, after the KV
    step_s = float(dec["duration_s"].iloc[-1] / dec["steps"].iloc[-1])  # one step of A alone
    assert b - kv_in[1] < step_s


def test_pool_memory_fractions_follow_each_framework():
    """decode_memory_fraction / prefill_memory_fraction set one pool's engine memory in its framework's
    meaning: SGLang's explicit --mem-fraction-static replaces its reserve rule (more KV at 0.9 than the
    default rule's ~0.78 on an 80 GB GPU at TP16), TRT-LLM's is a fraction of what the weights leave free;
    bad values are one clear error. The recipes carry theirs (SGLang decode 0.9 / 0.85, prefill 0.6;
    TRT-LLM ctx 0.6 at 1k and 0.3 at 8k input, gen 0.9)."""
    from perfmodel import memory
    from perfmodel.framework import framework_preset
    from perfmodel.hardware import load_hardware
    from perfmodel.layout import ParallelLayout
    from perfmodel.modelspec import load_model
    from simulator.policies.disagg.policy import pool_framework
    spec, hw = load_model("deepseek-ai/DeepSeek-R1", weights="fp8", kv="bf16"), load_hardware("h100")
    lay = ParallelLayout(tp=16)
    sg = framework_preset("sglang", "0.5.8")
    cap = {f: memory.plan(spec, lay, hw, pool_framework(sg, f, "decode_memory_fraction")).kv_capacity_tokens
           for f in (None, 0.6, 0.9)}
    assert cap[0.6] < cap[None] < cap[0.9]
    assert pool_framework(sg, 0.9, "x").reserve_bytes == 0.0
    trt = pool_framework(framework_preset("trtllm", ""), 0.3, "prefill_memory_fraction")
    assert trt.kv_fraction_of_free and trt.gpu_memory_utilization == 0.3
    with pytest.raises(ValueError, match="decode_memory_fraction=1.5"):
        pool_framework(sg, 1.5, "decode_memory_fraction")
    a = dict(as_launched(_case(8192, 6)).policy_args)
    assert (a["prefill_memory_fraction"], a["decode_memory_fraction"]) == ("0.3", "0.9")
    c = dataclasses.replace(_case(1024, 64), backend="sglang", version="0.5.8", osl=8192)
    assert dict(as_launched(c).policy_args)["decode_memory_fraction"] == "0.9"  # max-tp, the first recipe
