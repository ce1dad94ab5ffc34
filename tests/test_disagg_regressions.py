"""Regressions found replaying the measured disaggregated rows (issue 18 item 5)."""
import numpy as np

from perfmodel import disagg
from perfmodel.hardware import load_hardware
from perfmodel.layout import LayoutError, ParallelLayout
from simulator import run
from simulator.engine.config import EngineConfig
from simulator.run import RunSpec
from simulator.workload.workload import make_workload

SMALL = dict(model="llama-3.1-8b", hardware="h100", weights="bf16", profile="none")


def _wl(n, prompt, output):
    return make_workload({"arrival_s": np.zeros(n), "input_tokens": np.full(n, prompt),
                          "output_tokens": np.full(n, output)}, source="disagg-regression")


def test_closed_loop_survives_rejections_at_the_front_door():
    """A request the disagg front door rejects inside issue() ended before the closed loop counted it in
    flight (`in_flight += issue()` read the count first): the loop stalled with requests never issued."""
    eng = EngineConfig(max_num_batched_tokens=512, enable_chunked_prefill=False)
    r = run(_wl(12, 1000, 8), RunSpec(policy="disagg", gpus=2, max_concurrency=3, engine=eng,
                                     policy_args=(("prefill", "1x(tp=1)"), ("decode", "1x(tp=1)")), **SMALL))
    assert (r.requests["status"] == "rejected").all()
    assert r.requests["reject_reason"].str.contains("prefill instance").all()


def test_trtllm_unchunked_context_may_fill_the_budget():
    """TRT-LLM without chunked context bounds the context by max_num_tokens, not prompt + output (vLLM's
    max_model_len rule): an 8192-token prompt on an 8192-token budget runs (it stalled the prefill pool)."""
    eng = EngineConfig(max_num_batched_tokens=8192, enable_chunked_prefill=False, scheduler="trtllm", block_size=32,
                       enable_prefix_caching=False)
    r = run(_wl(6, 8192, 16), RunSpec(policy="disagg", gpus=2, max_concurrency=3, engine=eng,
                                     policy_args=(("prefill", "1x(tp=1)"), ("decode", "1x(tp=1)")), **SMALL))
    assert (r.requests["status"] == "completed").all()


def test_attention_dp_instances_are_one_engine_per_rank():
    """A pool instance with attention DP (`1x(dp=4,ep=4)`, DeepSeek's serving layout) is 4 engines on one
    GPU each; an instance sits inside one node or on whole nodes."""
    hw = load_hardware("h100")
    p, d = disagg.Pool(1, ParallelLayout(dp=4, ep=4)), disagg.Pool(1, ParallelLayout(tp=4))
    pg, dg = disagg.placement(p, d, hw, 8)
    assert pg == [(0,), (1,), (2,), (3,)] and dg == [(4, 5, 6, 7)] and p.engines == 4 and p.gpus == 4
    big = disagg.Pool(1, ParallelLayout(tp=16))
    assert disagg.placement(big, disagg.Pool(2, ParallelLayout(tp=8)), hw, 32)[1] == [tuple(range(16, 24)),
                                                                                       tuple(range(24, 32))]
    try:
        disagg.placement(disagg.Pool(1, ParallelLayout(tp=4)), big, hw, 20)
    except LayoutError as e:
        assert "straddles" in str(e)
    else:
        raise AssertionError("a 16-GPU instance starting mid-node must be refused")


def test_summary_names_the_deployment_once():
    """The summary's layout read 'prefill 1x(tp=1) / decode 1x(tp=1) (prefill)': the mode name was appended."""
    r = run(_wl(4, 100, 4), RunSpec(policy="disagg", gpus=2, policy_args=(("prefill", "1x(tp=1)"),
                                                                         ("decode", "1x(tp=1)")), **SMALL))
    assert r.summary["layout"] == "prefill 1x(tp=1) / decode 1x(tp=1)"


def test_attention_dp_decode_ranks_cost_experts_at_their_groups_load():
    """A decode instance of attention-DP ranks (`1x(dp=2,ep=2)`) with one request on one rank: its routed
    experts serve both ranks' tokens, the idle one's 0, so each decode stretch is costed at the group's mean
    padded tokens (here 1 / 2 of the request's), not as if the idle rank were as busy (2026-11-26: it was)."""
    from perfmodel.framework import DEFAULT_FRAMEWORK
    from perfmodel.modelspec import load_model
    from perfmodel.steptable import StepTable, decode_stretch_s

    spec = dict(model="qwen3-30b-a3b", hardware="h100", weights="bf16", profile="none")
    r = run(_wl(1, 200, 40), RunSpec(policy="disagg", gpus=3, tokenize_us_per_token=0.0,
                                     policy_args=(("prefill", "1x(tp=1)"), ("decode", "1x(dp=2,ep=2)")), **spec))
    assert (r.requests["status"] == "completed").all()
    s = r.steps[r.steps["mode"] == "decode"]
    assert len(s) and (s["decode_seqs"] == 1).all()
    tab = StepTable(load_model("qwen3-30b-a3b", weights="bf16"), ParallelLayout(dp=2, ep=2), load_hardware("h100"),
                    fw=DEFAULT_FRAMEWORK)
    assert tab.dispatch
    group, alone = tab.decode_affine(1, tab.padded(0, 1) / 2), tab.decode_affine(1)
    assert group[0] < alone[0]
    for st in s.itertuples():
        want = decode_stretch_s(*group, st.decode_kv_tokens, 1, int(st.steps))
        assert st.duration_s == np.float64(want) or abs(st.duration_s - want) <= 1e-12 * want


def _dep_prefill(rule: str, n: int = 2):
    """A long prompt and a short one at once on a prefill instance of two attention-DP ranks (one per rank)."""
    spec = dict(model="qwen3-30b-a3b", hardware="h100", weights="bf16", profile="none")
    w = make_workload({"arrival_s": np.zeros(n), "input_tokens": [6000, 200][:n], "output_tokens": np.full(n, 4)},
                      source="dep-prefill")
    return run(w, RunSpec(policy="disagg", gpus=3, tokenize_us_per_token=0.0, engine=EngineConfig(dp_lockstep=rule),
                          policy_args=(("prefill", "1x(dp=2,ep=2)"), ("decode", "1x(tp=1)")), **spec))


def test_attention_dp_prefill_ranks_step_together():
    """A prefill instance of attention-DP ranks (`prefill=1x(dp=2,ep=2)`) steps as one: the ranks share each MoE
    layer's all_to_all, so a long prompt on one rank holds the other's short one to the same tick, as an
    aggregated attention-DP instance's ranks do (2026-12-02: the disaggregated prefill ranks stepped alone, each
    step's experts costed as if every rank were as busy). `--dp-lockstep off` leaves them apart."""
    lock, free = _dep_prefill("ep"), _dep_prefill("off")
    for r in (lock, free):
        assert (r.requests["status"] == "completed").all()
        assert sorted(r.requests["prefill_engine"]) == [0, 1]  # one prompt per rank
    pre = lock.steps[lock.steps["mode"] == "prefill"]
    assert pre["start_s"].nunique() == 1 and pre["duration_s"].nunique() == 1 and len(pre) == 2  # one tick
    lone = free.steps[free.steps["mode"] == "prefill"]
    assert lone["duration_s"].nunique() == 2  # apart: each rank's own step
    # the short prompt's step lasts the long one's tick, longer than alone; its first token comes later
    short = lone["prefill_tokens"] == 200
    assert pre["duration_s"].iloc[0] > lone.loc[short, "duration_s"].iloc[0]
    first = [r.requests.loc[r.requests["input_tokens"] == 200, "first_token_s"].iloc[0] for r in (lock, free)]
    assert first[0] > first[1]
