"""Lock-step DP engines (simulator/engine/lockstep.py) and an idle engine's wake-up (HardwareSpec.host_wake_s).

Attention-DP ranks of one expert-parallel MoE step together (their all_to_all couples every step), so a
prompt on one rank stretches the decode step another rank runs beside it; plain DP replicas step
alone unless told (`dp_lockstep="all"`: the reference loop kernels.serve). Every request still ends
completed, and a lone request's timing is that of an engine alone."""
import dataclasses

import numpy as np
import pytest

from perfmodel.estimate import frontend_s
from perfmodel.framework import DEFAULT_FRAMEWORK
from perfmodel.layout import ParallelLayout
from test_sim_util import run, workload

from perfmodel.hardware import load_hardware
from perfmodel.modelspec import load_model
from simulator.cluster.simulate import SimConfig, simulate
from simulator.engine.config import EngineConfig

MOE = "qwen3-235b-a22b"


def _decode_then_prompt():
    """A long decode on one engine, then a long prompt that the router sends to the other."""
    return workload([0.0, 0.05], [128, 6000], [400, 2])


def _moe_run(rule: str):
    return run(_decode_then_prompt(), model_name=MOE, weights="fp8", policy="layout", layout="dp=2,tp=4,ep=8",
               gpus=8, engine=dict(dp_lockstep=rule))


def test_attention_dp_ranks_step_together_and_a_prompt_stretches_the_other_ranks_decode():
    lock, free = _moe_run("ep"), _moe_run("off")
    for r in (lock, free):
        f = r.requests.frame()
        assert (f["status"] == "completed").all() and len(f) == 2
        assert sorted(f["engine"]) == [0, 1]  # one request per DP rank
    s = lock.steps.frame()
    prompt = s[s["prefill_tokens"] >= 6000].iloc[0]
    beside = s[(s["engine"] != prompt["engine"]) & (s["start_s"] == prompt["start_s"])]
    assert len(beside) == 1 and beside["duration_s"].iloc[0] == prompt["duration_s"]  # one tick, both ranks
    # every tick with both ranks busy has one start and one duration
    both = s.groupby("start_s").filter(lambda g: len(g) == 2)
    assert len(both) and (both.groupby("start_s")["duration_s"].nunique() == 1).all()
    # the decoding request pays for the other rank's prompt: its step beside the prompt is the prompt's tick
    # (above), longer than its decode steps before it
    own = s[s["engine"] != prompt["engine"]]
    assert prompt["duration_s"] > own[own["start_s"] < prompt["start_s"]]["duration_s"].max()
    fl, ff = lock.requests.frame(), free.requests.frame()
    dec = fl["input_tokens"] == 128
    alone = run(workload([0.0], [128], [400]), model_name=MOE, weights="fp8", policy="layout",
                layout="dp=2,tp=4,ep=8", gpus=8, engine=dict(dp_lockstep="ep")).requests.frame()
    assert fl.loc[dec, "tpot_ms"].iloc[0] > alone["tpot_ms"].iloc[0]
    # (not longer than alone: its tick costs the experts at the group's mean load, below the equal load)
    assert fl.loc[~dec, "ttft_ms"].iloc[0] <= ff.loc[~dec, "ttft_ms"].iloc[0]


def test_a_lone_rank_costs_its_experts_at_the_groups_mean_load():
    """Regression (2026-11-26): a busy attention-DP rank beside idle ones was costed as if every rank of its
    EP group held as many tokens (its routed experts hit as many experts as a full group's tokens would).
    Each lock-step tick now costs them at the members' mean padded tokens, idle ones counting 0."""
    from perfmodel.steptable import StepTable

    r = run(workload([0.0], [128], [40]), model_name=MOE, weights="fp8", policy="layout", layout="dp=2,tp=4,ep=8",
            gpus=8, engine=dict(dp_lockstep="ep", fast_forward=False))
    solo = run(workload([0.0], [128], [40]), model_name=MOE, weights="fp8", policy="layout",
               layout="dp=2,tp=4,ep=8", gpus=8, engine=dict(dp_lockstep="off", fast_forward=False))
    s, s_solo = r.steps.frame(), solo.steps.frame()
    fw = dataclasses.replace(DEFAULT_FRAMEWORK, tokenize_s_per_token=0.0, tokenize_batch_wait_s=0.0)
    tab = StepTable(load_model(MOE, weights="fp8"), ParallelLayout(dp=2, tp=4, ep=8), load_hardware("h100"), fw=fw)
    for st in s.itertuples():
        agg = (int(st.prefill_tokens), int(st.prefill_seqs), st.prefill_pairs, st.prefill_kv_tokens,
               int(st.decode_seqs), st.decode_kv_tokens)
        mean = tab.padded(agg[0], agg[4]) / 2  # one busy member of two
        assert st.duration_s == pytest.approx(tab.time_s(*agg, rank_tokens=mean), rel=1e-12)
    assert (s["duration_s"].to_numpy() < s_solo["duration_s"].to_numpy()).all()  # equal load: more experts hit


def test_plain_dp_replicas_step_alone_unless_told():
    w = workload([0.0, 0.05], [128, 6000], [400, 2])
    base = run(w, policy="dp", gpus=2)
    assert run(w, policy="dp", gpus=2, engine=dict(dp_lockstep="ep")).requests.frame().equals(base.requests.frame())
    s_all = run(w, policy="dp", gpus=2, engine=dict(dp_lockstep="all")).steps.frame()
    s_off = base.steps.frame()
    ticks = lambda s: s.groupby("start_s")["engine"].nunique().max()  # noqa: E731
    assert ticks(s_all) == 2 and ticks(s_off) == 1  # steps (fast-forwarded stretches) start apart when free


def test_a_lone_request_runs_as_on_an_engine_alone():
    w = workload([0.0], [512], [64])
    solo = run(w, policy="dp", gpus=2, engine=dict(fast_forward=False)).requests.frame()
    lock = run(w, policy="dp", gpus=2, engine=dict(dp_lockstep="all")).requests.frame()
    for c in ("first_token_s", "finish_s"):
        assert lock[c].iloc[0] == pytest.approx(solo[c].iloc[0], rel=1e-9)


def test_lockstep_keeps_every_request_and_is_deterministic():
    rng = np.random.default_rng(3)
    n = 60
    w = workload(np.sort(rng.uniform(0, 2, n)), rng.integers(50, 3000, n), rng.integers(5, 200, n))
    a = run(w, policy="dp", gpus=4, engine=dict(dp_lockstep="all")).requests.frame()
    b = run(w, policy="dp", gpus=4, engine=dict(dp_lockstep="all")).requests.frame()
    assert (a["status"] == "completed").all() and len(a) == n
    assert a.equals(b)


def test_bad_lockstep_rule_is_refused():
    with pytest.raises(ValueError, match="dp_lockstep"):
        EngineConfig(dp_lockstep="sometimes")


def test_an_idle_engine_wakes_host_wake_s_after_an_arrival():
    hw = load_hardware("cpu")
    assert hw.host_wake_s > 0  # the reference loop's empty plan broadcast (cpu.toml cites the measurement)
    spec = load_model("tiny", weights="fp32", kv="fp32")
    w = workload([0.25], [64], [4])
    cfg = SimConfig(policy="tp", gpus=1, engine=EngineConfig())
    woke = simulate(w, spec, hw, cfg).requests.frame()
    instant = simulate(w, spec, dataclasses.replace(hw, host_wake_s=0.0), cfg).requests.frame()
    front = frontend_s(cfg.framework, 64)  # the front end's window and tokenization come first (frontend.py)
    assert (woke["scheduled_s"] - woke["arrival_s"]).iloc[0] == pytest.approx(front + hw.host_wake_s)
    assert woke["ttft_ms"].iloc[0] == pytest.approx(instant["ttft_ms"].iloc[0] + 1e3 * hw.host_wake_s)
    assert load_hardware("h100").host_wake_s == 0.0


@pytest.mark.parametrize("scheduler", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("closed", [0, 64])
def test_lockstep_under_kv_pressure_with_every_scheduler(scheduler, closed):
    """Preemption (vLLM), retraction (SGLang) and whole-request admission (TRT-LLM) inside lock-step ticks,
    open and closed loop: every request completes; TRT-LLM never preempts."""
    rng = np.random.default_rng(5)
    n = 120
    w = workload(np.sort(rng.uniform(0, 2, n)), rng.integers(100, 4000, n), rng.integers(10, 400, n))
    extra = {"sglang": dict(block_size=1, schedule_order="prefill-first"),
             "trtllm": dict(block_size=32, enable_chunked_prefill=False)}.get(scheduler, {})
    f = run(w, policy="dp", gpus=4, util=0.16, max_concurrency=closed,
            engine=dict(dp_lockstep="all", scheduler=scheduler, **extra)).requests.frame()
    assert (f["status"] == "completed").all() and len(f) == n
    if scheduler == "trtllm":
        assert f["preemptions"].sum() == 0
