"""TRT-LLM's attention-DP balance (EngineConfig.adp_balance / adp_timeout_iters / adp_batching_wait_iters; TRT-LLM
py_executor.py PyExecutor._balance_adp_requests, simulator/engine/adpbalance.py): the attention-DP ranks of a
lock-step group hold their prompts until every rank has one (at most timeout_iters ticks) and, once all have, for
batching_wait_iters ticks more; a rank without a generation request releases them at once. The InferenceX
DeepSeek-R1 TRT-LLM H200 scripts set it whenever they run attention DP (scripts.py)."""
from __future__ import annotations

import shlex

import pytest
from test_sim_util import run, workload

from simulator.apps.cli import build_parser, run_spec
from simulator.apps.validate.command import command
from simulator.apps.validate.harness import harness
from simulator.apps.validate.rows import Case
from simulator.engine.adpbalance import IDLE, Counts, hold
from simulator.engine.config import EngineConfig, framework_engine

MOE = "qwen3-235b-a22b"
TRT = {"scheduler": "trtllm", "block_size": 32, "enable_chunked_prefill": False, "enable_prefix_caching": False,
       "max_num_batched_tokens": 8192, "fast_forward": False}


# ---- the rule -----------------------------------------------------------------------------------------------
def test_every_rank_ready_runs_the_prompts_at_once_without_a_batching_wait():
    ranks = [Counts(1, 3), Counts(2, 5)]
    assert tuple(hold(ranks, 8, 60, 0, 7, 0)) == (False, 0, 0)  # the waiting count restarts too


def test_batching_wait_holds_ready_ranks_that_many_ticks():
    ranks, batching, held = [Counts(1, 3), Counts(1, 5)], 0, []
    for _ in range(4):
        got = hold(ranks, 8, 60, 2, 0, batching)
        held.append(got.held)
        batching = got.batching
    assert held == [True, True, False, True]  # two ticks held, the third runs and the count restarts


def test_a_rank_without_a_prompt_holds_the_others_until_the_timeout():
    ranks, waiting, held = [Counts(1, 3), Counts(0, 5)], 0, []
    for _ in range(5):
        got = hold(ranks, 8, 3, 0, waiting, 0)
        held.append(got.held)
        waiting = got.waiting
    assert held == [True, True, False, True, True]  # the count reaches 3 at the third tick: they run


def test_a_full_rank_is_not_ready_and_a_rank_without_generation_releases():
    assert hold([Counts(1, 8), Counts(1, 2)], 8, 60, 0, 0, 0).held  # 8 generation requests = max_batch_size
    assert not hold([Counts(1, 0), Counts(0, 2)], 8, 60, 0, 0, 0).held  # rank 0 has nothing decoding
    assert hold([Counts(1, 2), IDLE], 8, 60, 0, 0, 0).held  # an idle rank's dummy request decodes: it waits


# ---- in a lock-step group ---------------------------------------------------------------------------------
def _run(arrivals, balance=None):
    """Two attention-DP ranks (one EP group), each decoding a long request from t = 0, then `arrivals`."""
    arr = [0.0, 0.0] + list(arrivals)
    w = workload(arr, [128] * len(arr), [300, 300] + [4] * len(arrivals))
    eng = dict(TRT, **({} if balance is None else dict(adp_balance=True, adp_timeout_iters=balance[0],
                                                        adp_batching_wait_iters=balance[1])))
    return run(w, model_name=MOE, weights="fp8", policy="layout", layout="dp=2,tp=4,ep=8", gpus=8, engine=eng)


def _ticks(res, pos: int) -> tuple[int, int]:
    """(the lock-step tick, numbered from 1, that first began at or after request `pos` arrived; the tick that
    scheduled it)."""
    f, s = res.requests.frame(), res.steps.frame()
    starts = s["start_s"].drop_duplicates().sort_values().to_numpy()
    first = int((starts < f["arrival_s"].iloc[pos]).sum()) + 1
    return first, int((starts < f["scheduled_s"].iloc[pos]).sum()) + 1


@pytest.mark.parametrize("timeout", [3, 8, 13])
def test_a_prompt_on_one_rank_waits_for_the_count_to_reach_the_timeout(timeout):
    """Tick 1 runs both ranks' first prompts (every rank has one) and restarts the count; from then on every tick
    some rank lacks a prompt, so the count grows every tick, prompts or not, and whatever waits runs at the
    ticks where it reaches the timeout: 1 + k x timeout. The third request waits for the next of those."""
    plain, bal = _run([0.05]), _run([0.05], (timeout, 0))
    for r in (plain, bal):
        assert (r.requests.frame()["status"] == "completed").all()
    first, ran = _ticks(plain, 2)
    assert ran == first  # at once without the balance
    first, ran = _ticks(bal, 2)
    assert first <= ran < first + timeout and (ran - 1) % timeout == 0
    assert bal.requests.frame()["ttft_ms"].iloc[2] > plain.requests.frame()["ttft_ms"].iloc[2]


def test_prompts_on_every_rank_run_together_at_once():
    bal = _run([0.05, 0.05], (60, 0))
    f = bal.requests.frame()
    assert sorted(f["engine"].iloc[2:]) == [0, 1]  # one prompt per rank
    assert _ticks(bal, 2) == _ticks(bal, 3) and _ticks(bal, 2)[0] == _ticks(bal, 2)[1]  # the same tick, at once


def test_batching_wait_delays_ready_ranks():
    bal = _run([0.05, 0.05], (60, 2))
    first, ran = _ticks(bal, 2)
    assert _ticks(bal, 3) == (first, ran) and ran == first + 2


def test_off_by_default_and_only_for_trtllm():
    assert not EngineConfig().adp_balance and not framework_engine("trtllm").adp_balance
    # a balance whose count reaches its timeout at every tick never holds: the group's two-phase path (schedule,
    # decide, carry out) then runs exactly what the plain ticks run
    never, off = _run([0.05, 0.07], (1, 0)), _run([0.05, 0.07])
    assert never.requests.frame().equals(off.requests.frame()) and never.steps.frame().equals(off.steps.frame())
    with pytest.raises(ValueError, match="TRT-LLM's"):
        EngineConfig(adp_balance=True)
    with pytest.raises(ValueError, match=">= 0"):
        EngineConfig(scheduler="trtllm", adp_balance=True, adp_timeout_iters=-1)


# ---- reachable from simulate; set where InferenceX's scripts set it ----------------------------------------
def test_simulate_flags_and_the_validation_command_round_trip():
    args = build_parser().parse_args(shlex.split(
        "--trace x.csv --policy layout --layout dp=8,tp=1,ep=8 --framework trtllm --adp-balance "
        "--adp-timeout-iters 60 --adp-batching-wait-iters 0"))
    rs = run_spec(args.policy, args)
    assert (rs.engine.adp_balance, rs.engine.adp_timeout_iters, rs.engine.adp_batching_wait_iters) == (True, 60, 0)
    line = command(rs, "x.csv")
    again = run_spec("layout", build_parser().parse_args(line[1:]))
    assert again.engine == rs.engine


def _dsr1_case(concurrency: int, layout: str) -> Case:
    return Case(row=0, id="t", backend="trtllm", version="", model="deepseek-ai/DeepSeek-R1", hardware="h200",
                weights="fp8", layout=layout, gpus=8, isl=8192, osl=1024, concurrency=concurrency, batch_size=0,
                ttft_ms=1.0, tpot_ms=1.0, date="2025-11-02")


def test_the_inferencex_dsr1_trtllm_script_balances_its_attention_dp_runs():
    """dsr1_fp8_h200_trt_slurm.sh @ 9596d23d7: attention DP above C = 32 at 8k/1k, with attention_dp_config
    enable_balance, timeout_iters 60, batching_wait_iters 0 (:63-70)."""
    dp, tp = harness(_dsr1_case(64, "tp=8")).engine, harness(_dsr1_case(32, "tp=8")).engine
    assert (dp.adp_balance, dp.adp_timeout_iters, dp.adp_batching_wait_iters) == (True, 60, 0)
    assert not tp.adp_balance


def test_a_deployment_without_attention_dp_says_the_balance_changed_nothing():
    """As TRT-LLM ignores attention_dp_config without attention DP, the run goes on, and its notes say so."""
    w = workload([0.0, 0.01], [128, 128], [8, 8])
    alone = run(w, engine=dict(TRT, adp_balance=True))  # one engine: no lock-step group
    grouped = _run([0.05], (60, 0))
    assert all("--adp-balance changed nothing" in e["note"] for e in alone.engines)
    assert not any("--adp-balance" in e["note"] for e in grouped.engines)
    assert (alone.requests.frame()["status"] == "completed").all()
